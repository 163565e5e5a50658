"""The mutant corpus, graded end to end: the proof that traps are diagnosed.

What is asserted: every correct submission (reference and the correct variants in other styles) gets
full marks with no trap named, and every mutant has each of its expected traps named. Exact equality
(no extra trap named) is what `grader selftest` reports; it is not yet met for every mutant (see
issue 3's note), so this test checks recall and correctness, not precision.
"""

from __future__ import annotations

import pytest

from grader.discovery import assignments_root, find_assignment
from grader.selftest import corpus, run_selftest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows():
    assignment = find_assignment("fused_layers", assignments_root())
    return run_selftest(assignment, "interpreter", seed=5, jobs=2), assignment


def test_corpus_is_complete(rows):
    result, assignment = rows
    names = {r.submission for r in result}
    assert names == {p.name for p in corpus(assignment)}
    assert len(names) >= 25


def test_correct_submissions_get_full_marks_and_no_trap(rows):
    result, _ = rows
    correct = [r for r in result if not r.expected]
    assert len(correct) >= 6  # reference + chunked, Welford, autotune, rsqrt, fp64 variants
    for r in correct:
        assert r.score == r.max_score, r
        assert r.diagnosed == (), r


def test_every_mutant_has_its_traps_named(rows):
    result, _ = rows
    for r in result:
        if r.expected:
            assert set(r.expected) <= set(r.diagnosed), r
            assert r.score < r.max_score or r.expected == ("gpu-incompatible",), r
