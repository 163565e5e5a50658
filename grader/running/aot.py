"""GPU compile check without a GPU: compile each kernel ahead of time for the grading GPU (sm_90).

Runs in a worker *without* TRITON_INTERPRET, so code only the interpreter accepts (calls to plain
Python functions, tl.dot blocks the GPU rejects, `break`, ...) is reported before the student meets
it on the real GPU. Each kernel becomes one zero-point informational check in the results, always: where it
could not be compiled (the file does not import, the kernel is missing, the check could not start) the check is
there, failed, saying why, so every result of an assignment has the same tests (Gradescope's statistics per
question rely on it).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from grader import trap_ids
from grader.authoring.spec import Assignment, KernelSpec
from grader.backends import Backend
from grader.judging.errors import error_message
from grader.results import CaseResult
from grader.running import protocol
from grader.running.cases.symbols import check_symbol
from grader.running.processes.client import Worker, WorkerFailure
from grader.running.processes.sandbox import Sandbox, WorkerOptions, hidden_from_worker
from grader.running.processes.shared_zygote import template_address

GPU_ARCH = 90
COMPILE_TIMEOUT_S = 120.0
NOT_RUN = "not-run"  # evidence["compile"] of a check that could not compile the kernel at all


TRITON_TYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def triton_version() -> str:
    """The Triton this machine compiles with (a GPU's may differ: its verdict is the one that grades)."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def kernel_signature(spec: KernelSpec, dtype: str = "float32") -> dict[str, str]:
    """Triton types for the contract's parameters: `*_ptr` -> pointers to `dtype` (the first GPU case's: *fp32,
    *fp16 for a float16 case), float_params -> fp32, else i32."""
    signature = {}
    for param in spec.params:
        if param in spec.constexprs:
            signature[param] = "constexpr"
        elif param.endswith("_ptr"):
            signature[param] = "*" + TRITON_TYPES[dtype]
        elif param in spec.float_params:
            signature[param] = "fp32"
        else:
            signature[param] = "i32"
    return signature


def gpu_meta(assignment: Assignment, kernel: str) -> dict[str, int] | None:
    """Block sizes of the first case the GPU battery launches this kernel with."""
    for case in assignment.cases_for(Backend.CUDA):
        if case.target == kernel:
            return dict(case.meta)
    return None


def gpu_dtype(assignment: Assignment, kernel: str) -> str:
    """The inputs' dtype of the first case the GPU battery launches this kernel with."""
    return next((case.dtype for case in assignment.cases_for(Backend.CUDA) if case.target == kernel), "float32")


def compiled_kernels(assignment: Assignment) -> list[tuple[KernelSpec, dict[str, int]]]:
    """The kernels the check compiles (those the GPU battery launches), each with its first GPU case's blocks."""
    out = []
    for name, spec in assignment.kernels.items():
        meta = gpu_meta(assignment, name)
        if meta is not None:
            out.append((spec, meta))
    return out


def check_title(kernel: str) -> str:
    return f"{kernel}: compiles for the grading GPU (sm_{GPU_ARCH})"


def compile_result(kernel: str, passed: bool, message: str, traps: tuple[str, ...] = (),
                   evidence: dict[str, str] | None = None) -> CaseResult:
    """One kernel's compile check: zero points, public."""
    return CaseResult(case_id=f"gpu-compile-{kernel}", target=kernel, title=check_title(kernel), visibility="public",
                      max_score=0.0, score=0.0, passed=passed, message=message, traps=traps,
                      evidence=evidence or {})


def not_compiled(assignment: Assignment, why: str, traps: tuple[str, ...] = ()) -> list[CaseResult]:
    """Every kernel's check, failed for one reason (nothing could be compiled): the tests stay the same."""
    return [compile_result(spec.name, False, why, traps, {"compile": NOT_RUN})
            for spec, _ in compiled_kernels(assignment)]


def import_never_finishes(assignment: Assignment, filename: str) -> list[CaseResult]:
    """Every kernel's check, failed without importing the file again: importing it already ran past the import
    limit for the cases (the file's module-level code does not end; one timeout is enough)."""
    return not_compiled(assignment, f"Not compiled: importing {filename} does not finish (its cases say why), so "
                                    "no kernel of it could be compiled.")


def aot_check(assignment: Assignment, submission: Path, hidden: tuple[str, ...] = (),
              sandbox: Sandbox | None = None) -> tuple[list[CaseResult], list[str]]:
    """Compile each kernel for sm_90 in a worker without the interpreter (forked from `sandbox`'s zygote,
    the grade's, when given): one check per kernel of `compiled_kernels`, whatever happens."""
    options = WorkerOptions(backend="aot", import_timeout_s=assignment.import_timeout_s,
                            hidden_paths=hidden_from_worker(assignment, submission) + tuple(hidden))
    own = Sandbox(options) if sandbox is None and template_address("aot") is not None else None
    worker = Worker(submission, list(assignment.required_symbols), options, sandbox=sandbox or own)
    results: list[CaseResult] = []
    notes: list[str] = []
    try:
        try:
            reply = worker.start()
        except WorkerFailure as failure:
            why = f"GPU compile check skipped: {failure.detail}"
            return not_compiled(assignment, f"Not compiled: {why}."), [why]
        if not reply.ok:
            why = "the submission does not import (its cases say why)"
            return not_compiled(assignment, f"Not compiled: {why}."), [f"GPU compile check skipped: {why}."]
        for spec, meta in compiled_kernels(assignment):
            problem = check_symbol(spec.name, reply.symbols.get(spec.name, {}), assignment, submission.name)
            if problem is not None:
                results.append(compile_result(spec.name, False, f"Not compiled: {problem.message}",
                                              evidence={"compile": NOT_RUN}))
                continue
            results.append(_compile_one(worker, spec, meta, submission.name,
                                        kernel_signature(spec, gpu_dtype(assignment, spec.name))))
    finally:
        worker.close()
        if own is not None:
            own.close()
    return results, notes


def _compile_one(worker: Worker, spec: KernelSpec, meta: dict[str, int], filename: str,
                 signature: dict[str, str]) -> CaseResult:
    def result(passed: bool, message: str, traps: tuple[str, ...] = ()) -> CaseResult:
        return compile_result(spec.name, passed, message, traps)

    what = f"compiling {spec.name} for sm_{GPU_ARCH}"
    try:
        if not worker.alive:
            worker.start()
        reply = worker.request(protocol.Compile(kernel=spec.name, signature=signature, constexprs=meta,
                                                arch=GPU_ARCH), COMPILE_TIMEOUT_S, what)
    except WorkerFailure as failure:
        return result(False, f"{what}: {failure.detail}", (failure.trap,))
    if reply.ok:
        return result(True, f"The GPU compiler (Triton {triton_version()}) accepts {spec.name} for sm_{GPU_ARCH} with "
                            f"{meta}: a check of the kernel's form, worth no points (its cases say whether it computes "
                            "the right result).")
    message = (f"{spec.name} does not compile for the grading GPU (sm_{GPU_ARCH} with this machine's Triton "
               f"{triton_version()}, blocks {meta}): " + error_message(reply.error, filename))
    return result(False, message, (trap_ids.GPU_INCOMPATIBLE,))
