"""Reference and torch-eager timings measured once per batch and GPU, reused by every student.

Every student of a batch is graded on the same seed, so the reference solution and torch eager see
the same inputs for every student: timing them again per student only adds noise and minutes. The
first grade that needs a case's bars measures them (inside the GPU's exclusive slot) and writes them
to GRADER_CALIBRATION_DIR; later grades reuse them until they are `max_age_s` old. Each result
records the calibration it was compared with. Without the variable (a single `grader grade`), the
bars are measured for that grade alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.publishing.atomic import write_json

CALIBRATION_DIR_VARIABLE = "GRADER_CALIBRATION_DIR"
MAX_AGE_S = 900.0  # recalibrate every 15 minutes of a long batch (clocks and temperature drift)


@dataclass(frozen=True)
class Calibration:
    """The bars of one performance case on one GPU: medians (ms) of the reference and of torch eager."""

    id: str
    reference: tuple[float, ...] | None
    torch: tuple[float, ...] | None
    reference_note: str
    copy_gb_per_s: float
    measured_at: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "reference": list(self.reference) if self.reference else None,
                "torch": list(self.torch) if self.torch else None, "reference_note": self.reference_note,
                "copy_gb_per_s": self.copy_gb_per_s, "measured_at": self.measured_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(str(data["id"]), tuple(data["reference"]) if data.get("reference") else None,
                   tuple(data["torch"]) if data.get("torch") else None, str(data.get("reference_note", "")),
                   float(data["copy_gb_per_s"]), float(data["measured_at"]))


def calibration_key(assignment: str, perf_id: str, seed: int, gpu: str) -> str:
    return hashlib.sha256(f"{assignment}\0{perf_id}\0{seed}\0{gpu}".encode()).hexdigest()[:16]


def calibration_dir() -> Path | None:
    folder = os.environ.get(CALIBRATION_DIR_VARIABLE)
    return Path(folder) if folder else None


def load(key: str, max_age_s: float = MAX_AGE_S, now: float | None = None) -> Calibration | None:
    folder = calibration_dir()
    if folder is None:
        return None
    try:
        found = Calibration.from_dict(json.loads((folder / f"{key}.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if (now or time.time()) - found.measured_at <= max_age_s else None


def store(key: str, calibration: Calibration) -> None:
    folder = calibration_dir()
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / f"{key}.json", calibration.to_dict())
