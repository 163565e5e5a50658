"""The mutant corpora graded once per test process (tests/operations/test_selftest.py checks the rows; the
exposure tests of tests/assignments/ read the submissions' results.json, in the corpus's xdist group)."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from grader.authoring.discovery import assignments_root, find_assignment
from grader.operations.selftest import run_selftest

SEED = 5
SEEDS = 3  # every submission graded at seeds 5, 6 and 7 in one run: a score or trap that moves is a MISS
JOBS = 2


@functools.cache
def graded_corpus(assignment_id: str):
    """Each corpus graded once per process, each submission's results written under the corpus folder (the
    exposure tests of tests/assignments/ read them, in the same xdist group: `corpus_results`). (A module
    fixture with params is set up again whenever the tests of its two params interleave, as they may in a
    pytest-xdist worker: each corpus was graded twice.)"""
    assignment = find_assignment(assignment_id, assignments_root())
    out = Path(tempfile.mkdtemp(prefix=f"corpus-{assignment_id}-"))
    atexit.register(shutil.rmtree, out, True)
    return assignment, run_selftest(assignment, "interpreter", seed=SEED, jobs=JOBS, out=out, seeds=SEEDS), out


def corpus_results(assignment_id: str, submission: str) -> dict[str, Any]:
    """results.json of one submission of the corpus as `graded_corpus` graded it (seed SEED)."""
    _, _, out = graded_corpus(assignment_id)
    return json.loads((out / submission / "results.json").read_text(encoding="utf-8"))
