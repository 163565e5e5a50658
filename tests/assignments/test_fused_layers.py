"""fused_layers trap signatures on float32 effects the CPU interpreter does not produce but a GPU does.

On the H200 the float32 mean of an exactly constant row can be an ulp or two off (sum/N rounds), so
x - mean is a tiny constant delta per row. The mistakes then show as: eps outside the sqrt ->
delta / (|delta| + eps); no eps -> +-1 (or NaN when delta = 0); the correct kernel -> delta / sqrt(eps).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch

from grader.authoring.inputs import InputMaker
from grader.authoring.spec import load_assignment
from grader.judging.diagnosis import match_traps

ROOT = Path(__file__).resolve().parents[2]


def _oracles():
    path = ROOT / "assignments/fused_layers/oracles.py"
    spec = importlib.util.spec_from_file_location("fused_layers_oracles_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _constant_case():
    assignment = load_assignment(ROOT / "assignments/fused_layers/assignment.toml")
    case = assignment.case("ln-kernel-constant")
    tol = assignment.tolerances[case.tolerance].lookup("cuda", "float32")
    return case, tol


def _outputs_with_mean_off_by_ulps(inputs, denominator) -> dict[str, torch.Tensor]:
    x = inputs["x"].double()
    g, b = inputs["weight"].double(), inputs["bias"].double()
    c = x[:, :1]
    delta = 2 * (2.0**-24) * 2 * c.abs()  # two ulps of the row's value
    return {"out": (delta / denominator(delta) * g + b).expand_as(x).float()}


def test_eps_outside_sqrt_is_named_on_constant_rows_with_an_inexact_mean() -> None:
    oracles = _oracles()
    case, tol = _constant_case()
    inputs = oracles.layernorm_inputs(case, InputMaker(4))
    eps = inputs["eps"]
    expected = oracles.layernorm_expected(inputs)
    outputs = _outputs_with_mean_off_by_ulps(inputs, lambda d: d.abs() + eps)
    named = {m.trap for m in match_traps(oracles.PROBLEMS["layernorm"].traps, inputs, outputs, expected, tol)}
    assert named == {"eps-outside-sqrt"}


def test_eps_missing_is_named_and_the_correct_formula_is_not_mistaken() -> None:
    oracles = _oracles()
    case, tol = _constant_case()
    inputs = oracles.layernorm_inputs(case, InputMaker(4))
    eps = inputs["eps"]
    expected = oracles.layernorm_expected(inputs)
    traps = oracles.PROBLEMS["layernorm"].traps
    no_eps = _outputs_with_mean_off_by_ulps(inputs, lambda d: d.abs())
    assert {m.trap for m in match_traps(traps, inputs, no_eps, expected, tol)} == {"eps-missing"}
    correct = _outputs_with_mean_off_by_ulps(inputs, lambda d: torch.full_like(d, math.sqrt(eps)))
    assert match_traps(traps, inputs, correct, expected, tol) == []
