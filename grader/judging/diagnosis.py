"""Trap diagnosis: pure functions from (inputs, outputs, oracle, trap signatures) to named traps.

A failed case is attributed to every trap whose signature (the output that mistake would produce on
the same inputs) matches the student's output within tolerance where the correct oracle does not.
NaN leaking into an output where the oracle is finite, and that no matched signature explains, is an
out-of-bounds read (the guards are NaN).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from grader import trap_ids
from grader.authoring.problem import Signature, TrapFunction
from grader.authoring.spec import Tolerance
from grader.judging.compare import Comparison, close_mask

# "precision" (no known mistake fits) only where rounding could have made the error: every failing output within
# PRECISION_FACTOR times its tolerance at its worst element, and no NaN/inf disagreement; beyond it, "unknown".
# Each tolerance is the worst error of a correct kernel's own roundings (every profile's `why`; a correct attention
# kernel stays under half of it). Rounding more than that, with the formula right, is one notch coarser: another
# summation order, approximate exp, or an intermediate one format down, e.g. attention's p rounded to bfloat16
# instead of float16 (2^-8 against 2^-11 relative per weight: 8x the float16 tolerance, which is made of that
# rounding). 10x holds that. A formula is further off: attention normalising by the running sum in every key block
# is 15x to 440x its tolerance on 9 of the 10 cases it fails (a student's was called `precision` at 99x; 4.5x where
# the last key block holds nearly all the weight). The cost: a kernel that keeps an intermediate in float16 under a
# float32 profile (1e-5: 2^-11 relative is ~50x) is `unknown`, not `precision`.
PRECISION_FACTOR = 10.0
# A band signature that constrains no position at all is evidence only if it demands at least this
# deviation from the oracle (otherwise it would match any failure on such inputs).
MIN_UNCONSTRAINED_DEVIATION = 0.01


@dataclass(frozen=True)
class TrapMatch:
    trap: str
    signature: Signature


def as_signatures(value: Any) -> list[Signature]:
    if value is None:
        return []
    if isinstance(value, Signature):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in as_signatures(v)]
    return [Signature(outputs=dict(value))]


def signature_matches(
    sig: Signature,
    outputs: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    tol: Tolerance,
    unwritten: Mapping[str, torch.Tensor] | None = None,
) -> bool:
    """True when every output the signature predicts agrees with the student's output on every defined
    position (within tolerance plus the signature's slack), and it accounts for at least one of the
    elements where the student's output fails the oracle."""
    if sig.predicate is not None:
        if unwritten and any(bool(mask.any()) for mask in unwritten.values()):
            return False  # a property of outputs the kernel did not fully write is no evidence
        try:
            return bool(sig.predicate(outputs))
        except (KeyError, RuntimeError, ValueError, IndexError):
            return False
    compared = 0
    explained = 0
    deviation = 0.0
    for name, predicted in sig.outputs.items():
        actual = outputs.get(name)
        if actual is None or tuple(actual.shape) != tuple(predicted.shape):
            return False
        ok = close_mask(actual, predicted, tol.atol, tol.rtol)
        if unwritten and name in unwritten:
            ok = ok & ~unwritten[name]  # never-written elements are no evidence for a formula
        if name in sig.slack:
            band = (actual.to(torch.float64) - predicted).abs() <= sig.slack[name] + tol.atol
            ok = ok | band
            if name in expected:
                dev = (actual.to(torch.float64) - expected[name]).abs()
                dev = torch.where(torch.isnan(dev), torch.full_like(dev, float("inf")), dev)
                if unwritten and name in unwritten:
                    dev = torch.where(unwritten[name], torch.zeros_like(dev), dev)
                deviation = max(deviation, float(dev.max()))
        undefined = sig.undefined.get(name)
        if name in sig.unconstrained:
            undefined = sig.unconstrained[name] if undefined is None else (undefined | sig.unconstrained[name])
        defined = ~undefined if undefined is not None else torch.ones_like(ok)
        if name in expected and tuple(expected[name].shape) == tuple(actual.shape):
            failing = ~close_mask(actual, expected[name], tol.atol, tol.rtol)
        else:
            failing = torch.ones_like(ok)  # no oracle for this output: nothing contradicts the trap
        explained += int((failing & ok & defined).sum())
        if undefined is not None:
            ok = ok | undefined
        compared += int(defined.sum())
        if not bool(ok.all()):
            return False
    if sig.slack and deviation < sig.min_deviation:
        return False
    # The signature must account for at least one element the oracle rejects, at a position it
    # constrains; a band that constrains nothing is evidence only through its min_deviation.
    enough = explained > 0 or (compared == 0 and bool(sig.slack) and sig.min_deviation >= MIN_UNCONSTRAINED_DEVIATION)
    return enough and distinguishable(sig, expected, tol)


def distinguishable(sig: Signature, expected: Mapping[str, torch.Tensor], tol: Tolerance) -> bool:
    """A signature is evidence only where it predicts something the correct oracle does not: some
    compared position lies outside the oracle's tolerance (plus the signature's slack), or, for a band
    centred on the truth, it demands a deviation (`min_deviation`) the correct output never shows."""
    if sig.slack and sig.min_deviation > 0:
        return True
    for name, predicted in sig.outputs.items():
        exp = expected.get(name)
        if exp is None or tuple(exp.shape) != tuple(predicted.shape):
            return True
        near = close_mask(predicted, exp, tol.atol, tol.rtol)
        if name in sig.slack:
            near = near | ((predicted - exp).abs() <= sig.slack[name] + tol.atol)
        skip = sig.undefined.get(name)
        if name in sig.unconstrained:
            skip = sig.unconstrained[name] if skip is None else (skip | sig.unconstrained[name])
        if skip is not None:
            near = near | skip
        if not bool(near.all()):
            return True
    return False


def explain_away(case_traps: list[tuple[str, ...]], formula_traps: set[str]) -> list[tuple[str, ...]]:
    """Across one submission's cases: where a case matches several formula traps (an input on which those
    mistakes coincide), keep the ones confirmed elsewhere and drop the rest. A trap is confirmed when some other
    case names it alone (N = 1, where 0/0 is NaN under several mistakes), or when every failed case names it:
    one mistake then explains the whole submission, and the traps that fit only some cases fit where they
    coincide with it (exp2 without log2 e on all-zero queries: every score is 0, so the output is right and the
    lse is log2(N_KV), which two lse traps predict as well). A passed case (no trap) counts for neither.
    Structural traps are never removed."""
    formulas = [[t for t in traps if t in formula_traps] for traps in case_traps]
    confirmed = {formula[0] for formula in formulas if len(formula) == 1}
    failed = [set(formula) for traps, formula in zip(case_traps, formulas, strict=True) if traps]
    if failed:
        confirmed |= set.intersection(*failed)
    out = []
    for traps, formula in zip(case_traps, formulas, strict=True):
        keep = [t for t in formula if t in confirmed]
        if len(formula) > 1 and keep:
            traps = tuple(t for t in traps if t not in formula_traps or t in confirmed)
        out.append(traps)
    return out


def match_traps(
    traps: Mapping[str, TrapFunction],
    inputs: Mapping[str, Any],
    outputs: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    tol: Tolerance,
    unwritten: Mapping[str, torch.Tensor] | None = None,
) -> list[TrapMatch]:
    matches = []
    for trap_id, signature_fn in traps.items():
        for sig in as_signatures(signature_fn(inputs)):
            if signature_matches(sig, outputs, expected, tol, unwritten):
                matches.append(TrapMatch(trap_id, sig))
                break
    return matches


def nan_leaks(
    outputs: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    unwritten: Mapping[str, torch.Tensor],
) -> dict[str, torch.Tensor]:
    """Per output: True where the student's value is NaN, the oracle's is not, and the element was
    written (unwritten poison is reported separately)."""
    leaks = {}
    for name, actual in outputs.items():
        if name not in expected or tuple(actual.shape) != tuple(expected[name].shape):
            continue
        leak = torch.isnan(actual.to(torch.float64)) & ~torch.isnan(expected[name])
        if name in unwritten:
            leak &= ~unwritten[name]
        if leak.any():
            leaks[name] = leak
    return leaks


def inherit_kernel_traps(
    case_traps: list[tuple[str, ...]], case_problems: list[tuple[str, bool]], structural: set[str]
) -> list[tuple[str, ...]]:
    """A wrapper case that failed without a named cause (`unknown`/`precision`) in a submission whose
    kernel for the same problem has structural findings (out-of-bounds, unwritten) inherits them:
    the wrapper launches that kernel, on an output it allocated itself, where the grader has no
    guards; a passed case (no trap) inherits nothing. `case_problems` gives each case's (problem, is_wrapper).

    Out-of-bounds writes race: a program storing past its row overwrites a neighbour's elements,
    and on a GPU which store lands last changes from run to run. So `nondeterministic` is no cause
    of its own in a case that writes out of bounds, or in a wrapper whose kernel does."""
    found: dict[str, list[str]] = {}
    for traps, (problem, is_wrapper) in zip(case_traps, case_problems, strict=True):
        if not is_wrapper:
            for t in traps:
                if t in structural and t not in found.setdefault(problem, []):
                    found[problem].append(t)
    out = []
    for traps, (problem, is_wrapper) in zip(case_traps, case_problems, strict=True):
        if not traps:  # a passed case: nothing to explain, so it carries no trap of its kernel's
            out.append(traps)
            continue
        inherited = found.get(problem, []) if is_wrapper else []
        if RACING_WRITE in traps or RACING_WRITE in inherited:
            traps = tuple(t for t in traps if t != RACE) or (() if RACING_WRITE in traps else (trap_ids.UNKNOWN,))
        vague = set(traps) <= {trap_ids.UNKNOWN, trap_ids.PRECISION} and traps
        if vague and inherited:
            traps = tuple(inherited)
        out.append(traps)
    return out


RACING_WRITE = trap_ids.OOB_WRITE
RACE = trap_ids.NONDETERMINISTIC
INTERPRETER_LIMIT = trap_ids.INTERPRETER_UNSUPPORTED


def refute_interpreter_limits(case_traps: list[tuple[str, ...]], case_problems: list[str],
                              compiles: Mapping[str, bool]) -> list[tuple[str, ...]]:
    """A case that failed on a limit of Triton's CPU interpreter keeps `interpreter-unsupported` unless the
    GPU compile check of its problem's kernels failed (`compiles[problem]` False): code the grading GPU
    rejects as well is the code's problem, a `runtime-error`. A problem without a compile check keeps it."""
    out = []
    for traps, problem in zip(case_traps, case_problems, strict=True):
        if INTERPRETER_LIMIT in traps and compiles.get(problem, True) is False:
            traps = tuple(dict.fromkeys(trap_ids.RUNTIME_ERROR if t == INTERPRETER_LIMIT else t for t in traps))
        out.append(traps)
    return out


def classify_unmatched(comparisons: list[Comparison]) -> str:
    """'precision' when every failing output is off by no more than rounding can do (PRECISION_FACTOR times its
    tolerance at its worst element, every NaN and inf where the oracle has it), otherwise 'unknown'."""
    for c in comparisons:
        if c.ok:
            continue
        if c.nan_mismatches or c.inf_mismatches or c.worst_actual is None or c.worst_expected is None:
            return trap_ids.UNKNOWN
        allowed = c.atol + c.rtol * abs(c.worst_expected)
        if abs(c.worst_actual - c.worst_expected) > PRECISION_FACTOR * allowed:
            return trap_ids.UNKNOWN
    return trap_ids.PRECISION


def locate(mask: torch.Tensor, block_meta: Mapping[str, int]) -> dict[str, Any]:
    """Where the wrong elements of one output are: fraction, rows/columns, and block tiles."""
    total = mask.numel()
    wrong = int(mask.sum())
    where: dict[str, Any] = {"wrong": wrong, "total": total, "fraction": wrong / total if total else 0.0}
    if wrong == 0:
        return where
    if mask.dim() == 2:
        rows = torch.nonzero(mask.any(dim=1)).flatten().tolist()
        cols = torch.nonzero(mask.any(dim=0)).flatten().tolist()
        where["rows"] = _ranges(rows, mask.shape[0])
        where["cols"] = _ranges(cols, mask.shape[1])
        bm, bn = block_meta.get("BLOCK_M"), block_meta.get("BLOCK_N")
        if bm and bn:
            tiles = sorted({(r // bm, c // bn) for r, c in torch.nonzero(mask).tolist()})
            where["tiles"] = [list(t) for t in tiles[:64]]
            where["tile_shape"] = [bm, bn]
    elif mask.dim() > 2:
        # (B, H, N, D) and the like: which leading slices hold a wrong element, then the rows and columns
        # of the last two dimensions wrong in any of them (no tiles: the launch's blocks need not tile them).
        slices = mask.flatten(0, -3)
        bad = torch.nonzero(slices.flatten(1).any(dim=1)).flatten()
        lead = torch.stack(torch.unravel_index(bad, tuple(mask.shape[:-2])), dim=1).tolist()
        where["slices"] = [list(index) for index in lead[:16]]
        where["slices_wrong"] = len(lead)
        where["slices_total"] = slices.shape[0]
        union = slices.any(dim=0)
        where["rows"] = _ranges(torch.nonzero(union.any(dim=1)).flatten().tolist(), union.shape[0])
        where["cols"] = _ranges(torch.nonzero(union.any(dim=0)).flatten().tolist(), union.shape[1])
    else:
        where["indices"] = _ranges(torch.nonzero(mask).flatten().tolist(), mask.shape[0])
    return where


def _ranges(indices: list[int], length: int) -> str:
    if len(indices) == length:
        return f"all {length}"
    spans = []
    start = prev = indices[0]
    for i in indices[1:]:
        if i == prev + 1:
            prev = i
            continue
        spans.append((start, prev))
        start = prev = i
    spans.append((start, prev))
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:8])
    if len(spans) > 8:
        text += ", ..."
    return f"{text} (of {length})"
