"""Jupyter and Colab notebooks as submissions: the code cells, in order, as one Python file.

`notebook_source` is pure: a notebook's JSON (nbformat 4, the format Jupyter and Colab save) in, the
submission's Python text and the lines it dropped out. IPython-only syntax cannot be imported as
Python, so it is dropped and listed: cell magics (a cell whose first line starts with `%%`: the whole
cell), line magics (`%timeit ...`) and shell escapes (`!nvidia-smi`), also as the right-hand side of an
assignment (`x = !ls`). A dropped line inside a block becomes `pass`, so the block stays valid. Lines
inside a multi-line string or an open bracket are never taken for magics. Cells are numbered from 1 in
notebook order, markdown cells included (the order Jupyter and Colab show them in).

`materialise` writes that text under the assignment's submission_file name in a folder of the caller's,
which is what `grader.operations.grade.grade` grades.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NOTEBOOK_SUFFIX = ".ipynb"
_ASSIGNED_MAGIC = re.compile(r"^[A-Za-z_][\w.]*\s*=\s*[!%]")


class NotebookError(Exception):
    """A notebook that cannot be read as nbformat 4; the message names the file and what is wrong."""


@dataclass(frozen=True)
class DroppedLine:
    cell: int  # 1-based position of the cell in the notebook, markdown cells counted
    text: str  # the line as written (for a cell magic: its first line)
    whole_cell: bool = False  # a `%%` cell magic: the whole cell was dropped

    def describe(self) -> str:
        what = "cell magic (whole cell)" if self.whole_cell else "line"
        return f"cell {self.cell}: {what} `{self.text.strip()}`"


@dataclass(frozen=True)
class NotebookSource:
    text: str
    dropped: tuple[DroppedLine, ...]

    def note(self, name: str) -> str:
        """The submission-level note listing what was dropped ('' when nothing was)."""
        if not self.dropped:
            return ""
        lines = "; ".join(d.describe() for d in self.dropped)
        return (f"{name} is a notebook: its code cells were graded in order as one Python file. "
                f"IPython-only lines were dropped ({len(self.dropped)}): {lines}.")


def is_notebook(path: Path) -> bool:
    return path.suffix.lower() == NOTEBOOK_SUFFIX


def read_notebook(text: str, name: str = "notebook") -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise NotebookError(f"{name} is not a readable notebook (invalid JSON: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        major = data.get("nbformat") if isinstance(data, dict) else None
        raise NotebookError(f"{name} is not an nbformat 4 notebook (nbformat {major}, no `cells` list); "
                            "save it from a current Jupyter or Colab")
    return data


def cell_text(cell: Mapping[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def notebook_source(notebook: Mapping[str, Any]) -> NotebookSource:
    """Pure: the code cells of an nbformat-4 notebook as one Python text, IPython-only lines dropped."""
    parts: list[str] = []
    dropped: list[DroppedLine] = []
    for number, cell in enumerate(notebook.get("cells", []), start=1):
        if not isinstance(cell, Mapping) or cell.get("cell_type") != "code":
            continue
        text = cell_text(cell)
        lines = text.splitlines()
        first = next((line for line in lines if line.strip()), "")
        if first.lstrip().startswith("%%"):
            dropped.append(DroppedLine(number, first, whole_cell=True))
            parts.append(f"# cell {number}: cell magic dropped by the grader: {first.strip()}")
            continue
        kept, cell_dropped = _drop_magic_lines(lines, number)
        dropped.extend(cell_dropped)
        parts.append(f"# cell {number}\n" + "\n".join(kept))
    return NotebookSource("\n\n".join(parts).rstrip() + "\n", tuple(dropped))


def _drop_magic_lines(lines: list[str], cell: int) -> tuple[list[str], list[DroppedLine]]:
    kept: list[str] = []
    dropped: list[DroppedLine] = []
    for line in lines:
        stripped = line.lstrip()
        magic = stripped.startswith(("%", "!")) or bool(_ASSIGNED_MAGIC.match(stripped))
        if magic and _at_statement_start(kept):
            indent = line[: len(line) - len(stripped)]
            dropped.append(DroppedLine(cell, line))
            kept.append(f"{indent}pass  # dropped by the grader: {stripped}" if indent else
                        f"# dropped by the grader: {stripped}")
        else:
            kept.append(line)
    return kept, dropped


def _at_statement_start(lines: list[str]) -> bool:
    """Whether the next line after `lines` starts a statement: not inside a string, bracket or `\\`."""
    if lines and lines[-1].rstrip().endswith("\\"):
        return False
    try:
        for _ in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            pass
    except IndentationError:  # the cell's own indentation: not ours to judge
        return True
    except (tokenize.TokenError, SyntaxError):
        return False  # EOF inside a multi-line string or statement
    return True


def materialise(notebook_path: Path, submission_file: str, folder: Path) -> tuple[Path, NotebookSource]:
    """Write the notebook's Python text as `folder/submission_file`; return that path and the source."""
    text = notebook_path.read_text(encoding="utf-8", errors="replace")
    source = notebook_source(read_notebook(text, notebook_path.name))
    path = Path(folder) / submission_file
    path.write_text(source.text, encoding="utf-8")
    return path, source
