"""report.html in a real browser: Debian's chromium, headless, opening the file from disk.

`--dump-dom` gives the DOM after parsing (what a student's browser builds: no script elements, the
score and trap names as text); `--screenshot` saves what it looks like under the test's tmp dir.
Skipped, with the reason, where chromium is not installed (.ci/run installs it).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from grader.authoring.catalog import trap_catalog
from grader.authoring.spec import Assignment, load_assignment
from grader.publishing import report
from grader.publishing.jinja_environment import template_environment
from tests.conftest import chromium

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)




def open_in_chromium(page: Path, tmp_path: Path, screenshot: Path, window: str = "1200,2000") -> str:
    """Load `page` from disk; save a screenshot; return the rendered DOM."""
    base = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    dom = subprocess.run(
        [*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    subprocess.run(
        [*base, f"--screenshot={screenshot}", f"--window-size={window}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "chromium did not write a PNG screenshot"
    return dom


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_report_renders_score_traps_and_maps_in_chromium(tmp_path: Path, assignment: Assignment) -> None:
    from tests.publishing.test_report import HOSTILE, sample_result

    page = tmp_path / "report.html"
    page.write_text(report.html(sample_result(public_message=HOSTILE), assignment), encoding="utf-8")
    dom = open_in_chromium(page, tmp_path, tmp_path / "report.png")
    assert '<div class="score" id="score">1 / 6</div>' in dom
    for trap in ("bias-wrong-axis", "oob-read", "unknown"):
        title = template_environment().filters["escape"](trap_catalog(assignment)[trap].title)
        assert f'data-trap="{trap}"' in dom and str(title) in dom, trap
    # the public case's map in two trap cards and in its details; the hidden case's in its details
    assert dom.count('<figure class="errmap"') == 4
    assert dom.count("<image ") == 4
    # the student's <script> and <img> stayed text: the browser built no such elements
    assert "<script" not in dom and "<img" not in dom and "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert (tmp_path / "report.png").stat().st_size > 10_000
