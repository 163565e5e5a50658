"""grader/running/cases/fault_recovery.py: a case that ends in a GPU memory fault is named, by the case run again
under compute-sanitizer memcheck (a fake memcheck here, tests/data/fake_memcheck.py, which fakes the fault and
writes the tool's report) or by the same case in the CPU companion; a case that did not fault is left alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grader import trap_ids
from grader.authoring.inputs import InputMaker
from grader.authoring.spec import load_assignment
from grader.evidence.observation import Observation
from grader.judging import faults
from grader.running.cases.battery import Battery
from grader.running.cases.cpu_companion import CpuCompanion
from grader.seeds import case_seed
from tests.conftest import corpus_mutant

ROOT = Path(__file__).resolve().parents[3]
FAKE_MEMCHECK = ROOT / "tests" / "data" / "fake_memcheck.py"
SEED = 3
# torch's text for an illegal address (torch 2.11 on the H200), as the worker's reply carries it
TORCH_FAULT = ("softmax(...) raised AcceleratorError: CUDA error: an illegal memory access was encountered\n"
               "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n")


@pytest.fixture(scope="module")
def softmax():
    return load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")


def faulted() -> Observation:
    return Observation(trap=trap_ids.RUNTIME_ERROR, message=TORCH_FAULT)


def test_a_case_that_did_not_fault_is_left_as_it_was(tmp_path: Path, softmax) -> None:
    submission = tmp_path / "softmax.py"
    submission.write_text((ROOT / "reference" / "softmax" / "reference.py").read_text(encoding="utf-8"),
                          encoding="utf-8")
    battery = Battery(softmax, submission, "interpreter", SEED, replayer=False)
    try:
        case = softmax.case("softmax-basic")
        problem = battery.problems["softmax"]
        inputs = problem.make_inputs(case, InputMaker(case_seed(SEED, case.id)))
        plain = Observation(trap=trap_ids.RUNTIME_ERROR, message="softmax(...) raised ValueError: x must be 2-D")
        assert battery.faults.name_fault(case, problem, inputs, plain, SEED) is plain  # no fault: nothing to name
        fault = faulted()  # the interpreter without memcheck or a CPU rerun: its fence names stray accesses itself
        assert battery.faults.name_fault(case, problem, inputs, fault, SEED) is fault
        assert battery.faults.sanitize(case, problem, inputs, plain) is plain  # no --sanitize
    finally:
        battery.close()


FAKE_FAULT = '''    out = torch.empty((M, N), device=x.device, dtype=torch.float32)
    raise RuntimeError("CUDA error: an illegal memory access was encountered\\n"
                       "For debugging consider passing CUDA_LAUNCH_BLOCKING=1")
'''


@pytest.mark.slow
def test_a_wrapper_case_that_faults_is_rerun_under_the_tool_and_named(tmp_path: Path, softmax) -> None:
    reference = (ROOT / "reference" / "softmax" / "reference.py").read_text(encoding="utf-8")
    allocation = "    out = torch.empty((M, N), device=x.device, dtype=torch.float32)\n"
    assert reference.count(allocation) == 1
    submission = tmp_path / "softmax.py"
    submission.write_text(reference.replace(allocation, FAKE_FAULT), encoding="utf-8")
    tool = (sys.executable, str(FAKE_MEMCHECK), "--write", "--at-allocation")
    battery = Battery(softmax, submission, "interpreter", SEED, fault_tool=tool)
    try:
        graded = battery.run_case(softmax.case("softmax-basic"))
        assert battery.workers.sanitizer is not None and not battery.workers.sanitizer.alive  # ended after its fault
    finally:
        battery.close()
    assert graded.traps == (trap_ids.OOB_WRITE,), (graded.traps, graded.message)
    assert "1 invalid write(s) of 4 bytes in fake_kernel (fused_layers.py, line 148)" in graded.message
    assert "64 bytes after the buffer `a buffer softmax allocated (shape [4, 10])`" in graded.message
    assert "What the GPU reported: softmax(...) raised RuntimeError" in graded.message
    assert "CUDA_LAUNCH_BLOCKING" not in graded.message
    assert graded.evidence["gpu_fault"]["named_by"] == faults.SANITIZER


@pytest.mark.slow
def test_a_fault_is_named_by_the_same_case_in_the_cpu_companion(tmp_path: Path, softmax) -> None:
    _, text = corpus_mutant("wrong_axis_store_walk", "softmax")
    submission = tmp_path / "softmax.py"
    submission.write_text(text, encoding="utf-8")
    case = softmax.case("softmax-long-rows")
    companion = CpuCompanion(softmax, submission, SEED)
    battery = Battery(softmax, submission, "interpreter", SEED, cpu_rerun=companion.rerun)
    try:
        problem = battery.problems["softmax"]
        inputs = problem.make_inputs(case, InputMaker(case_seed(SEED, case.id)))
        named = battery.faults.name_fault(case, problem, inputs, faulted(), SEED)  # what a GPU fault becomes
    finally:
        battery.close()
        companion.close()
    assert named.trap == trap_ids.OOB_WRITE, named.message
    assert "the same case on the CPU (Triton's interpreter" in named.message
    assert "tl.store(out_ptr + offs * stride_om + row" in named.message and "line 99" in named.message
    assert named.fault is not None and named.fault["named_by"] == faults.CPU_RERUN
