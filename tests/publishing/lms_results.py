"""Hand-made results for the LMS formats' tests (PrairieLearn, the gradebook and Canvas)."""

from __future__ import annotations

from grader.results import CaseResult, GradeResult, PerformanceResult
from tests.conftest import ASSIGNMENT, SEED


def case(case_id: str, visibility: str, score: float, max_score: float, traps: tuple[str, ...] = ()) -> CaseResult:
    return CaseResult(case_id=case_id, target="layernorm", title=f"layernorm: {case_id}", visibility=visibility,
                      max_score=max_score, score=score, passed=score == max_score,
                      message=f"details of {case_id}", traps=traps)


def result(*cases: CaseResult, performance: tuple[PerformanceResult, ...] = ()) -> GradeResult:
    return GradeResult(assignment=ASSIGNMENT, submission="fused_layers.py", backend="interpreter", seed=SEED,
                       versions={}, cases=cases, execution_time_s=1.0, performance=performance)
