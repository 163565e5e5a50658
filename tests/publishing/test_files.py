"""grader/publishing/files.py: one grade's files, each written atomically: results.json (the student view),
grade.json (the results model), the reports, pytest's own record as written, prairielearn.json on request."""

from __future__ import annotations

import json
from pathlib import Path

from grader.authoring.spec import load_assignment
from grader.publishing.files import write_outputs
from grader.results import CaseResult, GradeResult
from tests.conftest import ROOT

RECORD = '{"created": 1, "tests": []}'


def test_every_file_of_a_grade(tmp_path: Path) -> None:
    assignment = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    case = assignment.cases[0]
    result = GradeResult("softmax", "softmax.py", "interpreter", 3, {}, (
        CaseResult(case.id, case.target, f"{case.target}: {case.description}", case.visibility, case.points, 0.0,
                   False, "Failed: wrong", ("no-max-subtraction",)),), 1.0)
    write_outputs(tmp_path / "out", result, assignment, RECORD)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["grade.json", "pytest-report.json", "report.html", "report.md",
                                                      "results.json"]
    assert (out / "pytest-report.json").read_text(encoding="utf-8") == RECORD  # as written, never re-parsed
    assert GradeResult.from_dict(json.loads((out / "grade.json").read_text(encoding="utf-8"))) == result
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 0.0 and results["tests"][0]["extra_data"]["case_id"] == case.id
    assert "Row max not subtracted" in (out / "report.md").read_text(encoding="utf-8")
    write_outputs(tmp_path / "pl", result, assignment, RECORD, prairielearn=True)
    assert json.loads((tmp_path / "pl" / "prairielearn.json").read_text(encoding="utf-8"))["gradable"] is True
