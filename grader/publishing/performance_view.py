"""The report's Performance section: each performance case as a table row of short strings
(PerformanceRow) or one line of plain text (Gradescope's test output, the terminal), the device line, and
each performance trap as "Why it may be slow" lists it (SlowReason)."""

from __future__ import annotations

from dataclasses import dataclass

from grader.judging.roofline import Ceilings, Point, roofline_svg
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
    speed_of_light: str = ""  # "72% of speed of light": the GPU's roofs over the measured time
    counters: str = ""  # what Nsight Compute counted, yours against the reference's, in one line
    roofline: str = ""  # an SVG (built here from numbers only: safe to inline) where the case declares flops

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


def speed_of_light(m: Measurement | None) -> str:
    if m is None or m.pct_of_speed_of_light is None:
        return ""
    if m.pct_of_speed_of_light >= 100:  # a read-heavy kernel can beat the copy (read + write) bandwidth the roof uses
        return f"at the speed of light ({m.pct_of_speed_of_light:.0f}% of the copy-bandwidth roof)"
    return f"{m.pct_of_speed_of_light:.0f}% of speed of light"


_COUNTERS = (  # counter -> how it reads
    ("dram_bytes", "DRAM traffic", lambda v: f"{v / 1e6:,.0f} MB"),
    ("sectors_per_load", "sectors per load request", lambda v: f"{v:.0f}"),
    ("occupancy_pct", "achieved occupancy", lambda v: f"{v:.0f}%"),
    ("tensor_pipe_pct", "tensor pipe", lambda v: f"{v:.0f}%"),
    ("programs", "programs", lambda v: f"{v:,.0f}"),
    ("threads", "threads per program", lambda v: f"{v:.0f}"),
    ("spills", "register spills", lambda v: f"{v:.0f}"),
)


def counters_line(p: PerformanceResult) -> str:
    """"DRAM traffic 805 MB (reference 268 MB); ..." for the counters both sides have."""
    mine, theirs = p.counters.get("student", {}), p.counters.get("reference", {})
    parts = []
    for key, name, fmt in _COUNTERS:
        if key in mine:
            other = f" (reference {fmt(theirs[key])})" if key in theirs else ""
            parts.append(f"{name} {fmt(mine[key])}{other}")
    return "; ".join(parts)


def roofline(p: PerformanceResult) -> str:
    """The case on the GPU's roofline (yours, the reference, torch), where it declares flops and the device's
    roofs were measured; the bytes are what Nsight Compute counted where it did, else the case's own."""
    d = p.device
    if not p.timed or d is None or not d.matmul_tflops or not d.copy_gb_per_s:
        return ""
    points = []
    for label, m, side in (("yours", p.student, "student"), ("reference", p.reference, "reference"),
                           ("torch", p.torch, "")):
        if m is None or not m.tflops:
            continue
        time_s = m.median_ms * 1e-3
        counted = p.counters.get(side, {}).get("dram_bytes") if side else None
        nbytes = counted or (m.gb_per_s * 1e9 * time_s if m.gb_per_s else 0.0)
        # a case that declares no bytes is placed where ncu counted them (yours, the reference's); the rest is named
        flops = m.tflops * 1e12 * time_s
        if nbytes:
            points.append(Point(label, nbytes, flops, time_s))
        else:
            points.append(Point(label, nbytes, flops, time_s,
                                "not profiled" if not side else "no DRAM bytes counted"))
    if not any(point.placeable for point in points):
        return ""
    return roofline_svg(points, Ceilings(d.copy_gb_per_s, d.matmul_tflops), title=f"{p.perf_id} on {d.gpu}",
                        width=480, height=300)


def performance_row(p: PerformanceResult) -> PerformanceRow:
    return PerformanceRow(
        id=p.perf_id, title=p.title, shape=f"{p.shape} {p.dtype}", status=p.status,
        time=_ms(p.student), spread=f"±{p.student.spread_pct:.1f}%" if p.student else "",
        vs_torch=_times(p.speedup_vs_torch), vs_reference=_times(p.speedup_vs_reference),
        throughput=throughput(p.student),
        points=f"{p.score:g} / {p.max_score:g}" if p.max_score else "–",
        reason=clean(p.reason, 600), torch_label=p.torch.label if p.torch else "",
        torch_time=_ms(p.torch), reference_time=_ms(p.reference), speed_of_light=speed_of_light(p.student),
        counters=counters_line(p), roofline=roofline(p),
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
    if r.speed_of_light:
        parts.append(r.speed_of_light)
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
