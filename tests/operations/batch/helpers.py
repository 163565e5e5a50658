"""Batch grading without grading (fast): finding submissions in every layout, the manifest rules,
committing results, the gradebook files and the class statistics, on hand-made results.

The end-to-end batches (real grades, 1 and 2 workers, Ray, the kill test, chromium) are in
tests/e2e/test_batch_grading.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.operations import batch
from grader.publishing.gradebook import (
    Gradebook,
    Student,
    graded_row,
    ungraded_row,
)
from grader.results import CaseResult, GradeResult

SUBMISSION_FILE = "fused_layers.py"

METADATA = """\
submission_101:
  :submitters:
  - :name: Ada Lovelace
    :sid: '100'
    :email: ada@example.edu
  :created_at: 2026-11-01 10:00:00.000000000 Z
  :score: 12.0
submission_102:
  :submitters:
  - :name: "Pair One"
    :sid: '200'
    :email: one@example.edu
  - :name: Pair O'Two
    :sid: '201'
    :email: two@example.edu
  :history:
  - :owners:
    - :name: Not A Submitter
submission_103:
  :submitters:
  - :name: '=HYPERLINK("x")'
"""


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def write(path: Path, text: str = "x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def ids(submissions: list[batch.Submission]) -> list[str]:
    return [s.id for s in submissions]


# ------------------------------------------------------------------------------------------- layouts


# ------------------------------------------------------------------------------------------- manifest, commit


def fake_result(student: str, passed: dict[str, bool], traps: dict[str, tuple[str, ...]] | None = None,
                seconds: float = 1.0) -> GradeResult:
    traps = traps or {}
    cases = tuple(
        CaseResult(case_id=cid, target=cid.split("-")[0], title=cid, visibility="public", max_score=2.0,
                   score=2.0 if ok else 0.0, passed=ok, message="", traps=traps.get(cid, ()))
        for cid, ok in passed.items()
    )
    return GradeResult(assignment="fused_layers", submission=SUBMISSION_FILE, backend="interpreter", seed=3,
                       versions={}, cases=cases, execution_time_s=seconds)


def outcome_files(result: GradeResult) -> dict[str, bytes]:
    return {"grade.json": json.dumps(result.to_dict()).encode(), "results.json": b'{"score": 0, "tests": []}'}


# ------------------------------------------------------------------------------------------- gradebook


def sample_book(assignment: Assignment) -> tuple[Gradebook, dict[str, GradeResult]]:
    results = {
        "ann": fake_result("ann", {"a-1": True, "a-2": True, "b-1": True}, seconds=3.0),
        "ben": fake_result("ben", {"a-1": False, "a-2": True, "b-1": False},
                           {"a-1": ("eps-missing",), "b-1": ("eps-missing", "oob-read")}, seconds=9.0),
        "cat": fake_result("cat", {"a-1": False, "a-2": False, "b-1": True},
                           {"a-1": ("timeout",), "a-2": ("timeout",)}, seconds=40.0),
    }
    record = {"finished_at": "2026-11-30T00:00:00+00:00", "device": "", "submission_sha256": "f" * 64}
    rows = [graded_row(Student(sid, name=f"=cmd|{sid}"), result, record) for sid, result in results.items()]
    failure = "-the grading process ended with exit code 1"
    rows.append(ungraded_row(Student("dee"), "error", 6.0, error=failure))
    rows.append(ungraded_row(Student("eve"), "no-submission", 6.0, error="no fused_layers.py"))
    book = Gradebook("fused_layers", "Fused layers", 6.0, {"a": 4.0, "b": 2.0}, tuple(rows),
                     "2026-11-30T00:00:00+00:00", 3, "interpreter")
    return book, results


# ------------------------------------------------------------------------------------------- GPUs


# ------------------------------------------------------------------------------------------- calibration


