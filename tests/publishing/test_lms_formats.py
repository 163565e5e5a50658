"""The LMS and CI outputs, each against its documented shape: PrairieLearn's external-grader results,
Canvas's gradebook-import CSV, GitHub Classroom's autograding workflow; and `check --target`, which the
workflow's steps run."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from grader.authoring.spec import load_assignment
from grader.cli import main
from grader.publishing.classroom import classroom_steps
from grader.publishing.gradebook import Gradebook, Student, canvas_csv, graded_row, ungraded_row
from grader.publishing.prairielearn import HIDDEN_MESSAGE, prairielearn_json
from grader.results import CaseResult, GradeResult, PerformanceResult
from tests.conftest import ASSIGNMENT, SEED


def case(case_id: str, visibility: str, score: float, max_score: float, traps: tuple[str, ...] = ()) -> CaseResult:
    return CaseResult(case_id=case_id, target="layernorm", title=f"layernorm: {case_id}", visibility=visibility,
                      max_score=max_score, score=score, passed=score == max_score,
                      message=f"details of {case_id}", traps=traps)


def result(*cases: CaseResult, performance: tuple[PerformanceResult, ...] = ()) -> GradeResult:
    return GradeResult(assignment=ASSIGNMENT, submission="fused_layers.py", backend="interpreter", seed=SEED,
                       versions={}, cases=cases, execution_time_s=1.0, performance=performance)


# ------------------------------------------------------------------------------------ PrairieLearn

# https://prairielearn.readthedocs.io/en/latest/externalGrading/ ("Grading results"): top-level keys and
# per-test keys with their JSON types.
PL_TOP = {"gradable": bool, "score": float, "message": str, "output": str, "tests": list}
PL_TEST = {"name": str, "description": str, "points": float, "max_points": float, "message": str, "output": str}


def assert_prairielearn_shape(doc: dict[str, Any]) -> None:
    assert set(doc) == set(PL_TOP)
    for key, kind in PL_TOP.items():
        assert isinstance(doc[key], kind), key
    assert 0.0 <= doc["score"] <= 1.0
    for test in doc["tests"]:
        assert set(test) == set(PL_TEST)
        for key, kind in PL_TEST.items():
            assert isinstance(test[key], kind), (key, test)
        assert 0.0 <= test["points"] <= test["max_points"]


def test_prairielearn_results_shape_score_and_hidden_cases() -> None:
    perf = PerformanceResult(perf_id="ln_big", target="layernorm", title="layernorm: big", dims={"M": 8},
                             dtype="float32", status="timed", score=1.0, max_score=2.0)
    graded = result(case("public_ok", "public", 2.0, 2.0),
                    case("hidden_bad", "hidden", 0.0, 4.0, ("eps-outside-sqrt",)), performance=(perf,))
    doc = prairielearn_json(graded, "# report")
    assert_prairielearn_shape(doc)
    json.dumps(doc, allow_nan=False)
    assert doc["gradable"] is True
    assert doc["score"] == pytest.approx(3.0 / 8.0)
    public, hidden, timed = doc["tests"]
    assert (public["points"], public["max_points"], public["output"]) == (2.0, 2.0, "details of public_ok")
    assert (hidden["points"], hidden["max_points"], hidden["output"]) == (0.0, 4.0, HIDDEN_MESSAGE)
    assert "eps-outside-sqrt" not in json.dumps(hidden)
    assert timed["name"] == "performance layernorm: big" and timed["max_points"] == 2.0


def test_prairielearn_score_without_points_is_zero_not_nan() -> None:
    doc = prairielearn_json(result(), "")
    assert doc["score"] == 0.0 and doc["gradable"] is False


# ------------------------------------------------------------------------------------ Canvas

# Canvas's gradebook import: identifying columns, then one column per assignment ("Name (id)"); the second
# line is the "Points Possible" row.
CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def test_canvas_csv_shape() -> None:
    graded = result(case("a", "public", 3.0, 4.0))
    rows = (
        graded_row(Student("s1", name="Doe, Jane", email="jane@example.edu", sid="100"), graded, {}),
        graded_row(Student("s2"), graded, {}),
        ungraded_row(Student("s3", name="=HYPERLINK()"), "no-submission", 4.0),
    )
    book = Gradebook(ASSIGNMENT, "Fused layers", 4.0, {"layernorm": 4.0}, rows, "2026-01-01T00:00:00+00:00")
    table = list(csv.reader(io.StringIO(canvas_csv(book, "Fused layers (12345)"))))
    assert table[0] == [*CANVAS_HEADER, "Fused layers (12345)"]
    assert table[1] == ["Points Possible", "", "", "", "", "4"]
    assert table[2] == ["Doe, Jane", "", "100", "jane@example.edu", "", "3"]
    assert table[3] == ["s2", "", "s2", "", "", "3"]
    assert table[4] == ["'=HYPERLINK()", "", "s3", "", "", ""]
    assert all(len(row) == 6 for row in table)
    default = list(csv.reader(io.StringIO(canvas_csv(book))))
    assert default[0][-1] == "Fused layers"


# ------------------------------------------------------------------------------------ GitHub Classroom


def test_classroom_workflow_shape(tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / ".github" / "workflows" / "classroom.yml"
    assert main(["--assignments", str(repo_root / "assignments"), "classroom-workflow", "--assignment", ASSIGNMENT,
                 "--out", str(out), "--grader-repo", "course/kernel-grader"]) == 0
    assert "autograding steps" in capsys.readouterr().out
    flow = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert flow["on"] == ["push", "repository_dispatch"]
    assert flow["permissions"] == {"checks": "write", "actions": "read", "contents": "read"}
    (job,) = flow["jobs"].values()
    steps = job["steps"]
    graders = [s for s in steps if s.get("uses") == "classroom-resources/autograding-command-grader@v1"]
    (reporter,) = [s for s in steps if s.get("uses") == "classroom-resources/autograding-grading-reporter@v1"]
    assert steps[-1] is reporter
    spec = load_assignment(repo_root / "assignments" / ASSIGNMENT / "assignment.toml")
    public_targets = [t for t in spec.targets if any(c.target == t and c.is_public for c in spec.cases)]
    assert [g["with"]["test-name"] for g in graders] == public_targets
    for step in graders:
        target = step["with"]["test-name"]
        # worth the cases it runs: `check --target T` runs T's public cases
        points = sum(c.points for c in spec.cases_for("interpreter", public_only=True) if c.target == target)
        assert set(step["with"]) == {"test-name", "setup-command", "command", "timeout", "max-score"}
        assert step["with"]["max-score"] == points and step["with"]["timeout"] == 10
        assert step["with"]["command"] == (f"grader --assignments assignments check fused_layers.py --assignment "
                                           f"{ASSIGNMENT} --target {target} --backend interpreter")
        assert reporter["env"][f"{step['id'].upper()}_RESULTS"] == f"${{{{steps.{step['id']}.outputs.result}}}}"
    assert reporter["with"]["runners"] == ",".join(g["id"] for g in graders)
    public_points = sum(c.points for c in spec.cases if c.is_public)
    assert sum(g["with"]["max-score"] for g in graders) == public_points == 6 < spec.max_score
    # nothing of the course is checked out where the student's code (and workflow) runs: the grader is a
    # package, the public assignment is the template repository's own assignments/ (the student bundle's)
    assert not [s for s in steps if s.get("with", {}).get("repository")]
    (install,) = [s for s in steps if "pip install" in s.get("run", "")]
    assert '"kernel-grader @ git+https://github.com/course/kernel-grader"' in install["run"]
    assert "-e " not in install["run"] and ".grader" not in out.read_text(encoding="utf-8")
    assert "public cases only" in out.read_text(encoding="utf-8").lower()


def test_classroom_commands_run_against_the_student_bundle_layout(tmp_path: Path, repo_root: Path) -> None:
    """The template repository is the student bundle's folder: the steps' `--assignments assignments` is there."""
    assert main(["--assignments", str(repo_root / "assignments"), "student-bundle", "--assignment", ASSIGNMENT,
                 "--out", str(tmp_path / "s.zip")]) == 0
    zipfile.ZipFile(tmp_path / "s.zip").extractall(tmp_path / "repo")
    repo = tmp_path / "repo" / ASSIGNMENT
    spec = load_assignment(repo_root / "assignments" / ASSIGNMENT / "assignment.toml")
    for step in classroom_steps(spec):
        assignments = step.command.split("--assignments ")[1].split()[0]
        assert (repo / assignments / ASSIGNMENT / "assignment.toml").is_file()
        assert (repo / step.command.split(" check ")[1].split()[0]).is_file()  # the submission file


def test_check_rejects_an_unknown_target(tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    submission = tmp_path / "fused_layers.py"
    submission.write_text("", encoding="utf-8")
    assert main(["--assignments", str(repo_root / "assignments"), "check", str(submission),
                 "--target", "nope"]) == 2
    assert "no target 'nope' in fused_layers" in capsys.readouterr().err


@pytest.mark.slow
def test_check_target_exits_zero_iff_that_targets_public_cases_pass(tmp_path: Path, repo_root: Path,
                                                                     reference_source: str) -> None:
    broken = 'def layernorm(*args, **kwargs):\n    raise RuntimeError("planted")\n'  # row_mean_var untouched
    submission = tmp_path / "fused_layers.py"
    submission.write_text(reference_source + "\n\n" + broken, encoding="utf-8")
    base = ["--assignments", str(repo_root / "assignments"), "check", str(submission), "--seed", str(SEED),
            "--backend", "interpreter"]
    assert main([*base, "--target", "row_mean_var"]) == 0
    assert main([*base, "--target", "layernorm"]) == 1
