"""Judge one case: from an Observation to a scored, diagnosed CaseResult. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from grader import trap_ids
from grader.authoring.catalog import trap_catalog, trap_title
from grader.authoring.problem import TrapFunction
from grader.authoring.spec import Assignment, Case, Tolerance
from grader.judging.compare import Comparison, close_mask, compare
from grader.judging.diagnosis import classify_unmatched, locate, match_traps
from grader.judging.error_maps import error_maps
from grader.judging.false_hints import evidence as false_hint_evidence
from grader.judging.replay import launch_meta
from grader.results import CaseResult
from grader.running.guards import INPUT_MODIFIED
from grader.running.observation import Observation

# Torch operators a wrapper may run besides its kernel launch: allocation, views, copies, metadata.
# Anything else (aten.mm, aten.gelu, aten.var_mean, aten.native_layer_norm, aten.add, ...) is torch
# computing the answer instead of the kernel.
ALLOWED_WRAPPER_OPS = frozenset(
    f"aten.{name}"
    for name in (
        "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
        "new_zeros", "ones", "ones_like", "full", "full_like", "new_full", "fill_", "zero_",
        "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
        "contiguous", "clone", "copy_", "_to_copy", "to", "detach", "alias", "select", "slice",
        "unsqueeze", "squeeze", "lift_fresh", "resize_", "is_same_size", "_has_compatible_shallow_copy_type",
    )
)

GUARD_TRAPS = {
    trap_ids.OOB_WRITE: trap_ids.OOB_WRITE,
    trap_ids.UNWRITTEN_OUTPUT: trap_ids.UNWRITTEN_OUTPUT,
    INPUT_MODIFIED: trap_ids.WRITES_INPUT,
}


def judge_case(
    case: Case,
    assignment: Assignment,
    inputs: Mapping[str, Any],
    expected: Mapping[str, torch.Tensor],
    observation: Observation,
    tolerance: Tolerance,
    traps: Mapping[str, TrapFunction],
    elapsed_s: float,
) -> CaseResult:
    catalog = trap_catalog(assignment)
    title = f"{case.target}: {case.description or case.id}"
    evidence: dict[str, Any] = {
        "dims": dict(case.dims), "kind": case.kind, "layout": case.layout, "meta": dict(case.meta),
        "tolerance": {"profile": case.tolerance, "atol": tolerance.atol, "rtol": tolerance.rtol},
    }
    hint = false_hint_evidence(observation.false_hint)
    if hint is not None:  # a warning for the whole kernel (grade.py), never points off this case
        evidence["false_hint"] = hint

    def result(passed: bool, message: str, named: list[str]) -> CaseResult:
        return CaseResult(
            case_id=case.id, target=case.target, title=title, visibility=case.visibility,
            max_score=case.points, score=case.points if passed else 0.0, passed=passed,
            message=message, traps=tuple(dict.fromkeys(named)), evidence=evidence, elapsed_s=elapsed_s,
        )

    if observation.fault is not None:  # how a GPU memory fault was named (grader/judging/faults.py)
        evidence["gpu_fault"] = dict(observation.fault)
    if observation.failure:
        return result(False, observation.message, [observation.failure, *(f.trap for f in observation.fault_findings)])

    named: list[str] = []
    lines: list[str] = []

    fusion = fusion_problems(observation, assignment, case.target)
    if fusion:
        named.append(trap_ids.NOT_FUSED)
        lines.extend(fusion)
    if observation.replay_finding is not None:
        named.append(observation.replay_finding.trap)
        lines.append(observation.replay_finding.message)

    shape_problems = output_shape_problems(observation.outputs, expected)
    if shape_problems:
        return result(False, "\n".join(lines + shape_problems), named + [trap_ids.BAD_OUTPUT])

    comparisons = [
        compare(name, observation.outputs[name], exp, tolerance.atol, tolerance.rtol) for name, exp in expected.items()
    ]
    evidence["comparisons"] = [_comparison_evidence(c) for c in comparisons]
    evidence["where_wrong"] = {
        c.name: locate(~close_mask(observation.outputs[c.name], expected[c.name], tolerance.atol, tolerance.rtol),
                       observation.block_meta)
        for c in comparisons if not c.ok
    }
    evidence["error_maps"] = error_maps(
        observation.outputs, expected, tolerance.atol, tolerance.rtol, unwritten=observation.unwritten,
        oob_reads=observation.guard_reads, block_meta=observation.block_meta,
    )

    if observation.nondeterministic:
        named.append(trap_ids.NONDETERMINISTIC)
        lines.append(f"{', '.join(observation.nondeterministic)} differed between two runs on identical inputs: "
                     "a race between programs, or a read of memory nothing wrote")

    for finding in observation.guard_findings:
        named.append(GUARD_TRAPS[finding.kind])
        lines.append(finding.message())
    for extra in observation.sanitizer_findings:
        named.append(extra.trap)
        lines.append(extra.message)
    evidence["guard_findings"] = [f.message() for f in observation.guard_findings]

    values_ok = all(c.ok for c in comparisons)
    if not values_ok:
        matches = match_traps(traps, trap_inputs(inputs, observation, case),
                              observation.outputs, expected, tolerance, observation.unwritten)
        named.extend(m.trap for m in matches)
        if observation.guard_reads:
            named.append(trap_ids.OOB_READ)
            for name, reads in observation.guard_reads.items():
                lines.append(f"{int(reads.sum())} element(s) of {name} are NaN where the oracle is finite, and turn "
                             "finite when the guard bands around the inputs hold a number instead of NaN: "
                             "a load read outside its tensor")
        if not named:
            named.append(classify_unmatched(comparisons))
        lines.extend(c.summary() for c in comparisons if not c.ok)

    passed = values_ok and not named
    if passed:
        worst = max((c.max_abs_error for c in comparisons), default=0.0)
        return result(True, f"passed (max |error| {worst:.3g}; atol={tolerance.atol:g}, rtol={tolerance.rtol:g})", [])
    head = "; ".join(f"{trap_title(catalog, t)} [{t}]" for t in dict.fromkeys(named))
    return result(False, "\n".join([f"Failed: {head}"] + lines), named)


def trap_inputs(inputs: Mapping[str, Any], observation: Observation, case: Case) -> dict[str, Any]:
    """The case's inputs plus what the run itself decided, for trap functions (see Problem):
    `_row_strides`, each input's row stride as placed, and `_launches`, the launches that computed the
    outputs: the grader's own for a kernel case (its kernel, the case's `meta`), each recorded launch
    for a wrapper case (its kernel, grid and constexpr values, grader/judging/replay.py launch_meta)."""
    if observation.launches is None:
        launches: tuple[dict[str, Any], ...] = ({"kernel": case.target, "grid": None, "meta": dict(case.meta)},)
    else:
        launches = launch_meta(observation.launches)
    return {**inputs, "_row_strides": dict(observation.row_strides), "_launches": launches}


def fusion_problems(observation: Observation, assignment: Assignment, target: str) -> list[str]:
    """For wrapper cases: too many or no kernel launches, or torch operators doing the work."""
    if observation.launches is None or target not in assignment.functions:
        return []
    spec = assignment.functions[target]
    problems = []
    launches = list(observation.launches)
    if len(launches) > spec.max_launches:
        names = ", ".join(str(launch.get("kernel")) for launch in launches)
        problems.append(f"{target} launched {len(launches)} kernels ({names}); the assignment allows "
                        f"{spec.max_launches}")
    if not launches and spec.max_launches > 0:
        problems.append(f"{target} launched no Triton kernel")
    compute_ops = sorted(op for op in observation.torch_ops if op not in ALLOWED_WRAPPER_OPS)
    if compute_ops:
        problems.append(f"{target} computed with torch operators instead of its kernel: {', '.join(compute_ops[:8])}")
    return problems


def output_shape_problems(outputs: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> list[str]:
    problems = []
    for name, exp in expected.items():
        got = outputs.get(name)
        if got is None:
            problems.append(f"output `{name}` is missing")
            continue
        if tuple(got.shape) != tuple(exp.shape):
            problems.append(f"output `{name}` has shape {tuple(got.shape)}, expected {tuple(exp.shape)}")
        elif got.dtype != torch.float32:
            problems.append(f"output `{name}` has dtype {got.dtype}, expected torch.float32")
    return problems


def _comparison_evidence(c: Comparison) -> dict[str, Any]:
    return {
        "output": c.name, "ok": c.ok, "mismatches": c.mismatches, "numel": c.numel,
        "nan_mismatches": c.nan_mismatches, "inf_mismatches": c.inf_mismatches,
        "max_abs_error": c.max_abs_error, "worst_index": list(c.worst_index) if c.worst_index else None,
        "worst_actual": _json_float(c.worst_actual), "worst_expected": _json_float(c.worst_expected),
        "summary": c.summary(),
    }


def _json_float(x: float | None) -> float | str | None:
    if x is None:
        return None
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    return x
