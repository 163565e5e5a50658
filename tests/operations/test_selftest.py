"""The mutant corpora, graded end to end: the proof that traps are diagnosed, that one seed gives one
verdict, and that a mutant whose verdict moves with the seed is flagged.

For every assignment: every correct submission (reference and the correct variants in other styles)
gets full marks with no trap named, and every mutant is diagnosed with exactly its expected traps (no
miss, no extra): the whole corpus is graded once. Determinism is checked on a sample of each corpus (the
reference and the first submission of each kind: patch, whole-file mutant, variant), graded a second time with
the same seed: the same score and the same traps. Grading each whole corpus twice cost as much as the
rest of the suite; which submissions a nondeterminism would show in is not a matter of kind, and the
hostile and memory-safety tests regrade their own submissions besides.

The seed: a scaffold course (grader new-assignment) with one more mutant, which drops the last column
only when the input's first element is positive, graded at two seeds: its score and traps change, and
the selftest names it a MISS with the seeds and the cases behind it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.discovery import assignments_root, find_assignment, list_assignment_ids
from grader.cli import main
from grader.operations import selftest
from grader.operations.selftest import SelftestRow, corpus, format_table, run_selftest
from tests.corpus import JOBS, SEED, graded_corpus

pytestmark = pytest.mark.slow

MIN_CORRECT = {"attention": 4, "fused_layers": 4, "softmax": 4}  # the reference and its correct variants
WARNINGS = {"gpu-incompatible", "false-hint"}  # named, but cost no points when the outputs are right
# each corpus is graded in one xdist worker (its module fixture is computed once)
ASSIGNMENTS = [pytest.param(a, marks=pytest.mark.xdist_group(f"selftest-{a}"))
               for a in list_assignment_ids(assignments_root())]


@pytest.fixture(params=ASSIGNMENTS)
def graded(request):
    assignment, rows, _ = graded_corpus(request.param)
    return assignment, rows


def verdict(row: SelftestRow) -> tuple[str, float, tuple[str, ...], tuple[str, ...]]:
    """What one seed must give every time: the score, the traps and the performance traps named."""
    return row.submission, row.score, tuple(sorted(row.diagnosed)), tuple(sorted(row.performance))


def determinism_sample(assignment) -> list[str]:
    """The reference and the first submission of each other kind of the corpus."""
    first: dict[str, str] = {}
    for mutant in corpus(assignment):
        first.setdefault(mutant.kind, mutant.id)
    return list(first.values())


def test_corpus_is_complete(graded):
    assignment, rows = graded
    assert [r.submission for r in rows] == [m.id for m in corpus(assignment)]
    assert len(rows) >= 10


def test_correct_submissions_get_full_marks_and_no_trap(graded):
    assignment, rows = graded
    correct = [r for r in rows if not r.expected]
    assert len(correct) >= MIN_CORRECT.get(assignment.id, 1)
    for r in correct:
        assert r.score == r.max_score, r
        assert r.diagnosed == (), r


def test_every_mutant_has_exactly_its_traps_named(graded):
    _, rows = graded
    mutants = [r for r in rows if r.expected]
    assert len(mutants) >= 8
    for r in mutants:
        assert set(r.diagnosed) == set(r.expected), r
        assert r.score < r.max_score or set(r.expected) <= WARNINGS, r
        assert r.cases, r  # the cases that named its traps
    assert all(r.ok for r in rows), format_table(rows)


def test_the_same_seed_gives_the_same_verdict(graded):
    assignment, rows = graded
    sample = determinism_sample(assignment)
    assert sample[0] == "reference" and len(sample) >= 3  # reference, patch, (whole-file mutant,) variant
    again = run_selftest(assignment, "interpreter", seed=SEED, jobs=JOBS, only=sample)
    first = [verdict(r) for r in rows if r.submission in sample]
    assert [verdict(r) for r in again] == first, (format_table(rows), format_table(again))


# a mutant only some inputs expose: the last column is dropped when x[0, 0] > 0
SEED_DEPENDENT = """
[[mutant]]
id = "drops_last_column_sometimes"
traps = ["last-column-dropped"]
mistake = "the mask depends on the data: the last column is dropped when the first element is positive"
edits = [
  { find = 'mask = cols < N', replace = 'mask = cols < N - (tl.load(x_ptr) > 0).to(tl.int32)' },
]
"""


@pytest.mark.xdist_group("selftest-seeds")
def test_a_mutant_whose_verdict_moves_with_the_seed_is_a_miss(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assignments = tmp_path / "course" / "assignments"
    assert main(["new-assignment", "row_sums", "--assignments", str(assignments)]) == 0
    with open(tmp_path / "course" / "reference" / "row_sums" / "mutants.toml", "a", encoding="utf-8") as f:
        f.write(SEED_DEPENDENT)
    assignment = find_assignment("row_sums", assignments)
    (row,) = run_selftest(assignment, "interpreter", seed=1, seeds=3, only=["drops_last_column_sometimes"])
    assert row.seed_dependent and not row.ok, row
    assert [s.seed for s in row.seeds] == [1, 2, 3]
    assert len({s.score for s in row.seeds}) > 1, row.seeds
    table = format_table([row])
    assert "drops_last_column_sometimes" in table and "1 MISS" in table
    assert "depends on the seed: seed 1: " in table and "seed 3: " in table
    assert "kernel-" in table  # the cases behind the verdict, by id
    # the command prints the same table, and refuses --seeds 0 before grading anything
    monkeypatch.setattr(selftest, "run_selftest", lambda *args, **kwargs: [row])
    capsys.readouterr()
    argv = ["selftest", "--assignment", "row_sums", "--assignments", str(assignments), "--backend", "interpreter",
            "--seed", "1", "--only", "drops_last_column_sometimes"]
    assert main([*argv, "--seeds", "3"]) == 1
    printed = capsys.readouterr().out
    assert printed.startswith("selftest row_sums on interpreter, seeds 1..3\n") and table in printed
    assert main([*argv, "--seeds", "0"]) == 2


def test_a_performance_trap_is_compared_apart_from_the_correctness_traps() -> None:
    row = SelftestRow("slow", (), (), 10.0, 10.0, 1.0, expected_performance=("re-reading",),
                      performance=("re-reading",))
    assert row.ok
    missed = SelftestRow("slow", (), (), 10.0, 10.0, 1.0, expected_performance=("re-reading",))
    extra = SelftestRow("ref", (), (), 10.0, 10.0, 1.0, performance=("uncoalesced-access",))
    assert not missed.ok and "performance trap not named: re-reading" in missed.explain()
    assert not extra.ok and "performance trap named but not expected: uncoalesced-access" in extra.explain()
    table = format_table([row, extra])
    assert "none +slow: re-reading" in table and "1 of 2 as expected, 1 MISS" in table


def test_timed_needs_a_gpu(repo_root: Path, capsys) -> None:
    code = main(["--assignments", str(repo_root / "assignments"), "selftest", "--assignment", "softmax", "--backend",
                 "interpreter", "--timed"])
    assert code == 2 and "--timed needs a CUDA GPU" in capsys.readouterr().err
