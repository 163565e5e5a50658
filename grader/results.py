"""The results model: what one case and one whole grading run produced. Plain, JSON-able, frozen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from grader.seeds import seed_label, seed_text
from grader.trap_ids import FLAGGED

RESULTS_FORMAT_VERSION = 1


@dataclass(frozen=True)
class CaseResult:
    case_id: str
    target: str
    title: str
    visibility: str  # "public" | "hidden"
    max_score: float
    score: float
    passed: bool
    message: str
    traps: tuple[str, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["traps"] = list(self.traps)
        data["evidence"] = dict(self.evidence)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseResult:
        return cls(
            case_id=str(data["case_id"]),
            target=str(data["target"]),
            title=str(data["title"]),
            visibility=str(data["visibility"]),
            max_score=float(data["max_score"]),
            score=float(data["score"]),
            passed=bool(data["passed"]),
            message=str(data["message"]),
            traps=tuple(data.get("traps", ())),
            evidence=dict(data.get("evidence", {})),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
        )


@dataclass(frozen=True)
class Measurement:
    """One implementation timed on one performance case: medians of repeated do_bench runs."""

    label: str  # what was timed: "your layernorm", "reference", "F.layer_norm"
    medians_ms: tuple[float, ...]
    median_ms: float
    spread_pct: float  # half the range of the medians, % of their median (printed as +-)
    gb_per_s: float | None = None  # bytes moved / time (problems that declare bytes_moved)
    pct_of_copy_bandwidth: float | None = None
    tflops: float | None = None  # problems that declare flops
    # the fewest milliseconds the GPU's measured roofs allow for the case's bytes and flops (copy bandwidth, matmul
    # throughput), as a % of this median: 100 is the roof (judging.roofline.speed_of_light)
    pct_of_speed_of_light: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["medians_ms"] = list(self.medians_ms)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Measurement | None:
        if data is None:
            return None
        optional = {k: (None if data.get(k) is None else float(data[k]))
                    for k in ("gb_per_s", "pct_of_copy_bandwidth", "tflops", "pct_of_speed_of_light")}
        return cls(label=str(data["label"]), medians_ms=tuple(float(m) for m in data["medians_ms"]),
                   median_ms=float(data["median_ms"]), spread_pct=float(data["spread_pct"]), **optional)


@dataclass(frozen=True)
class DeviceInfo:
    """Where performance was measured: the GPU, its measured copy bandwidth, the versions."""

    gpu: str
    copy_gb_per_s: float  # a 1 GiB device-to-device copy, bytes read + written per second
    torch: str
    triton: str
    matmul_tflops: float | None = None  # torch's 8192^3 matmul in the case's dtype: the compute roof (matmul cases)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> DeviceInfo | None:
        if data is None:
            return None
        roof = data.get("matmul_tflops")
        return cls(str(data["gpu"]), float(data["copy_gb_per_s"]), str(data["torch"]), str(data["triton"]),
                   None if roof is None else float(roof))


@dataclass(frozen=True)
class PerformanceResult:
    """One performance case. `status`: "timed" (numbers below); "skipped" (the backend cannot time:
    the interpreter; never counted, max_score 0); "not-run" (the target's correctness cases did not all
    pass, or it cannot be run); "error" (it failed or gave a wrong output at the timed size)."""

    perf_id: str
    target: str
    title: str
    dims: Mapping[str, int]
    dtype: str
    status: str
    reason: str = ""
    student: Measurement | None = None
    reference: Measurement | None = None
    torch: Measurement | None = None
    speedup_vs_torch: float | None = None  # torch time / your time: > 1 is faster than torch
    speedup_vs_reference: float | None = None
    relative_to: str = "reference"  # what thresholds compare with
    thresholds: tuple[tuple[float, float], ...] = ()  # (speedup, points)
    score: float = 0.0
    max_score: float = 0.0
    device: DeviceInfo | None = None
    trap: str = ""  # what went wrong at the timed size, when it has a name (timeout, out-of-memory, not-fused)
    calibration: str = ""  # the batch calibration the reference and torch times come from
    # what Nsight Compute counted in one profiled replay (CUDA): "student" and "reference" -> counter -> value
    # (dram_bytes, sectors_per_load, occupancy_pct, tensor_pipe_pct, programs, threads, registers, spills)
    counters: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @property
    def timed(self) -> bool:
        return self.status == "timed"

    @property
    def shape(self) -> str:
        return "x".join(str(v) for v in self.dims.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "perf_id": self.perf_id, "target": self.target, "title": self.title, "dims": dict(self.dims),
            "dtype": self.dtype, "status": self.status, "reason": self.reason,
            "student": self.student.to_dict() if self.student else None,
            "reference": self.reference.to_dict() if self.reference else None,
            "torch": self.torch.to_dict() if self.torch else None,
            "speedup_vs_torch": self.speedup_vs_torch, "speedup_vs_reference": self.speedup_vs_reference,
            "relative_to": self.relative_to, "thresholds": [list(t) for t in self.thresholds],
            "score": self.score, "max_score": self.max_score,
            "device": self.device.to_dict() if self.device else None,
            "trap": self.trap, "calibration": self.calibration,
            "counters": {side: dict(values) for side, values in self.counters.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerformanceResult:
        def ratio(key: str) -> float | None:
            return None if data.get(key) is None else float(data[key])

        return cls(
            perf_id=str(data["perf_id"]), target=str(data["target"]), title=str(data["title"]),
            dims={str(k): int(v) for k, v in dict(data.get("dims", {})).items()}, dtype=str(data["dtype"]),
            status=str(data["status"]), reason=str(data.get("reason", "")),
            student=Measurement.from_dict(data.get("student")),
            reference=Measurement.from_dict(data.get("reference")),
            torch=Measurement.from_dict(data.get("torch")),
            speedup_vs_torch=ratio("speedup_vs_torch"), speedup_vs_reference=ratio("speedup_vs_reference"),
            relative_to=str(data.get("relative_to", "reference")),
            thresholds=tuple((float(s), float(p)) for s, p in data.get("thresholds", ())),
            score=float(data.get("score", 0.0)), max_score=float(data.get("max_score", 0.0)),
            device=DeviceInfo.from_dict(data.get("device")),
            trap=str(data.get("trap", "")), calibration=str(data.get("calibration", "")),
            counters={str(side): {str(k): float(v) for k, v in dict(values).items()}
                      for side, values in dict(data.get("counters") or {}).items()},
        )


@dataclass(frozen=True)
class PerformanceTrap:
    """A performance trap named from evidence (grader/judging/performance_traps.py): informational, no points.
    `basis`: "prediction" (counted by the interpreter, lane by lane); a GPU measurement would be "measured"."""

    trap: str
    target: str  # the kernel or wrapper whose cases gave the evidence
    message: str  # the finding in one sentence, with its numbers
    numbers: Mapping[str, float] = field(default_factory=dict)
    basis: str = "prediction"

    def to_dict(self) -> dict[str, Any]:
        return {"trap": self.trap, "target": self.target, "message": self.message,
                "numbers": dict(self.numbers), "basis": self.basis}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerformanceTrap:
        return cls(trap=str(data["trap"]), target=str(data["target"]), message=str(data["message"]),
                   numbers={str(k): float(v) for k, v in dict(data.get("numbers", {})).items()},
                   basis=str(data.get("basis", "prediction")))


@dataclass(frozen=True)
class GradeResult:
    assignment: str
    submission: str
    backend: str
    seed: int
    versions: Mapping[str, str]
    cases: tuple[CaseResult, ...]
    execution_time_s: float
    notes: tuple[str, ...] = ()  # submission-level messages (import errors, GPU compile problems)
    public_only: bool = False
    format_version: int = RESULTS_FORMAT_VERSION
    performance: tuple[PerformanceResult, ...] = ()  # [[performance]] cases (skipped ones have max_score 0)
    phases: Mapping[str, float] = field(default_factory=dict)  # wall seconds per phase (grader.running.phases)
    rejected: str = ""  # why nothing of the submission ran (not Python source, say); '' when it was graded
    performance_traps: tuple[PerformanceTrap, ...] = ()  # why it may be slow: informational, never scored
    seed_source: str = ""  # "course", "public" or "given" (grader.authoring.course_seed); "" in older records

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cases) + sum(p.score for p in self.performance)

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.cases) + sum(p.max_score for p in self.performance)

    @property
    def seed_text(self) -> str:
        """The seed as a report names it (grader.seeds.seed_text): the course's by its fingerprint only."""
        return seed_text(self.seed, self.seed_source)

    @property
    def seed_label(self) -> str:
        """The seed in a few words (grader.seeds.seed_label), for one-line summaries."""
        return seed_label(self.seed, self.seed_source)

    @property
    def performance_device(self) -> DeviceInfo | None:
        return next((p.device for p in self.performance if p.device is not None), None)

    @property
    def traps(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for case in self.cases:
            for trap in case.traps:
                seen.setdefault(trap, None)
        return tuple(seen)

    @property
    def flags(self) -> tuple[str, ...]:
        """The traps an instructor must look at whatever the score (grader.trap_ids.FLAGGED): forged work or
        timings, from a correctness case or a performance case."""
        found = [t for t in self.traps if t in FLAGGED] + [p.trap for p in self.performance if p.trap in FLAGGED]
        return tuple(dict.fromkeys(found))

    @property
    def performance_trap_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.trap for t in self.performance_traps))

    def score_by_target(self) -> dict[str, tuple[float, float]]:
        out: dict[str, tuple[float, float]] = {}
        for case in self.cases:
            got, total = out.get(case.target, (0.0, 0.0))
            out[case.target] = (got + case.score, total + case.max_score)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "assignment": self.assignment,
            "submission": self.submission,
            "backend": self.backend,
            "seed": self.seed,
            "seed_source": self.seed_source,
            "versions": dict(self.versions),
            "execution_time_s": self.execution_time_s,
            "notes": list(self.notes),
            "public_only": self.public_only,
            "score": self.score,
            "max_score": self.max_score,
            "traps": list(self.traps),
            "cases": [c.to_dict() for c in self.cases],
            "performance": [p.to_dict() for p in self.performance],
            "phases": dict(self.phases),
            "rejected": self.rejected,
            "performance_traps": [t.to_dict() for t in self.performance_traps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GradeResult:
        return cls(
            assignment=data["assignment"],
            submission=data["submission"],
            backend=data["backend"],
            seed=int(data["seed"]),
            versions=dict(data.get("versions", {})),
            cases=tuple(CaseResult.from_dict(c) for c in data["cases"]),
            execution_time_s=float(data.get("execution_time_s", 0.0)),
            notes=tuple(data.get("notes", ())),
            public_only=bool(data.get("public_only", False)),
            format_version=int(data.get("format_version", RESULTS_FORMAT_VERSION)),
            performance=tuple(PerformanceResult.from_dict(p) for p in data.get("performance", ())),
            phases={str(k): float(v) for k, v in (data.get("phases") or {}).items()},
            rejected=str(data.get("rejected", "")),
            performance_traps=tuple(PerformanceTrap.from_dict(t) for t in data.get("performance_traps", ())),
            seed_source=str(data.get("seed_source", "")),
        )
