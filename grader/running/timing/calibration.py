"""Bars: the reference's and torch eager's timings and the copy bandwidth, measured once per assignment,
GPU and versions and cached on disk across grades, batches and runs.

The bars of a performance case depend on its shapes, the code timed and the machine, not on the random
values of the inputs, so every grade of a course on one GPU can share them. A `CalibrationKey` names all
that they depend on: the assignment, the case's definition (target, dims, dtype, input sets, repeats,
tolerance, its baseline), the oracle module (torch eager and the input generator) and the reference
solution (their file bytes), the GPU (name and UUID), the driver, torch, triton and the grader, and the
file format. Not the seed. Whatever the key covers (a driver update, a new torch, an edited reference)
brings a new measurement at once; the maximum age (default 24 h) covers what it cannot see: thermal
state, clocks left locked or unlocked by someone else, a neighbour's long job.

A `CalibrationStore` is a folder of JSON files, one per key (the key's parts are in the file, for people
to read). `measure_once` takes an flock per key while it measures, so concurrent grades of a batch measure
a case once: the others wait on the lock, then read. Writes are atomic; a corrupt, foreign or stale file
is measured again, never an error. The default folder is the user's cache (`default_folder`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import math
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.atomic import write_json

if TYPE_CHECKING:  # torch comes with them: a batch's parent and `grader list` need none of it
    from grader.authoring.problem import Problem
    from grader.authoring.spec import Assignment, PerformanceCase

FORMAT_VERSION = 1  # bump when the file's layout or the way bars are timed changes
DEFAULT_MAX_AGE_S = 24 * 3600.0
CLOCK_SLACK_S = 60.0  # an entry measured further in the future than this (a clock set back) is stale
CACHE_DIR_VARIABLE = "GRADER_CACHE_DIR"  # the grader's cache; calibration/ under it
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


@dataclass(frozen=True)
class Calibration:
    """The bars of one performance case on one GPU: medians (ms) of the reference and of torch eager."""

    id: str
    reference: tuple[float, ...] | None
    torch: tuple[float, ...] | None
    reference_note: str
    copy_gb_per_s: float
    measured_at: float
    matmul_tflops: float | None = None  # the compute roof for the case's dtype (cases that declare flops)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "reference": list(self.reference) if self.reference else None,
                "torch": list(self.torch) if self.torch else None, "reference_note": self.reference_note,
                "copy_gb_per_s": self.copy_gb_per_s, "measured_at": self.measured_at,
                "matmul_tflops": self.matmul_tflops}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        """Raises ValueError, KeyError or TypeError on anything but numbers where numbers belong."""
        return cls(str(data["id"]), _medians(data.get("reference")), _medians(data.get("torch")),
                   str(data.get("reference_note", "")), _finite(data["copy_gb_per_s"]), _finite(data["measured_at"]),
                   None if data.get("matmul_tflops") is None else _finite(data["matmul_tflops"]))


def _finite(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return float(value)


def _medians(value: Any) -> tuple[float, ...] | None:
    if not value:
        return None
    if not isinstance(value, list):
        raise TypeError(f"not a list of medians: {value!r}")
    return tuple(_finite(v) for v in value)


# --------------------------------------------------------------------------- what bars depend on


@dataclass(frozen=True)
class Machine:
    """The GPU and software that time the bars (`this_machine`)."""

    gpu: str  # name and UUID, e.g. "NVIDIA H200 (GPU-8f0c...)"; the device ("cpu") elsewhere
    driver: str  # the NVIDIA driver's version; "" where it cannot be read
    torch: str  # with the CUDA it was built for
    triton: str
    grader: str


@dataclass(frozen=True)
class CalibrationKey:
    """Everything a case's bars depend on (see the module's docstring); `digest` names its file."""

    assignment: str
    perf_id: str
    case: Mapping[str, Any]  # the case's definition as JSON data (`case_definition`)
    oracles: str  # sha256 of the assignment's oracle module: torch eager and the input generator
    reference: str  # sha256 of the reference solution; "" without one
    gpu: str
    driver: str
    torch: str
    triton: str
    grader: str
    format: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def digest(self) -> str:
        return hashlib.sha256(_canonical(self.to_dict()).encode()).hexdigest()[:20]

    @property
    def file_name(self) -> str:
        return f"{_safe(self.assignment)}.{_safe(self.perf_id)}.{self.digest}.json"


# How a timed run's input sets are made (planned_launches.rotated_sets): bars measured another way are not reused.
SETS_RULE = "own values, at least two, past L2"


def case_definition(perf: PerformanceCase, problem_name: str, problem: Problem) -> dict[str, Any]:
    """Pure: what of a performance case shapes its bars, as JSON data (points and thresholds do not)."""
    baseline = problem.baseline
    definition = {
        "target": perf.target, "problem": problem_name, "dims": dict(perf.dims), "dtype": perf.dtype,
        "kind": perf.kind, "meta": dict(perf.meta), "options": dict(perf.options), "tolerance": perf.tolerance,
        "input_sets": perf.input_sets, "repeats": perf.repeats, "sets_rule": SETS_RULE,
        "baseline": None if baseline is None else
        {"label": baseline.label, "outputs": list(baseline.outputs), "tf32": baseline.tf32},
    }
    normal: dict[str, Any] = json.loads(_canonical(definition))  # as it reads back from a file
    return normal


def calibration_key(assignment: Assignment, perf: PerformanceCase, problems: Mapping[str, Problem],
                    machine: Machine) -> CalibrationKey:
    """The key of `perf`'s bars on `machine` (reads the oracle module and the reference solution)."""
    spec = assignment.kernels.get(perf.target) or assignment.functions[perf.target]
    reference = file_digest(assignment.reference_solution) if assignment.reference_solution else ""
    return CalibrationKey(
        assignment=assignment.id, perf_id=perf.id,
        case=case_definition(perf, spec.problem, problems[spec.problem]),
        oracles=file_digest(assignment.root / assignment.module), reference=reference,
        gpu=machine.gpu, driver=machine.driver, torch=machine.torch, triton=machine.triton, grader=machine.grader)


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes; "" when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def this_machine(device: str) -> Machine:
    """The machine that times on `device` ("cuda": the current GPU). Cheap: a file read (or one
    nvidia-smi call where that file is missing) and torch's device properties."""
    import torch

    from grader.environment import versions

    found = versions()
    if device != "cuda":
        return Machine(gpu=device, driver="", torch=torch.__version__, triton=found.get("triton", "?"),
                       grader=found.get("kernel-grader", "?"))
    from grader.running.processes.gpu_slot import gpu_name

    return Machine(gpu=f"{torch.cuda.get_device_name()} ({gpu_name()})", driver=driver_version(),
                   torch=f"{torch.__version__} (CUDA {torch.version.cuda})", triton=found.get("triton", "?"),
                   grader=found.get("kernel-grader", "?"))


def driver_version(version_file: Path = DRIVER_VERSION_FILE) -> str:
    """The NVIDIA driver's version, e.g. "570.124.06": from the kernel module's /proc file, else
    nvidia-smi; "" when neither answers."""
    try:
        found = parse_driver_version(version_file.read_text(encoding="utf-8", errors="replace"))
        if found:
            return found
    except OSError:
        pass
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else ""


def parse_driver_version(text: str) -> str:
    """Pure: the version on the NVRM line of /proc/driver/nvidia/version, or ""."""
    found = re.search(r"^NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text, re.MULTILINE)
    return found.group(1) if found else ""


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:60]


# --------------------------------------------------------------------------- the store


def default_folder(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """The user's cache: $GRADER_CACHE_DIR/calibration, else $XDG_CACHE_HOME/kernel-grader/calibration,
    else ~/.cache/kernel-grader/calibration (a relative XDG_CACHE_HOME is ignored, as XDG says)."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_DIR_VARIABLE):
        return Path(env[CACHE_DIR_VARIABLE]) / "calibration"
    xdg = env.get("XDG_CACHE_HOME", "")
    cache = Path(xdg) if xdg and Path(xdg).is_absolute() else (home or Path.home()) / ".cache"
    return cache / "kernel-grader" / "calibration"


@dataclass(frozen=True)
class CalibrationStore:
    """Bars on disk in `folder`, good for `max_age_s` and not if measured before `not_before` (set by
    `recalibrated`, e.g. for `--recalibrate`: this run's first grade measures again, its others reuse that)."""

    folder: Path
    max_age_s: float = DEFAULT_MAX_AGE_S
    not_before: float = 0.0
    clock: Callable[[], float] = field(default=time.time, compare=False, repr=False)

    def recalibrated(self) -> CalibrationStore:
        """This store ignoring every entry measured before now."""
        return replace(self, not_before=self.clock())

    def path(self, key: CalibrationKey) -> Path:
        return self.folder / key.file_name

    @property
    def reference_triton_cache(self) -> Path:
        """Where the reference solution's workers keep Triton's compiled kernels for every grade of the course (only
        the reference's: its code is the course's; a submission's cache dies with its sandbox). Inside the store's
        folder, which every grade hides from student code (grader.operations.grade.guard_calibration)."""
        return self.folder / "reference-triton-cache"

    def load(self, key: CalibrationKey) -> Calibration | None:
        """The stored bars of `key`, or None when absent, stale, unreadable or stored for another key."""
        try:
            data = json.loads(self.path(key).read_text(encoding="utf-8"))
            if data.get("format") != FORMAT_VERSION or data.get("key") != key.to_dict():
                return None
            found = Calibration.from_dict(data["calibration"])
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return found if self.fresh(found) else None

    def fresh(self, calibration: Calibration) -> bool:
        age = self.clock() - calibration.measured_at
        return calibration.measured_at >= self.not_before and -CLOCK_SLACK_S <= age <= self.max_age_s

    def store(self, key: CalibrationKey, calibration: Calibration) -> None:
        """Write atomically (grader.atomic); raises OSError, or ValueError for a non-finite time."""
        measured = dt.datetime.fromtimestamp(calibration.measured_at, dt.timezone.utc).isoformat(timespec="seconds")
        write_json(self.path(key), {"format": FORMAT_VERSION, "measured": measured, "key": key.to_dict(),
                                    "calibration": calibration.to_dict()})

    def measure_once(self, key: CalibrationKey, measure: Callable[[], Calibration],
                     keep: Callable[[Calibration], bool] | None = None) -> Calibration:
        """The stored bars of `key`, else `measure()`'s, stored when `keep` (default: always) says so.
        Holds an flock on the key while measuring, so another process that needs the same bars waits and
        then reads them. Where the folder cannot be written, measures for this caller alone. An exception
        from `measure` propagates and stores nothing."""
        found = self.load(key)
        if found is not None:
            return found
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            lock = os.open(self.folder / f".{key.file_name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return measure()
        try:
            with contextlib.suppress(OSError):  # no locks on this file system: measure unlocked
                fcntl.flock(lock, fcntl.LOCK_EX)
            found = self.load(key)  # measured by another grade while this one waited
            if found is not None:
                return found
            made = measure()
            if keep is None or keep(made):
                with contextlib.suppress(OSError, ValueError):  # bars are used even when they cannot be kept
                    self.store(key, made)
            return made
        finally:
            os.close(lock)  # releases the flock

    def to_args(self, prefix: str = "--") -> list[str]:
        """Command-line options that make this store in another process (`from_args`)."""
        args = [f"{prefix}calibration-dir={self.folder}", f"{prefix}calibration-max-age-s={self.max_age_s!r}"]
        return args + ([f"{prefix}calibrated-after={self.not_before!r}"] if self.not_before else [])

    @classmethod
    def from_args(cls, folder: str | os.PathLike[str] | None, max_age_s: float | None,
                  not_before: float | None) -> CalibrationStore | None:
        """The store `to_args` describes; None without a folder."""
        if not folder:
            return None
        return cls(Path(folder), DEFAULT_MAX_AGE_S if max_age_s is None else max_age_s, not_before or 0.0)
