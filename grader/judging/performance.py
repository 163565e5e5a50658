"""Performance cases, the pure part: speedups, bandwidth, TFLOP/s, threshold points, the correctness
gate, PerformanceResults and Gradescope leaderboard entries. No timing and no I/O here
(grader.running.timing.runner measures; this judges what it measured)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from grader.authoring.spec import PerformanceCase
from grader.results import CaseResult, DeviceInfo, Measurement, PerformanceResult
from grader.trap_ids import FASTER_THAN_HARDWARE

NEEDS_CUDA = "needs a CUDA GPU (performance is only measured on the cuda backend)"
# The physical floor: a time this far past the speed of light the GPU measured (the case's bytes at its copy bandwidth,
# its flops at torch's matmul rate) is no time. Honest kernels reach at most 94% of it on the H200 (the reference's
# LayerNorm at 8192x8192; a read-only reduction can beat a copy's bandwidth by ~10%, docs/performance.md), a forged
# timing reached 9,157% (issue 47): 125% leaves honest code a wide margin and refuses every forgery seen.
SPEED_OF_LIGHT_LIMIT_PCT = 125.0


def speedup(bar_ms: float, student_ms: float) -> float:
    """How many times faster than the bar: bar time / student time (> 1 is faster)."""
    if student_ms <= 0 or bar_ms <= 0:
        raise ValueError(f"times must be positive, got {bar_ms} and {student_ms}")
    return bar_ms / student_ms


def paired_speedup(bar_ms: Sequence[float], student_ms: Sequence[float]) -> float:
    """Samples timed in turn, pair by pair (the bar's i-th beside the student's i-th, under the same clocks), who
    goes first alternating from round to round: the median, over blocks of two rounds, of the block's geometric
    mean speedup. A clock that wanders between rounds moves both samples of a pair alike and cancels in its ratio,
    where a ratio of the two medians can set a fast round's sample against a slow one's
    (benchmarks/timing_noise.py: identical 4096^3 tf32 matmuls in turn, median pair ratio +-0.15%); and whatever
    going first or second is worth (a 4096^3 tf32 matmul on an H100 at its power cap: the first of a round's two
    samples ~4% slower, docs/gpu-runs-2026-12-06.txt)
    favours each side once in every block, so it cancels too. An odd last round stands alone."""
    return float(statistics.median(pair_blocks(bar_ms, student_ms)))


def pair_blocks(bar_ms: Sequence[float], student_ms: Sequence[float]) -> list[float]:
    """Samples timed in turn: each block of two rounds' geometric mean speedup (an odd last round alone)."""
    if len(bar_ms) != len(student_ms) or not bar_ms:
        raise ValueError(f"pairs need equal, non-empty samples, got {len(bar_ms)} and {len(student_ms)}")
    ratios = [speedup(bar, mine) for bar, mine in zip(bar_ms, student_ms, strict=True)]
    blocks = [math.sqrt(a * b) for a, b in zip(ratios[0::2], ratios[1::2], strict=False)]
    if len(ratios) % 2:
        blocks.append(ratios[-1])
    return blocks


# A timing in turn has settled once at least SETTLED_BLOCKS whole blocks of two rounds agree within SETTLED_RANGE of
# their median: more rounds would not move `paired_speedup` beyond its noise. Chosen on the round-by-round ratios of
# the 76 in-turn timings recorded on H100s (docs/gpu-runs-2026-12-06.txt, fused_layers' four cases, the reference
# and correct_welford): 26% fewer rounds, every speedup within 0.65% of all ten rounds'. The row statistics and the
# LayerNorm settle after two blocks; the 14 us LayerNorm and the power-capped tf32 matmul rarely do (two blocks
# within 1% would have ended one matmul 1.75% off; three blocks within 0.5% save only 17%).
SETTLED_BLOCKS = 2
SETTLED_RANGE = 0.005


def settled(bar_ms: Sequence[float], student_ms: Sequence[float]) -> bool:
    """Pure: have these samples timed in turn settled (whole blocks only; at least SETTLED_BLOCKS of them, every one
    within SETTLED_RANGE of their median)?"""
    whole = min(len(bar_ms), len(student_ms)) // 2 * 2
    if whole < 2 * SETTLED_BLOCKS:
        return False
    blocks = pair_blocks(bar_ms[:whole], student_ms[:whole])
    middle = statistics.median(blocks)
    return (max(blocks) - min(blocks)) <= SETTLED_RANGE * middle


def gb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops: int, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def percent(value: float, ceiling: float) -> float:
    return 100.0 * value / ceiling if ceiling > 0 else 0.0


def threshold_points(thresholds: Sequence[tuple[float, float]], ratio: float | None) -> float:
    """Points of the highest threshold `ratio` reaches (thresholds: (speedup, points), increasing)."""
    if ratio is None:
        return 0.0
    return max((points for bar, points in thresholds if ratio >= bar), default=0.0)


def measurement(
    label: str,
    medians_ms: Sequence[float],
    nbytes: int | None,
    flops: int | None,
    copy_gb_per_s: float | None,
    matmul_tflops: float | None = None,
) -> Measurement:
    """A Measurement from repeated medians, with bandwidth (given bytes), TFLOP/s (given flops) and the % of the
    speed of light the GPU's measured roofs allow (copy bandwidth for the bytes, matmul throughput for the flops)."""
    ordered = sorted(float(m) for m in medians_ms)
    if not ordered or ordered[0] <= 0:
        raise ValueError(f"{label}: timings must be positive, got {list(medians_ms)}")
    n = len(ordered)
    mid = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    spread = 100.0 * (ordered[-1] - ordered[0]) / 2.0 / mid
    bandwidth = gb_per_s(nbytes, mid) if nbytes else None
    return Measurement(
        label=label,
        medians_ms=tuple(float(m) for m in medians_ms),
        median_ms=mid,
        spread_pct=spread,
        gb_per_s=bandwidth,
        pct_of_copy_bandwidth=percent(bandwidth, copy_gb_per_s) if bandwidth and copy_gb_per_s else None,
        tflops=tflops(flops, mid) if flops else None,
        pct_of_speed_of_light=_speed_of_light(nbytes, flops, mid, copy_gb_per_s, matmul_tflops),
    )


def _speed_of_light(nbytes: int | None, flops: int | None, median_ms: float, copy_gb_per_s: float | None,
                    matmul_tflops: float | None) -> float | None:
    """max(bytes at the copy bandwidth, flops at the matmul roof) / the median, in %; None without a roof that the
    case's bytes or flops can be set against (flops count only with a measured matmul roof)."""
    bound_s = 0.0
    if nbytes and copy_gb_per_s:
        bound_s = nbytes / (copy_gb_per_s * 1e9)
    if flops and matmul_tflops:
        bound_s = max(bound_s, flops / (matmul_tflops * 1e12))
    return round(100.0 * bound_s / (median_ms * 1e-3), 2) if bound_s > 0 else None


def title(perf: PerformanceCase) -> str:
    return f"{perf.target}: {perf.description or perf.shape + ' ' + perf.dtype}"


def _base(
    perf: PerformanceCase, status: str, reason: str, max_score: float, device: DeviceInfo | None = None, trap: str = ""
) -> PerformanceResult:
    return PerformanceResult(
        perf_id=perf.id,
        target=perf.target,
        title=title(perf),
        dims=dict(perf.dims),
        dtype=perf.dtype,
        status=status,
        reason=reason,
        relative_to=perf.relative_to,
        thresholds=tuple((t.speedup, t.points) for t in perf.thresholds),
        max_score=max_score,
        device=device,
        trap=trap,
    )


def skipped(perf: PerformanceCase, reason: str = NEEDS_CUDA) -> PerformanceResult:
    """Not measurable here (no GPU): never passed, never failed, worth nothing either way."""
    return _base(perf, "skipped", reason, max_score=0.0)


def not_run(perf: PerformanceCase, reason: str, device: DeviceInfo | None = None) -> PerformanceResult:
    """Measurable, but not timed (correctness failed, the target is missing): 0 of its points."""
    return _base(perf, "not-run", reason, perf.max_score, device)


def errored(perf: PerformanceCase, reason: str, device: DeviceInfo | None = None, trap: str = "") -> PerformanceResult:
    """Failed or wrong at the timed size; `trap` names what happened where it has a name."""
    return _base(perf, "error", reason, perf.max_score, device, trap)


def correctness_gate(target: str, cases: Sequence[CaseResult]) -> str | None:
    """Why `target` may not be timed yet (None: it may): every correctness case of the target that ran
    in this run must have passed, and at least one must have run."""
    mine = [c for c in cases if c.target == target]
    if not mine:
        return f"no correctness case of {target} ran in this run, so its speed is not measured"
    failed = [c.case_id for c in mine if not c.passed and c.visibility == "public"]
    hidden = sum(not c.passed for c in mine if c.visibility != "public")  # counted, never named: this is public
    if failed or hidden:
        shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        what = f"correctness case(s) {shown}" if shown else f"{hidden} hidden correctness case(s)"
        if shown and hidden:
            what += f" and {hidden} hidden case(s)"
        return f"{target} failed {what}: speed is only measured once every case passes"
    return None


def evaluate(
    perf: PerformanceCase,
    student: Measurement,
    reference: Measurement | None,
    torch: Measurement | None,
    device: DeviceInfo | None,
    note: str = "",
    reference_in_turn: bool = False,
) -> PerformanceResult:
    """A timed case: speedups against torch eager and the reference, and the threshold points; refused (no time, no
    points, flagged) when it beats the physical floor. `reference_in_turn`: the reference's samples were taken in turn
    with the student's, pair by pair, so its speedup is the median pair's (paired_speedup)."""
    if beats_hardware(student):
        return refused_as_too_fast(perf, student, reference, torch, device)
    vs_torch = speedup(torch.median_ms, student.median_ms) if torch else None
    vs_reference = None
    if reference is not None:
        paired = reference_in_turn and len(reference.medians_ms) == len(student.medians_ms)
        vs_reference = paired_speedup(reference.medians_ms, student.medians_ms) if paired \
            else speedup(reference.median_ms, student.median_ms)
    ratio = vs_reference if perf.relative_to == "reference" else vs_torch
    base = _base(perf, "timed", note, perf.max_score, device)
    return replace(
        base,
        student=student,
        reference=reference,
        torch=torch,
        speedup_vs_torch=vs_torch,
        speedup_vs_reference=vs_reference,
        score=threshold_points(base.thresholds, ratio),
    )


def beats_hardware(student: Measurement) -> bool:
    """Is the time faster than the GPU allows, beyond the margin (SPEED_OF_LIGHT_LIMIT_PCT)?"""
    return student.pct_of_speed_of_light is not None and student.pct_of_speed_of_light > SPEED_OF_LIGHT_LIMIT_PCT


def refused_as_too_fast(perf: PerformanceCase, student: Measurement, reference: Measurement | None,
                        torch: Measurement | None, device: DeviceInfo | None) -> PerformanceResult:
    """A time past the physical floor: kept for the instructor to see, worth nothing, on no leaderboard."""
    floor = ""
    if student.pct_of_speed_of_light:
        floor_ms = student.median_ms * student.pct_of_speed_of_light / 100.0
        floor = f" (this GPU needs at least {floor_ms:.4f} ms to move the case's data)"
    reason = (f"faster than this GPU can move the data: {student.median_ms:.4f} ms is "
              f"{student.pct_of_speed_of_light:.0f}% of the speed of light measured on this GPU{floor}; a timed run "
              "cannot beat the hardware, so this is no time: 0 points, and your instructor sees this case flagged")
    return replace(_base(perf, "error", reason, perf.max_score, device, FASTER_THAN_HARDWARE),
                   student=student, reference=reference, torch=torch)


def leaderboard(results: Sequence[PerformanceResult]) -> list[dict[str, Any]]:
    """Gradescope leaderboard entries (https://gradescope-autograders.readthedocs.io: results.json
    `leaderboard`): per timed case its time (lower is better) and its speedup over torch eager."""
    entries: list[dict[str, Any]] = []
    for p in results:
        if not p.timed or p.student is None:
            continue
        entries.append({"name": f"{p.perf_id} (ms)", "value": round(p.student.median_ms, 5), "order": "asc"})
        if p.speedup_vs_torch is not None:
            entries.append(
                {
                    "name": f"{p.perf_id} speedup vs torch",
                    "value": round(p.speedup_vs_torch, 3),
                    "order": "desc",
                }
            )
    return entries


def summary_dict(results: Sequence[PerformanceResult]) -> dict[str, Any]:
    """`extra_data.performance` of results.json: the device once, then every case."""
    device = next((p.device for p in results if p.device is not None), None)
    return {"device": device.to_dict() if device else None, "cases": [p.to_dict() for p in results]}


def by_id(results: Mapping[str, PerformanceResult],
          performance_cases: Sequence[PerformanceCase]) -> list[PerformanceResult]:
    """Results in spec order; a case with no result (never expected) becomes an error."""
    missing = "the grader could not run this performance case (a grader problem)"
    return [results.get(p.id) or errored(p, missing) for p in performance_cases]
