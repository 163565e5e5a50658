"""grader/authoring/problem.py: the pieces an oracle module builds a Problem from (frozen data)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from grader.authoring.oracle_loader import load_problems
from grader.authoring.problem import Baseline, In, Out, Problem, Signature, Stride
from grader.authoring.spec import load_assignment
from tests.conftest import ROOT


def test_defaults_and_frozen() -> None:
    assert (In("x").transpose, Out("out", (4,)).like, Out("out", (4,)).dtype) == (False, None, torch.float32)
    signature = Signature({"out": torch.zeros(2)})
    assert (dict(signature.undefined), signature.min_deviation, signature.predicate) == ({}, 0.0, None)
    baseline = Baseline("F.layer_norm", run=lambda inputs: None)
    assert (baseline.outputs, baseline.bytes_moved, baseline.flops, baseline.tf32) == (("out",), None, None, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Stride("x_ptr", 0).dim = 1  # type: ignore[misc]


def test_the_shipped_problems_bind_every_target() -> None:
    for assignment_id in ("attention", "fused_layers", "softmax"):
        assignment = load_assignment(ROOT / "assignments" / assignment_id / "assignment.toml")
        problems = load_problems(assignment)
        assert all(isinstance(p, Problem) for p in problems.values())
        for name, kernel in assignment.kernels.items():
            assert problems[kernel.problem].kernel_args is not None, name
        for name, function in assignment.functions.items():
            assert problems[function.problem].call_args is not None, name
