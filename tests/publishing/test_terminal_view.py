"""`grader check`'s terminal, the point first (grader/publishing/terminal_view.py and summary.txt.j2): the score and
the file's notes, then the first failure in full with its trap's advice and fix, then every case; a grid where every
element is the same is one line, grids after the first few and cases that failed the same way are folded into one
line that says where the rest is; -v folds nothing. Hand-made results (fast); real grading runs of the template in
tests/e2e/test_report_e2e.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.publishing import report
from grader.publishing.error_map_view import map_view
from grader.publishing.report_view import view
from grader.publishing.terminal_view import MAX_MAPPED_CASES, SAME_TRAPS_SHOWN, TerminalView, map_text
from grader.results import CaseResult, GradeResult


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def grid(rows: int, cols: int, code: str, wrong_rows: int = 0) -> dict[str, Any]:
    """An error map of `rows` x `cols` elements: all `code`, or `wrong_rows` rows of `code` under right ones."""
    lines = ["." * cols] * (rows - wrong_rows) + [code * cols] * wrong_rows if wrong_rows else [code * cols] * rows
    wrong = cols * (wrong_rows or rows)
    return {"out": {"shape": [rows, cols], "cell": [1, 1], "grid": lines, "tile": None, "wrong": wrong,
                    "total": rows * cols}}


def case(case_id: str, target: str, traps: tuple[str, ...], message: str, *, passed: bool = False,
         points: float = 1.0, **evidence: Any) -> CaseResult:
    return CaseResult(case_id=case_id, target=target, title=f"{target}: {case_id}", visibility="public",
                      max_score=points, score=points if passed else 0.0, passed=passed, message=message, traps=traps,
                      evidence=evidence)


def result(*cases: CaseResult, notes: tuple[str, ...] = ()) -> GradeResult:
    return GradeResult(assignment="fused_layers", submission="erin.py", backend="interpreter", seed=1, versions={},
                       cases=cases, execution_time_s=1.0, notes=notes, public_only=True)


def unwritten(case_id: str, target: str, rows: int) -> CaseResult:
    """An untouched template's kernel case: nothing written, a map of `U` only."""
    return case(case_id, target, ("unwritten-output",),
                f"Failed: Output elements never written [unwritten-output]\n{rows * 8} output element(s) never "
                f"written in out", error_maps=grid(rows, 8, "U"), nothing_written=["out"])


def wrong_rows(case_id: str, target: str, traps: tuple[str, ...] = ("unknown",)) -> CaseResult:
    return case(case_id, target, traps, f"Failed: wrong in {case_id}\nout: 16 of 64 elements differ",
                error_maps=grid(8, 8, "3", wrong_rows=2))


def lines_of(text: str) -> list[str]:
    return text.splitlines()


def test_a_uniform_map_is_one_line_and_a_mixed_one_its_grid() -> None:
    (only_u,) = [map_text(map_view("out", data, None)) for data in grid(6, 17, "U").values()]
    assert only_u is not None and only_u.lines == ()
    assert only_u.heading == "where out is wrong: all 102 elements U (never written)"
    (mixed,) = [map_text(map_view("out", data, None)) for data in grid(8, 8, "3", wrong_rows=2).values()]
    assert mixed is not None and mixed.heading.startswith("where out is wrong (. right, 1-4 wrong by")
    assert mixed.lines == ("........",) * 6 + ("33333333",) * 2
    too_big = grid(100, 8, "3", wrong_rows=2)["out"]
    assert map_text(map_view("out", too_big, None)) is None  # not readable as text: left to the HTML report


def test_the_template_leads_with_its_fix_and_prints_no_grids_of_u(assignment: Assignment) -> None:
    graded = result(unwritten("linear", "fused_linear_gelu_kernel", 20),
                    unwritten("stats", "row_mean_var_kernel", 5),
                    unwritten("ln", "layernorm_forward_kernel", 6),
                    case("wrap", "layernorm", ("runtime-error",),
                         "layernorm(...) raised NotImplementedError (erin.py, line 143): TODO: layernorm"))
    text = report.terminal(graded, assignment)
    lines = lines_of(text)
    assert lines[0] == "erin.py (fused_layers): 0 / 4  (interpreter, seed 1, 1.0 s)"  # the file as submitted
    first = lines.index("First to fix: fused_linear_gelu_kernel: linear  [unwritten-output]")
    card = lines.index("== Output elements never written (unwritten-output)")
    listed = lines.index("FAIL  fused_linear_gelu_kernel: linear  [unwritten-output]  (first to fix, above)")
    assert first < card < listed
    assert lines[first + 3] == "      where out is wrong: all 160 elements U (never written)"
    assert lines[card + 1].startswith("   Your kernel has not written any output yet")
    assert any(line.startswith("   Fix: Fill in the TODO in the kernel's body") for line in lines[card:listed])
    assert "UUUU" not in text  # no grid of U anywhere
    assert text.count("== Output elements never written") == 1  # explained once, with the first failure
    assert text.count("Exposed by: Every case: the kernel stores nothing yet.") == 1
    # a second case with the same traps is its first line alone, and the fold says where the rest is
    assert ("FAIL  row_mean_var_kernel: stats  [unwritten-output]\nFAIL  layernorm_forward_kernel: ln  "
            "[unwritten-output]\nFAIL  layernorm: wrap  [runtime-error]\n") in text
    assert "where out is wrong: all 40 elements U" not in text  # stats' own details are folded
    assert ("\u2026 2 more cases failed the same way as ones above (only their first lines are shown): `grader check "
            "-v` prints everything, `--out DIR` writes the full report") in lines


def test_grids_fold_after_the_first_few_and_verbose_prints_them_all(assignment: Assignment) -> None:
    # different traps each, so no case folds: only their grids do
    traps = ("unknown", "oob-read", "oob-write", "unwritten-output")
    graded = result(*(wrong_rows(f"c{i}", "fused_linear_gelu_kernel", (trap,)) for i, trap in enumerate(traps)))
    folded = TerminalView(view(graded, assignment, True))
    assert [len([m for m in c.maps if m.lines]) for c in folded.cases] == [1] * MAX_MAPPED_CASES + [0, 0]
    assert all(c.full for c in folded.cases)
    assert folded.fold_line.startswith("\u2026 2 more error maps not printed: `grader check -v` prints everything")
    text = report.terminal(graded, assignment)
    assert text.count("33333333") == 2 * MAX_MAPPED_CASES
    assert "Failed: wrong in c3" in text  # its message is there, only its grid folded
    verbose = report.terminal(graded, assignment, verbose=True)
    assert verbose.count("33333333") == 2 * len(traps) and "\u2026" not in verbose


def test_cases_that_failed_the_same_way_fold_into_one_line(assignment: Assignment) -> None:
    same = [wrong_rows(f"c{i}", "fused_linear_gelu_kernel") for i in range(5)]
    view_ = TerminalView(view(result(*same), assignment, True), written_to="out")
    assert [c.full for c in view_.cases] == [True] * SAME_TRAPS_SHOWN + [False] * (5 - SAME_TRAPS_SHOWN)
    assert view_.fold_line == ("\u2026 4 more cases failed the same way as ones above (only their first lines are "
                               "shown): `grader check -v` prints everything, the full report is in out")
    verbose = TerminalView(view(result(*same), assignment, True), verbose=True)
    assert all(c.full for c in verbose.cases) and verbose.fold_line == ""


def test_a_second_case_with_the_same_trap_is_one_line(assignment: Assignment) -> None:
    """As the README says: a case that failed the same way as one above (the same trap, another message) is one
    line; failures with no trap named are not the same way unless their messages are."""
    graded = result(case("c0", "layernorm", ("runtime-error",), "layernorm(...) raised ValueError: first"),
                    case("c1", "layernorm", ("runtime-error",), "layernorm(...) raised KeyError: second"),
                    case("c2", "layernorm", (), "Failed: wrong values in c2"),
                    case("c3", "layernorm", (), "Failed: wrong values in c3"))
    term = TerminalView(view(graded, assignment, True))
    assert [c.full for c in term.cases] == [True, False, True, True]
    text = report.terminal(graded, assignment)
    assert "KeyError: second" not in text and "wrong values in c2" in text and "wrong values in c3" in text
    assert "FAIL  layernorm: c1  [runtime-error]\nFAIL  layernorm: c2\n" in text
    assert "\u2026 1 more case failed the same way as one above" in text


def test_no_fold_line_when_every_case_is_shown_whole(assignment: Assignment) -> None:
    """A case whose one line is all there is to it (no message, no map) hides nothing: no line says it was folded."""
    graded = result(case("c0", "layernorm", ("runtime-error",), "layernorm(...) raised ValueError"),
                    case("c1", "row_mean_var", ("unknown",), ""), case("c2", "row_mean_var", ("unknown",), ""))
    term = TerminalView(view(graded, assignment, True))
    assert term.fold_line == ""
    text = report.terminal(graded, assignment)
    assert "more case" not in text and "\u2026" not in text
    assert "FAIL  row_mean_var: c1  [unknown]" in text and "FAIL  row_mean_var: c2  [unknown]" in text


def test_counts_in_the_terminal_are_singular_for_one(assignment: Assignment) -> None:
    graded = result(case("c0", "layernorm", ("runtime-error",), "layernorm(...) raised ValueError"),
                    case("c1", "row_mean_var", (), "", passed=True), case("c2", "row_mean_var", (), "", passed=True))
    lines = lines_of(report.terminal(graded, assignment))
    assert "  layernorm                        0 / 1   (0 of 1 case)" in lines
    assert "  row_mean_var                     2 / 2   (2 of 2 cases)" in lines
    (one,) = [map_text(map_view("out", data, None)) for data in grid(1, 1, "U").values()]
    assert one is not None and one.heading == "where out is wrong: all 1 element U (never written)"


def test_an_import_that_hung_is_said_once(assignment: Assignment) -> None:
    """Every case of a file whose import never finished says the same: the first says it, the rest are a line."""
    said = ("Importing erin.py did not finish within 60 s: code at module level (outside any function) runs when the "
            "file is imported, and something there does not end")
    cases = [case(f"c{i}", target, ("timeout",), said, at_import=True)
             for i, target in enumerate(("fused_linear_gelu_kernel", "row_mean_var_kernel", "layernorm"))]
    check = case("gpu-compile-row_mean_var_kernel", "row_mean_var_kernel", (), "Not compiled: importing erin.py "
                 "does not finish (its cases say why), so no kernel of it could be compiled.", points=0.0)
    text = report.terminal(result(*cases, check), assignment)
    assert text.count(said) == 1
    assert text.index("First to fix: fused_linear_gelu_kernel: c0  [timeout]") < text.index(said)
    assert "\u2026 2 more cases failed the same way as ones above" in text
    words = " ".join(text.split())
    assert "Fix: Keep only imports, constants and definitions at module level" in words
    assert "range(0, K, BLOCK_K)" not in words and "The call did not finish" not in words


def test_the_files_notes_come_before_the_first_failure(assignment: Assignment) -> None:
    note = "erin.py is empty: it defines nothing. It must define `layernorm`."
    graded = result(case("c0", "layernorm", ("missing-symbol",), "erin.py does not define `layernorm`."),
                    notes=(note,))
    lines = lines_of(report.terminal(graded, assignment))
    assert lines.index(f"note: {note}") < lines.index("First to fix: layernorm: c0  [missing-symbol]")
    assert lines.index(f"note: {note}") < 6


def test_a_zero_point_check_leads_only_when_no_case_failed(assignment: Assignment) -> None:
    warn = case("gpu-compile-layernorm_forward_kernel", "layernorm_forward_kernel", ("gpu-incompatible",),
                "does not compile for the grading GPU", points=0.0)
    failing = case("c1", "layernorm", ("runtime-error",), "layernorm(...) raised ValueError")
    assert TerminalView(view(result(warn, failing), assignment, True)).lead.result.case_id == "c1"  # type: ignore[union-attr]
    alone = TerminalView(view(result(warn), assignment, True))
    assert alone.lead is not None and alone.lead.result.case_id == warn.case_id


def test_a_passing_file_is_its_score_and_its_cases(assignment: Assignment) -> None:
    passed = [case(f"c{i}", "layernorm", (), "", passed=True) for i in range(3)]
    text = report.terminal(result(*passed), assignment)
    assert "First to fix" not in text and "\u2026" not in text and "==" not in text
    assert text.count("PASS  layernorm: c") == 3
    rejected = dataclasses.replace(result(*passed), rejected="erin.py is not Python source.")
    assert "Nothing in it ran" in report.terminal(rejected, assignment)
