"""A course's grading seed: the seed every grade uses when none is given, so a grade is a fact about the file.

Inputs are drawn from a run's seed (grader.seeds). With a fresh seed per grade, a resubmission, a regrade or a
second batch of the same bytes drew other inputs; the course seed makes them the same. It is kept in
`<course>/reference/course-seed.toml`: reference/ is course staff's folder (it ships nowhere: not the wheel,
the student bundle, Classroom; and it is hidden from the workers that run student code). The first grade that
needs it creates it (a 63-bit secret from the OS), atomically, so concurrent grades of a batch agree;
`grader course-seed --rotate` replaces it. Commit it with the course, keep it as secret as the reference.

A public run (`grader check`, the student bundle) has no course folder behind it: its public cases draw
from `grader.seeds.public_seed(assignment id)`, the same for every student and every run.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grader.authoring.spec import REFERENCE_DIR, Assignment, SpecError
from grader.seeds import fingerprint, public_seed

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SEED_FILE = "course-seed.toml"
SEED_BITS = 63  # a secret nobody enumerates; any int works as a run seed (grader.seeds.case_seed hashes it)

# Where a grade's seed came from (GradeResult.seed_source)
GIVEN = "given"  # --seed, or a batch's manifest
COURSE = "course"  # the course's secret seed
PUBLIC = "public"  # a public run: the assignment's public seed


@dataclass(frozen=True)
class CourseSeed:
    seed: int
    path: Path
    created: str = ""

    @property
    def fingerprint(self) -> str:
        """A short public name for the seed: tells two seeds apart without telling either."""
        return fingerprint(self.seed)


@dataclass(frozen=True)
class SeedChoice:
    """The seed a grade uses and where it came from."""

    seed: int
    source: str  # GIVEN, COURSE or PUBLIC
    note: str = ""  # said once to whoever runs the grade (the course seed was just created, say)


def seed_path(course_root: Path) -> Path:
    return Path(course_root) / REFERENCE_DIR / SEED_FILE


def read_course_seed(course_root: Path) -> CourseSeed | None:
    """The course's seed, or None where it has none yet. A file that is there but unreadable is an error naming it."""
    path = seed_path(course_root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SpecError(path, "", f"cannot read the course seed: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(path, "", f"is not valid TOML: {exc}") from None
    seed = data.get("seed")
    if type(seed) is not int or seed < 0:
        raise SpecError(path, "seed", "must be a non-negative integer (`grader course-seed --rotate` writes a new one)")
    return CourseSeed(seed, path, str(data.get("created", "")))


def _text(seed: int) -> str:
    created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ("# The course's grading seed (kernel-grader): every grade, batch and Gradescope bundle without --seed\n"
            "# draws its inputs from it, so the same file gets the same grade every time. Secret, like the reference:\n"
            "# keep it in reference/ (which ships nowhere). `grader course-seed --rotate` replaces it.\n"
            f"seed = {seed}\ncreated = \"{created}\"\n")


def _write(path: Path, seed: int, replace: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".course-seed-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_text(seed))
        os.chmod(tmp, 0o600)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # atomic, and fails where another grade created it first
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def ensure_course_seed(course_root: Path) -> tuple[CourseSeed, bool]:
    """The course's seed, created now where it has none; and whether it was created."""
    found = read_course_seed(course_root)
    if found is not None:
        return found, False
    path = seed_path(course_root)
    try:
        _write(path, secrets.randbits(SEED_BITS), replace=False)
        created = True
    except FileExistsError:  # a concurrent grade made it: use theirs
        created = False
    except OSError as exc:
        raise SpecError(path, "", f"cannot create the course seed: {exc}; pass --seed instead") from None
    seed = read_course_seed(course_root)
    assert seed is not None
    return seed, created


def rotate_course_seed(course_root: Path) -> CourseSeed:
    """A new course seed in place of the old: later grades draw other inputs (a batch marks its earlier results
    outdated)."""
    path = seed_path(course_root)
    _write(path, secrets.randbits(SEED_BITS), replace=True)
    seed = read_course_seed(course_root)
    assert seed is not None
    return seed


def choose_seed(assignment: Assignment, given: int | None, public_run: bool) -> SeedChoice:
    """The seed of a grade: the one given; else a public run's public seed; else the course's (created once)."""
    if given is not None:
        return SeedChoice(given, GIVEN)
    if public_run or assignment.public:
        return SeedChoice(public_seed(assignment.id), PUBLIC)
    seed, created = ensure_course_seed(assignment.course_root)
    note = (f"created the course seed {seed.fingerprint} in {seed.path}: every grade without --seed uses it from "
            "now on; keep it with the course (it ships nowhere)") if created else ""
    return SeedChoice(seed.seed, COURSE, note)
