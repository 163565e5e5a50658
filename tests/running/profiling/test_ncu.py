"""Nsight Compute: the command never touches clocks, its CSV becomes one KernelProfile per launch, its failures
one line each; the static facts of PTX / SASS text."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.evidence import kernel_profiles as counters
from grader.running.profiling import ncu
from grader.running.profiling.ncu import (
    classify_failure,
    parse_ncu_csv,
    parse_number,
    profiler_command,
    static_facts,
    uses_tensor_cores,
    vectorised_loads,
)
from tests.ncu_profiles import MM_REFERENCE, ROW_BYTES, ROW_ONE_WARP, ROW_REFERENCE, ROW_SEGMENTS, csv_text


def test_the_command_reads_counters_and_never_changes_clocks() -> None:
    command = profiler_command("row_mean_var_kernel", launch_count=3, ncu="/usr/local/cuda/bin/ncu")
    assert command is not None
    assert command[:6] == ("/usr/local/cuda/bin/ncu", "--clock-control", "none", "--csv", "--print-units", "base")
    assert command[command.index("--metrics") + 1].split(",") == list(counters.METRICS)
    assert command[command.index("--kernel-name") + 1] == "regex:^row_mean_var_kernel$"
    assert command[command.index("--launch-count") + 1] == "3"
    assert command.count("--clock-control") == 1  # the GPU keeps its own clocks: none locked to base
    assert not [arg for arg in command if arg.startswith(("--reset", "--lock", "--set"))]
    with pytest.raises(ValueError, match="launch_count"):
        profiler_command("k", launch_count=0, ncu="ncu")


def test_a_kernel_name_is_matched_whole_and_literally() -> None:
    command = profiler_command("kernel.v2", ncu="ncu")
    assert command is not None and command[command.index("--kernel-name") + 1] == r"regex:^kernel\.v2$"


def test_the_metric_set_is_what_the_judge_reads_and_no_breakdown() -> None:
    assert len(set(counters.METRICS)) == len(counters.METRICS) == 12
    assert all("__" in m for m in counters.METRICS)  # unit__counter.rollup names, no section names
    # The throughput breakdowns cost replay passes inside the exclusive slot and nothing reads them
    assert counters.DRAM_THROUGHPUT not in counters.METRICS and counters.SM_THROUGHPUT not in counters.METRICS
    judge = (Path(__file__).resolve().parents[3] / "grader" / "judging" / "gpu_performance_traps.py").read_text()
    names = {name for name in dir(counters) if getattr(counters, name) in counters.METRICS and name.isupper()}
    unread = [n for n in names if f"ncu.{n}" not in judge and n not in ("DURATION", "GRID_SIZE", "BLOCK_SIZE")]
    assert unread == []  # duration, grid and block are read by KernelProfile's properties


def test_ncu_is_found_on_path_then_in_the_toolkit_then_in_a_standalone_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for version in ("2024.1.0", "2025.3.1"):
        tool = tmp_path / version / "ncu"
        tool.parent.mkdir()
        tool.write_text("")
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "_CANDIDATES", ())
    monkeypatch.setattr(ncu, "_GLOBS", (str(tmp_path / "*" / "ncu"),))
    assert ncu.find_ncu() == str(tmp_path / "2025.3.1" / "ncu")
    monkeypatch.setattr(ncu, "_CANDIDATES", (str(tmp_path / "2024.1.0" / "ncu"),))
    assert ncu.find_ncu() == str(tmp_path / "2024.1.0" / "ncu")
    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/usr/bin/ncu")
    assert ncu.find_ncu() == "/usr/bin/ncu"
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "_CANDIDATES", ())
    monkeypatch.setattr(ncu, "_GLOBS", ())
    assert ncu.find_ncu() is None and profiler_command("k") is None


def test_the_csv_becomes_one_profile_per_launch_with_base_units() -> None:
    profiles = parse_ncu_csv(csv_text(ROW_REFERENCE, ROW_SEGMENTS, MM_REFERENCE))
    assert [p.launch_id for p in profiles] == [0, 1, 2]
    reference = profiles[0]
    assert reference.kernel == "row_mean_var_kernel"
    assert reference.grid == (8192, 1, 1) and reference.block == (256, 1, 1)
    assert reference.programs == 8192 and reference.threads == 256
    assert reference.metrics[counters.DRAM_READ] == ROW_BYTES  # "268,435,456"
    assert reference.metrics[counters.LOAD_SECTORS] / reference.metrics[counters.LOAD_REQUESTS] == 16
    assert reference.time_ns == 61_000
    assert reference.metrics[counters.OCCUPANCY] == 95.0
    assert counters.TENSOR_PIPE not in reference.metrics  # "n/a" on a kernel without MMA: absent, not 0
    assert profiles[1].metrics[counters.LOAD_SECTORS] / profiles[1].metrics[counters.LOAD_REQUESTS] == 32
    assert profiles[2].metrics[counters.TENSOR_PIPE] == 81.0


def test_scaled_units_are_brought_back_to_bytes_and_nanoseconds() -> None:
    text = csv_text(ROW_ONE_WARP, preamble=False).replace(
        '"byte","268,435,456"', '"Mbyte","268.44"').replace('"nsecond","167,000"', '"usecond","167.00"')
    profile = parse_ncu_csv(text)[0]
    assert profile.metrics[counters.DRAM_READ] == pytest.approx(268.44e6)
    assert profile.time_ns == pytest.approx(167_000)


def test_columns_are_found_by_name_and_launches_by_id_and_process() -> None:
    # an older ncu: "Kernel Time" instead of Block/Grid/Device/CC; two processes reuse launch id 0
    old = ['"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context","Stream",'
           '"Section Name","Metric Name","Metric Unit","Metric Value"',
           '"0","1","p","h","k","t","1","7","S","launch__grid_size","","4"',
           '"0","2","p","h","k","t","1","7","S","launch__grid_size","","8"']
    profiles = parse_ncu_csv("\n".join(old))
    assert [(p.programs, p.grid) for p in profiles] == [(4, ()), (8, ())]
    assert parse_ncu_csv("no csv here\n==PROF== Disconnected") == ()


@pytest.mark.parametrize(("text", "value"), [("1,234", 1234.0), ("92.31", 92.31), (" 16,005,000 ", 16_005_000.0),
                                             ("n/a", None), ("", None)])
def test_numbers_with_thousands_separators(text: str, value: float | None) -> None:
    assert parse_number(text) == value


def test_failures_become_one_line_reasons() -> None:
    refused = ("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission "
               "to access NVIDIA GPU Performance Counters on the target device 0.\n")
    reason = classify_failure(1, refused)
    assert reason is not None and reason.startswith(
        "Nsight Compute is not permitted to read the GPU's counters on this machine (ERR_NVGPUCTRPERM): ")
    assert "\n" not in reason
    assert "LibraryNotLoaded" in (classify_failure(1, "==ERROR== Failed to profile: LibraryNotLoaded") or "")
    assert "no kernel" in (classify_failure(0, "==WARNING== No kernels were profiled.\n") or "")
    assert classify_failure(None, "") == ncu.NOT_INSTALLED
    assert classify_failure(9, "==ERROR== Unknown option '--bogus'\n") == \
        "Nsight Compute failed: Unknown option '--bogus'"
    assert classify_failure(3, "killed") == "Nsight Compute gave no counters (exit code 3)"
    assert classify_failure(0, csv_text(ROW_REFERENCE), profiles_found=1) is None


PTX_WGMMA = """
.visible .entry fused_linear_gelu_kernel(
	wgmma.fence.sync.aligned;
	wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%f1, %f2}, %rd5, %rd6, p, 1, 1;
	@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
"""
PTX_MMA = "\tmma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6};\n"
PTX_SCALAR = """
.visible .entry row_mean_var_kernel(  // mma in a comment is not an instruction
	@%p1 ld.global.b32 { %r1 }, [ %rd1 + 0 ];
	@%p2 ld.global.L1::evict_last.v2.b32 { %r2, %r3 }, [ %rd2 + 0 ];
	fma.rn.f32 %f3, %f1, %f2, %f3;
"""
SASS_HOPPER = """
        /*0230*/                   HGMMA.64x128x8.F32.TF32 R24, gdesc[UR4], RZ, !UPT ;
        /*0240*/                   LDG.E.128 R4, desc[UR6][R2.64] ;
"""
SASS_AMPERE = "        /*0100*/                   HMMA.1688.F32.TF32 R8, R4, R12, R8 ;\n"


@pytest.mark.parametrize(("text", "tensor", "vector"), [
    (PTX_WGMMA, True, True), (PTX_MMA, True, False), (PTX_SCALAR, False, False), (SASS_HOPPER, True, True),
    (SASS_AMPERE, True, False), ("\t@%p1 ld.global.L1::evict_last.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 ];", False,
                                 True)])
def test_static_facts_from_ptx_and_sass(text: str, tensor: bool, vector: bool) -> None:
    assert uses_tensor_cores(text) is tensor
    assert vectorised_loads(text) is vector


def test_static_facts_take_registers_and_spills_as_given() -> None:
    facts = static_facts(PTX_WGMMA, n_regs=168, n_spills=0)
    assert (facts.tensor_cores, facts.vector_loads, facts.registers, facts.spills) == (True, True, 168, 0)
