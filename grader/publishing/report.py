"""Render results for people: Markdown (Gradescope output, CI logs), HTML (one self-contained file)
and the terminal summary of `grader check`, all from one jinja2 template set and one view model.

The view model (ReportView) decides what is shown: the cases, the input that exposed each trap, the error
maps. Templates only lay it out. The instructor view (show_hidden_details) shows every case. The student
view is built from the public part of the result (`public_part`): hidden cases are not in it at all, only
counted with their points (`HiddenSummary`: "18 hidden cases worth 27 points: results after the due
date"), so no hidden case's name, input, trap or score can reach it. It is what results.json's `output`
carries (Gradescope shows it from the moment of grading; each hidden test has its own entry, shown when
the spec's hidden_visibility says).
HTML autoescapes; everything student-controlled (messages, printed output, file names) reaches the
templates as data, stripped of terminal control sequences and cut to a size, never as markup.

Every report stays under a size budget: if the full rendering is too long it is rendered again with
shorter messages and no maps, then with no messages, so the result is always well-formed.
"""

from __future__ import annotations

import base64
import math
import re
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jinja2

from grader import trap_ids
from grader.authoring.catalog import trap_catalog
from grader.authoring.inputs import describe_kind
from grader.authoring.spec import LAYOUTS, Assignment, TrapText
from grader.judging.error_maps import CODES, LEGEND
from grader.results import CaseResult, GradeResult, Measurement, PerformanceResult

MAX_MESSAGE_CHARS = 3000
MAX_EXAMPLES = 3  # cases listed under a trap

# Error-map colours, one per error_maps.CODES character (the PNG palette and the legend).
MAP_COLOURS = {
    ".": "#cfeedd",
    "1": "#fde68a",
    "2": "#f59e0b",
    "3": "#dc2626",
    "4": "#7f1d1d",
    "I": "#111827",
    "N": "#7c3aed",
    "R": "#db2777",
    "U": "#64748b",
}
MAP_MAX_PX = 360  # the longer side of a drawn map
MAP_MIN_PX = 96  # the shorter side, unless that makes an element taller or wider than 28 px
STRIP_MAX_PX = 480
TEXT_MAP_MAX = (48, 64)  # rows, columns: larger maps are not drawn as text


@dataclass(frozen=True)
class Detail:
    """How much a rendering shows; the budget steps down through DETAIL_LEVELS."""

    message_chars: int
    maps: bool
    comparisons: bool


DETAIL_LEVELS = (Detail(MAX_MESSAGE_CHARS, True, True), Detail(400, False, True), Detail(0, False, False))

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~])")


def clean(text: str, limit: int | None = None) -> str:
    """Student-controlled text made safe to print anywhere: no terminal escapes or control
    characters (newlines and tabs stay), at most `limit` characters."""
    text = _CONTROL.sub("", _ANSI.sub("", str(text)))
    if limit is None or len(text) <= limit:
        return text
    cut = len(text) - limit
    return text[:limit].rstrip() + f" ... [{cut} more characters cut]" if limit else f"[{cut} characters cut]"


def md_inline(text: str) -> str:
    """Text for one line of Markdown: newlines folded, Markdown and HTML characters escaped."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def md_fence(text: str) -> str:
    """A backtick fence longer than any backtick run in `text`, so the text cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


# ------------------------------------------------------------------------------------------ maps


@dataclass(frozen=True)
class MapView:
    """One error map, with the geometry a template needs to draw it as SVG (element units)."""

    output: str
    shape: tuple[int, ...]
    rows: int  # element rows and columns (a 1-D output is one row)
    cols: int
    cell: tuple[int, int]
    grid: tuple[str, ...]
    tile: tuple[int, int] | None
    wrong: int
    total: int
    worst: tuple[int, int] | None  # (row, col) of the worst element

    @property
    def strip(self) -> bool:
        return len(self.shape) < 2

    @property
    def extent(self) -> tuple[int, int]:
        """Rows and columns the launch's tiles cover (at least the output)."""
        if self.tile is None:
            return self.rows, self.cols
        tm, tn = self.tile
        return math.ceil(self.rows / tm) * tm, math.ceil(self.cols / tn) * tn

    @property
    def size_px(self) -> tuple[float, float]:
        """Width and height the map is drawn at: square elements, the longer side at most MAP_MAX_PX,
        the shorter stretched to at least MAP_MIN_PX so a few long rows stay readable."""
        ext_rows, ext_cols = self.extent
        if self.strip:
            return round(min(28.0, max(3.0, STRIP_MAX_PX / max(ext_cols, 1))) * ext_cols, 1), 22.0
        scale = min(28.0, max(1.0, MAP_MAX_PX / max(ext_rows, ext_cols, 1)))
        width, height = ext_cols * scale, ext_rows * scale
        return round(max(width, min(MAP_MIN_PX, 28.0 * ext_cols)), 1), round(
            max(height, min(MAP_MIN_PX, 28.0 * ext_rows)), 1
        )

    @property
    def image_size(self) -> tuple[int, int]:
        """Width and height, in elements, of the cell image (cells may overhang the output's edge)."""
        return len(self.grid[0]) * self.cell[1] if self.grid else 0, len(self.grid) * self.cell[0]

    @property
    def tile_lines(self) -> tuple[list[int], list[int]]:
        """x positions of vertical and y positions of horizontal block-grid lines."""
        if self.tile is None:
            return [], []
        ext_rows, ext_cols = self.extent
        tm, tn = self.tile
        return list(range(tn, ext_cols, tn)), list(range(tm, ext_rows, tm))

    @property
    def png_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(palette_png(self.grid)).decode("ascii")

    @property
    def caption(self) -> str:
        text = f"{self.output}: {self.wrong} of {self.total} elements wrong"
        if self.cell != (1, 1):
            text += f"; one cell = {self.cell[0]}\u00d7{self.cell[1]} elements (its worst shown)"
        if self.tile is not None:
            tm, tn = self.tile
            text += (
                f"; lines: one program per row, BLOCK_N = {tn}"
                if tm == 1
                else f"; lines: the launch's {tm}\u00d7{tn} tiles"
            )
        return text

    @property
    def overhang(self) -> bool:
        """The launch's tiles reach past the output (their lanes there must be masked)."""
        return self.extent != (self.rows, self.cols)

    @property
    def axes(self) -> str:
        if self.strip:
            return f"index 0 \u2192 {self.cols - 1}"
        return f"rows 0 \u2193 {self.rows - 1}, columns 0 \u2192 {self.cols - 1}"

    def text_lines(self, max_rows: int = TEXT_MAP_MAX[0], max_cols: int = TEXT_MAP_MAX[1]) -> list[str]:
        """The grid as text, tile boundaries as | and -, or [] when it is too big to read as text."""
        if not self.grid or len(self.grid) > max_rows or len(self.grid[0]) > max_cols:
            return []
        cr, cc = self.cell
        tm, tn = self.tile or (0, 0)
        vertical = {j for j in range(1, len(self.grid[0])) if tn and tn % cc == 0 and (j * cc) % tn == 0}
        horizontal = {i for i in range(1, len(self.grid)) if tm > cr and tm % cr == 0 and (i * cr) % tm == 0}
        lines = []
        for i, row in enumerate(self.grid):
            line = "".join(("|" if j in vertical else "") + ch for j, ch in enumerate(row))
            if i in horizontal:
                lines.append("".join("+" if ch == "|" else "-" for ch in line))
            lines.append(line)
        return lines


def worst_cell(shape: Sequence[int], index: Sequence[int] | None) -> tuple[int, int] | None:
    """(row, col) on a map of an output of `shape` (rows flattened, a 1-D output one row) of an element."""
    if not index:
        return None
    if len(shape) < 2:
        return 0, int(index[0])
    if len(index) != len(shape):
        return None
    flat_row = 0
    for size, i in zip(shape[:-1], index[:-1], strict=True):
        flat_row = flat_row * size + int(i)
    return flat_row, int(index[-1])


def map_view(output: str, data: Mapping[str, Any], worst_index: Sequence[int] | None) -> MapView:
    shape = tuple(int(s) for s in data["shape"])
    if len(shape) < 2:
        rows, cols = 1, shape[0] if shape else 1
    else:
        rows, cols = math.prod(shape[:-1]), shape[-1]
    worst = worst_cell(shape, worst_index)
    tile = data.get("tile")
    return MapView(
        output=output,
        shape=shape,
        rows=rows,
        cols=cols,
        cell=(int(data["cell"][0]), int(data["cell"][1])),
        grid=tuple(str(g) for g in data["grid"]),
        tile=(int(tile[0]), int(tile[1])) if tile else None,
        wrong=int(data["wrong"]),
        total=int(data["total"]),
        worst=worst,
    )


def palette_png(grid: Sequence[str]) -> bytes:
    """A palette PNG with one pixel per grid cell, coloured by MAP_COLOURS."""
    height, width = len(grid), len(grid[0]) if grid else 0
    palette = b"".join(bytes.fromhex(MAP_COLOURS[c][1:]) for c in CODES)
    raw = b"".join(b"\x00" + bytes(CODES.index(ch) for ch in row) for row in grid)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", max(width, 1), max(height, 1), 8, 3, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"PLTE", palette)
        + chunk(b"IDAT", zlib.compress(raw or b"\x00\x00", 9))
        + chunk(b"IEND", b"")
    )


# ------------------------------------------------------------------------------------------ views

NOTHING_WRITTEN = ("Your kernel has not written any output yet: the template's TODO is still there (or its "
                   "tl.store never runs). Write the kernel's body, ending in a masked tl.store into the output.")
# What the unwritten-output card says instead of its grid-coverage text when the kernel stored nothing at all.
NOTHING_WRITTEN_EXPOSED_BY = "Every case: the kernel stores nothing yet."
NOTHING_WRITTEN_FIX = ("Fill in the TODO in the kernel's body: load the inputs (masked to their bounds), compute, "
                       "and tl.store the result into the output pointer with the same mask.")


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



@dataclass(frozen=True)
class CaseView:
    result: CaseResult
    listed: bool  # hidden cases of an assignment whose hidden_visibility is "hidden" are not, for students
    detailed: bool  # message, input, comparison and maps shown
    input: str
    message: str
    comparisons: tuple[Mapping[str, Any], ...]
    maps: tuple[MapView, ...]
    where: tuple[str, ...]  # where the output is wrong, in words, for outputs without a map

    @property
    def check(self) -> bool:
        """A zero-point check (the GPU compile check, a false hint): shown with the cases, passed by no one."""
        return self.result.max_score == 0

    @property
    def mark(self) -> str:
        """The case's mark in the terminal: PASS / FAIL, or for a zero-point check `ok` / `WARN`."""
        if self.check:
            return "ok" if self.result.passed else "WARN"
        return "PASS" if self.result.passed else "FAIL"


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
        """A line that says more than the trap's text where this submission shows something plainer."""
        if self.id == trap_ids.UNWRITTEN_OUTPUT and self.cases and all(
                (c.result.evidence or {}).get("nothing_written") for c in self.cases):
            return NOTHING_WRITTEN
        return ""

    @property
    def exposed_by(self) -> str:
        if self.text is None:
            return ""
        return NOTHING_WRITTEN_EXPOSED_BY if self.advice == NOTHING_WRITTEN else self.text.exposed_by

    @property
    def fix(self) -> str:
        """The trap's fix, for this submission: an untouched template is told to fill in its TODO (not about grid
        coverage); in `grader check` a fix written for elsewhere ("reproduce it with grader check") gives way to
        the trap's `fix_when_checking`."""
        if self.text is None:
            return ""
        if self.advice == NOTHING_WRITTEN:
            return NOTHING_WRITTEN_FIX
        if self.checking and self.text.fix_when_checking:
            return self.text.fix_when_checking
        return self.text.fix

    @property
    def structural(self) -> bool:
        """No output to compare (import failure, crash, ...): the message is the evidence."""
        return all(not c.comparisons for c in self.cases)


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
        return f"{len(perf)} performance case(s) not measured: {'; '.join(reasons)}."

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
    def legend(self) -> list[tuple[str, str, str]]:
        return [(c, MAP_COLOURS[c], LEGEND[c]) for c in CODES]


# ------------------------------------------------------------------------------------------ performance


@dataclass(frozen=True)
class SlowReason:
    """One performance trap as the report's "Why it may be slow" lists it."""

    trap: str
    title: str
    target: str
    message: str  # the finding with its numbers
    fix: str
    basis: str  # "prediction" (counted on the CPU) or "measured"



@dataclass(frozen=True)
class PerformanceRow:
    """One performance case, formatted for a table (every field a short string)."""

    id: str
    title: str
    shape: str
    status: str  # "timed" | "skipped" | "not-run" | "error"
    time: str  # "0.1354 ms"
    spread: str  # "±0.3%"
    vs_torch: str  # "1.63x"
    vs_reference: str
    throughput: str  # "94.0% of copy bandwidth" or "313.7 TFLOP/s"
    points: str  # "1 / 2"
    reason: str
    torch_label: str
    torch_time: str
    reference_time: str

    @property
    def timed(self) -> bool:
        return self.status == "timed"


def _ms(m: Measurement | None) -> str:
    return f"{m.median_ms:.4f} ms" if m else "–"


def _times(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "–"


def throughput(m: Measurement | None) -> str:
    if m is None:
        return ""
    parts = []
    if m.pct_of_copy_bandwidth is not None:
        parts.append(f"{m.pct_of_copy_bandwidth:.1f}% of copy bandwidth ({m.gb_per_s:.0f} GB/s)")
    if m.tflops is not None:
        parts.append(f"{m.tflops:.1f} TFLOP/s")
    return ", ".join(parts)


def performance_row(p: PerformanceResult) -> PerformanceRow:
    return PerformanceRow(
        id=p.perf_id, title=p.title, shape=f"{p.shape} {p.dtype}", status=p.status,
        time=_ms(p.student), spread=f"±{p.student.spread_pct:.1f}%" if p.student else "",
        vs_torch=_times(p.speedup_vs_torch), vs_reference=_times(p.speedup_vs_reference),
        throughput=throughput(p.student),
        points=f"{p.score:g} / {p.max_score:g}" if p.max_score else "–",
        reason=clean(p.reason, 600), torch_label=p.torch.label if p.torch else "",
        torch_time=_ms(p.torch), reference_time=_ms(p.reference),
    )


def performance_line(p: PerformanceResult) -> str:
    """One performance case in one line of plain text (Gradescope test output, terminal)."""
    r = performance_row(p)
    if not r.timed:
        return f"{r.status}: {r.reason}"
    parts = [f"{r.time} {r.spread}", f"{r.vs_torch} torch eager ({r.torch_label} {r.torch_time})"]
    if p.reference:
        parts.append(f"{r.vs_reference} the reference ({r.reference_time})")
    if r.throughput:
        parts.append(r.throughput)
    if p.max_score:
        parts.append(f"{r.points} points")
    if r.reason:
        parts.append(r.reason)
    return " · ".join(parts)


def device_line(result: GradeResult) -> str:
    d = result.performance_device
    if d is None:
        return ""
    return f"{d.gpu} (copy bandwidth {d.copy_gb_per_s:.0f} GB/s), torch {d.torch}, triton {d.triton}"


def case_view(
    case: CaseResult, assignment: Assignment, show_hidden_details: bool, detail: Detail
) -> CaseView:
    hidden = case.visibility == "hidden"
    detailed = not hidden or show_hidden_details
    listed = detailed or assignment.hidden_visibility != "hidden"
    if not detailed:
        return CaseView(case, listed, False, "", "", (), (), ())
    evidence = case.evidence or {}
    comparisons = (
        tuple(c for c in evidence.get("comparisons", ()) if not c.get("ok", True))
        if detail.comparisons
        else ()
    )
    worst = {c.get("output"): c.get("worst_index") for c in comparisons}
    maps = evidence.get("error_maps", {}) if detail.maps and not case.passed else {}
    where = tuple(
        f"{name}: {_where_words(w)}"
        for name, w in evidence.get("where_wrong", {}).items()
        if name not in maps and w
    )
    return CaseView(
        result=case,
        listed=True,
        detailed=True,
        input=input_description(evidence, assignment.input_kinds),
        message=clean(case.message, detail.message_chars),
        comparisons=comparisons,
        maps=tuple(map_view(name, data, worst.get(name)) for name, data in maps.items()),
        where=where,
    )


def input_description(evidence: Mapping[str, Any], input_kinds: Mapping[str, str]) -> str:
    """The input of a case in words: shape, kind, layout, block sizes."""
    parts = []
    dims = evidence.get("dims") or {}
    if dims:
        parts.append(" ".join(f"{k}={v}" for k, v in dims.items()))
    kind = evidence.get("kind")
    if kind:
        parts.append(describe_kind(kind, input_kinds) or kind)
    layout = evidence.get("layout")
    if layout:
        parts.append(LAYOUTS.get(layout, layout))
    meta = evidence.get("meta") or {}
    if meta:
        parts.append("launched with " + " ".join(f"{k}={v}" for k, v in meta.items()))
    return " \u00b7 ".join(parts)


def _where_words(where: Mapping[str, Any]) -> str:
    text = f"{where.get('wrong', 0)} of {where.get('total', 0)} wrong"
    for key in ("rows", "cols", "indices"):
        if key in where:
            text += f"; {key} {where[key]}"
    if where.get("tiles"):
        text += "; tiles " + " ".join(f"[{r},{c}]" for r, c in where["tiles"][:16])
    return text


def view(
    result: GradeResult,
    assignment: Assignment,
    show_hidden_details: bool = True,
    detail: Detail = DETAIL_LEVELS[0],
) -> ReportView:
    hidden = None
    if not show_hidden_details:  # the student view: built from the public part only
        hidden = hidden_summary(result, assignment)
        result = public_part(result)
    cases = tuple(case_view(c, assignment, show_hidden_details, detail) for c in result.cases)
    return ReportView(result, assignment, trap_catalog(assignment), show_hidden_details, detail, cases, hidden)


# ------------------------------------------------------------------------------------------ rendering


def template_environment() -> jinja2.Environment:
    """The one jinja2 environment of every view (student reports, class report): autoescaped HTML."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("grader.publishing", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=False),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["md"] = md_inline
    env.filters["fence"] = md_fence
    env.filters["num"] = lambda x: f"{x:g}"
    env.filters["value"] = lambda x: f"{x:.7g}" if isinstance(x, float) else str(x)
    return env


def render(template: str, report: ReportView) -> str:
    return template_environment().get_template(template).render(v=report, r=report.result)


def render_capped(template: str, make_view: Callable[[Detail], ReportView], max_chars: int | None) -> str:
    """Render with the most detail that fits in max_chars; the last resort cuts the text."""
    text = ""
    for detail in DETAIL_LEVELS:
        text = render(template, make_view(detail))
        if max_chars is None or len(text) <= max_chars:
            return text
    assert max_chars is not None
    marker = "\n[report cut to its size limit]\n"
    cut = text[: max(0, max_chars - len(marker))]
    cut = cut[: cut.rfind("\n") + 1]  # whole lines
    closing = open_fence(cut)
    while closing and len(cut) + len(closing) + 1 + len(marker) > max_chars:
        cut = cut[: cut.rfind("\n", 0, len(cut) - 1) + 1]  # room for the fence that closes the open block
        closing = open_fence(cut)
    return cut + (closing + "\n" if closing else "") + marker


_FENCE = re.compile(r"^`{3,}")


def open_fence(markdown: str) -> str:
    """The fence that closes a Markdown code block left open at the end of `markdown` ("" when none is): a
    report cut to its size must not swallow what follows into a code block."""
    fence = ""
    for line in markdown.splitlines():
        stripped = line.strip()
        if not fence and _FENCE.match(stripped):
            fence = re.match(r"^`+", stripped).group(0)  # type: ignore[union-attr]
        elif fence and re.fullmatch(r"`+", stripped) and len(stripped) >= len(fence):
            fence = ""
    return fence


def markdown(
    result: GradeResult,
    assignment: Assignment,
    show_hidden_details: bool = True,
    max_chars: int | None = None,
) -> str:
    return render_capped(
        "report.md.j2", lambda d: view(result, assignment, show_hidden_details, d), max_chars
    )


def html(
    result: GradeResult,
    assignment: Assignment,
    show_hidden_details: bool = True,
    max_chars: int | None = None,
) -> str:
    return render_capped("report.html", lambda d: view(result, assignment, show_hidden_details, d), max_chars)


def terminal(result: GradeResult, assignment: Assignment) -> str:
    return render("summary.txt.j2", view(result, assignment, True))
