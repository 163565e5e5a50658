"""What the student view may say of the hidden cases. It is built from the public part of a result
(`public_part`), so no hidden case's name, input, trap or score can reach it; the hidden cases are only
counted with their points (`hidden_summary`: "18 hidden cases worth 27 points: results after the due
date"). `before_due_date` is both, the one rule for everything a student sees at once: the student reports,
Gradescope's visible top level and PrairieLearn's results (which PrairieLearn shows immediately)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from grader.authoring.spec import Assignment
from grader.publishing.plurals import counted
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
    def counted(self) -> str:
        """How many and what they are worth: "18 hidden cases worth 27 points"."""
        return f"{counted(self.count, 'hidden case')} worth {counted(self.points, 'point')}"

    @property
    def line(self) -> str:
        return f"{self.counted}: {self.when}"

    def to_dict(self) -> dict[str, float]:
        return {"count": self.count, "points": self.points}


@dataclass(frozen=True)
class StudentView:
    """What a student may see of a result before the due date: the public part (public and performance cases in
    full), and the hidden cases only as a count with their points (None: there are none)."""

    public: GradeResult
    hidden: HiddenSummary | None

    @property
    def hidden_dict(self) -> dict[str, float]:
        return self.hidden.to_dict() if self.hidden else {"count": 0, "points": 0.0}


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


def before_due_date(result: GradeResult, assignment: Assignment) -> StudentView:
    """Pure: what a student sees of `result` from the moment it is graded, whatever the spec's hidden_visibility
    (every value of it hides the hidden cases' own results until the due date or later)."""
    return StudentView(public_part(result), hidden_summary(result, assignment))
