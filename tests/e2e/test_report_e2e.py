"""Reports end to end: submissions written into tmp_path, graded by the real CLI, report files read.

Each grading run costs about ten seconds on the interpreter, so each submission is graded once (module
fixtures) and asserted on by the tests that need it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from grader.authoring.catalog import trap_catalog
from grader.authoring.spec import Assignment, load_assignment
from grader.publishing.report import template_environment
from tests.conftest import all_traps, corpus_mutant

pytestmark = pytest.mark.slow

ONE_MB = 1_000_000
LN_WRAPPER_LINE = "    out = torch.empty_strided((M, N), (x.stride(0), 1), device=x.device, dtype=x.dtype)\n"
RAISED = "<script>alert(1)</script>"
PRINTED = "<script>alert(2)</script>"
MUTANTS = ("bias_wrong_axis", "store_mask_off_by_one", "eps_outside_sqrt")
# Mutants whose outputs are wrong (store_mask_off_by_one's values are right: only its guards fail).
WRONG_VALUE_MUTANTS = ("bias_wrong_axis", "k_tail_unmasked", "eps_outside_sqrt")


@pytest.fixture(scope="module")
def spec(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


@pytest.fixture(scope="module")
def mutant(repo_root: Path, grade_text: Callable) -> Callable:
    """`mutant(name)`: that mutant of the corpus graded through the CLI, once per module."""
    graded: dict[str, object] = {}

    def grade(name: str):
        if name not in graded:
            graded[name] = grade_text(corpus_mutant(name)[1])
        return graded[name]

    return grade


def html_escape(text: str) -> str:
    return str(template_environment().filters["escape"](text))


def read(graded, name: str) -> str:
    return (graded.out_dir / name).read_text(encoding="utf-8")


def test_exception_message_cannot_inject_markup(planted, grade_text) -> None:
    body = f"    print({PRINTED!r})\n    raise ValueError({RAISED!r} + ' <b>bold</b>')\n"
    graded = grade_text(planted(LN_WRAPPER_LINE, body))
    assert graded.exit_code == 0
    failed = graded.tests_for("layernorm")
    assert failed and all(t["tags"] == ["runtime-error"] for t in failed)
    assert all(RAISED in t["output"] for t in failed)  # the message itself reaches the results ...
    html = read(graded, "report.html")
    assert RAISED not in html and "<b>bold</b>" not in html and "<script" not in html  # ... never as markup
    assert html_escape(RAISED) in html and "&lt;b&gt;bold&lt;/b&gt;" in html
    from tests.publishing.test_report import split_fences

    fenced, outside = split_fences(read(graded, "report.md"))
    assert RAISED not in outside and any(RAISED in block for block in fenced)


def test_100_mb_of_output_still_gives_small_reports(
    reference_source: str, grade_text, spec: Assignment
) -> None:
    # 100 MB of printing at import (the worker's output file stops it at 64 MB), then an exit, so the
    # report quotes the output's tail
    flood = (
        "import os, sys\n"
        f"_LINE = {PRINTED!r} + 'x' * 1000 + '\\n'\n"
        "try:\n"
        "    for _ in range(100_000):\n"
        "        sys.stdout.write(_LINE)\n"
        "except OSError:\n"
        "    pass\n"
        "os._exit(3)\n"
    )
    graded = grade_text(flood + reference_source)
    assert graded.exit_code == 0
    assert graded.results["score"] == 0
    assert {tag for t in graded.results["tests"] for tag in t["tags"]} == {"crash"}
    for name in ("results.json", "report.html", "report.md", "grade.json"):
        assert (graded.out_dir / name).stat().st_size < ONE_MB, name
    html = read(graded, "report.html")
    assert f'<div class="score" id="score">0 / {spec.max_score:g}</div>' in html
    assert html.rstrip().endswith("</html>")
    assert PRINTED not in html and html_escape(PRINTED) in html  # the output's tail is shown, escaped


def test_reference_report_is_all_green(reference_graded, spec: Assignment) -> None:
    html = read(reference_graded, "report.html")
    assert f'<div class="score" id="score">{spec.max_score:g} / {spec.max_score:g}</div>' in html
    assert "None: every case passed." in html and 'class="trap-card"' not in html and "<figure" not in html
    assert html.count('data-passed="true"') == len(reference_graded.results["tests"])
    md = read(reference_graded, "report.md")
    assert f"**Score: {spec.max_score:g} / {spec.max_score:g}**" in md and "## Mistakes found" not in md
    assert reference_graded.results["output"].startswith(f"# {spec.title}")


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_report_names_every_trap_with_its_fix(name: str, mutant, spec: Assignment) -> None:
    graded = mutant(name)
    catalog = trap_catalog(spec)
    traps = all_traps(graded.results)
    assert traps, "the mutant was graded as correct"
    html, md = read(graded, "report.html"), read(graded, "report.md")
    assert f'<div class="score" id="score">{graded.results["score"]:g} / {spec.max_score:g}</div>' in html
    for trap in traps:
        card = html[html.index(f'data-trap="{trap}"') :]
        card = card[: card.index("</section>")]
        text = catalog[trap]
        for part in (text.title, text.explanation, text.fix):
            assert html_escape(part) in card, (trap, part)
        if text.section:
            assert text.section in card
        assert "Your failures" in card and " · " in card  # the input: dims · kind · layout
        assert f"(`{trap}`)" in md
    # Gradescope's output is the student view: no hidden case's message
    student = graded.results["output"]
    for test in graded.results["tests"]:
        if test["visibility"] != "visible" and test["status"] == "failed":
            assert test["output"] not in student


@pytest.mark.parametrize("name", WRONG_VALUE_MUTANTS)
def test_mutant_report_draws_error_maps(name: str, mutant) -> None:
    graded = mutant(name)
    cases = json.loads(read(graded, "grade.json"))["cases"]
    mapped = [c for c in cases if c["evidence"].get("error_maps")]
    wrong = [c for c in cases if any(not x["ok"] for x in c["evidence"].get("comparisons", []))]
    assert wrong, "the mutant should produce wrong values"
    assert {c["case_id"] for c in mapped} == {c["case_id"] for c in wrong}, "every wrong case has an error map"
    html = read(graded, "report.html")
    for case in mapped:
        row = html[html.index(f'data-case="{case["case_id"]}"') :]
        row = row[: row.index("</details>")]
        assert row.count('<figure class="errmap"') == len(case["evidence"]["error_maps"]), case["case_id"]
        assert 'href="data:image/png;base64,' in row


def test_failing_report_in_chromium(mutant, tmp_path: Path, spec: Assignment) -> None:
    from tests.publishing.test_report_browser import open_in_chromium

    graded = mutant("bias_wrong_axis")
    dom = open_in_chromium(graded.out_dir / "report.html", tmp_path, tmp_path / "bias_wrong_axis.png")
    assert f'id="score">{graded.results["score"]:g} / {spec.max_score:g}<' in dom
    catalog = trap_catalog(spec)
    for trap in all_traps(graded.results):
        assert html_escape(catalog[trap].title) in dom, trap


# ------------------------------------------------------------------------------------ what students read


def _section(md: str, title: str) -> str:
    part = md[md.index(f"### {title}") + 4:]
    return part[: part.index("\n### ")]


def test_gradescope_shows_public_cases_only_before_the_due_date(mutant, spec: Assignment) -> None:
    graded = mutant("eps_outside_sqrt")
    results = graded.results
    visible = json.dumps({k: v for k, v in results.items() if k != "tests"}) + json.dumps(
        [t for t in results["tests"] if t["visibility"] == "visible"])
    hidden = [c for c in spec.cases if not c.is_public]
    for case in hidden:
        assert f'"{case.id}"' not in visible and case.id not in results["output"], case.id
        assert f"{case.target}: {case.description}" not in visible.replace("\\\\", ""), case.id
    assert f"{len(hidden)} hidden cases worth {sum(c.points for c in hidden):g} points: results after the due date" \
        in results["output"]
    assert "hidden cases:" not in results["output"] and "(hidden)" not in results["output"]
    assert {t["visibility"] for t in results["tests"] if t["extra_data"]["case_id"] in {c.id for c in hidden}} == {
        "after_due_date"}
    public_traps = {t for test in results["tests"] if test["visibility"] == "visible" for t in test["tags"]}
    assert set(results["extra_data"]["traps"]) <= public_traps


def test_a_trap_explained_away_is_named_nowhere_in_its_case(mutant) -> None:
    cases = json.loads(read(mutant("eps_outside_sqrt"), "grade.json"))["cases"]
    away = [c for c in cases if c["evidence"].get("explained_away")]
    assert away, "eps_outside_sqrt has cases where eps-missing gives the same output"
    for case in cases:
        head = case["message"].splitlines()[0]
        if head.startswith("Failed: "):
            assert sorted(re.findall(r"\[([a-z0-9-]+)\]", head)) == sorted(case["traps"]), case["case_id"]
        assert "not named" not in case["message"]
    for case in away:
        for trap in case["evidence"]["explained_away"]:
            assert trap not in case["message"] and trap not in case["traps"]


def test_each_trap_shows_an_element_that_shows_it(mutant) -> None:
    md = read(mutant("bias_wrong_axis"), "report.md")
    bias = _section(md, "Bias broadcast along the wrong axis")
    oob = _section(md, "Out-of-bounds read")
    (bias_element,) = re.findall(r"\*\*Worst element\*\* in .*` is (\S+), expected", bias)
    (oob_element,) = re.findall(r"\*\*Worst element\*\* in .*` is (\S+), expected", oob)
    assert bias_element != "nan" and oob_element == "nan"  # the bias's arithmetic; the NaN read from outside


def test_the_trap_example_is_the_case_that_shows_it_best(mutant) -> None:
    """Not the first failing case (eps-missing can leave a random row one element barely off): the one whose
    element showing the trap is furthest beyond tolerance (a NaN from 0/0 on a constant row counts as furthest)."""
    graded = mutant("eps_missing")
    section = _section(read(graded, "report.md"), "No eps in the normalisation")
    (shown,) = re.findall(r"\*\*Worst element\*\* in (.*?): `", section)
    cases = [c for c in json.loads(read(graded, "grade.json"))["cases"] if "eps-missing" in c["traps"]]

    def strength(case: dict) -> float:
        tol = case["evidence"]["tolerance"]
        best = 0.0
        for element in case["evidence"].get("illustrations", {}).get("eps-missing", {}).values():
            if isinstance(element["actual"], str) or isinstance(element["expected"], str):
                return float("inf")
            allowed = tol["atol"] + tol["rtol"] * abs(element["expected"])
            best = max(best, abs(element["actual"] - element["expected"]) / allowed)
        return best

    best = max(strength(c) for c in cases)
    assert len(cases) > 3 and strength(cases[0]) < best  # the first failing case is not the clearest one
    assert [strength(c) for c in cases if c["title"].replace("_", "\\_") == shown or c["title"] == shown] == [best]


def test_an_untouched_template_is_told_it_writes_nothing(grade_text, repo_root: Path) -> None:
    template = (repo_root / "student_template" / "fused_layers" / "fused_layers.py").read_text(encoding="utf-8")
    graded = grade_text(template)
    md = read(graded, "report.md")
    assert "Your kernel has not written any output yet: the template's TODO is still there" in md
    cases = json.loads(read(graded, "grade.json"))["cases"]
    kernel_cases = [c for c in cases if c["target"].endswith("_kernel") and "unwritten-output" in c["traps"]]
    assert kernel_cases and all(": your kernel wrote nothing to " in c["message"] for c in kernel_cases)
