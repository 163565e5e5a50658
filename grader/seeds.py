"""Seeds, in one place: a fresh seed for a run, a public run's seed, and the per-case seed derived from them.

A run's seed is recorded in its results (and in a batch's manifest); every case's inputs are drawn
from `case_seed(run seed, case id)`, so the same seed gives the same inputs case by case, and one
case can be re-run alone. tests/test_seeds.py pins derived values: they must never change.
"""

from __future__ import annotations

import hashlib
import random

RUN_SEED_LIMIT = 2**31  # fresh run seeds are in [0, RUN_SEED_LIMIT)


def fresh_seed() -> int:
    """A new run seed from the OS's randomness (never from a global generator)."""
    return random.SystemRandom().randrange(RUN_SEED_LIMIT)


def case_seed(run_seed: int, case_id: str) -> int:
    """A stable per-case seed derived from the run's seed, so one case can be re-run alone."""
    digest = hashlib.sha256(f"{run_seed}:{case_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def public_seed(assignment_id: str) -> int:
    """The seed of a public run (`grader check`) of an assignment: the same for every student and every run, so
    a student's check of the same file always says the same (grader.authoring.course_seed)."""
    return case_seed(0, f"public:{assignment_id}")


def fingerprint(seed: int) -> str:
    """A short public name for a seed: tells two seeds apart without telling either (a course's seed is secret)."""
    return hashlib.sha256(f"kernel-grader course seed {seed}".encode()).hexdigest()[:12]


def seed_label(seed: int, source: str) -> str:
    """A grade's seed in a few words: the course's by its fingerprint only (it is as secret as the hidden cases)."""
    if source == "course":
        return f"course seed {fingerprint(seed)}"
    if source == "public":
        return f"public seed {seed}"
    return f"seed {seed}"


def seed_text(seed: int, source: str) -> str:
    """How a report names a grade's seed, with how to grade again on the same inputs."""
    if source == "course":
        return f"{seed_label(seed, source)} (re-run without --seed)"
    if source == "public":
        return seed_label(seed, source)
    return f"seed {seed} (re-run with --seed {seed})"


def run_seeds(seed: int, more: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The seeds one run grades at: `seed` first, then each of `more` once (a run graded at several seeds)."""
    return (seed, *(s for s in dict.fromkeys(more) if s != seed))
