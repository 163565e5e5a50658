"""The view model the report templates read (ReportView): the score line, the targets with their cases,
the traps, the notes, the Performance section and the error-map legend, built by `view` from a result at
one detail level. The instructor view (show_hidden_details) shows every case; the student view is built
from the public part of the result only (grader.publishing.hidden_cases). Templates only lay it out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from grader.authoring.catalog import trap_catalog
from grader.authoring.spec import Assignment, TrapText
from grader.judging.error_maps import CODES, LEGEND
from grader.publishing.case_view import CaseView, case_view
from grader.publishing.error_map_view import MAP_COLOURS
from grader.publishing.hidden_cases import HiddenSummary, before_due_date
from grader.publishing.performance_view import PerformanceRow, SlowReason, device_line, performance_row
from grader.publishing.plurals import counted
from grader.publishing.safe_text import clean
from grader.publishing.size_budget import DETAIL_LEVELS, MAX_MESSAGE_CHARS, Detail
from grader.publishing.trap_view import TrapView
from grader.results import GradeResult


@dataclass(frozen=True)
class TargetView:
    name: str
    kind: str  # "kernel" | "function"
    got: float
    total: float
    cases: tuple[CaseView, ...]

    @property
    def scored(self) -> tuple[CaseView, ...]:
        """The cases worth points: what "cases passed" counts. Zero-point checks (the GPU compile check, false
        hints) are listed with the cases but are not cases a submission passes."""
        return tuple(c for c in self.cases if not c.check)

    @property
    def passed(self) -> int:
        return sum(c.result.passed for c in self.scored)


@dataclass(frozen=True)
class ReportView:
    result: GradeResult  # the student view's is the public part only
    assignment: Assignment
    catalog: Mapping[str, TrapText]
    show_hidden_details: bool
    detail: Detail = DETAIL_LEVELS[0]
    cases: tuple[CaseView, ...] = field(default=())
    hidden: HiddenSummary | None = None  # the student view: the hidden cases left out, counted

    @property
    def score_label(self) -> str:
        """What the score line counts: everything, or (student view) what the student may see now."""
        if self.hidden is None:
            return "Score"
        scored_performance = any(p.max_score for p in self.result.performance)
        return "Public and performance cases" if scored_performance else "Public cases"

    @property
    def score_unit(self) -> str:
        """" points" after a score whose label names cases ("Public cases: 5 / 6 points"): not read as a count."""
        return "" if self.hidden is None else " points"

    @property
    def passed_line(self) -> str:
        """How many scored cases passed: "5 of 6 cases passed"; the instructor view of a grade with hidden cases
        counts each visibility ("public cases: 5 of 6 passed · hidden cases: 25 of 27 passed")."""
        counts = self.counts
        if len(counts) > 1:
            return " · ".join(f"{visibility} cases: {passed} of {total} passed"
                              for visibility, (passed, total) in counts.items())
        passed, total = next(iter(counts.values()), (0, 0))
        return f"{passed} of {total} {'case' if total == 1 else 'cases'} passed"

    @property
    def targets(self) -> list[TargetView]:
        order = list(self.assignment.targets)
        names = sorted(
            {c.result.target for c in self.cases},
            key=lambda t: (order.index(t) if t in order else len(order), t),
        )
        views = []
        for name in names:
            cases = tuple(c for c in self.cases if c.result.target == name)
            views.append(
                TargetView(
                    name=name,
                    kind="kernel" if name in self.assignment.kernels else "function",
                    got=sum(c.result.score for c in cases),
                    total=sum(c.result.max_score for c in cases),
                    cases=tuple(c for c in cases if c.listed),
                )
            )
        return views

    @property
    def traps(self) -> list[TrapView]:
        return [
            TrapView(tid, self.catalog.get(tid), tuple(c for c in self.cases if tid in c.result.traps),
                     checking=self.result.public_only)
            for tid in self.result.traps
        ]

    @property
    def text_maps(self) -> bool:
        """Some trap's example has a map small enough to print as text (the Markdown shows a legend)."""
        return any(m.text_lines() for t in self.traps if t.example for m in t.example.maps)

    @property
    def counts(self) -> dict[str, tuple[int, int]]:
        """visibility -> (passed, total), over graded (non-zero-point) cases."""
        out: dict[str, tuple[int, int]] = {}
        for c in self.cases:
            if c.result.max_score == 0:
                continue
            passed, total = out.get(c.result.visibility, (0, 0))
            out[c.result.visibility] = (passed + c.result.passed, total + 1)
        return out

    @property
    def percent(self) -> float:
        return 100.0 * self.result.score / self.result.max_score if self.result.max_score else 100.0

    @property
    def notes(self) -> list[str]:
        return [clean(n, MAX_MESSAGE_CHARS) for n in self.result.notes]

    @property
    def submission(self) -> str:
        return clean(self.result.submission, 200)

    @property
    def performance(self) -> tuple[PerformanceRow, ...]:
        return tuple(performance_row(p) for p in self.result.performance)

    @property
    def performance_device(self) -> str:
        return device_line(self.result)

    @property
    def performance_skipped(self) -> str:
        """One line instead of the table when no case could be measured at all (the interpreter)."""
        perf = self.result.performance
        if not perf or any(p.status != "skipped" for p in perf):
            return ""
        reasons = sorted({p.reason for p in perf})
        return f"{counted(len(perf), 'performance case')} not measured: {'; '.join(reasons)}."

    @property
    def slow_reasons(self) -> tuple[SlowReason, ...]:
        """Why it may be slow: the performance traps named (informational), each with its numbers and fix."""
        out = []
        for found in self.result.performance_traps:
            text = self.catalog.get(found.trap)
            out.append(SlowReason(found.trap, text.title if text else found.trap, found.target,
                                  clean(found.message, MAX_MESSAGE_CHARS), text.fix if text else "", found.basis))
        return tuple(out)

    @property
    def slow_measured(self) -> bool:
        return any(t.basis == "measured" for t in self.result.performance_traps)

    @property
    def slow_predicted(self) -> bool:
        return any(t.basis != "measured" for t in self.result.performance_traps)

    @property
    def legend(self) -> list[tuple[str, str, str]]:
        return [(c, MAP_COLOURS[c], LEGEND[c]) for c in CODES]


def view(
    result: GradeResult,
    assignment: Assignment,
    show_hidden_details: bool = True,
    detail: Detail = DETAIL_LEVELS[0],
) -> ReportView:
    hidden = None
    if not show_hidden_details:  # the student view: built from the public part only
        seen = before_due_date(result, assignment)
        result, hidden = seen.public, seen.hidden
    cases = tuple(case_view(c, assignment, show_hidden_details, detail) for c in result.cases)
    return ReportView(result, assignment, trap_catalog(assignment), show_hidden_details, detail, cases, hidden)
