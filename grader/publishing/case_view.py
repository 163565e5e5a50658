"""One case as the report shows it (CaseView): listed or not, and for a detailed case its input in words,
its message cut to the detail level, its failed comparisons, its error maps and, for outputs without a
map, where they are wrong in words. A hidden case is detailed only in the instructor view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader.authoring.inputs import describe_kind
from grader.authoring.spec import LAYOUTS, Assignment
from grader.publishing.error_map_view import MapView, map_view
from grader.publishing.safe_text import clean
from grader.publishing.size_budget import Detail
from grader.results import CaseResult


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
    dtype = evidence.get("dtype")
    if dtype and dtype != "float32":
        parts.append(dtype)
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
    if where.get("slices"):  # an output of more than two dimensions: which leading slices, then their rows/columns
        shown = " ".join("[" + ",".join(str(i) for i in index) + "]" for index in where["slices"])
        more = where.get("slices_wrong", 0) - len(where["slices"])
        text += f"; in {where.get('slices_wrong', 0)} of {where.get('slices_total', 0)} slices {shown}"
        text += f" (+{more} more)" if more > 0 else ""
    for key in ("rows", "cols", "indices"):
        if key in where:
            text += f"; {key} {where[key]}"
    if where.get("tiles"):
        text += "; tiles " + " ".join(f"[{r},{c}]" for r, c in where["tiles"][:16])
    return text
