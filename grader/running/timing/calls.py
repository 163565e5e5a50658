"""What a performance case runs and checks, as plain data (pure): the target bound to contiguous inputs at the
timed size (`CallPlan`, the worker's `Run` request), and the comparison of the timed outputs with torch eager's."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader.authoring.problem import Baseline, Problem
from grader.authoring.spec import Assignment, PerformanceCase
from grader.judging.compare import close_mask
from grader.running import protocol
from grader.running.cases import arguments
from grader.running.timing.launch_plan import PerformancePlan


@dataclass(frozen=True)
class CallPlan:
    """A target and its arguments as plain data for the worker's `Run` request (samplers.prepare_call)."""

    kind: str  # "kernel" | "function"
    target: str
    inputs: tuple[torch.Tensor, ...]  # contiguous CPU tensors
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    outputs: tuple[Mapping[str, Any], ...]  # kernel output buffers: shape, dtype
    output_names: tuple[str, ...]
    meta: Mapping[str, int]
    grid: tuple[str, ...]

    def request(self, *, sets: int, repeats: int, time: bool, return_outputs: bool,
                record: bool = False) -> protocol.Run:
        return protocol.Run(kind=self.kind, target=self.target, inputs=self.inputs, args=self.args,
                            kwargs=dict(self.kwargs), outputs=self.outputs, meta=dict(self.meta), grid=self.grid,
                            sets=sets, repeats=repeats, time=time, return_outputs=return_outputs, record=record)


def encode_call(
    perf: PerformanceCase, assignment: Assignment, problem: Problem, inputs: Mapping[str, Any]
) -> CallPlan:
    """Bind the target to its inputs the way correctness cases do (grader.running.cases.arguments), with
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


@dataclass(frozen=True)
class InputSet:
    """Another input set of a timed case: values of its own (drawn at a seed of its own), so that no set's answer is
    another's for a kernel to copy. `named`: as the oracle and torch eager take them; `tensors`: as the call's."""

    named: Mapping[str, Any]
    tensors: tuple[torch.Tensor, ...]


def input_set(perf: PerformanceCase, assignment: Assignment, problem: Problem, inputs: Mapping[str, Any]) -> InputSet:
    cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    return InputSet(inputs, encode_call(perf, assignment, problem, cpu).inputs)


@dataclass(frozen=True)
class Prepared:
    """A case recorded in the student's worker and planned, ready to check and time. `more`: the input sets after
    the first (their timed runs each checked against their own first run, which the grader checks here)."""

    perf: PerformanceCase
    problem: Problem
    call: CallPlan
    inputs: Mapping[str, Any]
    timed: PerformancePlan
    more: tuple[InputSet, ...] = ()

    @property
    def more_inputs(self) -> tuple[torch.Tensor, ...]:
        return tuple(t for extra in self.more for t in extra.tensors)

    def wrong_set(self, outputs: Sequence[torch.Tensor], expected_for: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                  atol: float, rtol: float) -> str:
        """'' when the timer's first run of every set (`outputs`, set after set) matches torch eager on that set's
        inputs; else which set's output does not, and how far off."""
        sets = (self.inputs, *(extra.named for extra in self.more))
        per_set = len(outputs) // len(sets)
        for index, named_inputs in enumerate(sets):
            got = dict(zip(self.call.output_names, outputs[index * per_set:(index + 1) * per_set], strict=False))
            wrong = compare_outputs(got, expected_for(named_inputs), atol, rtol)
            if wrong:
                return wrong + (f" (input set {index + 1} of {len(sets)})" if len(sets) > 1 else "")
        return ""
