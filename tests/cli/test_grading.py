"""grader/cli/grading.py, the CLI end to end: submissions written into tmp_path, graded by `grader.cli.main`,
results.json read.

Each grading run costs seconds (the timeout one about a minute), so each planted failure is graded
once and asserted on in one test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.authoring.spec import load_assignment
from grader.cli import main
from tests.conftest import all_traps

TOP_LEVEL_KEYS = {"score", "execution_time", "output", "tests", "extra_data"}
TEST_KEYS = {"name", "number", "score", "max_score", "status", "output", "tags", "visibility", "extra_data"}
LN_WRAPPER_BODY = "    out = torch.empty_strided((M, N), (x.stride(0), 1), device=x.device, dtype=x.dtype)\n"


@pytest.fixture(scope="module")
def spec(repo_root: Path):
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def scores_by_case(graded) -> dict[str, tuple[float, float]]:
    return {t["extra_data"]["case_id"]: (t["score"], t["max_score"]) for t in graded.results["tests"]}


def graded_cases(graded, spec) -> list[dict]:
    """The tests that are spec cases (not the zero-point GPU compile checks)."""
    ids = {c.id for c in spec.cases}
    return [t for t in graded.results["tests"] if t["extra_data"]["case_id"] in ids]


# ------------------------------------------------------------------------------------ fast: no grading


def test_list_prints_the_assignment(repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--assignments", str(repo_root / "assignments"), "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("attention: ") and "\nfused_layers: " in out
    assert "(40 points, " in out
    for target in ("fused_linear_gelu_kernel", "row_mean_var_kernel", "layernorm_forward_kernel",
                   "fused_linear_gelu", "row_mean_var", "layernorm"):
        assert f" {target} " in out
    assert "timed    layernorm                    8192x8192 float32 (leaderboard only)" in out


def test_list_says_1_point_not_1_points(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "assignments"
    assert main(["--assignments", str(root), "new-assignment", "rowsum"]) == 0
    spec = root / "rowsum" / "assignment.toml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("points = 1\n", "points = 0.5\n"), encoding="utf-8")
    capsys.readouterr()
    assert main(["--assignments", str(root), "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(1 point, 2 cases)")
    assert out[1] == "  kernel   row_sum_kernel               1 point"


def test_list_with_no_assignments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--assignments", str(tmp_path), "list"]) == 1
    assert "no assignments under" in capsys.readouterr().out


def test_grade_missing_submission_is_a_usage_error(tmp_path: Path, repo_root: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "fused_layers.py"
    code = main(["--assignments", str(repo_root / "assignments"), "grade", str(missing),
                 "--assignment", "fused_layers", "--out", str(tmp_path / "out"), "--backend", "interpreter"])
    assert code == 2
    assert f"submission {missing} is not a file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_unknown_assignment_is_an_error(tmp_path: Path, repo_root: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    submission = tmp_path / "fused_layers.py"
    submission.write_text("", encoding="utf-8")
    code = main(["--assignments", str(repo_root / "assignments"), "grade", str(submission),
                 "--assignment", "no_such_thing", "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert "no assignment 'no_such_thing'" in err and "known: attention, fused_layers, softmax" in err


def test_check_needs_a_known_file_name(tmp_path: Path, repo_root: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    submission = tmp_path / "my_kernels.py"
    submission.write_text("", encoding="utf-8")
    assert main(["--assignments", str(repo_root / "assignments"), "check", str(submission)]) == 2
    assert "cannot tell the assignment from the file name my_kernels.py" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ slow: grading


@pytest.mark.slow
def test_reference_gets_full_marks(reference_graded, spec) -> None:
    graded = reference_graded
    results = graded.results
    assert graded.exit_code == 0
    assert TOP_LEVEL_KEYS <= set(results)
    extra = results["extra_data"]
    assert extra["max_score"] == spec.max_score == 40
    assert results["score"] == extra["max_score"] == sum(t["max_score"] for t in results["tests"])
    assert extra["traps"] == []
    assert extra["seed"] == 3
    assert extra["backend"] == "interpreter"
    assert extra["assignment"] == "fused_layers"
    assert {"torch", "triton"} <= set(extra["versions"])
    assert results["execution_time"] > 0
    assert results["output"].strip()
    # one test per case, in spec order, numbered from 1
    cases = graded_cases(graded, spec)
    assert [t["extra_data"]["case_id"] for t in cases] == [c.id for c in spec.cases]
    assert [t["number"] for t in results["tests"]] == [str(i) for i in range(1, len(results["tests"]) + 1)]
    for test in results["tests"]:
        assert TEST_KEYS <= set(test), test["name"]
        assert test["status"] == "passed", (test["name"], test["output"])
        assert test["score"] == test["max_score"]
        assert test["tags"] == [] and test["extra_data"]["traps"] == []
    by_id = {c.id: c for c in spec.cases}
    for test in cases:
        case = by_id[test["extra_data"]["case_id"]]
        assert test["visibility"] == ("visible" if case.is_public else spec.hidden_visibility)
        assert test["name"].startswith(f"{case.target}: ")
    assert "fused_layers.py: 40 / 40  traps: none" in graded.stdout
    for name in ("results.json", "grade.json", "report.md", "report.html", "pytest-report.json"):
        assert (graded.out_dir / name).is_file(), name


@pytest.mark.slow
def test_results_json_is_strict_json_under_1mb(reference_graded) -> None:
    path = reference_graded.out_dir / "results.json"
    assert path.stat().st_size < 1_000_000
    json.loads(path.read_text(encoding="utf-8"))  # read_results already rejected NaN/Infinity literals
    assert not list(reference_graded.out_dir.glob(".results.json.*"))  # no temp files left behind


@pytest.mark.slow
def test_same_seed_gives_identical_messages(reference_graded, reference_source, grade_text) -> None:
    again = grade_text(reference_source, seed=3)
    first = {t["extra_data"]["case_id"]: t["output"] for t in reference_graded.results["tests"]}
    second = {t["extra_data"]["case_id"]: t["output"] for t in again.results["tests"]}
    assert first == second
    assert again.results["extra_data"]["seed"] == 3


@pytest.mark.slow
def test_hanging_wrapper_times_out_alone(planted, grade_text, reference_graded, spec) -> None:
    graded = grade_text(planted(LN_WRAPPER_BODY, LN_WRAPPER_BODY + "    while True:\n        pass\n"))
    assert graded.exit_code == 0
    assert len(graded.results["tests"]) == len(reference_graded.results["tests"])
    hung = graded.tests_for("layernorm")
    assert len(hung) == sum(c.target == "layernorm" for c in spec.cases) > 0
    limit = f"{spec.call_timeout_s:g} s"
    for test in hung:
        assert test["score"] == 0 and test["status"] == "failed"
        assert test["tags"] == ["timeout"]
        assert limit in test["output"], test["output"]
    assert all_traps(graded.results) == ["timeout"]
    # every other target keeps full marks: the worker is replaced after each hang
    for test in graded.results["tests"]:
        if test["extra_data"]["target"] != "layernorm":
            assert (test["score"], test["status"]) == (test["max_score"], "passed"), test["name"]
    layernorm_points = sum(c.points for c in spec.cases if c.target == "layernorm")
    assert graded.results["score"] == spec.max_score - layernorm_points


@pytest.mark.slow
def test_exit_at_import_is_a_crash(reference_source, grade_text, spec) -> None:
    graded = grade_text("import os\nos._exit(3)\n" + reference_source)
    assert graded.exit_code == 0
    tests = graded.results["tests"]
    assert len(graded_cases(graded, spec)) == len(spec.cases)
    assert graded.results["score"] == 0
    for test in graded_cases(graded, spec):
        assert test["score"] == 0 and test["status"] == "failed"
        assert test["tags"] == ["crash"], test["tags"]
        assert "exit code 3" in test["output"], test["output"]
    checks = [t for t in tests if t not in graded_cases(graded, spec)]  # the zero-point compile checks, always there
    assert checks and all(t["max_score"] == 0 for t in checks), checks
    assert all_traps(graded.results) == ["crash"]


@pytest.mark.slow
def test_syntax_error_fails_import_with_line_number(planted, grade_text, spec) -> None:
    anchor = "    inv_std = 1.0 / tl.sqrt(var + eps)\n"
    text = planted(anchor, "    inv_std = 1.0 / tl.sqrt(var + eps\n")
    line = text.splitlines().index("    inv_std = 1.0 / tl.sqrt(var + eps") + 1
    graded = grade_text(text)
    assert graded.exit_code == 0
    assert len(graded_cases(graded, spec)) == len(spec.cases)
    for test in graded_cases(graded, spec):
        assert test["score"] == 0 and test["status"] == "failed"
        assert test["tags"] == ["import-fails"]
        assert "SyntaxError" in test["output"]
        assert f"line {line}" in test["output"], test["output"]
    checks = [t for t in graded.results["tests"] if t["extra_data"]["case_id"].startswith("gpu-compile-")]
    assert len(checks) == len(spec.kernels)  # still there: every result of the assignment has the same tests
    assert all(t["status"] == "failed" and "does not import" in t["output"] for t in checks)


@pytest.mark.slow
def test_missing_wrapper_only_fails_its_cases(planted, grade_text, spec) -> None:
    graded = grade_text(planted("def row_mean_var(x):", "def row_mean_var_renamed(x):"))
    assert graded.exit_code == 0
    missing = graded.tests_for("row_mean_var")
    assert len(missing) == sum(c.target == "row_mean_var" for c in spec.cases) > 0
    for test in missing:
        assert test["score"] == 0
        assert test["tags"] == ["missing-symbol"]
        assert "does not define `row_mean_var`" in test["output"]
    for test in graded.results["tests"]:
        if test["extra_data"]["target"] != "row_mean_var":
            assert (test["score"], test["status"]) == (test["max_score"], "passed"), test["name"]
    assert all_traps(graded.results) == ["missing-symbol"]


@pytest.mark.slow
def test_check_runs_the_public_cases(tmp_path: Path, repo_root: Path, reference_source: str,
                                     reference_graded, spec, capsys: pytest.CaptureFixture[str]) -> None:
    submission = tmp_path / "fused_layers.py"
    submission.write_text(reference_source, encoding="utf-8")
    out = tmp_path / "out"
    # no --assignment: found from the file name
    code = main(["--assignments", str(repo_root / "assignments"), "check", str(submission),
                 "--seed", "3", "--backend", "interpreter", "--out", str(out)])
    printed = capsys.readouterr().out
    public = [c for c in spec.cases if c.is_public]
    points = sum(c.points for c in public)
    assert code == 0
    assert printed.startswith(f"fused_layers.py (fused_layers): {points:g} / {points:g}  (interpreter, seed 3, ")
    assert "FAIL" not in printed
    assert f"reports written to {out}" in printed
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    checked = {t["extra_data"]["case_id"]: t["output"] for t in results["tests"]}
    assert {c.id for c in public} <= set(checked)
    assert not {c.id for c in spec.cases if not c.is_public} & set(checked)
    # same seed, same per-case inputs: the public cases read exactly as in the full grading run
    for case in public:
        assert checked[case.id] == reference_graded.test(case.id)["output"]
