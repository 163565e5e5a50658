"""Load an assignment's oracle module (`assignment.module`) and its registered problems."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from types import ModuleType

from grader.authoring.problem import Problem
from grader.authoring.spec import Assignment, FunctionSpec, KernelSpec, SpecError

_LOADED: dict[str, ModuleType] = {}


def load_module(assignment: Assignment) -> ModuleType:
    path = assignment.root / assignment.module
    key = str(path)
    if key in _LOADED:
        return _LOADED[key]
    name = f"grader_assignment_{assignment.id.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpecError(assignment.spec_path, "assignment.module", f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _LOADED[key] = module
    return module


def load_problems(assignment: Assignment) -> Mapping[str, Problem]:
    """The module's PROBLEMS, checked against every problem the spec's targets name."""
    module = load_module(assignment)
    problems = getattr(module, "PROBLEMS", None)
    if not isinstance(problems, Mapping):
        raise SpecError(assignment.spec_path, "assignment.module", f"{assignment.module} defines no PROBLEMS dict")
    targets: dict[str, KernelSpec | FunctionSpec] = {**assignment.kernels, **assignment.functions}
    for target, spec in targets.items():
        if spec.problem not in problems:
            raise SpecError(
                assignment.spec_path, f"{target}.problem",
                f"{spec.problem!r} is not in {assignment.module}'s PROBLEMS ({', '.join(problems)})",
            )
        problem = problems[spec.problem]
        if target in assignment.kernels and problem.kernel_args is None:
            raise SpecError(assignment.spec_path, f"kernels.{target}.problem",
                            f"problem {spec.problem!r} has no kernel_args binding")
        if target in assignment.functions and problem.call_args is None:
            raise SpecError(assignment.spec_path, f"functions.{target}.problem",
                            f"problem {spec.problem!r} has no call_args binding")
    for index, perf in enumerate(assignment.performance):
        target_spec: KernelSpec | FunctionSpec = (
            assignment.kernels.get(perf.target) or assignment.functions[perf.target]
        )
        if problems[target_spec.problem].baseline is None:
            raise SpecError(assignment.spec_path, f"performance[{index}] (id={perf.id!r}).target",
                            f"problem {target_spec.problem!r} declares no baseline (torch eager) "
                            f"in {assignment.module}")
    return problems
