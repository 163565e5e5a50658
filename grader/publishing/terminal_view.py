"""What `grader check` prints, the point first (TerminalView): the score, the notes on the whole file, then the first
failure in full with its trap's advice and fix, then every case, the repetitive folded. A case that failed the same
way as one already shown (the same message, or the same traps) is its first line alone; error maps are printed as
grids for the first MAX_MAPPED_CASES cases with one, and a map whose elements are all the same (an untouched
template's `U`s) as one line; what was folded (a case whose details were left out, a grid) is counted in one line
that says where the rest is (`-v`, `--out DIR`), and there is no such line when nothing was. Verbose: nothing
folded. Reads the ReportView; the template lays it out."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from grader.judging.error_maps import LEGEND
from grader.publishing.case_view import CaseView
from grader.publishing.error_map_view import MapView
from grader.publishing.plurals import counted
from grader.publishing.report_view import ReportView
from grader.publishing.trap_view import TrapView

MAX_MAPPED_CASES = 2  # cases whose error maps are printed as grids (-v: all)
SAME_TRAPS_SHOWN = 1  # failing cases with the same (named) traps shown in full (-v: all)
TEXT_MAP_SIZE = (24, 64)  # rows, columns of the largest grid printed
MAP_LEGEND = ". right, 1-4 wrong by <=10x/1e3x/1e5x/more than tolerance, N NaN, R out-of-bounds read, U unwritten"


@dataclass(frozen=True)
class MapText:
    """One error map as the terminal prints it: a heading, and the grid's lines (none for a uniform map)."""

    heading: str
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class CaseLine:
    """One case in the terminal: `full` prints its message and maps under its mark line, else the line alone;
    `lead`: it is the first failure, printed in full above the list (the list names it only)."""

    case: CaseView
    full: bool
    maps: tuple[MapText, ...] = ()
    lead: bool = False


def map_text(m: MapView) -> MapText | None:
    """A map as text: one line when every element is the same ("all 40 elements U (never written)"), else the
    grid under its legend; None when the grid is too big to read as text."""
    codes = {ch for row in m.grid for ch in row}
    if len(codes) == 1:
        (code,) = codes
        every = counted(m.total, "element")
        return MapText(f"where {m.output} is wrong: all {every} {code} ({LEGEND.get(code, code)})")
    lines = m.text_lines(*TEXT_MAP_SIZE)
    if not lines:
        return None
    return MapText(f"where {m.output} is wrong ({MAP_LEGEND}):", tuple(lines))


@dataclass(frozen=True)
class TerminalView:
    report: ReportView
    verbose: bool = False
    written_to: str = ""  # the folder the full report was written to (`--out`), if it was

    @cached_property
    def _laid_out(self) -> tuple[tuple[CaseLine, ...], int, int]:
        """The cases in report order, each shown in full or folded; how many were folded, how many grids not shown."""
        lines: list[CaseLine] = []
        shown_messages: set[str] = set()
        same_traps: dict[tuple[str, ...], int] = {}
        mapped = folded = maps_left = 0
        lead = self.lead
        for target in self.report.targets:
            for case in target.cases:
                result = case.result
                if result.passed:
                    lines.append(CaseLine(case, full=False))
                    continue
                same_way = case.message in shown_messages or (
                    bool(result.traps) and same_traps.get(result.traps, 0) >= SAME_TRAPS_SHOWN)
                if not (self.verbose or case is lead) and same_way:
                    folded += bool(case.message.strip() or case.maps)  # one with no details loses nothing
                    lines.append(CaseLine(case, full=False))
                    continue
                shown_messages.add(case.message)
                same_traps[result.traps] = same_traps.get(result.traps, 0) + 1
                texts = [t for t in (map_text(m) for m in case.maps) if t is not None]
                if any(t.lines for t in texts):
                    if self.verbose or mapped < MAX_MAPPED_CASES:
                        mapped += 1
                    else:
                        maps_left += sum(1 for t in texts if t.lines)
                        texts = [t for t in texts if not t.lines]
                lines.append(CaseLine(case, full=True, maps=tuple(texts), lead=case is lead))
        return tuple(lines), folded, maps_left

    @property
    def cases(self) -> tuple[CaseLine, ...]:
        return self._laid_out[0]

    @property
    def first(self) -> CaseLine | None:
        """The first failure, as printed above the list (in full)."""
        return next((c for c in self.cases if c.lead), None)

    @cached_property
    def lead(self) -> CaseView | None:
        """The first failing case worth points (a zero-point check only when no such case failed)."""
        failing = [c for t in self.report.targets for c in t.cases if not c.result.passed]
        return next((c for c in failing if not c.check), failing[0] if failing else None)

    @property
    def lead_trap(self) -> TrapView | None:
        """The first failure's trap, explained with the first failure (and not again below)."""
        if self.lead is None or not self.lead.result.traps:
            return None
        first = self.lead.result.traps[0]
        return next((t for t in self.report.traps if t.id == first and t.text), None)

    @property
    def other_traps(self) -> tuple[TrapView, ...]:
        lead = self.lead_trap
        return tuple(t for t in self.report.traps if t.text and (lead is None or t.id != lead.id))

    @property
    def fold_line(self) -> str:
        """What was folded, in one line, and where the rest is; '' when nothing was."""
        _, folded, maps_left = self._laid_out
        parts = []
        if folded == 1:
            parts.append("1 more case failed the same way as one above (only its first line is shown)")
        elif folded:
            parts.append(f"{folded} more cases failed the same way as ones above (only their first lines are shown)")
        if maps_left:
            parts.append(f"{counted(maps_left, 'more error map')} not printed")
        if not parts:
            return ""
        full = (f"the full report is in {self.written_to}" if self.written_to else "`--out DIR` writes the full report")
        return "\u2026 " + "; ".join(parts) + f": `grader check -v` prints everything, {full}"
