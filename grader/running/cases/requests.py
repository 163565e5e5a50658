"""A case as the request its worker gets: the case's inputs bound to the target's parameters
(grader.running.cases.arguments), placed in guarded storages (placement), and the `Launch` or `Call` message
(grader.running.protocol) that names them. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grader.authoring.problem import In, Out, Problem
from grader.authoring.spec import Case, FunctionSpec, KernelSpec
from grader.running import protocol
from grader.running.cases import arguments
from grader.running.cases.arguments import buffer_key
from grader.running.cases.placement import Placed, launch_grid, place_buffers


def launch_request(spec: KernelSpec, case: Case, problem: Problem, inputs: Mapping[str, Any], *,
                   count_traffic: bool, finite_guard: float | None = None) -> tuple[Placed, protocol.Launch, str]:
    """The grader's own launch of a kernel case: guarded buffers, the request, and its description."""
    binding = arguments.kernel_binding(problem, inputs)
    by_param = {p: buffer_key(v) for p, v in binding.items() if isinstance(v, (In, Out))}
    placed = place_buffers(case, arguments.kernel_buffers(binding), inputs, by_param, finite_guard,
                           grid=launch_grid(spec, binding, case))
    args = arguments.kernel_arguments(spec, binding, placed)
    what = f"{spec.name}[grid]({', '.join(f'{k}={v}' for k, v in case.meta.items())})"
    request = protocol.Launch(kernel=spec.name, storages=tuple(placed.storages), views=tuple(placed.views()),
                              args=tuple(args), meta=dict(case.meta), grid=tuple(spec.grid),
                              count_traffic=count_traffic)
    return placed, request, what


def call_request(spec: FunctionSpec, case: Case, problem: Problem, inputs: Mapping[str, Any], *,
                 count_traffic: bool, finite_guard: float | None = None) -> tuple[Placed, protocol.Call, str]:
    """A wrapper case's call: guarded buffers, the request, and its description."""
    args, kwargs = arguments.call_binding(problem, inputs)
    placed = place_buffers(case, arguments.call_buffers(args, kwargs), inputs, finite_guard=finite_guard)
    wired_args, wired_kwargs = arguments.call_arguments(args, kwargs, placed)
    request = protocol.Call(function=spec.name, storages=tuple(placed.storages), views=tuple(placed.views()),
                            args=tuple(wired_args), kwargs=dict(wired_kwargs), count_traffic=count_traffic)
    return placed, request, f"{spec.name}(...)"
