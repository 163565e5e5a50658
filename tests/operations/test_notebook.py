"""Notebooks as submissions: the pure conversion, then a notebook built from the reference graded end to end
through `grader.cli.main` (and `--prairielearn`), and the `grader.check` API on it."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from grader.cli import main
from grader.operations.notebook import NotebookError, notebook_source, read_notebook
from tests.conftest import ASSIGNMENT, SEED, read_results


def code(source: str) -> dict[str, Any]:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": source.splitlines(keepends=True)}


def markdown(source: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": [source]}


def notebook(*cells: dict[str, Any]) -> dict[str, Any]:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": list(cells)}


# ------------------------------------------------------------------------------------ fast: the conversion


def test_code_cells_in_order_markdown_left_out() -> None:
    source = notebook_source(notebook(markdown("# Title"), code("a = 1\n"), markdown("text"), code("b = a + 1")))
    assert source.dropped == ()
    assert source.text == "# cell 2\na = 1\n\n# cell 4\nb = a + 1\n"
    namespace: dict[str, Any] = {}
    exec(source.text, namespace)
    assert namespace["b"] == 2


def test_magics_and_shell_escapes_dropped_and_listed() -> None:
    source = notebook_source(notebook(
        code("!pip install triton\nimport math\n%load_ext autoreload\nfiles = !ls\n"),
        code("%%timeit\nmath.sqrt(2)\n"),
        code("if True:\n    %time x = 1\ny = 3\n"),
    ))
    assert [(d.cell, d.text.strip(), d.whole_cell) for d in source.dropped] == [
        (1, "!pip install triton", False), (1, "%load_ext autoreload", False), (1, "files = !ls", False),
        (2, "%%timeit", True), (3, "%time x = 1", False)]
    compile(source.text, "converted.py", "exec")  # a dropped line inside a block leaves `pass`
    assert "math.sqrt" not in source.text
    note = source.note("hw.ipynb")
    assert "cell 1: line `!pip install triton`" in note and "cell 2: cell magic (whole cell) `%%timeit`" in note
    assert "cell 3: line `%time x = 1`" in note


def test_lines_inside_strings_and_brackets_are_not_magics() -> None:
    text = 's = """\n%d items\n!important\n"""\nt = (1 %\n   2)\n'
    source = notebook_source(notebook(code(text)))
    assert source.dropped == ()
    namespace: dict[str, Any] = {}
    exec(source.text, namespace)
    assert namespace["s"] == "\n%d items\n!important\n" and namespace["t"] == 1


def test_unreadable_notebooks_are_user_errors() -> None:
    with pytest.raises(NotebookError, match="hw.ipynb is not a readable notebook"):
        read_notebook("{not json", "hw.ipynb")
    with pytest.raises(NotebookError, match="not an nbformat 4 notebook"):
        read_notebook(json.dumps({"nbformat": 3, "worksheets": []}), "hw.ipynb")


def test_import_grader_does_not_import_torch() -> None:
    probe = "import sys, grader; assert callable(grader.check); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------------ slow: graded end to end


def reference_notebook(reference_source: str) -> dict[str, Any]:
    """The reference split into cells at its top-level blank-line gaps, with a markdown cell, a `%timeit`
    line and a `!nvidia-smi` cell, as a student's notebook would have them."""
    chunks = [c for c in reference_source.split("\n\n\n") if c.strip()]
    cells = [markdown("# Fused layers\nMy solution."), code("!nvidia-smi\n")]
    cells += [code(chunk + "\n") for chunk in chunks]
    cells.append(code("x = torch.randn(4, 8)\n%timeit layernorm(x, torch.ones(8), torch.zeros(8))\n"))
    return notebook(*cells)


@pytest.fixture(scope="module")
def notebook_path(tmp_path_factory: pytest.TempPathFactory, reference_source: str) -> Path:
    path = tmp_path_factory.mktemp("nb") / "fused_layers.ipynb"
    path.write_text(json.dumps(reference_notebook(reference_source)), encoding="utf-8")
    return path


@pytest.mark.slow
def test_reference_notebook_gets_full_marks_and_lists_dropped_lines(notebook_path: Path, repo_root: Path,
                                                                  reference_source: str) -> None:
    out = notebook_path.parent / "out"
    code_ = main(["--assignments", str(repo_root / "assignments"), "grade", str(notebook_path), "--assignment",
                  ASSIGNMENT, "--out", str(out), "--seed", str(SEED), "--backend", "interpreter", "--prairielearn"])
    assert code_ == 0
    results = read_results(out / "results.json")
    assert results["score"] == results["extra_data"]["max_score"] > 0
    n_cells = len(reference_notebook(reference_source)["cells"])
    (note,) = [n for n in results["extra_data"]["notes"] if "is a notebook" in n]
    assert "cell 2: line `!nvidia-smi`" in note
    assert f"cell {n_cells}: line `%timeit layernorm(x, torch.ones(8), torch.zeros(8))`" in note
    grade = json.loads((out / "grade.json").read_text(encoding="utf-8"))
    assert grade["submission"] == "fused_layers.ipynb"
    assert "!nvidia-smi" in (out / "report.md").read_text(encoding="utf-8")
    assert "%timeit" in (out / "report.html").read_text(encoding="utf-8")
    prairielearn = json.loads((out / "prairielearn.json").read_text(encoding="utf-8"))
    assert prairielearn["gradable"] is True and prairielearn["score"] == 1.0
    # PrairieLearn shows everything at once: the tests Gradescope shows before the due date, hidden ones counted
    assert len(prairielearn["tests"]) == len([t for t in results["tests"] if t["visibility"] == "visible"])
    assert prairielearn["message"].endswith(f"hidden cases worth {results['extra_data']['hidden_cases']['points']:g} "
                                            "points")


class FakeIPython(types.ModuleType):
    """IPython's `get_ipython` and `IPython.display`'s `HTML`/`display`, recording what was displayed."""

    def __init__(self) -> None:
        super().__init__("IPython")
        self.shown: list[str] = []
        display = types.ModuleType("IPython.display")
        display.HTML = lambda data: ("html", data)  # type: ignore[attr-defined]
        display.display = lambda obj: self.shown.append(obj[1])  # type: ignore[attr-defined]
        self.display = display
        self.get_ipython = lambda: object()


@pytest.mark.slow
def test_check_api_on_the_notebook_shows_the_html_report(notebook_path: Path, repo_root: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import grader

    fake = FakeIPython()
    monkeypatch.setitem(sys.modules, "IPython", fake)
    monkeypatch.setitem(sys.modules, "IPython.display", fake.display)
    result = grader.check(notebook_path, target="row_mean_var", backend="interpreter", seed=SEED,
                          assignments=repo_root / "assignments")
    assert result.public_only and result.cases
    assert {c.target for c in result.cases} == {"row_mean_var"}
    assert result.score == result.max_score > 0
    assert result.submission == "fused_layers.ipynb"
    (html,) = fake.shown
    assert html.lstrip().lower().startswith("<!doctype html") and "row_mean_var" in html


@pytest.mark.slow
def test_batch_grades_a_students_notebook_and_writes_canvas_csv(notebook_path: Path, repo_root: Path,
                                                                tmp_path: Path) -> None:
    folder = tmp_path / "submissions" / "alice"
    folder.mkdir(parents=True)
    (folder / "fused_layers.ipynb").write_bytes(notebook_path.read_bytes())
    (folder / "scratch.ipynb").write_text(json.dumps(notebook()), encoding="utf-8")  # not the one graded
    out = tmp_path / "out"
    assert main(["--assignments", str(repo_root / "assignments"), "batch", str(tmp_path / "submissions"),
                 "--assignment", ASSIGNMENT, "--out", str(out), "--seed", str(SEED), "--backend", "interpreter",
                 "--workers", "1", "--canvas-column", "Fused layers (12345)"]) == 0
    book = json.loads((out / "gradebook.json").read_text(encoding="utf-8"))
    (row,) = book["rows"]
    assert (row["student"], row["status"]) == ("alice", "graded")
    assert row["score"] == row["max_score"] > 0
    notes = json.loads((out / "alice" / "grade.json").read_text(encoding="utf-8"))["notes"]
    assert any("cell 2: line `!nvidia-smi`" in n for n in notes)
    lines = (out / "canvas.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "Student,ID,SIS User ID,SIS Login ID,Section,Fused layers (12345)"
    assert lines[1] == f"Points Possible,,,,,{row['max_score']:g}"
    assert lines[2] == f"alice,,alice,,,{row['score']:g}"


def test_batch_finds_notebooks(tmp_path: Path) -> None:
    from grader.operations.batch import discover_submissions

    root = tmp_path / "in"
    (root / "alice").mkdir(parents=True)
    (root / "alice" / "fused_layers.ipynb").write_text("{}", encoding="utf-8")
    (root / "alice" / "helper.py").write_text("", encoding="utf-8")  # the assignment's notebook comes first
    (root / "carl").mkdir()
    (root / "carl" / "work.ipynb").write_text("{}", encoding="utf-8")  # the only notebook, no .py
    (root / "bob.ipynb").write_text("{}", encoding="utf-8")
    found = {s.id: s for s in discover_submissions(root, "fused_layers.py", tmp_path / "scratch")}
    assert {k: (s.path.name if s.path else None) for k, s in found.items()} == {
        "alice": "fused_layers.ipynb", "bob": "bob.ipynb", "carl": "work.ipynb"}
