"""Judge one case: from an Observation to a scored, diagnosed CaseResult. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from grader import trap_ids
from grader.authoring.catalog import trap_catalog, trap_title
from grader.authoring.problem import TrapFunction
from grader.authoring.spec import Assignment, Case, Tolerance
from grader.evidence.guard_bits import INPUT_MODIFIED
from grader.evidence.observation import Observation
from grader.judging.compare import Comparison, close_mask, compare, worst_element
from grader.judging.diagnosis import TrapMatch, classify_unmatched, locate, match_traps
from grader.judging.error_maps import error_maps
from grader.judging.false_hints import evidence as false_hint_evidence
from grader.judging.replay import launch_meta
from grader.results import CaseResult

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
    output_dtypes: Mapping[str, torch.dtype] | None = None,
) -> CaseResult:
    """`output_dtypes`: the dtype each output must have (Problem.dtypes_of_outputs; float32 where not given)."""
    catalog = trap_catalog(assignment)
    title = f"{case.target}: {case.description or case.id}"
    evidence: dict[str, Any] = {
        "dims": dict(case.dims), "kind": case.kind, "dtype": case.dtype, "layout": case.layout,
        "meta": dict(case.meta),
        "tolerance": {"profile": case.tolerance, "atol": tolerance.atol, "rtol": tolerance.rtol},
    }
    hint = false_hint_evidence(observation.false_hint)
    if hint is not None:  # a warning for the whole kernel (grade.py), never points off this case
        evidence["false_hint"] = hint
    if observation.traffic is not None:  # the performance traps' evidence (grader/judging/performance_traps.py)
        evidence["traffic"] = [dict(launch) for launch in observation.traffic]

    def result(passed: bool, message: str, named: list[str]) -> CaseResult:
        return CaseResult(
            case_id=case.id, target=case.target, title=title, visibility=case.visibility,
            max_score=case.points, score=case.points if passed else 0.0, passed=passed,
            message=message, traps=tuple(dict.fromkeys(named)), evidence=evidence, elapsed_s=elapsed_s,
        )

    if observation.fault is not None:  # how a GPU memory fault was named (grader/judging/faults.py)
        evidence["gpu_fault"] = dict(observation.fault)
    if observation.at_import:  # the case never ran: the file's import failed (the reports word its fix so)
        evidence["at_import"] = True
    if observation.trap:
        return result(False, observation.message, [observation.trap, *(f.trap for f in observation.fault_findings)])

    named: list[str] = []
    lines: list[str] = []

    fusion = fusion_problems(observation, assignment, case.target)
    if fusion:
        named.append(trap_ids.NOT_FUSED)
        lines.extend(fusion)
    if observation.replay_finding is not None:
        named.append(observation.replay_finding.trap)
        lines.append(observation.replay_finding.message)

    shape_problems = output_shape_problems(observation.outputs, expected, output_dtypes or {})
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

    # Not one element of an output written: in every case, the untouched template's signature (report.py's
    # advice); in some, a store mask that is never true on that input.
    nothing_written = [name for name, mask in observation.unwritten.items() if mask.numel() and bool(mask.all())]
    if nothing_written:
        evidence["nothing_written"] = nothing_written
    for finding in observation.guard_findings:
        named.append(GUARD_TRAPS[finding.trap])
        line = finding.message()
        if finding.trap == trap_ids.UNWRITTEN_OUTPUT and finding.buffer in nothing_written:
            line += (f": your kernel wrote nothing to {finding.buffer} (the template's TODO is still there, or its "
                     "tl.store never runs, or its mask is never true)")
        lines.append(line)
    for extra in observation.sanitizer_findings:
        named.append(extra.trap)
        lines.append(extra.message)
    evidence["guard_findings"] = [f.message() for f in observation.guard_findings]

    values_ok = all(c.ok for c in comparisons)
    if not values_ok:
        matches = match_traps(traps, trap_inputs(inputs, observation, case),
                              observation.outputs, expected, tolerance, observation.unwritten)
        named.extend(m.trap for m in matches)
        evidence["illustrations"] = illustrations(matches, observation, expected, tolerance)
        if observation.guard_reads:
            named.append(trap_ids.OOB_READ)
            for name, reads in observation.guard_reads.items():
                lines.append(f"{int(reads.sum())} element(s) of {name} are NaN where the oracle is finite, and turn "
                             "finite when the guard bands around the case's tensors hold a number instead of NaN: "
                             "a load read outside its tensor")
        if not named:
            named.append(classify_unmatched(comparisons))
        lines.extend(c.summary() for c in comparisons if not c.ok)

    passed = values_ok and not named
    if passed:
        worst = max((c.max_abs_error for c in comparisons), default=0.0)
        return result(True, f"passed (max |error| {worst:.3g}; atol={tolerance.atol:g}, rtol={tolerance.rtol:g})", [])
    return result(False, "\n".join([failure_head(named, catalog)] + lines), named)


FAILED = "Failed: "


def failure_head(traps: Sequence[str], catalog: Mapping[str, Any]) -> str:
    """A failed case message's first line: every trap it names, by title and id."""
    return FAILED + "; ".join(f"{trap_title(catalog, t)} [{t}]" for t in dict.fromkeys(traps))


def renamed_head(message: str, traps: Sequence[str], catalog: Mapping[str, Any]) -> str:
    """`message` with its first line naming `traps` (when it starts with a failure head; else unchanged)."""
    first, _, rest = message.partition("\n")
    if not first.startswith(FAILED) or not traps:
        return message
    return failure_head(traps, catalog) + ("\n" + rest if rest else "")


def illustrations(matches: list[TrapMatch], observation: Observation, expected: Mapping[str, torch.Tensor],
                  tol: Tolerance) -> dict[str, dict[str, dict[str, Any]]]:
    """trap -> output -> the element that shows that trap: among the elements the oracle rejects, one the
    trap accounts for (where its signature predicts the student's value; where the output was never
    written; where a NaN came from outside an input), the furthest beyond tolerance, a number before a NaN.
    The comparison's own worst element is any wrong one; a report shows this one under the trap."""
    outputs = observation.outputs
    wrong = {name: ~close_mask(outputs[name], exp, tol.atol, tol.rtol) for name, exp in expected.items()
             if name in outputs and tuple(outputs[name].shape) == tuple(exp.shape)}
    masks: dict[str, dict[str, torch.Tensor]] = {}
    for match in matches:
        sig = match.signature
        for name, predicted in (sig.outputs.items() if sig.predicate is None else ()):
            if name in wrong and tuple(predicted.shape) == tuple(outputs[name].shape):
                fits = close_mask(outputs[name], predicted, tol.atol, tol.rtol)
                if name in sig.slack:
                    fits = fits | ((outputs[name].to(torch.float64) - predicted).abs() <= sig.slack[name] + tol.atol)
                masks.setdefault(match.trap, {})[name] = fits
        if sig.predicate is not None:  # a property of the whole output: any wrong element shows it
            masks.setdefault(match.trap, {}).update({name: torch.ones_like(w) for name, w in wrong.items()})
    structural = ((trap_ids.UNWRITTEN_OUTPUT, observation.unwritten), (trap_ids.OOB_READ, observation.guard_reads))
    for trap, found in structural:
        for name, mask in found.items():
            masks.setdefault(trap, {})[name] = mask.to(torch.bool)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for trap, per_output in masks.items():
        for name, mask in per_output.items():
            if name not in wrong or tuple(mask.shape) != tuple(wrong[name].shape):
                continue
            worst = worst_element(outputs[name], expected[name], mask & wrong[name], tol.atol, tol.rtol,
                                  nonfinite_first=trap in NAN_TRAPS)
            if worst is not None:
                index, actual, want = worst
                out.setdefault(trap, {})[name] = {"index": list(index), "actual": _json_float(actual),
                                                  "expected": _json_float(want)}
    return out


# Traps whose mark is a NaN in the output (never written: the poison; read from outside: the guards)
NAN_TRAPS = frozenset({trap_ids.UNWRITTEN_OUTPUT, trap_ids.OOB_READ})


def trap_inputs(inputs: Mapping[str, Any], observation: Observation, case: Case) -> dict[str, Any]:
    """The case's inputs plus what the run itself decided, for trap functions (see Problem):
    `_row_strides`, each input's row stride as placed, `_strides`, each input's strides as placed, and
    `_launches`, the launches that computed the outputs: the grader's own for a kernel case (its kernel, the
    meta-parameters it ran with: the case's `meta` under the observation's `block_meta`, where the launch records
    what autotune or heuristics chose instead), each recorded launch for a wrapper case (its kernel, grid and
    constexpr values, grader/judging/replay.py launch_meta)."""
    if observation.launches is None:
        ran = {**case.meta, **observation.block_meta}
        launches: tuple[dict[str, Any], ...] = ({"kernel": case.target, "grid": None, "meta": ran},)
    else:
        launches = launch_meta(observation.launches)
    return {**inputs, "_row_strides": dict(observation.row_strides), "_strides": dict(observation.strides),
            "_launches": launches}


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


def output_shape_problems(outputs: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor],
                          dtypes: Mapping[str, torch.dtype]) -> list[str]:
    problems = []
    for name, exp in expected.items():
        got = outputs.get(name)
        if got is None:
            problems.append(f"output `{name}` is missing")
            continue
        if tuple(got.shape) != tuple(exp.shape):
            problems.append(f"output `{name}` has shape {tuple(got.shape)}, expected {tuple(exp.shape)}")
        elif got.dtype != dtypes.get(name, torch.float32):
            problems.append(f"output `{name}` has dtype {got.dtype}, expected {dtypes.get(name, torch.float32)}")
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
