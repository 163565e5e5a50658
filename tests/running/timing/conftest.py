"""Fixtures the timing tests share: fused_layers, its perf-layernorm case, and that case's key on an H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import Assignment, PerformanceCase, load_assignment
from grader.running.timing.calibration import CalibrationKey, calibration_key
from tests.running.timing.test_calibration import H200


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


@pytest.fixture(scope="module")
def perf(assignment: Assignment) -> PerformanceCase:
    (found,) = [p for p in assignment.performance if p.id == "perf-layernorm"]
    return found


@pytest.fixture(scope="module")
def key(assignment: Assignment, perf: PerformanceCase) -> CalibrationKey:
    return calibration_key(assignment, perf, load_problems(assignment), H200)
