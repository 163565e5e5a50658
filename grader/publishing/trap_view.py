"""One trap as the report explains it (TrapView): its text, the cases that named it, the example that shows
it best (the case whose element showing this trap is furthest beyond the tolerance), that example's elements
and maps marking the element that shows this trap, and the advice and fix for this submission (an untouched
template is told to fill in its TODO; `grader check` gets the fix written for it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from grader import trap_ids
from grader.authoring.spec import TrapText
from grader.publishing.case_view import CaseView
from grader.publishing.error_map_view import MapView, worst_cell
from grader.results import CaseResult

MAX_EXAMPLES = 3  # cases listed under a trap

NOTHING_WRITTEN = ("Your kernel has not written any output yet: the template's TODO is still there (or its "
                   "tl.store never runs). Write the kernel's body, ending in a masked tl.store into the output.")
# What the unwritten-output card says instead of its grid-coverage text when the kernel stored nothing at all.
NOTHING_WRITTEN_EXPOSED_BY = "Every case: the kernel stores nothing yet."
NOTHING_WRITTEN_FIX = ("Fill in the TODO in the kernel's body: load the inputs (masked to their bounds), compute, "
                       "and tl.store the result into the output pointer with the same mask.")
# What the timeout card says when the file never finished importing: its module-level code, not a kernel's loop.
IMPORT_HANG = ("Importing your file did not finish: everything at module level (outside any function) runs when "
               "the file is imported, and something there does not end.")
IMPORT_HANG_EXPLANATION = ("The grader imports your file once, before any case, with a time limit of its own; the "
                           "import ran past it, so the grader stopped it and no case could run.")
IMPORT_HANG_EXPOSED_BY = "Importing the submission, before any case ran."
IMPORT_HANG_FIX = ("Keep only imports, constants and definitions at module level: move loops, tests, benchmarks and "
                   "anything that waits (input(), a server, a `while True:`) into a function, or under "
                   "`if __name__ == \"__main__\":`, which importing the file does not run.")


def _illustrations(case: CaseResult, trap: str) -> Mapping[str, Mapping[str, Any]]:
    found = (case.evidence or {}).get("illustrations") or {}
    return found.get(trap) or {}


def _strength(case: CaseResult, trap: str) -> float:
    """How far beyond the tolerance the elements showing `trap` are (inf: a NaN/inf; 0: none known)."""
    tolerance = (case.evidence or {}).get("tolerance") or {}
    atol, rtol = float(tolerance.get("atol", 0.0)), float(tolerance.get("rtol", 0.0))
    best = 0.0
    for element in _illustrations(case, trap).values():
        actual, expected = element.get("actual"), element.get("expected")
        if not isinstance(actual, (int, float)) or not isinstance(expected, (int, float)):
            return math.inf  # a NaN or an infinity (written as a string)
        allowed = atol + rtol * abs(expected)
        best = max(best, abs(actual - expected) / allowed if allowed > 0 else math.inf)
    return best


@dataclass(frozen=True)
class TrapView:
    id: str
    text: TrapText | None
    cases: tuple[CaseView, ...]  # every case that named the trap
    checking: bool = False  # the report of `grader check` (a public run): fixes do not send the student to it

    @property
    def title(self) -> str:
        return self.text.title if self.text else self.id

    @property
    def shown_cases(self) -> tuple[CaseView, ...]:
        return tuple(c for c in self.cases if c.detailed)

    @property
    def examples(self) -> tuple[CaseView, ...]:
        """The shown cases listed under the trap (the rest are counted)."""
        return self.shown_cases[:MAX_EXAMPLES]

    @property
    def more(self) -> int:
        return len(self.shown_cases) - len(self.examples)

    @property
    def example(self) -> CaseView | None:
        """The case that shows the trap best: of the detailed ones (those with a map first), the one whose
        element showing this trap is furthest beyond the tolerance; the first of equals."""
        shown = self.shown_cases
        if not shown:
            return None
        return max(shown, key=lambda c: (bool(c.maps), _strength(c.result, self.id)))

    @property
    def elements(self) -> tuple[Mapping[str, Any], ...]:
        """Per wrong output of the example: its comparison, with the element that shows this trap as its
        worst (grader.judging.judge.illustrations) where the judge found one."""
        ex = self.example
        if ex is None:
            return ()
        shown = _illustrations(ex.result, self.id)
        rows = []
        for c in ex.comparisons:
            element = shown.get(str(c.get("output")))
            rows.append({**c, "worst_index": element["index"], "worst_actual": element["actual"],
                         "worst_expected": element["expected"]} if element else c)
        return tuple(rows)

    @property
    def maps(self) -> tuple[MapView, ...]:
        """The example's error maps, marking the element `elements` shows."""
        ex = self.example
        if ex is None:
            return ()
        index = {str(e.get("output")): e.get("worst_index") for e in self.elements}
        return tuple(replace(m, worst=worst_cell(m.shape, index[m.output])) if index.get(m.output) else m
                     for m in ex.maps)

    @property
    def advice(self) -> str:
        """A line that says more than the trap's text where this submission shows something plainer: an untouched
        template's kernel stores nothing; a timeout that happened while the file was imported is its module-level
        code, not a kernel's loop."""
        if self.id == trap_ids.UNWRITTEN_OUTPUT and self.cases and all(
                (c.result.evidence or {}).get("nothing_written") for c in self.cases):
            return NOTHING_WRITTEN
        if self.id == trap_ids.TIMEOUT and self.cases and all(
                (c.result.evidence or {}).get("at_import") for c in self.cases):
            return IMPORT_HANG
        return ""

    @property
    def explanation(self) -> str:
        """The trap's explanation; for a timeout while importing, what the import's time limit is (the trap's own
        speaks of a call)."""
        if self.text is None:
            return ""
        return IMPORT_HANG_EXPLANATION if self.advice == IMPORT_HANG else self.text.explanation

    @property
    def exposed_by(self) -> str:
        if self.text is None:
            return ""
        return {NOTHING_WRITTEN: NOTHING_WRITTEN_EXPOSED_BY, IMPORT_HANG: IMPORT_HANG_EXPOSED_BY}.get(
            self.advice, self.text.exposed_by)

    @property
    def fix(self) -> str:
        """The trap's fix, for this submission: an untouched template is told to fill in its TODO (not about grid
        coverage); in `grader check` a fix written for elsewhere ("reproduce it with grader check") gives way to
        the trap's `fix_when_checking`."""
        if self.text is None:
            return ""
        if self.advice == NOTHING_WRITTEN:
            return NOTHING_WRITTEN_FIX
        if self.advice == IMPORT_HANG:
            return IMPORT_HANG_FIX
        if self.checking and self.text.fix_when_checking:
            return self.text.fix_when_checking
        return self.text.fix

    @property
    def structural(self) -> bool:
        """No output to compare (import failure, crash, ...): the message is the evidence."""
        return all(not c.comparisons for c in self.cases)
