"""A class's similarity (grader.judging.similarity) as files: similarity.csv (one line per pair sharing code,
ranked) and similarity.html (the ranked pairs, and for the top ones their shared code side by side), each written
atomically, each naming the students as the batch knows them (name, SIS id, section: `people`). Informational:
nothing here touches a score."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from grader.atomic import write_text
from grader.judging.similarity import FLAG, WINDOW, Comparison, K, Pair
from grader.publishing.jinja_environment import template_environment
from grader.publishing.people import Student

SIMILARITY_CSV = "similarity.csv"
SIMILARITY_HTML = "similarity.html"
CSV_COLUMNS = ("rank", "a", "b", "score", "share_a", "share_b", "shared_lines_a", "shared_lines_b", "flagged",
               "regions", "name_a", "sid_a", "section_a", "name_b", "sid_b", "section_b", "match")
DETAILED = 20  # pairs shown with their code (flagged ones too, up to DETAILED_MAX in all: the page stays readable)
DETAILED_MAX = 100
LISTED = 200  # pairs in the HTML table (the CSV has every pair sharing any fingerprint)


def regions_text(pair: Pair) -> str:
    """`a:3-10=b:5-12; ...`: each shared region as line ranges of the two files."""
    return "; ".join(f"a:{r.a_lines[0]}-{r.a_lines[1]}=b:{r.b_lines[0]}-{r.b_lines[1]}" for r in pair.regions)


def similarity_csv(comparison: Comparison, people: Mapping[str, Student] | None = None) -> str:
    """One line per pair; `people` (student id -> who) fills each side's name, SIS id and section; `match` says
    when the two files are one (`identical`: the same bytes; `same tokens`: the same once names, comments and
    layout are set aside). Text cells that a spreadsheet would run as a formula get a `'`."""
    people = people or {}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for rank, p in enumerate(comparison.pairs, start=1):
        who = [_text(getattr(people.get(s) or Student(s), f)) for s in (p.a, p.b) for f in ("name", "sid", "section")]
        writer.writerow([rank, p.a, p.b, f"{p.score:.4f}", f"{p.share_a:.4f}", f"{p.share_b:.4f}", p.shared_lines_a,
                         p.shared_lines_b, "yes" if p.flagged else "", regions_text(p), *who, p.match])
    return buffer.getvalue()


def _text(value: str) -> str:
    return "'" + value if value[:1] in ("=", "+", "-", "@") else value


@dataclass(frozen=True)
class SideBySide:
    """One shared region of a pair: the lines of each file, numbered."""

    a_first: int
    b_first: int
    a_code: tuple[str, ...]
    b_code: tuple[str, ...]
    tokens: int


def side_by_side(comparison: Comparison, pair: Pair, context: int = 0) -> tuple[SideBySide, ...]:
    a, b = comparison.documents[pair.a].lines, comparison.documents[pair.b].lines
    out = []
    for r in pair.regions:
        a0, a1 = max(1, r.a_lines[0] - context), min(len(a), r.a_lines[1] + context)
        b0, b1 = max(1, r.b_lines[0] - context), min(len(b), r.b_lines[1] + context)
        out.append(SideBySide(a0, b0, tuple(a[a0 - 1:a1]), tuple(b[b0 - 1:b1]), r.tokens))
    return tuple(out)


def similarity_html(comparison: Comparison, title: str, links: Mapping[str, str] | None = None,
                    people: Mapping[str, Student] | None = None) -> str:
    """The page: ranked pairs, the top and flagged ones with their shared code side by side. `links`: student ->
    the URL of their report (a batch's folders), else ids only; `people`: student -> who (name, SIS id,
    section), shown under each id."""
    detailed = [p for n, p in enumerate(comparison.pairs) if n < DETAILED or p.flagged][:DETAILED_MAX]
    known_as = {sid: who.known_as for sid, who in (people or {}).items() if who.known_as}
    return template_environment().get_template("similarity.html").render(
        c=comparison, title=title, pairs=comparison.pairs[:LISTED], detailed=detailed, links=links or {},
        known_as=known_as, side_by_side=lambda p: side_by_side(comparison, p), flag=FLAG, k=K, window=WINDOW)


@dataclass(frozen=True)
class SimilaritySummary:
    """What the class report says of the class's similarity: its top pairs and how many are flagged, or why it
    could not be worked out."""

    compared: int = 0
    flagged: int = 0
    top: tuple[Pair, ...] = ()
    page: str = SIMILARITY_HTML
    error: str = ""


def summary(comparison: Comparison, shown: int = 5) -> SimilaritySummary:
    return SimilaritySummary(len(comparison.documents), len(comparison.flagged), comparison.pairs[:shown])


def write_similarity(out_dir: Path, comparison: Comparison, title: str, links: Mapping[str, str] | None = None,
                     people: Mapping[str, Student] | None = None) -> list[Path]:
    """similarity.csv and similarity.html in `out_dir`, each atomically."""
    out_dir = Path(out_dir)
    paths = [out_dir / SIMILARITY_CSV, out_dir / SIMILARITY_HTML]
    write_text(paths[0], similarity_csv(comparison, people))
    write_text(paths[1], similarity_html(comparison, title, links, people))
    return paths
