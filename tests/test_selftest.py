"""The mutant corpus, graded end to end: the proof that traps are diagnosed.

Every correct submission (reference and the correct variants in other styles) gets full marks with
no trap named, and every mutant is diagnosed with exactly its expected traps: no miss, no extra.
"""

from __future__ import annotations

import pytest

from grader.authoring.discovery import assignments_root, find_assignment
from grader.operations.selftest import corpus, run_selftest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows():
    assignment = find_assignment("fused_layers", assignments_root())
    return run_selftest(assignment, "interpreter", seed=5, jobs=2), assignment


def test_corpus_is_complete(rows):
    result, assignment = rows
    names = [r.submission for r in result]
    assert names == [m.id for m in corpus(assignment)]
    assert len(names) >= 25


def test_correct_submissions_get_full_marks_and_no_trap(rows):
    result, _ = rows
    correct = [r for r in result if not r.expected]
    assert len(correct) >= 6  # reference + chunked, Welford, autotune, rsqrt, fp64 variants
    for r in correct:
        assert r.score == r.max_score, r
        assert r.diagnosed == (), r


def test_every_mutant_has_exactly_its_traps_named(rows):
    result, _ = rows
    for r in result:
        if r.expected:
            assert set(r.diagnosed) == set(r.expected), r
            assert r.score < r.max_score or r.expected == ("gpu-incompatible",), r
    assert all(r.ok for r in result), [r for r in result if not r.ok]
