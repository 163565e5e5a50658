"""The spec model (grader/authoring/spec_model.py), on hand-made dataclasses: an assignment's targets, score
and cases per backend; a tolerance profile's lookup; a performance case's points, shape and the correctness
case it is checked as."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.spec_model import (
    BACKENDS,
    Assignment,
    Case,
    FunctionSpec,
    KernelSpec,
    PerformanceCase,
    Threshold,
    Tolerance,
    ToleranceProfile,
)


def case(case_id: str, visibility: str = "public", points: float = 1.0, backends: tuple[str, ...] = BACKENDS) -> Case:
    return Case(id=case_id, target="copy", dims={"N": 10}, kind="random", points=points, visibility=visibility,
                tolerance="exact", backends=backends)


def assignment(*cases: Case) -> Assignment:
    root = Path("/course/assignments/tiny")
    return Assignment(
        id="tiny", title="Tiny", root=root, spec_path=root / "assignment.toml", module="oracles.py",
        submission_file="tiny.py",
        kernels={"copy_kernel": KernelSpec("copy_kernel", ("x_ptr", "N", "BLOCK"), ("BLOCK",), ("N",), "copy")},
        functions={"copy": FunctionSpec("copy", ("x",), ("out",), "copy", max_launches=1)},
        cases=cases, tolerances={}, traps={}, call_timeout_s=60.0, import_timeout_s=60.0,
        hidden_visibility="after_due_date")


def test_an_assignment_s_targets_score_and_cases() -> None:
    a = assignment(case("p"), case("h", "hidden", 2.0), case("cpu", points=0.5, backends=("interpreter",)))
    assert a.targets == a.required_symbols == ("copy_kernel", "copy")  # kernels first
    assert a.max_score == 3.5 and a.course_root == Path("/course")
    assert [c.id for c in a.cases_for("cuda")] == ["p", "h"]
    assert [c.id for c in a.cases_for("interpreter", public_only=True)] == ["p", "cpu"]
    assert a.case("h").points == 2.0 and not a.case("h").is_public and a.case("p").is_public
    with pytest.raises(KeyError):
        a.case("nope")


def test_a_tolerance_profile_names_what_it_lacks() -> None:
    exact = Tolerance(0.0, 0.0, "exact")
    profile = ToleranceProfile("matmul", {("cuda", "float32"): exact})
    assert profile.lookup("cuda", "float32") is exact
    with pytest.raises(KeyError, match="tolerance profile 'matmul' has no entry for interpreter.float16"):
        profile.lookup("interpreter", "float16")


def test_a_performance_case_s_points_shape_and_correctness_case() -> None:
    perf = PerformanceCase(id="perf", target="copy", dims={"M": 4096, "N": 1024}, tolerance="exact",
                           meta={"BLOCK": 64}, thresholds=(Threshold(0.5, 1.0), Threshold(0.8, 2.5)),
                           description="big")
    assert perf.max_score == 2.5 and perf.shape == "4096x1024"
    assert PerformanceCase(id="info", target="copy", dims={"N": 1}, tolerance="exact").max_score == 0.0
    checked = perf.as_case()
    assert (checked.id, checked.target, checked.dims, checked.meta, checked.kind) == (
        "perf", "copy", {"M": 4096, "N": 1024}, {"BLOCK": 64}, "random")
    assert (checked.points, checked.visibility, checked.backends, checked.description) == (0.0, "public", ("cuda",),
                                                                                           "big")
    assert checked.runs_on("cuda") and not checked.runs_on("interpreter")
