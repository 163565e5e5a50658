"""Check each problem's bindings against the contract when an assignment loads: every kernel parameter bound
(constexprs excluded), every `Stride` and `Out(like=...)` naming a pointer parameter bound to a tensor, every
`In` naming an input `make_inputs` makes. On the first case of each target, in the grader's own process (the
oracle module is the course's code, not a student's). A mistake here would otherwise surface only when a case
runs, as a case the grader could not run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from grader.authoring.inputs import case_maker
from grader.authoring.problem import In, Out, Problem, Stride
from grader.authoring.spec_model import Assignment, Case, KernelSpec


def binding_problems(assignment: Assignment, problems: Mapping[str, Problem]) -> list[tuple[str, str]]:
    """(key under the oracle module, what is wrong) for the first case of every target; empty when all bind."""
    found: list[tuple[str, str]] = []
    for target in [*assignment.kernels, *assignment.functions]:
        case = next((c for c in assignment.cases if c.target == target), None)
        spec = assignment.kernels.get(target) or assignment.functions[target]
        problem = problems.get(spec.problem)
        if case is None or problem is None:
            continue  # no case to bind with; a problem that is missing is the loader's to say
        try:
            inputs = problem.make_inputs(case, case_maker(case, 0))
            if isinstance(spec, KernelSpec):
                found.extend(_kernel(spec, problem, inputs, case))
            elif problem.call_args is not None:
                args, kwargs = problem.call_args(inputs)
                found.extend(_inputs_named(problem, [*args, *kwargs.values()], inputs, case))
        except Exception as error:  # noqa: BLE001 - the course's code: say what it raised, where
            found.append((f"PROBLEMS[{problem.name!r}]", f"raised {type(error).__name__}: {error} on case "
                                                          f"{case.id!r} (binding {target})"))
    return found


def _kernel(spec: KernelSpec, problem: Problem, inputs: Mapping[str, Any], case: Case) -> list[tuple[str, str]]:
    key = f"PROBLEMS[{problem.name!r}].kernel_args"
    if problem.kernel_args is None:
        return [(key, f"is missing: kernel {spec.name} needs it")]
    binding = problem.kernel_args(inputs)
    wanted = [p for p in spec.params if p not in spec.constexprs]
    found = []
    missing = [p for p in wanted if p not in binding]
    extra = [p for p in binding if p not in wanted]
    if missing:
        found.append((key, f"binds no value to {', '.join(missing)} of kernels.{spec.name}.params"))
    if extra:
        found.append((key, f"binds {', '.join(extra)}, which kernels.{spec.name} has not among its "
                           "non-constexpr params"))
    tensors = {p: v for p, v in binding.items() if isinstance(v, (In, Out))}
    for param, value in binding.items():
        if isinstance(value, Stride):
            bound = tensors.get(value.param)
            if bound is None:
                found.append((key, f"binds {param} to Stride({value.param!r}, {value.dim}): {value.param!r} is no "
                                   f"parameter of kernels.{spec.name} bound to an In or Out"))
            elif value.dim >= _ndim(bound, inputs):
                found.append((key, f"binds {param} to Stride({value.param!r}, {value.dim}): that tensor has "
                                   f"{_ndim(bound, inputs)} dimension(s)"))
        if isinstance(value, Out) and value.like is not None and value.like not in tensors:
            found.append((key, f"binds {param} to Out({value.name!r}, like={value.like!r}): {value.like!r} is no "
                               f"parameter of kernels.{spec.name} bound to an In or Out"))
    found.extend(_inputs_named(problem, list(tensors.values()), inputs, case))
    return found


def _inputs_named(problem: Problem, values: list[Any], inputs: Mapping[str, Any], case: Case) -> list[tuple[str, str]]:
    unknown = sorted({v.name for v in values if isinstance(v, In) and not isinstance(inputs.get(v.name), torch.Tensor)})
    if not unknown:
        return []
    return [(f"PROBLEMS[{problem.name!r}]", f"passes In({', '.join(map(repr, unknown))}), which make_inputs does not "
                                             f"make as a tensor (case {case.id!r})")]


def _ndim(ref: In | Out, inputs: Mapping[str, Any]) -> int:
    return len(ref.shape) if isinstance(ref, Out) else int(inputs[ref.name].dim())
