"""grader/publishing/prairielearn.py: PrairieLearn's external-grader results, against its documented shape:
score in [0, 1], never NaN, and only what Gradescope shows before the due date: hidden cases as a count."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.publishing.gradescope import results_json
from grader.publishing.prairielearn import prairielearn_json
from grader.results import PerformanceResult
from tests.publishing.lms_results import case, result

# https://prairielearn.readthedocs.io/en/latest/externalGrading/ ("Grading results"): top-level keys and
# per-test keys with their JSON types.
PL_TOP = {"gradable": bool, "score": float, "message": str, "output": str, "tests": list}
PL_TEST = {"name": str, "description": str, "points": float, "max_points": float, "message": str, "output": str}


def assert_prairielearn_shape(doc: dict[str, Any]) -> None:
    assert set(doc) == set(PL_TOP)
    for key, kind in PL_TOP.items():
        assert isinstance(doc[key], kind), key
    assert 0.0 <= doc["score"] <= 1.0
    for test in doc["tests"]:
        assert set(test) == set(PL_TEST)
        for key, kind in PL_TEST.items():
            assert isinstance(test[key], kind), (key, test)
        assert 0.0 <= test["points"] <= test["max_points"]

@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_prairielearn_results_shape_and_score(assignment: Assignment) -> None:
    perf = PerformanceResult(perf_id="ln_big", target="layernorm", title="layernorm: big", dims={"M": 8},
                             dtype="float32", status="timed", score=1.0, max_score=2.0)
    graded = result(case("public_ok", "public", 2.0, 2.0),
                    case("hidden_bad", "hidden", 0.0, 4.0, ("eps-outside-sqrt",)), performance=(perf,))
    doc = prairielearn_json(graded, assignment, "# report")
    assert_prairielearn_shape(doc)
    json.dumps(doc, allow_nan=False)
    assert doc["gradable"] is True
    assert doc["score"] == pytest.approx(3.0 / 8.0)  # the full grade: what PrairieLearn records
    public, timed = doc["tests"]
    assert (public["points"], public["max_points"], public["output"]) == (2.0, 2.0, "details of public_ok")
    assert timed["name"] == "performance layernorm: big" and timed["max_points"] == 2.0


@pytest.mark.parametrize("visibility", ["after_due_date", "after_published", "hidden"])
def test_prairielearn_shows_what_gradescope_shows_before_the_due_date(assignment: Assignment,
                                                                      visibility: str) -> None:
    """PrairieLearn shows everything at once: public cases in full, hidden ones only as a count with their points,
    and no trap that only hidden cases exposed (the same rule as results.json's visible top level)."""
    spec = dataclasses.replace(assignment, hidden_visibility=visibility)
    graded = result(case("public_bad", "public", 0.0, 2.0, ("bias-wrong-axis",)),
                    case("hidden_bad", "hidden", 0.0, 4.0, ("eps-outside-sqrt",)),
                    case("hidden_ok", "hidden", 3.0, 3.0))
    doc = prairielearn_json(graded, spec, "# report")
    assert_prairielearn_shape(doc)
    text = json.dumps(doc)
    for secret in ("hidden_bad", "hidden_ok", "eps-outside-sqrt", "details of hidden"):
        assert secret not in text, secret
    (public,) = doc["tests"]
    assert (public["description"], public["message"]) == ("public case public_bad", "failed: bias-wrong-axis")
    assert doc["message"] == "3 / 9 points; traps: bias-wrong-axis; 2 hidden cases worth 7 points"
    gradescope = results_json(graded, spec, "# report")["extra_data"]
    assert gradescope["traps"] == ["bias-wrong-axis"] and gradescope["hidden_cases"] == {"count": 2, "points": 7.0}


def test_prairielearn_score_without_points_is_zero_not_nan(assignment: Assignment) -> None:
    doc = prairielearn_json(result(), assignment, "")
    assert doc["score"] == 0.0 and doc["gradable"] is False
