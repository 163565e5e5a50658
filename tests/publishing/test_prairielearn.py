"""grader/publishing/prairielearn.py: PrairieLearn's external-grader results, against its documented shape:
score in [0, 1], hidden cases without their details, never NaN."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grader.publishing.prairielearn import HIDDEN_MESSAGE, prairielearn_json
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

def test_prairielearn_results_shape_score_and_hidden_cases() -> None:
    perf = PerformanceResult(perf_id="ln_big", target="layernorm", title="layernorm: big", dims={"M": 8},
                             dtype="float32", status="timed", score=1.0, max_score=2.0)
    graded = result(case("public_ok", "public", 2.0, 2.0),
                    case("hidden_bad", "hidden", 0.0, 4.0, ("eps-outside-sqrt",)), performance=(perf,))
    doc = prairielearn_json(graded, "# report")
    assert_prairielearn_shape(doc)
    json.dumps(doc, allow_nan=False)
    assert doc["gradable"] is True
    assert doc["score"] == pytest.approx(3.0 / 8.0)
    public, hidden, timed = doc["tests"]
    assert (public["points"], public["max_points"], public["output"]) == (2.0, 2.0, "details of public_ok")
    assert (hidden["points"], hidden["max_points"], hidden["output"]) == (0.0, 4.0, HIDDEN_MESSAGE)
    assert "eps-outside-sqrt" not in json.dumps(hidden)
    assert timed["name"] == "performance layernorm: big" and timed["max_points"] == 2.0

def test_prairielearn_score_without_points_is_zero_not_nan() -> None:
    doc = prairielearn_json(result(), "")
    assert doc["score"] == 0.0 and doc["gradable"] is False
