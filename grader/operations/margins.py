"""Does a case's verdict depend on the draw? Every trap's predicted output against the case's tolerance, at many
seeds, without running a kernel: `grader margins --assignment ID [--seeds N] [--backend B]`.

A trap function predicts the output of one mistake from a case's inputs (the assignment's oracles). Its worst
element, |predicted - expected| over the case's allowance atol + rtol * |expected|, is the margin: above 1 the
mistake fails the case, below 1 it passes. A case decides a trap by the bug, not by the draw, when the margin stays
on one side of 1 at every seed, with room to spare (float32 rounding of a real kernel moves it a little):
`EXPOSES` (every seed >= MARGIN), `HIDES` (every seed <= 1 / MARGIN). Anything else is `DEPENDS`: some inputs
expose the mistake and others do not, so one student's score would move with the seed (the selftest at several
seeds sees the same, slowly). Predictions that are only a band (float32 cancellation) or a property
(`predicate`) cannot be placed: they are `BAND` and left to the selftest's mutants. Pure: no worker, no kernel.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader.authoring.inputs import case_maker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.problem import Problem, Signature
from grader.authoring.spec import Assignment, Case, Tolerance
from grader.judging.diagnosis import as_signatures
from grader.running.cases import arguments
from grader.running.cases.placement import launch_grid, place_buffers
from grader.seeds import case_seed

MARGIN = 2.0  # a decided case keeps its verdict with the error twice as large, or half as large
EXPOSES, HIDES, DEPENDS, BAND = "exposes", "hides", "DEPENDS", "band"


@dataclass(frozen=True)
class Margin:
    """One way a trap shows (`variant`: a trap function may predict several, one per choice a student can make, such
    as the chunk width) on one case of one backend: its margin at each seed (inf: a NaN or inf where a number
    belongs), and the edges of its rounding band where the prediction is good only to within one."""

    case_id: str
    trap: str
    backend: str
    margins: tuple[float, ...]  # per seed, the prediction's own margin
    band: bool = False  # the prediction is only a property, or a band it must stray beyond: not placed
    variant: int = 0  # which of the trap function's predictions
    variants: int = 1
    lowest: tuple[float, ...] = ()  # per seed: the least the rounding band allows
    highest: tuple[float, ...] = ()  # per seed: the most it allows

    @property
    def verdict(self) -> str:
        if self.band or not self.margins:
            return BAND
        if min(self.margins) >= MARGIN:
            return EXPOSES
        if max(self.margins) <= 1 / MARGIN:
            return HIDES
        return DEPENDS

    @property
    def rounding(self) -> bool:
        """float32 rounding (the band), not the draw, decides it at some seed: said, never a DEPENDS."""
        return bool(self.lowest and self.highest) and any(lo <= 1 < hi for lo, hi in zip(self.lowest, self.highest,
                                                                                          strict=True))

    def describe(self) -> str:
        name = self.trap if self.variants == 1 else f"{self.trap} ({self.variant + 1}/{self.variants})"
        if self.band or not self.margins:
            return f"{self.case_id:28} {name:28} {BAND}"
        low, high = min(self.margins), max(self.margins)
        flips = sum(m > 1 for m in self.margins)
        note = "; float32 rounding can decide it" if self.rounding else ""
        return (f"{self.case_id:28} {name:28} {self.verdict:8} margin {low:9.3g} .. {high:<9.3g} "
                f"(fails at {flips} of {len(self.margins)} seeds{note})")


def worst_margin(predicted: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], tol: Tolerance,
                 undefined: Mapping[str, torch.Tensor] | None = None,
                 slack: Mapping[str, torch.Tensor] | None = None, sign: float = 0.0) -> float:
    """Pure: the largest |predicted - expected| / (atol + rtol |expected|) over the compared elements (the judge's
    rule, grader.judging.compare.close_mask); inf where one is NaN or infinite and the other is not. With `slack`
    (a prediction good to within a band), `sign` -1 takes the least the band allows, +1 the most."""
    worst = 0.0
    for name, exp in expected.items():
        got = predicted.get(name)
        if got is None or tuple(got.shape) != tuple(exp.shape):
            continue
        a, e = got.detach().to(torch.float64), exp.detach().to(torch.float64)
        compared = torch.ones_like(e, dtype=torch.bool)
        if undefined and name in undefined:
            compared &= ~undefined[name].to(torch.bool)
        both_nan = torch.isnan(a) & torch.isnan(e)
        same_inf = torch.isinf(a) & torch.isinf(e) & (a == e)
        finite = torch.isfinite(a) & torch.isfinite(e)
        if bool((compared & ~finite & ~both_nan & ~same_inf).any()):
            return math.inf
        distance = (a - e).abs()
        if slack and name in slack and sign:
            distance = (distance + sign * slack[name].to(torch.float64)).clamp(min=0.0)
        ratio = distance / (tol.atol + tol.rtol * e.abs())
        ratio = torch.where(compared & finite, ratio, torch.zeros_like(ratio))
        if ratio.numel():
            worst = max(worst, float(ratio.max()))
    return worst


def trap_inputs(case: Case, assignment: Assignment, problem: Problem, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The case's inputs as the judge gives them to trap functions: `_row_strides` as the battery places the
    inputs (grader.running.cases.placement), `_launches` the case's own launch for a kernel case; a wrapper's
    launches are the reference's choice (none recorded here)."""
    spec = assignment.kernels.get(case.target)
    if spec is not None:
        binding = arguments.kernel_binding(problem, inputs)
        placed = place_buffers(case, arguments.kernel_buffers(binding), inputs,
                               grid=launch_grid(spec, binding, case))
        launches: tuple[dict[str, Any], ...] = ({"kernel": case.target, "grid": None, "meta": dict(case.meta)},)
    else:
        args, kwargs = arguments.call_binding(problem, inputs)
        placed = place_buffers(case, list(arguments.call_buffers(args, kwargs)), inputs)
        launches = ()
    return {**inputs, "_row_strides": placed.row_strides(), "_strides": placed.strides(), "_launches": launches}


def case_margins(case: Case, assignment: Assignment, problem: Problem, backend: str,
                 seeds: Sequence[int]) -> list[Margin]:
    """Every trap of the case's problem, each of its predictions on its own, on the case's inputs at each seed."""
    tol = assignment.tolerances[case.tolerance].lookup(backend, case.dtype)
    found: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    counts: dict[str, int] = {}
    band: set[str] = set()
    for seed in seeds:
        inputs = problem.make_inputs(case, case_maker(case, case_seed(seed, case.id)))
        expected = problem.expected(inputs)
        given = trap_inputs(case, assignment, problem, inputs)
        for trap, function in problem.traps.items():
            predicted = as_signatures(function(given))
            placed = [s for s in predicted if _placeable(s)]
            if predicted and not placed:
                band.add(trap)
            counts[trap] = max(counts.get(trap, 0), len(placed))
            for index, sig in enumerate(placed):
                centre, low, high = (worst_margin(sig.outputs, expected, tol, sig.undefined, sig.slack, sign)
                                     for sign in (0.0, -1.0, 1.0))
                found.setdefault((trap, index), []).append((centre, low, high))
    out = []
    for trap in problem.traps:
        if counts.get(trap, 0) == 0:
            if trap in band:
                out.append(Margin(case.id, trap, backend, (), band=True))
            continue
        for index in range(counts[trap]):
            rows = found.get((trap, index), [])
            if len(rows) != len(seeds):  # a prediction some draws do not make: not comparable seed to seed
                continue
            out.append(Margin(case.id, trap, backend, tuple(r[0] for r in rows), variant=index,
                              variants=counts[trap], lowest=tuple(r[1] for r in rows),
                              highest=tuple(r[2] for r in rows)))
    return out


def _placeable(signature: Signature) -> bool:
    """A prediction of values (with or without a rounding band); not a property, and not a band so wide that the
    signature must demand a minimum deviation to mean anything (float32 cancellation)."""
    return signature.predicate is None and not signature.min_deviation and bool(signature.outputs)


def audit(assignment: Assignment, backend: str, seeds: Iterable[int]) -> list[Margin]:
    """Every case of `backend` against every trap its problem predicts, at each seed."""
    problems = load_problems(assignment)
    order = tuple(seeds)
    out: list[Margin] = []
    for case in assignment.cases_for(backend):
        spec = assignment.kernels.get(case.target) or assignment.functions[case.target]
        out.extend(case_margins(case, assignment, problems[spec.problem], backend, order))
    return out


def format_margins(margins: Sequence[Margin], everything: bool = False) -> str:
    """The cases whose verdict depends on the draw first, then (with `everything`) the rest."""
    shown = [m for m in margins if everything or m.verdict == DEPENDS]
    depends = sum(m.verdict == DEPENDS for m in margins)
    lines = [m.describe() for m in sorted(shown, key=lambda m: (m.verdict != DEPENDS, m.case_id, m.trap))]
    lines.append(f"{depends} of {len(margins)} (case, trap) pairs depend on the draw"
                 + ("" if depends else ": every predicted mistake is decided by the bug"))
    return "\n".join(lines)
