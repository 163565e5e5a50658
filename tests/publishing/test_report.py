"""The report views (grader/publishing/report.py), on hand-made results (fast: nothing is graded).

The rendering tests check what each view shows (trap, input, fix, map; hidden cases withheld for
students) and that student text cannot inject markup into any view. The error maps' geometry is pinned in
test_error_map_view.py, the size budget in test_size_budget.py (with the results made here).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.authoring.spec import Assignment, load_assignment
from grader.judging.error_maps import error_map
from grader.publishing import report
from grader.publishing.jinja_environment import template_environment
from grader.results import CaseResult, GradeResult

ATOL = RTOL = 1e-5
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


# ------------------------------------------------------------------------------------------ views


def failing_case(
    case_id: str, visibility: str, message: str, traps: tuple[str, ...], **evidence: Any
) -> CaseResult:
    return CaseResult(
        case_id=case_id,
        target="fused_linear_gelu_kernel",
        title=f"fused_linear_gelu_kernel: {case_id}",
        visibility=visibility,
        max_score=2.0,
        score=0.0,
        passed=False,
        message=message,
        traps=traps,
        evidence=evidence,
    )


def bias_axis_evidence() -> dict[str, Any]:
    expected = torch.arange(24 * 20, dtype=torch.float64).reshape(24, 20) / 100
    actual = expected.to(torch.float32).clone()
    actual[:, 1:] += 1.0
    actual[20:, :] = float("nan")
    return {
        "dims": {"M": 24, "N": 20, "K": 32},
        "kind": "near-constant",
        "layout": "row-gap",
        "meta": {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16},
        "tolerance": {"profile": "matmul", "atol": ATOL, "rtol": RTOL},
        "comparisons": [
            {
                "output": "out",
                "ok": False,
                "mismatches": 456,
                "numel": 480,
                "nan_mismatches": 80,
                "inf_mismatches": 0,
                "max_abs_error": 1.0,
                "worst_index": [20, 0],
                "worst_actual": "nan",
                "worst_expected": 2.0,
                "summary": "out: 456 of 480 elements differ",
            }
        ],
        "where_wrong": {
            "out": {"wrong": 456, "total": 480, "fraction": 0.95, "rows": "all 24", "cols": "all 20"}
        },
        "error_maps": {"out": error_map(actual, expected, ATOL, RTOL, tile=(16, 16))},
    }


def sample_result(
    public_message: str = "Failed: Bias broadcast along the wrong axis [bias-wrong-axis]",
    hidden_message: str = "hidden detail: M=37 N=19 worst at [36, 18]",
) -> GradeResult:
    passing = CaseResult(
        case_id="linear-kernel-basic",
        target="fused_linear_gelu_kernel",
        title="fused_linear_gelu_kernel: M=20 K=12 N=16",
        visibility="public",
        max_score=1.0,
        score=1.0,
        passed=True,
        message="passed",
    )
    stats = CaseResult(
        case_id="stats-kernel-basic",
        target="row_mean_var_kernel",
        title="row_mean_var_kernel: 5 rows",
        visibility="public",
        max_score=1.0,
        score=0.0,
        passed=False,
        message="out: 3 of 5 elements differ",
        traps=("unknown",),
        evidence={
            "dims": {"M": 5, "N": 10},
            "kind": "random",
            "layout": "contiguous",
            "comparisons": [
                {
                    "output": "mean",
                    "ok": False,
                    "mismatches": 3,
                    "numel": 5,
                    "nan_mismatches": 0,
                    "inf_mismatches": 1,
                    "max_abs_error": 0.5,
                    "worst_index": [4],
                    "worst_actual": "inf",
                    "worst_expected": 0.5,
                    "summary": "mean: 3 of 5 differ",
                }
            ],
        },
    )
    return GradeResult(
        assignment="fused_layers",
        submission="fused_layers.py",
        backend="interpreter",
        seed=7,
        versions={"torch": "2.13"},
        execution_time_s=1.5,
        cases=(
            passing,
            failing_case(
                "linear-kernel-exact",
                "public",
                public_message,
                ("bias-wrong-axis", "oob-read"),
                **bias_axis_evidence(),
            ),
            failing_case(
                "linear-kernel-primes", "hidden", hidden_message, ("bias-wrong-axis",), **bias_axis_evidence()
            ),
            stats,
        ),
    )


def test_html_shows_score_targets_trap_input_fix_and_map(assignment: Assignment) -> None:
    html = report.html(sample_result(), assignment)
    assert '<div class="score" id="score">1 / 6</div>' in html
    for target in ("fused_linear_gelu_kernel", "row_mean_var_kernel"):
        assert f'<a href="#target-{target}"><code>{target}</code></a>' in html
    trap = assignment.traps["bias-wrong-axis"]
    card = html[html.index('id="trap-bias-wrong-axis"') : html.index('id="trap-oob-read"')]
    for text in (trap.title, trap.explanation, trap.exposed_by, trap.section, assignment.chapter):
        assert template_environment().filters["escape"](text) in card, text
    assert "bias = tl.load(bias_ptr + cols, mask=cols &lt; N, other=0.0); acc += bias[None, :]" in card
    words = (
        "M=24 N=20 K=32 · near-constant rows (5.0 + 1e-6 noise) · padded rows (row stride &gt; row length)"
    )
    assert words in card
    assert card.count('<figure class="errmap"') == 1
    assert 'href="data:image/png;base64,' in card
    assert card.count('class="tiles"') == 1 + 1  # one vertical (x=16 of 32) and one horizontal (y=16 of 32)
    assert '<rect class="worst" x="0" y="20"' in card
    # unknown failures show the verbose comparison: count, worst element with index, NaN/inf mismatches
    unknown = html[html.index('id="trap-unknown"') :]
    assert "3 of 5" in unknown and "<code>mean[4]</code>" in unknown and "<code>inf</code>" in unknown
    assert "0 / 1" in unknown
    # one self-contained file: no scripts, no external resources
    assert "<script" not in html and "<link" not in html and not re.search(r'(src|href)="(https?:)?//', html)


def test_students_see_hidden_cases_as_a_count_with_their_points(assignment: Assignment) -> None:
    result = sample_result()
    full = report.html(result, assignment, show_hidden_details=True)
    student = report.html(result, assignment, show_hidden_details=False)
    md = report.markdown(result, assignment, show_hidden_details=False)
    assert "hidden detail: M=37 N=19" in full and "Instructor view" in full and "linear-kernel-primes" in full
    for text in (student, md):
        assert "hidden detail" not in text and "Instructor view" not in text
        assert "linear-kernel-primes" not in text  # no hidden case by id ...
        assert "1 hidden case worth 2 points: results after the due date." in text  # ... only counted
        assert "(hidden)" not in text and "hidden cases:" not in text  # nor their pass/fail
    assert "**Public cases: 1 / 4 points** · 1 of 3 cases passed" in md  # what a student may see now: public only
    assert '<span class="small muted">Public cases</span> 1 / 4</div>' in student
    # the public case's map: in both its trap cards (bias-wrong-axis, oob-read) and in its details
    assert student.count('<figure class="errmap"') == 3


def test_a_trap_only_hidden_cases_show_is_not_in_the_student_view(assignment: Assignment) -> None:
    base = sample_result()
    hidden_only = dataclasses.replace(base.cases[2], traps=("affine-ignored",), message="Failed: [affine-ignored]")
    result = dataclasses.replace(base, cases=(*base.cases[:2], hidden_only, base.cases[3]))
    for show_hidden_details, seen in ((True, True), (False, False)):
        md = report.markdown(result, assignment, show_hidden_details=show_hidden_details)
        html = report.html(result, assignment, show_hidden_details=show_hidden_details)
        title = assignment.traps["affine-ignored"].title
        assert (title in md, "affine-ignored" in md, title in html) == (seen, seen, seen)


@pytest.mark.parametrize(("visibility", "when"), [("hidden", "results not shown"),
                                                  ("after_published", "results when grades are published")])
def test_hidden_visibility_says_when_results_come(assignment: Assignment, visibility: str, when: str) -> None:
    secret = dataclasses.replace(assignment, hidden_visibility=visibility)
    result = sample_result()
    for text in (
        report.html(result, secret, show_hidden_details=False),
        report.markdown(result, secret, show_hidden_details=False),
    ):
        assert "linear-kernel-primes" not in text
        assert f"1 hidden case worth 2 points: {when}." in text
    assert "linear-kernel-primes" in report.html(result, secret, show_hidden_details=True)


def test_markdown_and_terminal_views(assignment: Assignment) -> None:
    result = sample_result()
    md = report.markdown(result, assignment)
    assert md.startswith("# Fused kernels for real layers")
    assert "**Score: 1 / 6** · public cases: 1 of 3 passed · hidden cases: 0 of 1 passed" in md
    assert "### Bias broadcast along the wrong axis (`bias-wrong-axis`) · §20.1" in md
    worst = "- **Worst element** in fused\\_linear\\_gelu\\_kernel: linear-kernel-exact: `out[20, 0]` is nan"
    assert worst in md
    # the text map: column 0 right, the rest wrong (1/(1e-5 + 1e-5 * e) > 1e3x), NaN from row 20, tiles of 16
    assert "\n.333333333333333|3333\n" in md and "\n----------------+----\n" in md
    assert "\nNNNNNNNNNNNNNNNN|NNNN\n```" in md
    terminal = report.terminal(result, assignment)
    # the file as submitted, then the first failure and its trap, then every case
    assert terminal.startswith("fused_layers.py (fused_layers): 1 / 6  (interpreter, seed 7, 1.5 s)\n")
    first = terminal.index("First to fix: fused_linear_gelu_kernel: linear-kernel-exact  [bias-wrong-axis, oob-read]")
    card = terminal.index("== Bias broadcast along the wrong axis (bias-wrong-axis), §20.1")
    listed = terminal.index("FAIL  fused_linear_gelu_kernel: linear-kernel-exact  [bias-wrong-axis, oob-read]  "
                            "(first to fix, above)")
    assert first < card < listed
    assert terminal.index("== Out-of-bounds read (oob-read)") > listed  # the other traps after the cases


def test_reference_like_result_is_all_green(assignment: Assignment) -> None:
    ok = CaseResult(
        case_id="ln",
        target="layernorm",
        title="layernorm: 6 rows",
        visibility="public",
        max_score=1.0,
        score=1.0,
        passed=True,
        message="passed",
    )
    result = GradeResult(
        assignment="fused_layers",
        submission="fused_layers.py",
        backend="interpreter",
        seed=1,
        versions={},
        cases=(ok,),
        execution_time_s=0.1,
    )
    html = report.html(result, assignment)
    assert "None: every case passed." in html and 'class="trap-card"' not in html and "<figure" not in html
    assert "## Mistakes found" not in report.markdown(result, assignment)


# ------------------------------------------------------------------------------------------ escaping


HOSTILE = (
    "Failed: ValueError: " + SCRIPT + " <img src=x onerror=alert(2)> ```\n# heading\n"
    "\x1b[31mred\x1b[0m \x07bell [link](javascript:alert(3))"
)


def test_student_text_cannot_inject_markup(assignment: Assignment) -> None:
    result = dataclasses.replace(
        sample_result(public_message=HOSTILE), notes=(SCRIPT,), submission=f"{SCRIPT}.py"
    )
    html = report.html(result, assignment)
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "\x1b" not in html and "\x07" not in html and "[31mred" not in html


def test_markdown_keeps_student_text_inside_fences(assignment: Assignment) -> None:
    result = dataclasses.replace(sample_result(public_message=HOSTILE), notes=(SCRIPT + " *bold*",))
    md = report.markdown(result, assignment)
    assert "\x1b" not in md
    fenced, outside = split_fences(md)
    assert SCRIPT not in outside and "<img" not in outside and "# heading" not in outside
    # the message, with its ``` inside a ```` fence
    assert any(SCRIPT in block and "```" in block for block in fenced)
    assert "> \\<script\\>alert(1)\\</script\\> \\*bold\\*" in md  # the note, escaped


def split_fences(md: str) -> tuple[list[str], str]:
    """CommonMark fences (possibly indented): the fenced blocks' text, and everything outside them."""
    blocks, outside, current, fence = [], [], [], ""
    for line in md.splitlines():
        stripped = line.strip()
        if not fence and re.match(r"^`{3,}", stripped):
            fence = re.match(r"^`+", stripped).group(0)  # type: ignore[union-attr]
            current = []
        elif fence and re.fullmatch(r"`+", stripped) and len(stripped) >= len(fence):
            blocks.append("\n".join(current))
            fence = ""
        elif fence:
            current.append(line)
        else:
            outside.append(line)
    assert not fence, "unclosed fence"
    return blocks, "\n".join(outside)
