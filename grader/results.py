"""The results model: what one case and one whole grading run produced. Plain, JSON-able, frozen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

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

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cases)

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.cases)

    @property
    def traps(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for case in self.cases:
            for trap in case.traps:
                seen.setdefault(trap, None)
        return tuple(seen)

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
            "versions": dict(self.versions),
            "execution_time_s": self.execution_time_s,
            "notes": list(self.notes),
            "public_only": self.public_only,
            "score": self.score,
            "max_score": self.max_score,
            "traps": list(self.traps),
            "cases": [c.to_dict() for c in self.cases],
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
        )
