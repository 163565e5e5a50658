"""grader/publishing/similarity.py: similarity.csv (every pair sharing code, ranked, with its shared line ranges)
and similarity.html (ranked pairs, the top ones side by side, student code escaped), written atomically; both name
the students as the batch knows them (name, SIS id, section)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from grader.judging.similarity import compare
from grader.publishing.people import Student
from grader.publishing.similarity import CSV_COLUMNS, side_by_side, similarity_csv, similarity_html, write_similarity
from tests.judging.planted import TEMPLATE, planted_class

HOSTILE = ('\n\ndef banner(width, height):\n    text = "</pre><script>alert(1)</script>"\n'
           '    for row in range(height):\n        text = text + "=" * width + str(row)\n'
           '    return text, width * height\n')


def test_csv_ranks_every_pair_with_its_shared_lines() -> None:
    comparison = compare(planted_class(), {"template": TEMPLATE.read_text(encoding="utf-8")})
    rows = list(csv.DictReader(io.StringIO(similarity_csv(comparison))))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == len(comparison.pairs)
    assert [r["rank"] for r in rows] == [str(n) for n in range(1, len(rows) + 1)]
    assert {rows[0]["a"], rows[0]["b"]} in ({"bob", "eve"}, {"cat", "fay"}) and rows[0]["flagged"] == "yes"
    match = {frozenset((r["a"], r["b"])): r["match"] for r in rows}  # eve: bob renamed; fay: cat reordered
    assert match[frozenset(("bob", "eve"))] == "same tokens" and match[frozenset(("cat", "fay"))] == ""
    assert compare({"x": planted_class()["ann"], "y": planted_class()["ann"]}).pairs[0].match == "identical"
    assert rows[0]["regions"].startswith("a:") and "=b:" in rows[0]["regions"]
    assert [float(r["score"]) for r in rows] == sorted((float(r["score"]) for r in rows), reverse=True)
    assert all(r["flagged"] == "" for r in rows[2:])


def test_html_shows_the_shared_code_side_by_side_escaped(tmp_path: Path) -> None:
    texts = planted_class()
    texts["bob"] += HOSTILE
    texts["eve"] += HOSTILE
    comparison = compare(texts, {"template": TEMPLATE.read_text(encoding="utf-8")})
    pair = comparison.pairs[0]
    regions = side_by_side(comparison, pair)
    assert regions and all(r.a_code and r.b_code for r in regions)
    source_a = comparison.documents[pair.a].lines
    assert regions[0].a_code[0] == source_a[regions[0].a_first - 1]
    html = similarity_html(comparison, "Softmax", links={"bob": "bob/report.html"})
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '<a href="bob/report.html">bob</a>' in html and 'id="pair-1"' in html and "flagged" in html
    paths = write_similarity(tmp_path, comparison, "Softmax")
    assert [p.name for p in paths] == ["similarity.csv", "similarity.html"]
    assert all(p.is_file() for p in paths) and not list(tmp_path.glob(".*tmp*"))


def test_both_files_name_each_student_as_the_roster_does() -> None:
    comparison = compare(planted_class(), {"template": TEMPLATE.read_text(encoding="utf-8")})
    people = {"bob": Student("bob", name="Builder, Bob", sid="S-100", section="Sec 1"),
              "eve": Student("eve", name="=Eve", sid="S-200"), "cat": Student("cat", name="Cat; Fay", sid="S-3; S-4"),
              "fay": Student("fay")}
    rows = {(r["a"], r["b"]): r for r in csv.DictReader(io.StringIO(similarity_csv(comparison, people)))}
    bob_eve = rows.get(("bob", "eve")) or rows[("eve", "bob")]
    side = "a" if bob_eve["a"] == "bob" else "b"
    other = "b" if side == "a" else "a"
    assert (bob_eve[f"name_{side}"], bob_eve[f"sid_{side}"], bob_eve[f"section_{side}"]) == ("Builder, Bob", "S-100",
                                                                                              "Sec 1")
    assert (bob_eve[f"name_{other}"], bob_eve[f"sid_{other}"]) == ("'=Eve", "S-200")  # not a spreadsheet formula
    unknown = next(r for r in rows.values() if "fay" in (r["a"], r["b"]) and "cat" not in (r["a"], r["b"]))
    fay = "a" if unknown["a"] == "fay" else "b"
    assert unknown[f"name_{fay}"] == unknown[f"sid_{fay}"] == unknown[f"section_{fay}"] == ""
    html = similarity_html(comparison, "Softmax", people=people)
    assert '<div class="small muted known-as">Builder, Bob · S-100 · Sec 1</div>' in html
    assert "(Builder, Bob · S-100 · Sec 1)" in html  # in the pair's heading too
    assert "Cat; Fay · S-3; S-4" in html and "=Eve · S-200" in html



def test_the_page_says_which_pairs_are_copies() -> None:
    texts = planted_class()
    texts["ann2"] = texts["ann"]  # a byte-identical copy
    html = similarity_html(compare(texts, {"template": TEMPLATE.read_text(encoding="utf-8")}), "Softmax")
    assert '<span class="flag">identical</span>' in html and '<span class="flag">same tokens</span>' in html
    assert "always flagged" in html
