"""grader/operations/margins.py: a case decides each predicted mistake by the bug, never by the draw.

The course's own assignments are audited at many seeds (every (case, trap) pair EXPOSES or HIDES with room to
spare, on both backends' tolerances): the held-out students' mistakes are these traps, written their own way, so a
pair that depends on the draw would move some student's score with the seed. The margin arithmetic and the
verdicts are tested on small tensors, and the audit is shown to catch a case that depends on the draw.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from grader.authoring.spec import Tolerance, load_assignment
from grader.cli import main
from grader.operations.margins import DEPENDS, EXPOSES, HIDES, Margin, audit, format_margins, worst_margin

ROOT = Path(__file__).resolve().parents[2]
TOL = Tolerance(atol=1e-5, rtol=1e-5, why="test")
SEEDS = range(1000, 1024)  # none of the seeds the suite grades at


def test_worst_margin_is_the_judges_rule() -> None:
    expected = {"out": torch.tensor([1.0, 0.0, -2.0], dtype=torch.float64)}
    # element 0: 3e-5 off against 1e-5 + 1e-5 * 1 = 2e-5 -> 1.5; element 2: 1e-5 off against 3e-5 -> 0.33
    predicted = {"out": torch.tensor([1.0 + 3e-5, 0.0, -2.0 + 1e-5], dtype=torch.float64)}
    assert worst_margin(predicted, expected, TOL) == pytest.approx(1.5)
    undefined = {"out": torch.tensor([True, False, False])}
    assert worst_margin(predicted, expected, TOL, undefined) == pytest.approx(1 / 3)
    nan = {"out": torch.tensor([1.0, float("nan"), -2.0], dtype=torch.float64)}
    assert worst_margin(nan, expected, TOL) == math.inf
    both_nan = {"out": torch.tensor([float("nan")], dtype=torch.float64)}
    assert worst_margin(both_nan, both_nan, TOL) == 0.0


def test_a_rounding_band_widens_the_margin_both_ways() -> None:
    expected = {"out": torch.tensor([0.0], dtype=torch.float64)}
    predicted = {"out": torch.tensor([2e-5], dtype=torch.float64)}
    slack = {"out": torch.tensor([1.5e-5], dtype=torch.float64)}
    assert worst_margin(predicted, expected, TOL, slack=slack, sign=-1.0) == pytest.approx(0.5)
    assert worst_margin(predicted, expected, TOL, slack=slack, sign=1.0) == pytest.approx(3.5)
    margin = Margin("c", "t", "interpreter", (2.0, 2.0), lowest=(0.5, 0.5), highest=(3.5, 3.5))
    assert margin.verdict == EXPOSES and margin.rounding


@pytest.mark.parametrize(("margins", "verdict"), [
    ((2.0, 5.0, math.inf), EXPOSES), ((0.0, 0.5, 0.1), HIDES), ((0.3, 1.2), DEPENDS), ((1.5, 3.0), DEPENDS),
    ((0.6, 0.4), DEPENDS),
])
def test_verdicts_need_room_to_spare(margins: tuple[float, ...], verdict: str) -> None:
    assert Margin("case", "trap", "interpreter", margins).verdict == verdict


@pytest.mark.parametrize("assignment", ["attention", "fused_layers", "softmax"])
@pytest.mark.parametrize("backend", ["interpreter", "cuda"])
def test_every_case_decides_every_predicted_mistake_by_the_bug(assignment: str, backend: str) -> None:
    spec = load_assignment(ROOT / "assignments" / assignment / "assignment.toml")
    margins = audit(spec, backend, SEEDS)
    assert margins and all(m.margins or m.band for m in margins)
    depends = [m for m in margins if m.verdict == DEPENDS]
    assert not depends, format_margins(depends)
    assert {m.verdict for m in margins} >= {EXPOSES, HIDES}  # the audit did place the traps


def test_the_audit_catches_a_case_that_depends_on_the_draw() -> None:
    """fused_layers' 1x1x1 matmul case with its bias drawn like the others (as it was): the one output lands where
    tanh-GELU and erf-GELU agree at some seeds and not at others."""
    spec = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    (case,) = [c for c in spec.cases if c.id == "linear-kernel-1x1x1"]
    from grader.authoring.oracle_loader import load_problems
    from grader.operations.margins import case_margins

    problem = load_problems(spec)["linear_gelu"]

    def undecided_inputs(case_: object, maker: object) -> dict[str, object]:
        inputs = problem.make_inputs(case_, maker)  # type: ignore[arg-type]
        layer = inputs["layer"]
        with torch.no_grad():
            layer.bias.uniform_(-0.2, 0.2, generator=maker.generator)  # type: ignore[attr-defined]
        return {**inputs, "bias": layer.bias.detach()}

    weakened = dataclasses.replace(problem, make_inputs=undecided_inputs)
    (tanh,) = [m for m in case_margins(case, spec, weakened, "interpreter", SEEDS) if m.trap == "gelu-tanh"]
    assert tanh.verdict == DEPENDS, tanh.describe()


def test_the_command_exits_1_only_when_a_pair_depends(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--assignments", str(ROOT / "assignments"), "margins", "--assignment", "softmax", "--seeds", "4",
                 "--backend", "interpreter"])
    printed = capsys.readouterr().out
    assert code == 0 and "0 of" in printed and "decided by the bug" in printed
