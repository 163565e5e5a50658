"""The size budget (grader/publishing/size_budget.py): a rendering steps down through the detail levels
until it fits, and a last-resort cut keeps whole lines and closes a code block it left open; on the real
reports too (report.html and report.md of a huge result stay whole and under their budget)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from grader.authoring.spec import Assignment, load_assignment
from grader.judging.error_maps import error_map
from grader.publishing import report
from grader.publishing.size_budget import DETAIL_LEVELS, Detail, open_fence, render_capped
from grader.results import GradeResult
from tests.publishing.test_report import ATOL, RTOL, bias_axis_evidence, failing_case, sample_result, split_fences


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_the_most_detail_that_fits_is_rendered() -> None:
    texts = {DETAIL_LEVELS[0]: "a" * 100, DETAIL_LEVELS[1]: "b" * 50, DETAIL_LEVELS[2]: "c" * 10}
    asked: list[Detail] = []

    def render_at(detail: Detail) -> str:
        asked.append(detail)
        return texts[detail]

    assert render_capped(render_at, None) == "a" * 100 and asked == [DETAIL_LEVELS[0]]  # no budget: all of it
    asked.clear()
    assert render_capped(render_at, 60) == "b" * 50 and asked == list(DETAIL_LEVELS[:2])
    assert render_capped(render_at, 10) == "c" * 10


def test_the_last_resort_cuts_whole_lines_and_closes_the_fence_it_left_open() -> None:
    text = "# title\n```\n" + "line\n" * 100 + "```\n"
    cut = render_capped(lambda detail: text, 80)
    # 80 less the marker leaves 7 whole lines; one more goes to make room for the closing fence
    assert cut == "# title\n```\n" + "line\n" * 6 + "```\n" + "\n[report cut to its size limit]\n"
    assert len(cut) <= 80 and open_fence(cut) == ""


def huge_result() -> GradeResult:
    actual = torch.rand(64, 64, generator=torch.Generator().manual_seed(2))  # every cell a different level
    expected = torch.zeros(64, 64, dtype=torch.float64)
    evidence = bias_axis_evidence()
    evidence["error_maps"] = {
        "out": error_map(
            actual * 10 ** torch.randint(-4, 3, (64, 64)).float(), expected, ATOL, RTOL, tile=(16, 16)
        )
    }
    cases = tuple(
        failing_case(f"case-{i}", "public", f"<b>{i}</b> " + "x" * 5000, ("bias-wrong-axis",), **evidence)
        for i in range(300)
    )
    return dataclasses.replace(sample_result(), cases=cases)


def test_reports_step_down_to_fit_their_budget(assignment: Assignment) -> None:
    result = huge_result()
    assert len(report.html(result, assignment)) > 1_500_000  # too big in full ...
    html = report.html(result, assignment, max_chars=300_000)
    assert len(html) <= 300_000 and html.rstrip().endswith("</html>")  # ... so less detail, still whole
    assert '<div class="score" id="score">0 / 600</div>' in html
    md = report.markdown(result, assignment, show_hidden_details=False, max_chars=20_000)
    assert len(md) <= 20_000 and "**Score: 0 / 600**" in md
    split_fences(md)  # whatever was cut, no fence is left open


def test_open_fence_names_the_fence_a_cut_left_open() -> None:
    assert open_fence("text\n```text\nline\n") == "```"
    assert open_fence("  ````text\n```\nstill inside\n") == "````"  # a shorter run does not close it
    assert open_fence("```\nx\n```\n") == "" and open_fence("plain") == ""
