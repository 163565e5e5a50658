"""GPU memory faults named oob-write / oob-read, and a GPU grade's false promises checked on the CPU (issue 22).

Fast part: the pure decisions (grader/judging/faults.py: which failures are faults, CUDA's advice removed,
naming from compute-sanitizer's findings, from a CPU rerun, from the submission's other cases; merging the
interpreter's false promises into a GPU grade's cases), the tool-side bits (allocation announcements, a
worker under the tool ending itself after a fault). Slow part, on the CPU: a wrapper case that "faults" (its
code raises CUDA's text) rerun under a stand-in compute-sanitizer; a faulted case named by the same case
graded in the CPU companion; the companion's hint check worded exactly as a CPU grade words it.
The GPU side of the same is tests/e2e/test_gpu_faults.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader import trap_ids
from grader.authoring.catalog import trap_catalog
from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import load_assignment
from grader.evidence.observation import Observation
from grader.judging import faults
from grader.judging.false_hints import HintCall, as_cpu_grade, false_hint_checks, with_cpu_evidence
from grader.judging.judge import judge_case
from grader.results import CaseResult
from grader.running.cases.cpu_companion import CpuCompanion, hint_check_cases, makes_promises
from grader.running.cases.observe import needs_fresh_worker
from grader.running.cases.sanitizer import announced_allocations, memcheck_findings, parse_memcheck
from grader.seeds import case_seed
from tests.conftest import corpus_mutant

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "assignments" / "softmax" / "assignment.toml"
FAKE_MEMCHECK = Path(__file__).resolve().parents[1] / "data" / "fake_memcheck.py"
SEED = 3

# torch's text for an illegal address (torch 2.11 on the H200), as the worker's reply carries it
TORCH_FAULT = (
    "softmax(...) raised AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
    "for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
MISALIGNED = "softmax_kernel[grid](BLOCK_N=16) raised RuntimeError: Triton Error [CUDA]: misaligned address"
HINTS = HintCall(12, "multiple_of", "offs = tl.multiple_of(offs, 16)")


@pytest.fixture(scope="module")
def softmax():
    return load_assignment(SOFTMAX)


def result(case_id: str, target: str, traps: tuple[str, ...], message: str = "", evidence=None) -> CaseResult:
    return CaseResult(case_id=case_id, target=target, title=case_id, visibility="hidden", max_score=1.0,
                      score=0.0 if traps else 1.0, passed=not traps, message=message, traps=traps,
                      evidence=evidence or {})


# ------------------------------------------------------------------------------------ which cases are faults


def test_an_illegal_address_is_a_fault_and_cudas_advice_is_dropped() -> None:
    fault = faults.gpu_fault(trap_ids.RUNTIME_ERROR, TORCH_FAULT)
    assert fault is not None and fault.sign == faults.ILLEGAL_ACCESS and fault.what == "an illegal memory access"
    assert "an illegal memory access was encountered" in fault.message
    for advice in ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA", "asynchronously", "cudaErrorIllegalAddress"):
        assert advice not in fault.message, advice
    # the worker died in CUDA's teardown: the text is in its output tail
    crash = "softmax(...) crashed the worker: the worker died (signal SIGABRT).\n" + TORCH_FAULT
    assert faults.gpu_fault(trap_ids.CRASH, crash) is not None
    triton_text = "softmax(...) raised RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered"
    assert faults.gpu_fault(trap_ids.RUNTIME_ERROR, triton_text) is not None


def test_a_misaligned_address_is_a_fault_only_where_the_code_makes_no_promise() -> None:
    fault = faults.gpu_fault(trap_ids.RUNTIME_ERROR, MISALIGNED)
    assert fault is not None and fault.sign == "misaligned address" and fault.what == "a misaligned address"
    assert faults.gpu_fault(trap_ids.RUNTIME_ERROR, MISALIGNED, (HINTS,)) is None  # false-hint's, not ours


def test_other_failures_are_no_faults() -> None:
    for failure in (None, trap_ids.TIMEOUT, trap_ids.COMPILE_ERROR, trap_ids.OOB_WRITE, trap_ids.FALSE_HINT):
        assert faults.gpu_fault(failure, TORCH_FAULT) is None, failure
    assert faults.gpu_fault(trap_ids.RUNTIME_ERROR, "ValueError: x must be 2-D") is None


# ------------------------------------------------------------------------------------ naming a fault


def faulted() -> Observation:
    return Observation(trap=trap_ids.RUNTIME_ERROR, message=TORCH_FAULT)


def judged(observation: Observation, softmax) -> CaseResult:
    case = softmax.case("softmax-long-rows")
    (problem,) = load_problems(softmax).values()
    inputs = problem.make_inputs(case, InputMaker(case_seed(SEED, case.id)))
    tolerance = softmax.tolerances[case.tolerance].lookup("cuda", "float32")
    return judge_case(case=case, assignment=softmax, inputs=inputs, expected=problem.expected(inputs),
                      observation=observation, tolerance=tolerance, traps=problem.traps, elapsed_s=0.0)


def test_named_by_compute_sanitizer_with_the_buffer_and_the_line(softmax) -> None:
    report = (Path(__file__).resolve().parents[1] / "data" / "memcheck-h200.txt").read_text(encoding="utf-8")
    reports = parse_memcheck(report.replace("Invalid __global__ read", "Invalid __global__ write", 1))
    findings = memcheck_findings(reports, {"x": (0x7FDD2A800000, 2248), "var": (0x7FDD2A801400, 2068)})
    naming = faults.from_sanitizer(findings)
    assert naming is not None and naming.by == faults.SANITIZER
    fault = faults.gpu_fault(trap_ids.RUNTIME_ERROR, TORCH_FAULT)
    assert fault is not None
    observation = faults.fault_observation(faulted(), fault, naming)
    assert observation.trap == trap_ids.OOB_WRITE
    graded = judged(observation, softmax)
    assert graded.traps == (trap_ids.OOB_WRITE, trap_ids.OOB_READ) and not graded.passed
    assert "compute-sanitizer memcheck, running this case again alone, reports" in graded.message
    assert "(fused_layers.py, line 148)" in graded.message and "the buffer `var`" in graded.message
    assert "What the GPU reported: softmax(...) raised AcceleratorError" in graded.message
    assert "CUDA_LAUNCH_BLOCKING" not in graded.message
    assert graded.evidence["gpu_fault"]["named_by"] == faults.SANITIZER
    assert needs_fresh_worker(observation)


def test_named_by_the_same_case_on_the_cpu(softmax) -> None:
    fence = ("softmax(...) was stopped at an out-of-bounds store (softmax.py, line 99, in online_softmax_kernel: "
             "tl.store(out_ptr + offs * stride_om + row, ...)): 811 store(s) addressed memory outside every tensor")
    naming = faults.from_cpu_rerun(result("softmax-long-rows", "softmax", (trap_ids.OOB_WRITE,), fence))
    assert naming is not None and naming.by == faults.CPU_RERUN
    fault = faults.gpu_fault(trap_ids.RUNTIME_ERROR, TORCH_FAULT)
    assert fault is not None
    graded = judged(faults.fault_observation(faulted(), fault, naming), softmax)
    assert graded.traps == (trap_ids.OOB_WRITE,)
    assert "the same case on the CPU (Triton's interpreter" in graded.message and "line 99" in graded.message
    # a rerun that saw no stray access names nothing: its other traps are no evidence of the GPU's fault
    clean = result("softmax-long-rows", "softmax", (trap_ids.UNWRITTEN_OUTPUT, "wrong-axis"))
    assert faults.from_cpu_rerun(clean) is None
    assert faults.from_cpu_rerun(result("softmax-long-rows", "softmax", ())) is None


def test_unnamed_is_memory_fault_without_cudas_advice(softmax) -> None:
    fault = faults.gpu_fault(trap_ids.RUNTIME_ERROR, TORCH_FAULT)
    assert fault is not None
    observation = faults.fault_observation(faulted(), fault, None)
    graded = judged(observation, softmax)
    assert graded.traps == (trap_ids.MEMORY_FAULT,) and graded.score == 0
    assert "illegal memory access" in graded.message and "CUDA_LAUNCH_BLOCKING" not in graded.message
    assert "--backend interpreter" in graded.message
    assert graded.evidence["gpu_fault"] == {"sign": faults.ILLEGAL_ACCESS, "named_by": None,
                                            "message": fault.message}
    assert needs_fresh_worker(observation)


def test_a_fault_nothing_named_takes_the_memory_traps_of_the_other_cases(softmax) -> None:
    fault_evidence = {"gpu_fault": {"sign": faults.ILLEGAL_ACCESS, "named_by": None, "message": "..."}}
    wrapper_fault = result("softmax-long-rows", "softmax", (trap_ids.MEMORY_FAULT,), "fault", fault_evidence)
    kernel_fault = result("online-prime", "online_softmax_kernel", (trap_ids.MEMORY_FAULT,), "fault", fault_evidence)
    cases = [
        result("kernel-basic", "softmax_kernel", ()),
        result("online-basic", "online_softmax_kernel", (trap_ids.OOB_WRITE, trap_ids.UNWRITTEN_OUTPUT)),
        kernel_fault,
        result("softmax-basic", "softmax", ()),
        wrapper_fault,
    ]
    named = {c.case_id: c for c in faults.name_from_other_cases(cases, softmax)}
    # a kernel's own other cases
    assert named["online-prime"].traps == (trap_ids.OOB_WRITE,)
    assert named["online-prime"].message.startswith("Named from this submission's other cases, which ran to the "
                                                    "end: online-basic shows oob-write")
    assert named["online-prime"].evidence["gpu_fault"]["named_by"] == faults.OTHER_CASES
    # a wrapper whose own cases show nothing: the kernel cases of its problem (it launches one of them)
    assert named["softmax-long-rows"].traps == (trap_ids.OOB_WRITE,)
    assert named["softmax-long-rows"].evidence["gpu_fault"]["cases"] == ["online-basic"]
    assert named["kernel-basic"] is cases[0]  # untouched
    # a kernel does not inherit from another kernel, nor from nothing
    alone = [result("kernel-prime", "softmax_kernel", (trap_ids.MEMORY_FAULT,)),
             result("online-basic", "online_softmax_kernel", (trap_ids.OOB_READ,))]
    assert [c.traps for c in faults.name_from_other_cases(alone, softmax)] == [(trap_ids.MEMORY_FAULT,),
                                                                                (trap_ids.OOB_READ,)]


# ------------------------------------------------------------------------------------ under the tool


def test_a_wrappers_allocations_are_named_for_memcheck() -> None:
    text = ("noise\ngrader-allocation: 4096 60000 3,5000\ngrader-allocation: 90000 40 10\n"
            "grader-allocation: 99000 40 10\ngrader-allocation: broken\n")
    assert announced_allocations(text, "softmax") == {
        "a buffer softmax allocated (shape [3, 5000])": (4096, 60000),
        "a buffer softmax allocated (shape [10])": (90000, 40),
        "a buffer softmax allocated (shape [10]) #2": (99000, 40),
    }


def test_a_misaligned_report_says_misaligned() -> None:
    text = ("========= Invalid __global__ read of size 16 bytes\n=========     at k+0x10 in s.py:7\n"
            "=========     by thread (1,0,0) in block (0,0,0)\n=========     Address 0x1004 is misaligned\n")
    (finding,) = memcheck_findings(parse_memcheck(text), {"x": (0x1000, 64)})
    assert finding.trap == trap_ids.OOB_READ
    assert "invalid misaligned read(s) of 16 bytes in k (s.py, line 7)" in finding.message


# ------------------------------------------------------------------------------------ false promises on the GPU


def hint_evidence(case_id: str) -> dict:
    return {"hint": "max_contiguous", "problem": "run", "claimed": [16], "dim": 0, "index": [0], "group": 16,
            "values": [32, 33, 34, 35, 36, 0, 1], "program": [2, 0, 0], "kernel": "fused_linear_gelu_kernel",
            "function": "fused_linear_gelu_kernel", "file": "fused_layers.py", "line": 61,
            "code": f"rows_a = tl.max_contiguous(tl.multiple_of(rows % M, BLOCK_M), BLOCK_M)  # {case_id}"}


def test_the_cpus_false_promises_are_merged_as_a_cpu_grade_has_them() -> None:
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    gpu = [result("a", "fused_linear_gelu_kernel", ()), result("b", "fused_linear_gelu_kernel", ()),
           result("c", "fused_linear_gelu_kernel", ())]
    merged = with_cpu_evidence(gpu, {"b": hint_evidence("b"), "c": {"hint": "os.system"}, "zz": hint_evidence("zz")})
    assert "false_hint" not in merged[0].evidence and "false_hint" not in merged[2].evidence  # c: malformed
    cpu = [dataclasses.replace(c, evidence={"false_hint": hint_evidence("b")} if c.case_id == "b" else {})
           for c in gpu]
    assert [c.to_dict() for c in false_hint_checks(merged, assignment)] == \
        [c.to_dict() for c in false_hint_checks(cpu, assignment)]
    assert with_cpu_evidence(gpu, {}) == gpu


def test_only_code_that_makes_promises_pays_for_the_cpu_check(tmp_path: Path, softmax) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("import triton.language as tl\n# tl.multiple_of(x, 16) in a comment\n", encoding="utf-8")
    hinted = tmp_path / "hinted.py"
    hinted.write_text("import triton.language as tl\ndef k(x):\n    return tl.multiple_of(x, 16)\n", encoding="utf-8")
    assert not makes_promises(plain) and makes_promises(hinted) and not makes_promises(tmp_path / "absent.py")
    # the cases a CPU grade with the same options runs
    assert hint_check_cases(softmax) == softmax.cases_for("interpreter")
    assert hint_check_cases(softmax, public_only=True) == softmax.cases_for("interpreter", public_only=True)
    assert {c.target for c in hint_check_cases(softmax, targets=frozenset({"softmax"}))} == {"softmax"}


def test_warnings_are_worded_from_the_cases_a_cpu_grade_runs() -> None:
    """A case only the interpreter runs (not in the GPU grade) still counts, in the CPU grade's order."""
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    cpu_only = [c for c in assignment.cases if not c.runs_on("cuda")]
    assert cpu_only, "fused_layers has an interpreter-only case (tl.dot blocks too small for a GPU)"
    order = assignment.cases_for("interpreter")
    found = {c.id: hint_evidence(c.id) for c in order if c.target == "fused_linear_gelu_kernel"}
    gpu = [dataclasses.replace(result(c.id, c.target, ()), visibility=c.visibility)
           for c in assignment.cases_for("cuda")]
    cpu = [dataclasses.replace(result(c.id, c.target, ()), visibility=c.visibility,
                               evidence={"false_hint": hint_evidence(c.id)} if c.id in found else {}) for c in order]
    (from_gpu,) = false_hint_checks(as_cpu_grade(gpu, found, order), assignment)
    (from_cpu,) = false_hint_checks(cpu, assignment)
    assert from_gpu.to_dict() == from_cpu.to_dict()
    assert f"({len(found)} cases showed a false hint" in from_gpu.message


# ------------------------------------------------------------------------------------ end to end, on the CPU

# The wrapper allocates its output and then "faults": it raises CUDA's text, as torch does after a kernel
# wrote out of bounds. The stand-in tool reports a write 64 bytes past that allocation.
@pytest.mark.slow
def test_the_companions_hint_check_words_the_warning_as_a_cpu_grade(grade_text, tmp_path: Path) -> None:
    _, text = corpus_mutant("false_hint")
    cpu_grade = grade_text(text)
    (cpu_warning,) = [t for t in cpu_grade.results["tests"] if trap_ids.FALSE_HINT in t["tags"]]
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    submission = tmp_path / "fused_layers.py"
    submission.write_text(text, encoding="utf-8")
    companion = CpuCompanion(assignment, submission, SEED)
    try:
        cases = hint_check_cases(assignment)
        companion.start_hint_check(cases)
        found = companion.hint_evidence()
    finally:
        companion.close()
    assert found and companion.cases_checked == len(cases)
    # the GPU grade's cases, without any evidence of promises of their own, get the interpreter's
    gpu_cases = [dataclasses.replace(result(c.id, c.target, ()), visibility=c.visibility)
                 for c in assignment.cases_for("cuda")]
    (check,) = false_hint_checks(as_cpu_grade(gpu_cases, found, cases), assignment)
    assert check.message == cpu_warning["output"], (check.message, cpu_warning["output"])
    assert check.traps == (trap_ids.FALSE_HINT,) and check.max_score == 0.0



def test_unexplained_gpu_values_take_the_cpus_out_of_bounds_traps(softmax) -> None:
    """A wild load that lands inside another allocation gives the GPU only wrong values (`unknown`: no guard saw
    it, memcheck reports nothing); the same case on the CPU stops it at the fence. The GPU verdict is the CPU's."""
    catalog = trap_catalog(softmax)
    gpu = result("softmax-basic", "softmax", (trap_ids.UNKNOWN,),
                 "Failed: unknown [unknown]\nout: 1 of 40 elements differ; 1 NaN where a number was expected")
    fence = ("softmax(...) was stopped at an out-of-bounds load (softmax.py, line 50, in softmax_kernel: "
             "x = tl.load(...)): 10 load(s) addressed memory outside every tensor passed to the kernel")
    named = faults.name_unexplained(gpu, result("softmax-basic", "softmax", (trap_ids.OOB_READ,), fence), catalog)
    assert named.traps == (trap_ids.OOB_READ,) and named.score == 0 and not named.passed
    assert named.message.startswith("Failed: ") and "[oob-read]" in named.message.splitlines()[0]
    assert "line 50" in named.message and "1 NaN where a number was expected" in named.message
    assert named.evidence["named_on_cpu"] == {"gpu_traps": [trap_ids.UNKNOWN], "by": faults.CPU_RERUN}
    # nothing to take: a clean CPU run, no rerun, or a case whose failure already has a name
    clean = result("softmax-basic", "softmax", (trap_ids.UNKNOWN,), "unknown there too")
    assert faults.name_unexplained(gpu, clean, catalog) == gpu
    assert faults.name_unexplained(gpu, None, catalog) == gpu
    named_already = result("softmax-basic", "softmax", ("no-max-subtraction",), "Failed")
    assert not faults.unexplained(named_already)
    assert faults.name_unexplained(named_already, result("softmax-basic", "softmax", (trap_ids.OOB_READ,), fence),
                                   catalog) == named_already
