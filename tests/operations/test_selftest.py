"""The mutant corpora, graded end to end, twice: the proof that traps are diagnosed, and that one seed
gives one verdict.

For every assignment: every correct submission (reference and the correct variants in other styles)
gets full marks with no trap named, every mutant is diagnosed with exactly its expected traps (no miss,
no extra), and grading the whole corpus a second time with the same seed gives the same score and the
same traps for every submission.
"""

from __future__ import annotations

import pytest

from grader.authoring.discovery import assignments_root, find_assignment, list_assignment_ids
from grader.operations.selftest import SelftestRow, corpus, format_table, run_selftest

pytestmark = pytest.mark.slow

SEED = 5
MIN_CORRECT = {"fused_layers": 4, "softmax": 4}  # the reference and its correct variants
WARNINGS = {"gpu-incompatible", "false-hint"}  # named, but cost no points when the outputs are right


@pytest.fixture(scope="module", params=list_assignment_ids(assignments_root()))
def graded_twice(request):
    assignment = find_assignment(request.param, assignments_root())
    first = run_selftest(assignment, "interpreter", seed=SEED, jobs=2)
    second = run_selftest(assignment, "interpreter", seed=SEED, jobs=2)
    return assignment, first, second


def verdict(row: SelftestRow) -> tuple[str, float, tuple[str, ...]]:
    return row.submission, row.score, tuple(sorted(row.diagnosed))


def test_corpus_is_complete(graded_twice):
    assignment, first, _ = graded_twice
    assert [r.submission for r in first] == [m.id for m in corpus(assignment)]
    assert len(first) >= 10


def test_correct_submissions_get_full_marks_and_no_trap(graded_twice):
    assignment, first, _ = graded_twice
    correct = [r for r in first if not r.expected]
    assert len(correct) >= MIN_CORRECT.get(assignment.id, 1)
    for r in correct:
        assert r.score == r.max_score, r
        assert r.diagnosed == (), r


def test_every_mutant_has_exactly_its_traps_named(graded_twice):
    _, first, _ = graded_twice
    for r in first:
        if r.expected:
            assert set(r.diagnosed) == set(r.expected), r
            assert r.score < r.max_score or set(r.expected) <= WARNINGS, r
    assert all(r.ok for r in first), format_table(first)


def test_the_same_seed_gives_the_same_verdict(graded_twice):
    _, first, second = graded_twice
    assert [verdict(r) for r in second] == [verdict(r) for r in first], (format_table(first), format_table(second))
