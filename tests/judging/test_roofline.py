"""The roofline's arithmetic, and an SVG that parses and puts each point where that arithmetic says."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest

from grader.judging.roofline import Ceilings, Point, attainable_time, layout, roofline_svg, speed_of_light

SVG = "{http://www.w3.org/2000/svg}"
# The H200's measured copy bandwidth (docs/performance.md); 494 TFLOP/s is the datasheet's dense tf32 figure, an
# assumption here (the reference matmul reached 309-346 TFLOP/s, cuBLAS 364).
H200 = Ceilings(bandwidth_gbs=4243, tflops=494)
FLOPS = 2 * 4096**3
REFERENCE = Point("reference", 348e6, FLOPS, 397e-6)  # issue 28: 4096^3 tf32, 348 MB of DRAM traffic
TINY_TILES = Point("student", 9010e6, FLOPS, 4634e-6)  # 16x16x16 tiles, one warp
ROWS = Point("row_mean_var", 268_435_456, 3 * 8192 * 8192, 61e-6)  # memory-bound: ~3 flops per element


def test_attainable_time_is_the_slower_of_memory_and_compute() -> None:
    assert attainable_time(348e6, FLOPS, H200) == pytest.approx(FLOPS / 494e12)  # compute-bound: 278 us
    assert attainable_time(9010e6, FLOPS, H200) == pytest.approx(9010e6 / 4243e9)  # memory-bound: 2.1 ms
    assert attainable_time(268_435_456, 0, H200) == pytest.approx(63.27e-6, rel=1e-3)
    assert H200.ridge == pytest.approx(494e12 / 4243e9)


def test_speed_of_light() -> None:
    assert speed_of_light(348e6, FLOPS, 397e-6, H200) == pytest.approx(100 * (FLOPS / 494e12) / 397e-6)
    assert speed_of_light(348e6, FLOPS, 397e-6, H200) == pytest.approx(70.1, abs=0.1)
    assert speed_of_light(268_435_456, 0, 63.27e-6, H200) == pytest.approx(100, abs=0.1)
    with pytest.raises(ValueError, match="time"):
        speed_of_light(1, 1, 0, H200)
    with pytest.raises(ValueError, match="positive"):
        Ceilings(0, 494)


def circles(svg: str) -> dict[str, tuple[float, float]]:
    root = ET.fromstring(svg)
    found = {}
    for group in root.iter(f"{SVG}g"):
        circle = group.find(f"{SVG}circle")
        assert circle is not None
        found[group.attrib["data-label"]] = (float(circle.attrib["cx"]), float(circle.attrib["cy"]))
    return found


def roof_y(svg: str, x: float) -> float:
    """The roof polyline's y at x (linear between its corners: the axes are logarithmic, the slope straight)."""
    polyline = next(e for e in ET.fromstring(svg).iter(f"{SVG}polyline") if e.attrib.get("class") == "roof")
    corners = [tuple(float(v) for v in pair.split(",")) for pair in polyline.attrib["points"].split()]
    for (x0, y0), (x1, y1) in itertools.pairwise(corners):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    raise AssertionError(f"{x} is outside the roof {corners}")


def test_points_sit_where_the_arithmetic_puts_them() -> None:
    points = [TINY_TILES, REFERENCE, ROWS]
    svg = roofline_svg(points, H200, title="fused_linear_gelu, 4096^3 tf32")
    plot = layout(points, H200)
    placed = circles(svg)
    for point in points:
        assert placed[point.label] == pytest.approx((plot.x(point.intensity), plot.y(point.performance)), abs=0.06)
    # the reference is compute-bound and slower than the roof: below it, right of the ridge
    x, y = placed["reference"]
    assert x > plot.x(H200.ridge) and y > roof_y(svg, x)
    # the 16x16x16 student moves 26x the bytes: far left of the reference, and lower
    assert placed["student"][0] < x and placed["student"][1] > y


def test_a_kernel_at_the_speed_of_light_sits_on_the_roof() -> None:
    on_slope = Point("copy", 1e9, 1e10, attainable_time(1e9, 1e10, H200))
    on_roof = Point("gemm", 1e8, 1e13, attainable_time(1e8, 1e13, H200))
    svg = roofline_svg([on_slope, on_roof], H200)
    for label, (x, y) in circles(svg).items():
        assert y == pytest.approx(roof_y(svg, x), abs=0.2), label
    assert "copy (100% of its roof)" in svg and "gemm (100% of its roof)" in svg


def test_labels_are_escaped_and_unplaceable_points_named() -> None:
    hostile = Point('<torch & "eager">', 348e6, FLOPS, 380e-6)
    svg = roofline_svg([hostile, Point("no flops </text>", 1e6, 0, 1e-6)], H200, title="a < b & c")
    root = ET.fromstring(svg)  # parses: nothing leaked into the markup
    assert list(circles(svg)) == ['<torch & "eager">']
    texts = ["".join(e.itertext()) for e in root.iter(f"{SVG}text")]
    assert "a < b & c" in texts
    assert "not placed (no bytes, flops or time): no flops </text>" in texts
    assert any(t.startswith('<torch & "eager"> (') for t in texts)


def test_the_axes_hold_every_point_in_whole_decades() -> None:
    plot = layout([ROWS, TINY_TILES], H200)
    (x_lo, x_hi), (y_lo, y_hi) = plot.x_decades, plot.y_decades
    assert 10.0**x_lo <= min(ROWS.intensity, H200.ridge / 10) and 10.0**x_hi >= H200.ridge * 10
    assert 10.0**y_lo <= ROWS.performance and 10.0**y_hi >= H200.compute
    for point in (ROWS, TINY_TILES):
        assert plot.margin <= plot.x(point.intensity) <= plot.width - plot.margin
        assert plot.margin <= plot.y(point.performance) <= plot.height - plot.margin
    empty = layout([], H200)
    assert empty.x_decades[0] < empty.x_decades[1] and empty.y_decades[0] < empty.y_decades[1]
