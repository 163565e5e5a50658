"""Render results for people: Markdown (Gradescope output, CI logs), HTML (one self-contained file)
and the terminal summary of `grader check`, all from one jinja2 template set and one view model.

The view model (grader.publishing.report_view.ReportView) decides what is shown: the cases, the input that
exposed each trap, the error maps; the terminal's own (grader.publishing.terminal_view) puts the first failure
first and folds repeats. Templates only lay it out. The instructor view (show_hidden_details)
shows every case. The student view is built from the public part of the result
(grader.publishing.hidden_cases): hidden cases are not in it at all, only counted with their points ("18
hidden cases worth 27 points: results after the due date"), so no hidden case's name, input, trap or score
can reach it. It is what results.json's `output` carries (Gradescope shows it from the moment of grading;
each hidden test has its own entry, shown when the spec's hidden_visibility says).
HTML autoescapes; everything student-controlled (messages, printed output, file names) reaches the
templates as data, stripped of terminal control sequences and cut to a size (grader.publishing.safe_text),
never as markup.

Every report stays under a size budget (grader.publishing.size_budget): if the full rendering is too long
it is rendered again with shorter messages and no maps, then with no messages, so the result is always
well-formed.

`performance_line` and `template_environment` are imported here from where they live, for the callers that
take them from this module.
"""

from __future__ import annotations

from grader.authoring.spec import Assignment
from grader.publishing.jinja_environment import template_environment
from grader.publishing.performance_view import performance_line
from grader.publishing.report_view import ReportView, view
from grader.publishing.size_budget import render_capped
from grader.publishing.terminal_view import TerminalView
from grader.results import GradeResult

__all__ = ["html", "markdown", "performance_line", "render", "template_environment", "terminal"]


def render(template: str, report: ReportView) -> str:
    return template_environment().get_template(template).render(v=report, r=report.result)


def markdown(
    result: GradeResult,
    assignment: Assignment,
    show_hidden_details: bool = True,
    max_chars: int | None = None,
) -> str:
    return render_capped(
        lambda d: render("report.md.j2", view(result, assignment, show_hidden_details, d)), max_chars
    )


def html(
    result: GradeResult,
    assignment: Assignment,
    show_hidden_details: bool = True,
    max_chars: int | None = None,
) -> str:
    return render_capped(lambda d: render("report.html", view(result, assignment, show_hidden_details, d)), max_chars)


def terminal(result: GradeResult, assignment: Assignment, verbose: bool = False, written_to: str = "") -> str:
    """`grader check`'s summary, the point first; repeats folded unless `verbose` (grader.publishing.terminal_view).
    `written_to`: the folder the full report was written to, if it was."""
    report = view(result, assignment, True)
    return template_environment().get_template("summary.txt.j2").render(
        v=report, r=report.result, term=TerminalView(report, verbose, written_to))
