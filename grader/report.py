"""Render results for people: Markdown (Gradescope output, CI logs), HTML (one self-contained file)
and the terminal summary of `grader check`, all from one jinja2 template set and one view model.

Templates autoescape HTML; everything student-controlled (messages, names, printed output) goes
through the templates as data, never as markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jinja2

from grader.catalog import trap_catalog
from grader.results import GradeResult
from grader.spec import Assignment, TrapText

MAX_MESSAGE_CHARS = 3000


@dataclass(frozen=True)
class ReportView:
    result: GradeResult
    assignment: Assignment
    traps: dict[str, TrapText]
    show_hidden_details: bool

    @property
    def by_target(self) -> list[tuple[str, float, float]]:
        return [(t, got, total) for t, (got, total) in self.result.score_by_target().items()]

    def case_message(self, case: Any) -> str:
        if case.visibility == "hidden" and not self.show_hidden_details:
            return ""
        text = case.message
        return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " ... [cut]"


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("grader", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=False),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def view(result: GradeResult, assignment: Assignment, show_hidden_details: bool = True) -> ReportView:
    return ReportView(result, assignment, trap_catalog(assignment), show_hidden_details)


def render(template: str, report: ReportView) -> str:
    return _environment().get_template(template).render(v=report, r=report.result)


def markdown(result: GradeResult, assignment: Assignment, show_hidden_details: bool = True) -> str:
    return render("report.md.j2", view(result, assignment, show_hidden_details))


def html(result: GradeResult, assignment: Assignment, show_hidden_details: bool = True) -> str:
    return render("report.html", view(result, assignment, show_hidden_details))


def terminal(result: GradeResult, assignment: Assignment) -> str:
    return render("summary.txt.j2", view(result, assignment, True))
