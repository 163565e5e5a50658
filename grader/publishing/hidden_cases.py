"""What the student view may say of the hidden cases. It is built from the public part of a result
(`public_part`), so no hidden case's name, input, trap or score can reach it; the hidden cases are only
counted with their points (`hidden_summary`: "18 hidden cases worth 27 points: results after the due
date")."""

from __future__ import annotations

from dataclasses import dataclass, replace

from grader.authoring.spec import Assignment
from grader.results import GradeResult

# When a student sees the hidden cases' own results, per the spec's hidden_visibility (Gradescope's names).
HIDDEN_WHEN = {
    "after_due_date": "results after the due date",
    "after_published": "results when grades are published",
    "hidden": "results not shown",
}


@dataclass(frozen=True)
class HiddenSummary:
    """What the student view says of the hidden cases: how many, and their points (never their score)."""

    count: int
    points: float
    when: str

    @property
    def line(self) -> str:
        cases = "case" if self.count == 1 else "cases"
        points = "point" if self.points == 1 else "points"
        return f"{self.count} hidden {cases} worth {self.points:g} {points}: {self.when}"


def public_part(result: GradeResult) -> GradeResult:
    """Pure: the result without its hidden cases (performance cases stay: their shapes are public)."""
    return replace(result, cases=tuple(c for c in result.cases if c.visibility == "public"))


def hidden_summary(result: GradeResult, assignment: Assignment) -> HiddenSummary | None:
    """The count and points of the result's hidden cases; None when it has none."""
    hidden = [c for c in result.cases if c.visibility != "public" and c.max_score > 0]
    if not hidden:
        return None
    when = HIDDEN_WHEN.get(assignment.hidden_visibility, HIDDEN_WHEN["hidden"])
    return HiddenSummary(len(hidden), sum(c.max_score for c in hidden), when)
