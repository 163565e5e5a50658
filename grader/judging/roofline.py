"""A roofline: how fast a kernel could be given the bytes it moves and the flops it does, and a small SVG of it
(pure, no plotting library).

Groundwork for issue 28, not wired into the report yet (docs/performance.md, "GPU performance traps"). The
ceilings are the device's: the copy bandwidth a GPU session measures (4,243 GB/s on the H200, docs/performance.md)
and a compute roof (the tensor cores' FLOP/s for the dtype). A kernel's time can never beat
max(bytes / bandwidth, flops / compute); "% of speed of light" is that bound over the measured time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr


@dataclass(frozen=True)
class Ceilings:
    bandwidth_gbs: float  # bytes per second / 1e9 the memory sustains (measured copy bandwidth)
    tflops: float  # floating-point operations per second / 1e12 the compute units sustain

    def __post_init__(self) -> None:
        if self.bandwidth_gbs <= 0 or self.tflops <= 0:
            raise ValueError(f"ceilings must be positive, not {self.bandwidth_gbs} GB/s and {self.tflops} TFLOP/s")

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_gbs * 1e9

    @property
    def compute(self) -> float:
        return self.tflops * 1e12

    @property
    def ridge(self) -> float:
        """The arithmetic intensity (flops per byte) where memory stops being the bound."""
        return self.compute / self.bandwidth

    def roof(self, intensity: float) -> float:
        """The attainable FLOP/s at this arithmetic intensity."""
        return min(self.compute, self.bandwidth * intensity)


def attainable_time(bytes_moved: float, flops: float, ceilings: Ceilings) -> float:
    """The fewest seconds any kernel moving these bytes and doing these flops can take on the device."""
    return max(bytes_moved / ceilings.bandwidth, flops / ceilings.compute)


def speed_of_light(bytes_moved: float, flops: float, time_s: float, ceilings: Ceilings) -> float:
    """The attainable time as a percentage of the measured time (100: the kernel runs at the roof)."""
    if time_s <= 0:
        raise ValueError(f"time must be positive, not {time_s}")
    return 100.0 * attainable_time(bytes_moved, flops, ceilings) / time_s


@dataclass(frozen=True)
class Point:
    label: str  # "student", "reference", "torch" ...
    bytes_moved: float
    flops: float
    time_s: float
    unplaced_why: str = "no bytes, flops or time"  # said beside the label where the point cannot be placed

    @property
    def placeable(self) -> bool:
        return self.bytes_moved > 0 and self.flops > 0 and self.time_s > 0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes_moved

    @property
    def performance(self) -> float:
        return self.flops / self.time_s


@dataclass(frozen=True)
class Plot:
    """Where things go: log10 decades on both axes, mapped to pixels inside the margins."""

    width: int
    height: int
    margin: int
    x_decades: tuple[int, int]  # log10 of the intensity range, flops per byte
    y_decades: tuple[int, int]  # log10 of the performance range, FLOP/s

    def x(self, intensity: float) -> float:
        lo, hi = self.x_decades
        return self.margin + (math.log10(intensity) - lo) / (hi - lo) * (self.width - 2 * self.margin)

    def y(self, performance: float) -> float:
        lo, hi = self.y_decades
        return self.height - self.margin - (math.log10(performance) - lo) / (hi - lo) * (self.height - 2 * self.margin)


def layout(points: Sequence[Point], ceilings: Ceilings, width: int = 560, height: int = 360,
           margin: int = 56) -> Plot:
    """Whole decades that hold every placeable point, the ridge and a decade either side of it."""
    placed = [p for p in points if p.placeable]
    intensities = [p.intensity for p in placed] + [ceilings.ridge / 10, ceilings.ridge * 10]
    x_lo, x_hi = math.floor(math.log10(min(intensities))), math.ceil(math.log10(max(intensities)))
    performances = [p.performance for p in placed] + [ceilings.roof(10.0**x_lo)]
    y_lo = math.floor(math.log10(min(performances)))
    y_hi = math.ceil(math.log10(max([ceilings.compute, *performances])) + 0.05)
    return Plot(width, height, margin, (x_lo, max(x_hi, x_lo + 1)), (y_lo, max(y_hi, y_lo + 1)))


_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def roofline_svg(points: Sequence[Point], ceilings: Ceilings, title: str = "", width: int = 560,
                 height: int = 360) -> str:
    """The roofline as an SVG document: the bandwidth slope and the compute roof, each placeable point as a
    labelled circle with its % of the roof above it (the bound its own bytes and flops allow: a kernel that moves
    12x the bytes may run near its own roof and still far from the problem's speed of light, which the report's
    table gives); points without bytes, flops or time are named, not drawn."""
    plot = layout(points, ceilings, width, height)
    (x_lo, x_hi), (y_lo, y_hi) = plot.x_decades, plot.y_decades
    left, right, top, bottom = plot.margin, width - plot.margin, plot.margin, height - plot.margin
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">']
    if title:
        out.append(f'<text x="{width / 2:.1f}" y="20" text-anchor="middle" font-size="13">{escape(title)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" '
               f'stroke="#999"/>')
    for k in range(x_lo, x_hi + 1):
        x = plot.x(10.0**k)
        out.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#999"/>'
                   f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">1e{k}</text>')
    for k in range(y_lo, y_hi + 1):
        y = plot.y(10.0**k)
        out.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#999"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">1e{k}</text>')
    out.append(f'<text x="{(left + right) / 2:.1f}" y="{height - 12}" text-anchor="middle">'
               f'arithmetic intensity (FLOP/byte)</text>')
    out.append(f'<text x="14" y="{(top + bottom) / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(top + bottom) / 2:.1f})">FLOP/s</text>')
    roof = [(10.0**x_lo, ceilings.roof(10.0**x_lo)), (ceilings.ridge, ceilings.compute),  # the layout puts
            (10.0**x_hi, ceilings.compute)]  # the ridge a decade inside the axis, so the slope is always drawn
    corners = " ".join(f"{plot.x(i):.1f},{plot.y(p):.1f}" for i, p in roof)
    out.append(f'<polyline class="roof" points="{corners}" fill="none" stroke="#333" stroke-width="2"/>')
    out.append(f'<text x="{right - 4}" y="{plot.y(ceilings.compute) - 6:.1f}" text-anchor="end">'
               f'{ceilings.tflops:.0f} TFLOP/s</text>')
    slope_x = plot.x(10.0**x_lo) + 6
    slope_y = plot.y(ceilings.roof(10.0**x_lo)) - 6
    out.append(f'<text x="{slope_x:.1f}" y="{slope_y:.1f}">{ceilings.bandwidth_gbs:.0f} GB/s</text>')
    unplaced: dict[str, list[str]] = {}
    placed = 0
    for n, point in enumerate(points):
        if not point.placeable:
            unplaced.setdefault(point.unplaced_why, []).append(point.label)
            continue
        x, y = plot.x(point.intensity), plot.y(point.performance)
        sol = speed_of_light(point.bytes_moved, point.flops, point.time_s, ceilings)
        colour = _COLOURS[n % len(_COLOURS)]
        out.append(f'<g class="point" data-label={quoteattr(point.label)}>'
                   f'<title>{escape(f"{point.label}: {sol:.0f}% of the roof above it, at its own bytes and flops")}'
                   f'</title>'
                   f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"/>'
                   f'<text x="{x + 7:.1f}" y="{y + 14 + 13 * placed:.1f}" fill="{colour}">{escape(point.label)} '
                   f'({sol:.0f}% of its roof)</text></g>')
        placed += 1  # labels stack below the points: points of one case often sit on top of each other
    if unplaced:
        missing = escape("; ".join(f"not placed ({why}): {', '.join(labels)}" for why, labels in unplaced.items()))
        out.append(f'<text x="{left}" y="{top - 8}">{missing}</text>')
    out.append("</svg>")
    return "\n".join(out)
