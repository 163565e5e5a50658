"""The mutant corpus as data (grader/authoring/mutants.py): patches apply to today's reference with their
exact counts, a broken patch fails loudly, a written mutant is the reference plus its edits and nothing
else, and `grader mutant` writes, diffs and lists them. Nothing here grades except the one slow test."""

from __future__ import annotations

import contextlib
import difflib
import io
from pathlib import Path

import pytest

from grader import trap_ids
from grader.authoring.catalog import trap_catalog
from grader.authoring.discovery import list_assignment_ids
from grader.authoring.mutants import Edit, Mutant, MutantError, load_mutants, parse_header, write_mutant
from grader.authoring.spec import BACKENDS, Assignment, load_assignment
from grader.cli import main
from grader.operations.selftest import corpus, expected_traps, reference_path, write_corpus

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = list_assignment_ids(ROOT / "assignments")


def spec(assignment_id: str) -> Assignment:
    return load_assignment(ROOT / "assignments" / assignment_id / "assignment.toml")


def reference_text(assignment: Assignment) -> str:
    return reference_path(assignment).read_text(encoding="utf-8")


def patches(assignment_id: str) -> list[Mutant]:
    return [m for m in load_mutants(ROOT / "reference" / assignment_id) if m.kind == "patch"]


def run_cli(*argv: str) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["--assignments", str(ROOT / "assignments"), *argv])
    return code, printed.getvalue()


# ------------------------------------------------------------------------------------ the checked-in corpus


def test_both_assignments_have_a_corpus() -> None:
    assert {"fused_layers", "softmax"} <= set(ASSIGNMENTS)
    for assignment_id in ASSIGNMENTS:
        assert patches(assignment_id), assignment_id


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_every_patch_applies_with_its_exact_counts(assignment_id: str) -> None:
    reference = reference_text(spec(assignment_id))
    for mutant in patches(assignment_id):
        text = reference
        for edit in mutant.edits:
            assert text.count(edit.find) == edit.count, (mutant.id, edit.find)
            text = text.replace(edit.find, edit.replace)
        assert mutant.source(reference) == text != reference, mutant.id
        if "import-fails" not in mutant.traps:  # no patch breaks the syntax by accident
            compile(text, mutant.id, "exec")


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_every_expected_trap_is_known_on_both_backends(assignment_id: str) -> None:
    assignment = spec(assignment_id)
    catalog = trap_catalog(assignment)
    for mutant in load_mutants(assignment.reference_dir):
        assert mutant.mistake and "\n" not in mutant.mistake, mutant.id
        for backend in BACKENDS:
            for trap in mutant.expected(backend):
                assert trap in catalog, (mutant.id, backend, trap)


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_whole_files_say_what_the_selftest_expects(assignment_id: str) -> None:
    wholes = [m for m in load_mutants(ROOT / "reference" / assignment_id) if m.kind != "patch"]
    for mutant in wholes:
        assert mutant.text == mutant.origin.read_text(encoding="utf-8")
        for backend in BACKENDS:
            assert expected_traps(mutant.origin, backend) == mutant.expected(backend), (mutant.id, backend)
        if mutant.kind == "variant":
            assert mutant.traps == () and not mutant.overrides, mutant.id


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_written_mutant_differs_from_the_reference_only_in_edited_lines(assignment_id: str, tmp_path: Path) -> None:
    assignment = spec(assignment_id)
    reference = reference_text(assignment)
    for mutant in patches(assignment_id):
        path = write_mutant(mutant, reference, tmp_path / mutant.id, assignment.submission_file)
        assert path == tmp_path / mutant.id / assignment.submission_file
        written = path.read_text(encoding="utf-8")
        removed, added = _changed_lines(reference, written)
        assert removed or added, mutant.id
        finds = [piece for e in mutant.edits for piece in e.find.splitlines() if piece.strip()]
        replaces = [piece for e in mutant.edits for piece in e.replace.splitlines() if piece.strip()]
        for line in removed:
            assert not line.strip() or any(piece in line for piece in finds), (mutant.id, line)
        for line in added:
            assert not line.strip() or any(piece in line for piece in replaces), (mutant.id, line)


def _changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    a, b = before.splitlines(), after.splitlines()
    removed: list[str] = []
    added: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += a[i1:i2]
            added += b[j1:j2]
    return removed, added


def test_write_corpus_writes_the_reference_first_then_every_mutant(tmp_path: Path) -> None:
    assignment = spec("softmax")
    written = write_corpus(assignment, tmp_path)
    assert [m.id for m, _ in written] == [m.id for m in corpus(assignment)]
    assert written[0][0].id == "reference" and written[0][0].traps == ()
    assert written[0][1].read_text(encoding="utf-8") == reference_text(assignment)
    for mutant, path in written:
        assert path == tmp_path / mutant.id / "softmax.py" and path.is_file()


# ------------------------------------------------------------------------------------ applying, failing loudly

REFERENCE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n"


def mutant(*edits: Edit, origin: str = "assignments/demo/mutants.toml") -> Mutant:
    return Mutant("demo_bug", "patch", ("oob-read",), "the demo mistake", Path(origin), edits=edits)


def test_source_applies_edits_in_order_and_replaces_every_occurrence() -> None:
    m = mutant(Edit("x + 1", "x - 1", count=2), Edit("def g(x):\n    return x - 1\n", "def g(x):\n    return 0\n"))
    assert m.source(REFERENCE) == "def f(x):\n    return x - 1\n\n\ndef g(x):\n    return 0\n"


@pytest.mark.parametrize(("edit", "found"), [(Edit("x + 1", "x - 1"), 2), (Edit("x * 2", "x"), 0)])
def test_an_edit_with_the_wrong_count_fails_naming_file_mutant_and_edit(edit: Edit, found: int) -> None:
    with pytest.raises(MutantError) as caught:
        mutant(Edit("def f", "def f_renamed"), edit).source(REFERENCE, reference_name="reference/demo.py")
    message = str(caught.value)
    assert message.startswith("assignments/demo/mutants.toml: mutant 'demo_bug': edit 2 of 2")
    assert repr(edit.find) in message and f"occurs {found} time" in message
    assert "reference/demo.py" in message and f"count = {edit.count}" in message


def test_edits_that_cancel_out_are_an_error() -> None:
    with pytest.raises(MutantError, match="leave the reference unchanged"):
        mutant(Edit("x + 1", "x - 1", count=2), Edit("x - 1", "x + 1", count=2)).source(REFERENCE)


def test_a_patch_that_no_longer_matches_the_reference_fails_at_write(tmp_path: Path) -> None:
    assignment = spec("fused_layers")
    (eps,) = [m for m in patches("fused_layers") if m.id == "eps_outside_sqrt"]
    moved = reference_text(assignment).replace("1.0 / tl.sqrt(var + eps)", "tl.rsqrt(var + eps)")
    with pytest.raises(MutantError, match=r"mutants\.toml: mutant 'eps_outside_sqrt': edit 1 of 1 .* occurs 0 times"):
        write_mutant(eps, moved, tmp_path, "fused_layers.py")
    assert not list(tmp_path.iterdir())


def test_diff_reads_the_bug_in_three_lines() -> None:
    diff = mutant(Edit("def g(x):\n    return x + 1", "def g(x):\n    return x")).diff(REFERENCE, "demo.py")
    assert diff.splitlines() == ["--- demo.py", "+++ demo_bug (patch)", "@@ -6 +6 @@",
                                 "-    return x + 1", "+    return x"]


# ------------------------------------------------------------------------------------ loading


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


GOOD = """
[[mutant]]
id = "off_by_one"
traps = ["oob-write"]
traps_cuda = ["oob-write", "runtime-error"]
mistake = "stores one past the end"
edits = [{ find = 'mask=mask', replace = 'mask=cols <= N', count = 2 }]
"""


def test_load_reads_patches_then_whole_mutants_then_variants(tmp_path: Path) -> None:
    write(tmp_path, "mutants.toml", GOOD)
    write(tmp_path, "mutants/no_kernel.py", "# expect: missing-symbol\n# mistake: the kernel\n# is absent\nx = 1\n")
    write(tmp_path, "variants/loops.py", "# expect: none\n# variant: loops instead of blocks\nimport torch\n")
    patch, whole, variant = load_mutants(tmp_path)
    assert patch == Mutant("off_by_one", "patch", ("oob-write",), "stores one past the end", tmp_path / "mutants.toml",
                           edits=(Edit("mask=mask", "mask=cols <= N", 2),),
                           overrides=(("cuda", ("oob-write", "runtime-error")),))
    assert patch.expected("cuda") == ("oob-write", "runtime-error") and patch.expected("interpreter") == ("oob-write",)
    assert (whole.id, whole.kind, whole.traps, whole.mistake) == ("no_kernel", "mutant", ("missing-symbol",),
                                                                  "the kernel is absent")
    assert whole.source("ignored") == "# expect: missing-symbol\n# mistake: the kernel\n# is absent\nx = 1\n"
    assert (variant.id, variant.kind, variant.traps, variant.mistake) == ("loops", "variant", (),
                                                                          "loops instead of blocks")


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        (GOOD.replace('mistake = "stores one past the end"\n', ""), "'mistake' must be one non-empty line"),
        (GOOD.replace("traps_cuda", "traps_rocm"), "unknown key(s) ['traps_rocm']"),
        (GOOD.replace("count = 2", "count = 0"), "edit 1: 'count' must be a whole number >= 1"),
        (GOOD.replace("count = 2", "cnt = 2"), "edit 1: unknown key(s) ['cnt']"),
        (GOOD.replace("replace = 'mask=cols <= N'", "replace = 'mask=mask'"), "'replace' equals 'find'"),
        (GOOD.replace('traps = ["oob-write"]\n', ""), "'traps' is required"),
        (GOOD.replace("edits = [", "edits = []\nignored = ["), "unknown key(s) ['ignored']"),
        (GOOD + GOOD, "the id is taken already"),
        (GOOD.replace('"off_by_one"', '"reference"'), "names the reference solution itself"),
        (GOOD.replace('"off_by_one"', '"Off-By-One"'), "'id' must be lower-case"),
        (GOOD.replace("[[mutant]]", "[[mutants]]"), "unknown top-level key(s) ['mutants']"),
        (GOOD.replace("edits = [", 'performance_traps = ["slow"]\nedits = ['), "performance trap 'slow' is none"),
        (GOOD.replace("edits = [", 'performance_traps = ["oob-write"]\nedits = ['), "performance trap 'oob-write'"),
    ],
)
def test_a_bad_mutants_toml_fails_at_load_naming_file_and_mutant(tmp_path: Path, toml: str, problem: str) -> None:
    write(tmp_path, "mutants.toml", toml)
    with pytest.raises(MutantError) as caught:
        load_mutants(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'mutants.toml'}: ")
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("mutants/bug.py", "# mistake: something\nx = 1\n", "no '# expect: ...' line"),
        ("mutants/bug.py", "# expect: crash\nx = 1\n", "no '# mistake: ...' line"),
        ("mutants/bug.py", "# expect: crash\n# expect-rocm: crash\n# mistake: m\n", "names no backend"),
        ("variants/style.py", "# expect: oob-read\n# variant: v\n", "a variant is a correct solution"),
        ("variants/Style.py", "# expect: none\n# variant: v\n", "lower-case letters"),
        ("variants/style.py", "# expect: none\n# performance: slow\n# variant: v\n", "performance trap 'slow'"),
    ],
)
def test_a_bad_whole_file_fails_at_load_naming_it(tmp_path: Path, name: str, text: str, problem: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(MutantError) as caught:
        load_mutants(tmp_path)
    assert str(caught.value).startswith(str(path)) and problem in str(caught.value)


def test_header_description_continues_on_plain_comment_lines_only() -> None:
    header = parse_header(["# expect: a, b\n", "# expect-cuda: none\n", "# mistake: one\n", "# two\n",
                           "# ruff: noqa\n", "# not part\n", "\n", "import x\n", "# expect: late\n"])
    assert (header.traps, dict(header.overrides), header.description) == (("a", "b"), {"cuda": ()}, "one two")
    assert header.expected("cuda") == () and header.expected("interpreter") == ("a", "b")


# ------------------------------------------------------------------------------------ the CLI


def test_cli_writes_mutants_as_submission_files(tmp_path: Path) -> None:
    code, printed = run_cli("mutant", "eps_outside_sqrt", "hang", "--assignment", "fused_layers",
                            "--write", str(tmp_path / "out"))
    assert code == 0, printed
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["eps_outside_sqrt.py", "hang.py"]
    reference = reference_text(spec("fused_layers"))
    by_id = {m.id: m for m in patches("fused_layers")}
    for name in ("eps_outside_sqrt", "hang"):
        assert (tmp_path / "out" / f"{name}.py").read_text(encoding="utf-8") == by_id[name].source(reference)
    assert f"wrote {tmp_path / 'out' / 'hang.py'}  (expect: timeout)" in printed


def test_cli_writes_every_mutant_with_all(tmp_path: Path) -> None:
    code, _ = run_cli("mutant", "--all", "--assignment", "softmax", "--write", str(tmp_path))
    assert code == 0
    written = sorted(p.stem for p in tmp_path.iterdir())
    assert written == sorted(m.id for m in load_mutants(spec("softmax").reference_dir)) and len(written) > 10


def test_cli_diff_and_list() -> None:
    code, printed = run_cli("mutant", "online_rescale_missing", "--assignment", "softmax", "--diff")
    assert code == 0
    assert "+        d = d + tl.sum(tl.exp(x - m_new), axis=0)\n" in printed
    code, printed = run_cli("mutant", "--assignment", "softmax", "--list")
    assert code == 0
    lines = printed.splitlines()
    assert lines[0].startswith("softmax: ")
    (line,) = [x for x in lines if x.split()[0] == "global_constant"]
    assert "  patch    [gpu-incompatible (cuda: compile-error)]  a kernel reads a module-level constant" in line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mutant", "no_such_bug", "--assignment", "softmax", "--diff"], "no mutant 'no_such_bug' in softmax"),
        (["mutant", "--assignment", "softmax"], "name mutant ids"),
        (["mutant", "wrong_axis", "--assignment", "softmax"], "name mutant ids"),
        (["mutant", "wrong_axis", "--assignment", "softmax", "--list"], "--list takes no mutant ids"),
        (["mutant", "wrong_axis", "--all", "--assignment", "softmax", "--diff"], "name mutant ids (or --all)"),
    ],
)
def test_cli_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_cli(*argv)
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_a_written_mutant_grades_to_its_expected_traps(tmp_path: Path) -> None:
    assert run_cli("mutant", "eps_outside_sqrt", "--assignment", "fused_layers", "--write", str(tmp_path))[0] == 0
    code, printed = run_cli("grade", str(tmp_path / "eps_outside_sqrt.py"), "--assignment", "fused_layers",
                            "--out", str(tmp_path / "out"), "--seed", "3", "--backend", "interpreter")
    assert code == 0
    assert "traps: eps-outside-sqrt " in printed, printed


def test_performance_traps_are_expected_apart_from_the_correctness_ones(tmp_path: Path) -> None:
    write(tmp_path, "mutants.toml", GOOD.replace("edits = [", 'performance_traps = ["re-reading"]\nedits = ['))
    write(tmp_path, "variants/three_reads.py",
          "# expect: none\n# performance: re-reading, uncoalesced-access\n# variant: reads its row three\n# times\n")
    patch, variant = load_mutants(tmp_path)
    assert (patch.traps, patch.performance_traps) == (("oob-write",), ("re-reading",))
    assert variant.traps == () and variant.performance_traps == ("re-reading", "uncoalesced-access")
    assert variant.mistake == "reads its row three times"  # the performance line is not the description


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_every_performance_trap_of_the_corpus_is_one_of_the_graders(assignment_id: str) -> None:
    slow = [m for m in load_mutants(spec(assignment_id).reference_dir) if m.performance_traps]
    assert slow  # each corpus proves a performance trap
    for mutant in slow:
        assert set(mutant.performance_traps) <= trap_ids.PERFORMANCE, mutant.id


def test_measured_performance_traps_are_per_backend_and_checked(tmp_path: Path) -> None:
    from grader.backends import Backend
    from grader.operations.selftest import expected_performance

    write(tmp_path, "mutants.toml", GOOD.replace("edits = [", 'performance_traps = ["re-reading"]\n'
                                                               'performance_traps_cuda = ["serial-grid"]\nedits = ['))
    (patch,) = load_mutants(tmp_path)
    assert patch.measured("cuda") == ("serial-grid",) and patch.measured("interpreter") == ()
    assert expected_performance(patch, Backend.INTERPRETER) == ("re-reading",)  # the CPU predicts
    assert expected_performance(patch, Backend.CUDA) == ()  # untimed on the GPU: nothing measured
    assert expected_performance(patch, Backend.CUDA, timed=True) == ("serial-grid",)
    write(tmp_path, "mutants.toml", GOOD.replace("edits = [", 'performance_traps_cuda = ["slow-ish"]\nedits = ['))
    with pytest.raises(MutantError, match="performance trap 'slow-ish' is none of the grader's"):
        load_mutants(tmp_path)


def test_a_whole_file_says_what_a_backend_must_measure(tmp_path: Path) -> None:
    write(tmp_path, "variants/chunked.py", "# expect: none\n# performance: re-reading, launch-bound\n"
                                           "# performance-cuda: launch-bound\n# variant: 32-wide chunks\nx = 1\n")
    (variant,) = load_mutants(tmp_path)
    assert variant.performance_traps == ("re-reading", "launch-bound") and variant.mistake == "32-wide chunks"
    assert variant.measured("cuda") == ("launch-bound",) and variant.measured("interpreter") == ()
    write(tmp_path, "variants/chunked.py", "# expect: none\n# performance-tpu: launch-bound\n# variant: v\nx = 1\n")
    with pytest.raises(MutantError, match="'# performance-tpu:' names no backend"):
        load_mutants(tmp_path)
    write(tmp_path, "variants/chunked.py", "# expect: none\n# performance-cuda: slow\n# variant: v\nx = 1\n")
    with pytest.raises(MutantError, match="performance trap 'slow' is none of the grader's"):
        load_mutants(tmp_path)
