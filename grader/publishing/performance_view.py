"""The report's Performance section: each performance case as a table row of short strings
(PerformanceRow) or one line of plain text (Gradescope's test output, the terminal), the device line, and
each performance trap as "Why it may be slow" lists it (SlowReason)."""

from __future__ import annotations

from dataclasses import dataclass

from grader.publishing.safe_text import clean
from grader.results import GradeResult, Measurement, PerformanceResult


@dataclass(frozen=True)
class SlowReason:
    """One performance trap as the report's "Why it may be slow" lists it."""

    trap: str
    title: str
    target: str
    message: str  # the finding with its numbers
    fix: str
    basis: str  # "prediction" (counted on the CPU) or "measured"


@dataclass(frozen=True)
class PerformanceRow:
    """One performance case, formatted for a table (every field a short string)."""

    id: str
    title: str
    shape: str
    status: str  # "timed" | "skipped" | "not-run" | "error"
    time: str  # "0.1354 ms"
    spread: str  # "±0.3%"
    vs_torch: str  # "1.63x"
    vs_reference: str
    throughput: str  # "94.0% of copy bandwidth" or "313.7 TFLOP/s"
    points: str  # "1 / 2"
    reason: str
    torch_label: str
    torch_time: str
    reference_time: str

    @property
    def timed(self) -> bool:
        return self.status == "timed"


def _ms(m: Measurement | None) -> str:
    return f"{m.median_ms:.4f} ms" if m else "–"


def _times(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "–"


def throughput(m: Measurement | None) -> str:
    if m is None:
        return ""
    parts = []
    if m.pct_of_copy_bandwidth is not None:
        parts.append(f"{m.pct_of_copy_bandwidth:.1f}% of copy bandwidth ({m.gb_per_s:.0f} GB/s)")
    if m.tflops is not None:
        parts.append(f"{m.tflops:.1f} TFLOP/s")
    return ", ".join(parts)


def performance_row(p: PerformanceResult) -> PerformanceRow:
    return PerformanceRow(
        id=p.perf_id, title=p.title, shape=f"{p.shape} {p.dtype}", status=p.status,
        time=_ms(p.student), spread=f"±{p.student.spread_pct:.1f}%" if p.student else "",
        vs_torch=_times(p.speedup_vs_torch), vs_reference=_times(p.speedup_vs_reference),
        throughput=throughput(p.student),
        points=f"{p.score:g} / {p.max_score:g}" if p.max_score else "–",
        reason=clean(p.reason, 600), torch_label=p.torch.label if p.torch else "",
        torch_time=_ms(p.torch), reference_time=_ms(p.reference),
    )


def performance_line(p: PerformanceResult) -> str:
    """One performance case in one line of plain text (Gradescope test output, terminal)."""
    r = performance_row(p)
    if not r.timed:
        return f"{r.status}: {r.reason}"
    parts = [f"{r.time} {r.spread}", f"{r.vs_torch} torch eager ({r.torch_label} {r.torch_time})"]
    if p.reference:
        parts.append(f"{r.vs_reference} the reference ({r.reference_time})")
    if r.throughput:
        parts.append(r.throughput)
    if p.max_score:
        parts.append(f"{r.points} points")
    if r.reason:
        parts.append(r.reason)
    return " · ".join(parts)


def device_line(result: GradeResult) -> str:
    d = result.performance_device
    if d is None:
        return ""
    return f"{d.gpu} (copy bandwidth {d.copy_gb_per_s:.0f} GB/s), torch {d.torch}, triton {d.triton}"
