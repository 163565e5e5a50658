"""grader/results.py, the results model: frozen, JSON-able, round trips through to_dict/from_dict; a
grade's score, traps and per-target scores are computed from its cases."""

from __future__ import annotations

import json

from grader.results import (
    RESULTS_FORMAT_VERSION,
    CaseResult,
    DeviceInfo,
    GradeResult,
    Measurement,
    PerformanceResult,
    PerformanceTrap,
)


def case(case_id: str, target: str, score: float, max_score: float, traps: tuple[str, ...] = ()) -> CaseResult:
    return CaseResult(case_id, target, f"{target}: {case_id}", "public", max_score, score, score == max_score,
                      "" if score == max_score else "Failed: wrong", traps, {"worst": [0, 1]}, 0.5)


def test_round_trips_through_json() -> None:
    measured = Measurement("your layernorm", (1.0, 1.2, 1.1), 1.1, 9.1, gb_per_s=800.0)
    perf = PerformanceResult("perf-ln", "layernorm", "layernorm: big", {"M": 4096, "N": 4096}, "float32", "timed",
                             student=measured, reference=measured, speedup_vs_reference=1.0,
                             thresholds=((1.0, 2.0),), score=2.0, max_score=2.0,
                             device=DeviceInfo("NVIDIA H200", 3000.0, "2.13.0", "3.9.0"))
    grade = GradeResult("fused_layers", "fused_layers.py", "interpreter", 3, {"torch": "2.13.0"},
                        (case("a", "k", 1.0, 1.0), case("b", "k", 0.0, 2.0, ("oob-read",))), 4.5,
                        notes=("a note",), performance=(perf,), phases={"cases": 3.0})
    data = json.loads(json.dumps(grade.to_dict(), allow_nan=False))
    assert data["format_version"] == RESULTS_FORMAT_VERSION
    assert GradeResult.from_dict(data) == grade
    slow = PerformanceTrap("re-reading", "layernorm", "loads x_ptr 3.0 times", {"reads": 3.0})
    with_slow = GradeResult(**{**vars(grade), "performance_traps": (slow, slow)})
    assert GradeResult.from_dict(json.loads(json.dumps(with_slow.to_dict()))) == with_slow
    assert with_slow.performance_trap_ids == ("re-reading",) and with_slow.score == grade.score
    assert perf.shape == "4096x4096" and perf.timed and grade.performance_device == perf.device


def test_speed_of_light_counters_and_the_matmul_roof_round_trip() -> None:
    measured = Measurement("your matmul", (0.5,), 0.5, 0.0, gb_per_s=400.0, tflops=275.0, pct_of_speed_of_light=72.4)
    perf = PerformanceResult("perf-mm", "fused_linear_gelu", "mm", {"M": 4096}, "float32", "timed", student=measured,
                             device=DeviceInfo("NVIDIA H200", 4243.0, "2.11", "3.6", matmul_tflops=380.0),
                             counters={"student": {"dram_bytes": 9.0e9, "tensor_pipe_pct": 9.0},
                                       "reference": {"dram_bytes": 3.5e8, "tensor_pipe_pct": 81.0}})
    data = json.loads(json.dumps(perf.to_dict(), allow_nan=False))
    assert PerformanceResult.from_dict(data) == perf
    older = {k: v for k, v in data.items() if k != "counters"}  # results written before profiling
    older["device"] = {k: v for k, v in data["device"].items() if k != "matmul_tflops"}
    back = PerformanceResult.from_dict(older)
    assert back.counters == {} and back.device is not None and back.device.matmul_tflops is None


def test_score_traps_and_per_target() -> None:
    grade = GradeResult("a", "s.py", "interpreter", 1, {}, (
        case("a", "k", 1.0, 1.0), case("b", "k", 0.0, 2.0, ("oob-read", "eps-missing")),
        case("c", "f", 0.0, 3.0, ("oob-read",))), 1.0)
    assert (grade.score, grade.max_score) == (1.0, 6.0)
    assert grade.traps == ("oob-read", "eps-missing")  # each once, in the order the cases name them
    assert grade.score_by_target() == {"k": (1.0, 3.0), "f": (0.0, 3.0)}


def test_older_records_load_with_defaults() -> None:
    minimal = {"case_id": "a", "target": "k", "title": "t", "visibility": "hidden", "max_score": 1,
               "score": 0, "passed": False, "message": "m"}
    loaded = CaseResult.from_dict(minimal)
    assert (loaded.traps, dict(loaded.evidence), loaded.elapsed_s) == ((), {}, 0.0)
    assert Measurement.from_dict(None) is None and DeviceInfo.from_dict(None) is None
    perf = PerformanceResult.from_dict({"perf_id": "p", "target": "k", "title": "t", "dtype": "float32",
                                        "status": "skipped"})
    assert (perf.score, perf.max_score, perf.timed, perf.trap) == (0.0, 0.0, False, "")
