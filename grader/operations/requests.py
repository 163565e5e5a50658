"""What a command asks of the grader, built once by the command line and handed down: `GradeFiles` (`grader
grade`), `CheckFile` (`grader check`), and the performance bars' cache settings they share. Frozen and cheap to
import: the command line builds them before anything heavy is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.backends import AUTO
from grader.running.timing.calibration import DEFAULT_MAX_AGE_S, CalibrationStore, default_folder


class UsageError(Exception):
    """A mistake in how the grader was asked; its message is for the user."""


@dataclass(frozen=True)
class CalibrationSettings:
    """Where the performance cases' bars (reference and torch eager timings) are cached, and for how long."""

    folder: Path | None = None  # None: $GRADER_CACHE_DIR/calibration, else the user's cache folder
    max_age_s: float = DEFAULT_MAX_AGE_S
    recalibrate: bool = False  # measure them again (later grades of this run reuse what this one measured)

    def __post_init__(self) -> None:
        if self.max_age_s < 0:
            raise UsageError("--calibration-max-age must not be negative")

    @property
    def resolved_folder(self) -> Path:
        """The cache folder, absolute (children grade in folders of their own)."""
        return (self.folder or default_folder()).resolve()

    def store(self) -> CalibrationStore:
        """The store these settings name (made once per command: --recalibrate counts from now)."""
        store = CalibrationStore(self.resolved_folder, self.max_age_s)
        return store.recalibrated() if self.recalibrate else store


@dataclass(frozen=True)
class GradeFiles:
    """`grader grade`: files graded on an assignment's full battery, each to `out` (several: `out/<file stem>`)."""

    assignments_root: Path
    assignment_id: str
    submissions: tuple[Path, ...]
    out: Path
    backend: str = AUTO  # as asked: "auto", "interpreter" or "cuda"
    seed: int | None = None  # None: the course's seed
    sanitize: bool = False
    profile: bool = True  # CUDA: the timed cases replayed once under Nsight Compute
    prairielearn: bool = False
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)


@dataclass(frozen=True)
class CheckFile:
    """`grader check`: one file on an assignment's public cases (the assignment its name fits, when none is named)."""

    assignments_root: Path
    submission: Path
    assignment_id: str | None = None
    targets: tuple[str, ...] = ()
    out: Path | None = None
    backend: str = AUTO
    seed: int | None = None  # None: the assignment's public seed
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    timed: bool = False  # CUDA: time the performance cases too (a check is the quick loop: off)
    profile: bool = False  # CUDA: the timed cases replayed under Nsight Compute (off, as `timed`)
