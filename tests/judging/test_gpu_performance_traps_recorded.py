"""The judge on what ncu really wrote: the H200 recording of 2026-12-05 (benchmarks/why_slow_gpu.sh;
tests/data/ncu-h200: ncu 2025.3.1's CSV for every submission and timed case, the do_bench medians and the compiled
kernels' facts) and the H100 recording of 2026-12-06 of the three styles issue 49 added (tests/data/ncu-h100:
a LayerNorm on one program, row statistics on 32-thread programs, row statistics whose lanes walk the row apart;
`bash benchmarks/gpu_round.sh ncu:fused_layers:...`).
Every slow style the project proves is named from its counters, with the numbers a student reads; the reference,
the correct variants and the mutants that are not slower at the timed size name nothing.

The tables are docs/ncu-verdicts-h200.md (`python benchmarks/ncu_verdicts.py tests/data/ncu-h200 --all`) and the same
command on tests/data/ncu-h100."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from grader.evidence.kernel_profiles import SideProfile, StaticFacts
from grader.judging.gpu_performance_traps import Side, compare, diagnose
from grader.running.profiling.ncu import classify_failure, parse_ncu_csv

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDINGS = {"h200": 55, "h100": 16}  # each recording's folder (ncu-<gpu>) and how many runs it holds
RUNS = [dict(r, gpu=gpu) for gpu in RECORDINGS
        for r in json.loads((DATA / f"ncu-{gpu}" / "summary.json").read_text(encoding="utf-8"))["runs"]
        if "submission" in r]
MATMUL_CASES = {"perf-linear-gelu"}

# (assignment, submission, case) -> the traps named; every other recorded case names none.
NAMED = {
    ("softmax", "online_lane_stretches", "perf-softmax"): ("uncoalesced-access", "low-occupancy"),
    ("softmax", "softmax_few_programs", "perf-softmax"): ("serial-grid",),
    ("softmax", "softmax_narrow_one_warp", "perf-softmax"): ("low-occupancy",),
    ("fused_layers", "linear_small_tiles", "perf-linear-gelu"): ("low-arithmetic-intensity",),
    ("fused_layers", "linear_64_tiles", "perf-linear-gelu"): ("low-arithmetic-intensity",),
    ("fused_layers", "linear_ieee_dot", "perf-linear-gelu"): ("no-tensor-cores", "register-spills"),
    ("fused_layers", "layernorm_serial_grid", "perf-layernorm"): ("serial-grid",),
    ("fused_layers", "layernorm_serial_grid", "perf-layernorm-small"): ("serial-grid",),
    ("fused_layers", "row_stats_tiny_block", "perf-row-mean-var"): ("launch-bound", "low-occupancy"),
    # rows walked in slivers: 16x-128x the reference's load requests (the correct chunked styles are 2.8x-40x slower)
    ("softmax", "tiny_chunks_looping", "perf-softmax"): ("launch-bound",),
    **{("fused_layers", variant, case): ("launch-bound",) for variant in ("correct_welford", "correct_chunked_two_pass")
       for case in ("perf-row-mean-var", "perf-layernorm", "perf-layernorm-small")},
    ("fused_layers", "row_stats_strided_lanes", "perf-row-mean-var"): ("uncoalesced-access", "low-occupancy"),
}


def csv_of(run: dict) -> str:
    return (DATA / f"ncu-{run['gpu']}" / run["assignment"] / run["submission"] / f"{run['case']}.csv").read_text(
        encoding="utf-8")


def side(run: dict) -> Side:
    text = csv_of(run)
    kernels = {f"{f['kernel']}#{n}": StaticFacts(f["tensor_cores"], f["vector_loads"], f["registers"], f["spills"])
               for n, f in enumerate(run["static"])}
    static = SideProfile((), kernels).static  # the kernels together, as a grade has them
    return Side(parse_ncu_csv(text), static, statistics.median(run["ms"]) * 1e-3)


def verdict(run: dict):
    reference = next(r for r in RUNS if r["submission"] == "reference" and r["assignment"] == run["assignment"]
                     and r["case"] == run["case"] and r["gpu"] == run["gpu"])
    comparison = compare(run["case"], side(run), side(reference), case_id=run["case"],
                         matmul=run["case"] in MATMUL_CASES)
    return comparison, diagnose(comparison)


def test_every_recorded_run_has_counters_and_facts() -> None:
    assert {gpu: sum(r["gpu"] == gpu for r in RUNS) for gpu in RECORDINGS} == RECORDINGS
    for run in RUNS:
        text = csv_of(run)
        launches = parse_ncu_csv(text)
        assert run["returncode"] == 0 and classify_failure(0, text, len(launches)) is None, run["submission"]
        assert len(launches) == 1 and launches[0].get("dram__bytes_read.sum") > 0, run["submission"]
        assert "==WARNING== Note: Running with unmodified GPU clocks" in text  # --clock-control none


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r['gpu']}-{r['assignment']}-{r['submission']}-{r['case']}")
def test_the_judge_names_what_the_counters_show(run: dict) -> None:
    comparison, traps = verdict(run)
    assert tuple(t.trap for t in traps) == NAMED.get((run["assignment"], run["submission"], run["case"]), ())
    for trap in traps:
        assert trap.basis == "measured" and trap.numbers["time_ratio"] >= 1.1
        assert f"(case {run['case']})" in trap.message and "x the reference's time" in trap.message


def test_the_numbers_a_student_reads() -> None:
    by_id = {(r["submission"], r["case"]): r for r in RUNS}  # every submission is in one recording
    _, (grid,) = verdict(by_id[("softmax_few_programs", "perf-softmax")])
    assert grid.message.startswith("a grid of 16 programs keeps 16 SMs of the GPU's 132 busy where the reference "
                                   "launches 8,192")
    _, (tiles,) = verdict(by_id[("linear_small_tiles", "perf-linear-gelu")])
    assert tiles.numbers["ratio"] > 10 and "GB through DRAM" in tiles.message
    _, (pipe, spills) = verdict(by_id[("linear_ieee_dot", "perf-linear-gelu")])
    assert pipe.numbers["tensor_pipe"] < 1 and pipe.numbers["reference_tensor_pipe"] > 75
    assert spills.numbers["spills"] > spills.numbers["reference_spills"]


def test_the_numbers_a_student_reads_for_issue_49s_styles() -> None:
    """The H100 recording: one program for the whole LayerNorm, 32-thread programs, lanes 32 sectors apart."""
    by_id = {(r["submission"], r["case"]): r for r in RUNS if r["gpu"] == "h100"}
    _, (grid,) = verdict(by_id[("layernorm_serial_grid", "perf-layernorm")])
    assert grid.message.startswith("a grid of 1 program keeps one SM of the GPU's 132 busy where the reference "
                                   "launches 8,192")
    assert grid.numbers["time_ratio"] > 50
    _, (slivers, occupancy) = verdict(by_id[("row_stats_tiny_block", "perf-row-mean-var")])
    assert "each program is one warp of 32 threads" in occupancy.message
    assert slivers.message.startswith("the kernel issues 16x the reference's global load requests (8.4 M against "
                                      "0.5 M), each touching 64 bytes where the reference's touch 512")
    _, (strided, _) = verdict(by_id[("row_stats_strided_lanes", "perf-row-mean-var")])
    assert "touch 32 sectors of 32 bytes per request where the reference's touch 16" in strided.message
    assert "in all 8.0x the sectors the reference's loads touch (67.1 M against 8.4 M)" in strided.message
