"""Performance cases on CUDA, the measuring part: time the student's target in its worker, the reference
solution in a worker of its own, and torch eager (the assignment's declared baseline) here; check the
student's output at the timed size against torch's; hand the numbers to grader.judging.performance.

The student's target is timed only after all of its correctness cases in this run passed. On any other
backend a performance case is "skipped" (it needs a CUDA GPU), never passed and never failed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.problem import Baseline, Problem
from grader.authoring.spec import Assignment, PerfCase
from grader.judging.compare import close_mask
from grader.judging.judge import fusion_problems
from grader.judging.performance import correctness_gate, errored, evaluate, measurement, not_run, skipped
from grader.operations.environment import versions
from grader.publishing.results import CaseResult, DeviceInfo, Measurement, PerfResult
from grader.running import arguments
from grader.running.battery import Battery, unpack_returns
from grader.running.client import Worker, WorkerFailure, WorkerOptions
from grader.running.observation import Observation, error_message
from grader.running.worker import timing
from grader.seeds import case_seed

# --------------------------------------------------------------------------- what the worker runs (pure)


@dataclass(frozen=True)
class CallPlan:
    """A target and its arguments as plain data for the worker's "time" op (timing.prepare_call)."""

    kind: str  # "kernel" | "function"
    target: str
    inputs: tuple[torch.Tensor, ...]  # contiguous CPU tensors
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    outputs: tuple[Mapping[str, Any], ...]  # kernel output buffers: shape, dtype
    output_names: tuple[str, ...]
    meta: Mapping[str, int]
    grid: tuple[str, ...]

    def request(self, *, sets: int, repeats: int, time: bool, return_outputs: bool) -> dict[str, Any]:
        return {
            "op": "time",
            "kind": self.kind,
            "target": self.target,
            "inputs": list(self.inputs),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "outputs": [dict(o) for o in self.outputs],
            "meta": dict(self.meta),
            "grid": list(self.grid),
            "sets": sets,
            "repeats": repeats,
            "time": time,
            "return_outputs": return_outputs,
        }


def encode_call(
    perf: PerfCase, assignment: Assignment, problem: Problem, inputs: Mapping[str, Any]
) -> CallPlan:
    """Bind the target to its inputs the way correctness cases do (grader.running.arguments), with
    every tensor contiguous and without guard buffers."""
    if perf.target in assignment.kernels:
        spec = assignment.kernels[perf.target]
        binding = arguments.kernel_binding(problem, inputs)
        placement = arguments.Contiguous(inputs, arguments.kernel_buffers(binding))
        args = arguments.kernel_arguments(spec, binding, placement)
        return CallPlan(
            "kernel",
            perf.target,
            placement.tensors(),
            tuple(args),
            {},
            tuple(placement.outputs),
            tuple(placement.output_names),
            dict(perf.meta),
            spec.grid,
        )
    function = assignment.functions[perf.target]
    call_args, call_kwargs = arguments.call_binding(problem, inputs)
    placement = arguments.Contiguous(inputs, arguments.call_buffers(call_args, call_kwargs))
    args_w, kwargs_w = arguments.call_arguments(call_args, call_kwargs, placement)
    return CallPlan(
        "function",
        perf.target,
        placement.tensors(),
        tuple(args_w),
        kwargs_w,
        (),
        function.returns,
        {},
        (),
    )


def outputs_from_reply(
    plan: CallPlan, reply: Mapping[str, Any], backend: str
) -> dict[str, torch.Tensor] | str:
    """The target's outputs by name from a "time" reply, or what is wrong with them."""
    if plan.kind == "kernel":
        got = reply.get("outputs") or []
        if len(got) != len(plan.output_names) or any(type(t) is not torch.Tensor for t in got):
            return "the worker returned a malformed reply"
        return dict(zip(plan.output_names, got, strict=True))
    outputs, problem = unpack_returns(reply.get("result") or {}, plan.output_names, backend)
    return f"{plan.target} returned {problem}" if problem else outputs


def compare_outputs(
    actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], atol: float, rtol: float
) -> str:
    """'' when every output matches within the tolerance; else which one does not, and how far off."""
    for name, exp in expected.items():
        got = actual.get(name)
        if got is None or tuple(got.shape) != tuple(exp.shape):
            shape = None if got is None else tuple(got.shape)
            return f"`{name}` has shape {shape}, expected {tuple(exp.shape)}"
        ok = close_mask(got.to(exp.device), exp, atol, rtol)
        wrong = int((~ok).sum())
        if wrong:
            diff = (got.to(exp.device).double() - exp.double()).abs().nan_to_num(nan=math.inf)
            worst = float(diff.max())
            return (
                f"`{name}`: {wrong} of {exp.numel()} elements differ (max |error| {worst:.3g}, "
                f"atol={atol:g}, rtol={rtol:g})"
            )
    return ""


def baseline_outputs(baseline: Baseline, result: Any) -> dict[str, torch.Tensor]:
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(items) != len(baseline.outputs):
        raise ValueError(f"{baseline.label} returned {len(items)} values for outputs {baseline.outputs}")
    return dict(zip(baseline.outputs, items, strict=True))


# --------------------------------------------------------------------------- measuring (I/O)


class PerfRunner:
    """Times one grading session's performance cases (made at the first one, closed at session end).

    `device` is where torch eager runs ("cuda"; tests on a CPU-only machine use "cpu" with a fake
    clock). The reference solution gets a worker of its own, started at its first use."""

    def __init__(
        self,
        assignment: Assignment,
        seed: int,
        device: str = "cuda",
        warmup_ms: float = timing.DEFAULT_WARMUP_MS,
        rep_ms: float = timing.DEFAULT_REP_MS,
    ) -> None:
        self.assignment = assignment
        self.seed = seed
        self.problems: Mapping[str, Problem] = load_problems(assignment)
        self.device = device
        self.warmup_ms = warmup_ms
        self.rep_ms = rep_ms
        self._device_info: DeviceInfo | None = None
        self._reference: Worker | None = None
        self._reference_problem = "" if assignment.reference else "the assignment names no reference solution"

    def close(self) -> None:
        if self._reference is not None:
            self._reference.close()
            self._reference = None

    def device_info(self) -> DeviceInfo:
        """The GPU, its copy bandwidth (measured once per session, here: trusted) and the versions."""
        if self._device_info is None:
            found = versions()
            self._device_info = DeviceInfo(
                gpu=torch.cuda.get_device_name(0),
                copy_gb_per_s=timing.copy_bandwidth_gbs(),
                torch=found.get("torch", "?"),
                triton=found.get("triton", "?"),
            )
        return self._device_info

    def run(self, perf: PerfCase, battery: Battery, cases: Sequence[CaseResult]) -> PerfResult:
        """Time one case, if it may be: CUDA, every correctness case of its target passed, the target runs."""
        if battery.backend != "cuda":
            return skipped(perf)
        reason = correctness_gate(perf.target, cases)
        if reason:
            return not_run(perf, reason)
        blocked = battery.symbol_problem(perf.target)
        if blocked is not None:
            return not_run(perf, blocked.message)
        return self.measure(perf, battery)

    def measure(self, perf: PerfCase, battery: Battery) -> PerfResult:
        device = self.device_info()
        spec = self.assignment.kernels.get(perf.target) or self.assignment.functions[perf.target]
        problem = self.problems[spec.problem]
        baseline = problem.baseline
        assert baseline is not None  # load_problems checks every performance target has one
        maker = InputMaker(case_seed(self.seed, perf.id), getattr(torch, perf.dtype))
        inputs = problem.make_inputs(perf.as_case(), maker)
        plan = encode_call(perf, self.assignment, problem, inputs)
        student = self._time_student(plan, perf, battery)
        if isinstance(student, str):
            return errored(perf, student, device)
        outputs, student_medians = student
        torch_medians, expected = self._time_baseline(baseline, inputs, perf)
        tol = self.assignment.tolerances[perf.tolerance].lookup("cuda", perf.dtype)
        wrong = compare_outputs(outputs, expected, tol.atol, tol.rtol)
        del outputs, expected
        if wrong:
            return errored(perf, f"at {perf.shape} the output differs from {baseline.label}: {wrong}", device)
        reference_medians, note = self._time_reference(plan, perf)
        nbytes = baseline.bytes_moved(dict(perf.dims)) if baseline.bytes_moved else None
        flops = baseline.flops(dict(perf.dims)) if baseline.flops else None

        def measured(label: str, medians: Sequence[float] | None) -> Measurement | None:
            return measurement(label, medians, nbytes, flops, device.copy_gb_per_s) if medians else None

        mine = measured(f"your {perf.target}", student_medians)
        assert mine is not None
        eager = measured(baseline.label + (" (tf32 allowed)" if baseline.tf32 else ""), torch_medians)
        return evaluate(perf, mine, measured("reference", reference_medians), eager, device, note)

    def _request(self, plan: CallPlan, perf: PerfCase, return_outputs: bool) -> dict[str, Any]:
        request = plan.request(
            sets=perf.input_sets, repeats=perf.repeats, time=True, return_outputs=return_outputs
        )
        request.update(warmup_ms=self.warmup_ms, rep_ms=self.rep_ms)
        return request

    def _time_student(
        self, plan: CallPlan, perf: PerfCase, battery: Battery
    ) -> tuple[dict[str, torch.Tensor], list[float]] | str:
        """The student's outputs (first, untimed run) and medians; or why there are none."""
        what = f"timing {perf.target} on {perf.shape}"
        try:
            reply = battery.worker.request(self._request(plan, perf, True), perf.timeout_s, what)
        except WorkerFailure as failure:
            battery.load_reply = None  # the next request starts a fresh worker
            return f"{what}: {failure.detail}"
        if not reply.get("ok"):
            if reply.get("fatal"):
                battery.load_reply = None
            return f"{what} raised " + error_message(reply.get("error", {}), battery.submission.name)
        if plan.kind == "function":
            record = Observation(
                launches=tuple(reply.get("launches") or ()), torch_ops=dict(reply.get("torch_ops") or {})
            )
            unfused = fusion_problems(record, self.assignment, perf.target)
            if unfused:
                return f"{what}: not fused at this size: " + "; ".join(unfused)
        outputs = outputs_from_reply(plan, reply, "cuda" if self.device == "cuda" else "interpreter")
        if isinstance(outputs, str):
            return outputs
        medians = list(reply.get("timing", {}).get("medians_ms", []))
        if not medians:
            return f"{what}: the worker sent no timing"
        return outputs, medians

    def _time_baseline(
        self, baseline: Baseline, inputs: Mapping[str, Any], perf: PerfCase
    ) -> tuple[list[float], dict[str, torch.Tensor]]:
        """Torch eager on `input_sets` copies of the inputs on the device: its medians and its outputs."""
        medians, expected = self._bench_baseline(baseline, inputs, perf)
        if self.device == "cuda":
            torch.cuda.empty_cache()  # the input copies died with _bench_baseline
        return medians, expected

    def _bench_baseline(
        self, baseline: Baseline, inputs: Mapping[str, Any], perf: PerfCase
    ) -> tuple[list[float], dict[str, torch.Tensor]]:
        first = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        copies = [first] + [
            {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in first.items()}
            for _ in range(perf.input_sets - 1)
        ]
        with timing.tf32_matmul(baseline.tf32):
            expected = baseline_outputs(baseline, baseline.run(copies[0]))
            if self.device == "cuda":
                torch.cuda.synchronize()
            measured = timing.bench(
                lambda i: baseline.run(copies[i]),
                sets=perf.input_sets,
                repeats=perf.repeats,
                warmup_ms=self.warmup_ms,
                rep_ms=self.rep_ms,
            )
        return list(measured.medians_ms), expected

    def start_reference(self) -> Worker:
        """A worker running the assignment's reference solution (trusted code, same timing path)."""
        path = (self.assignment.root / self.assignment.reference).resolve()
        worker = Worker(
            path,
            list(self.assignment.required_symbols),
            WorkerOptions(backend="cuda", import_timeout_s=self.assignment.import_timeout_s),
        )
        try:
            reply = worker.start()
        except WorkerFailure as failure:
            reply = {"ok": False, "error": {"message": failure.detail}}
        if not reply.get("ok"):
            worker.close()
            raise RuntimeError(str(reply.get("error", {}).get("message", ""))[:300])
        return worker

    def _time_reference(self, plan: CallPlan, perf: PerfCase) -> tuple[list[float] | None, str]:
        """The reference's medians on the same inputs, or None and why not (a note on the result)."""
        if self._reference is None and not self._reference_problem:
            try:
                self._reference = self.start_reference()
            except RuntimeError as exc:
                self._reference_problem = f"the reference solution could not be loaded: {exc}"
        if self._reference is None:
            return None, self._reference_problem
        what = f"timing the reference {perf.target} on {perf.shape}"
        try:
            reply = self._reference.request(self._request(plan, perf, False), perf.timeout_s, what)
        except WorkerFailure as failure:
            self.close()  # the next case starts a fresh one
            return None, f"the reference could not be timed: {failure.detail}"
        if not reply.get("ok"):
            detail = str(reply.get("error", {}).get("message", ""))[:300]
            return None, f"the reference could not be timed: {detail}"
        return list(reply.get("timing", {}).get("medians_ms", [])) or None, ""
