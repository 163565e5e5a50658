"""The report's Performance section (grader/publishing/performance_view.py), on hand-made results: each
number formatted once (times, spread, speedups, throughput, points), untimed cases by their status and
reason, student text cut and stripped. Every view of a fabricated timed result is in
tests/judging/test_performance.py."""

from __future__ import annotations

from grader.publishing.performance_view import device_line, performance_line, performance_row, throughput
from grader.results import DeviceInfo, GradeResult, Measurement, PerformanceResult

STUDENT = Measurement("your layernorm", (0.2, 0.2), 0.2, 0.25, gb_per_s=1500.0, pct_of_copy_bandwidth=37.5)
TORCH = Measurement("F.layer_norm", (0.3,), 0.3, 0.0)
REFERENCE = Measurement("reference", (0.1354,), 0.1354, 0.0)


def timed(**changes) -> PerformanceResult:
    fields = dict(perf_id="perf-ln", target="layernorm", title="layernorm 8192x8192", dims={"M": 8192, "N": 8192},
                  dtype="float32", status="timed", student=STUDENT, torch=TORCH, reference=REFERENCE,
                  speedup_vs_torch=1.5, speedup_vs_reference=0.677, score=1.0, max_score=2.0)
    return PerformanceResult(**{**fields, **changes})


def test_a_timed_case_as_a_table_row() -> None:
    row = performance_row(timed())
    assert row.timed and (row.id, row.shape, row.status) == ("perf-ln", "8192x8192 float32", "timed")
    assert (row.time, row.spread, row.vs_torch, row.vs_reference) == ("0.2000 ms", "±0.2%", "1.50x", "0.68x")
    assert (row.torch_label, row.torch_time, row.reference_time) == ("F.layer_norm", "0.3000 ms", "0.1354 ms")
    assert row.throughput == "37.5% of copy bandwidth (1500 GB/s)" and row.points == "1 / 2"


def test_an_untimed_case_shows_dashes_and_its_reason() -> None:
    row = performance_row(timed(status="not-run", student=None, torch=None, reference=None, speedup_vs_torch=None,
                                speedup_vs_reference=None, max_score=0.0, reason="\x1b[31mfailed\x1b[0m " + "x" * 700))
    assert not row.timed and (row.time, row.spread, row.vs_torch, row.points) == ("–", "", "–", "–")
    assert row.reason.startswith("failed x") and row.reason.endswith(" ... [107 more characters cut]")
    assert performance_line(timed(status="skipped", reason="needs CUDA")) == "skipped: needs CUDA"


def test_throughput_names_bandwidth_and_flops() -> None:
    assert throughput(None) == ""
    assert throughput(Measurement("x", (1.0,), 1.0, 0.0, tflops=313.74)) == "313.7 TFLOP/s"
    both = Measurement("x", (1.0,), 1.0, 0.0, gb_per_s=10.0, pct_of_copy_bandwidth=0.5, tflops=1.0)
    assert throughput(both) == "0.5% of copy bandwidth (10 GB/s), 1.0 TFLOP/s"


def test_a_timed_case_in_one_line() -> None:
    line = performance_line(timed(reason="fast enough"))
    assert line == ("0.2000 ms ±0.2% · 1.50x torch eager (F.layer_norm 0.3000 ms) · 0.68x the reference (0.1354 ms)"
                    " · 37.5% of copy bandwidth (1500 GB/s) · 1 / 2 points · fast enough")
    assert performance_line(timed(reference=None, max_score=0.0)) == (
        "0.2000 ms ±0.2% · 1.50x torch eager (F.layer_norm 0.3000 ms) · 37.5% of copy bandwidth (1500 GB/s)")


def test_the_device_line() -> None:
    device = DeviceInfo(gpu="NVIDIA H200", copy_gb_per_s=4000.4, torch="2.11.0", triton="3.6.0")
    result = GradeResult(assignment="a", submission="a.py", backend="cuda", seed=1, versions={}, cases=(),
                         execution_time_s=1.0, performance=(timed(device=device),))
    assert device_line(result) == "NVIDIA H200 (copy bandwidth 4000 GB/s), torch 2.11.0, triton 3.6.0"
    assert device_line(GradeResult(assignment="a", submission="a.py", backend="cuda", seed=1, versions={}, cases=(),
                                   execution_time_s=1.0)) == ""


def test_speed_of_light_and_the_counters_read_in_the_row() -> None:
    mine = Measurement("your layernorm", (0.2,), 0.2, 0.0, gb_per_s=1500.0, pct_of_copy_bandwidth=37.5,
                       pct_of_speed_of_light=37.5)
    counted = timed(student=mine, counters={"student": {"dram_bytes": 805e6, "sectors_per_load": 32.0},
                                            "reference": {"dram_bytes": 268e6, "sectors_per_load": 16.0}})
    row = performance_row(counted)
    assert row.speed_of_light == "38% of speed of light"
    assert row.counters == "DRAM traffic 805 MB (reference 268 MB); sectors per load request 32 (reference 16)"
    assert row.roofline == ""  # no flops declared: the % alone says it
    assert performance_line(counted).endswith("37.5% of copy bandwidth (1500 GB/s) · 38% of speed of light · "
                                              "1 / 2 points")


def test_a_matmul_case_gets_its_roofline() -> None:
    device = DeviceInfo("NVIDIA H200", 4243.0, "2.11", "3.6", matmul_tflops=380.0)
    flops = 2 * 4096**3

    def m(label: str, ms: float) -> Measurement:
        return Measurement(label, (ms,), ms, 0.0, gb_per_s=200e6 / (ms * 1e-3) / 1e9, tflops=flops / (ms * 1e-3) / 1e12)

    case = timed(perf_id="perf-mm", title="linear 4096^3", student=m("yours", 4.6), reference=m("reference", 0.4),
                 torch=m("torch", 0.45), device=device,
                 counters={"student": {"dram_bytes": 9.0e9}, "reference": {"dram_bytes": 3.5e8}})
    svg = performance_row(case).roofline
    assert svg.startswith("<svg") and svg.count('class="point"') == 3
    assert 'data-label="yours"' in svg and "380 TFLOP/s" in svg and "4243 GB/s" in svg
    assert performance_row(timed(device=DeviceInfo("NVIDIA H200", 4243.0, "2.11", "3.6"))).roofline == ""


def test_a_case_without_declared_bytes_is_placed_where_ncu_counted_them() -> None:
    device = DeviceInfo("NVIDIA H200", 4243.0, "2.11", "3.6", matmul_tflops=362.4)
    flops = 2 * 4096**3
    mine = Measurement("yours", (0.436,), 0.436, 0.0, tflops=flops / 0.436e-3 / 1e12, pct_of_speed_of_light=87.6)
    case = timed(perf_id="perf-linear-gelu", student=mine, reference=mine, torch=mine, device=device,
                 counters={"student": {"dram_bytes": 4.1e8}, "reference": {"dram_bytes": 4.1e8}})
    svg = performance_row(case).roofline
    assert svg.count('class="point"') == 2  # torch: no counters, no declared bytes: named, and why
    assert "not placed (not profiled): torch" in svg
    assert performance_row(timed(student=Measurement("x", (1.0,), 1.0, 0.0, pct_of_speed_of_light=105.6))
                           ).speed_of_light == "at the speed of light (106% of the copy-bandwidth roof)"
