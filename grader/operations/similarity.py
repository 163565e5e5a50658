"""Similarity across a class, as a command: `grader similarity SUBMISSIONS --assignment A --out DIR [--allowed
FILE]`, and the step of `grader batch` that writes similarity.csv and similarity.html beside its gradebook.

SUBMISSIONS is any layout `grader batch` reads (grader.operations.batch.submissions). What is discounted: every
`.py` file of the assignment's student template (student_template/<id>/: what every student starts from) and the
allowed sources the course names (`--allowed FILE_OR_FOLDER`, repeatable: a tutorial, lecture code). Notebooks
are compared as their code cells. Informational: nothing here reads or changes a grade.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from grader.authoring.spec import Assignment
from grader.judging.similarity import Comparison, compare
from grader.operations.batch.submissions import Submission, discover_submissions
from grader.operations.notebook import NotebookError, is_notebook, notebook_source, read_notebook
from grader.publishing.people import Student
from grader.publishing.similarity import write_similarity


def read_source(path: Path) -> str:
    """A submission's Python text: the file, or a notebook's code cells ("" for a notebook that is not one)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if not is_notebook(path):
        return text
    try:
        return notebook_source(read_notebook(text, path.name)).text
    except NotebookError:
        return ""


def discounted_sources(assignment: Assignment, allowed: Sequence[Path] = ()) -> dict[str, str]:
    """name -> text of what every student may share: the template's .py files and the allowed files (a folder:
    its .py files and notebooks, recursively)."""
    files: list[Path] = []
    if assignment.template_dir is not None:
        files += sorted(assignment.template_dir.rglob("*.py"))
    for entry in allowed:
        entry = Path(entry)
        if entry.is_dir():
            files += sorted(p for p in entry.rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file())
        elif entry.is_file():
            files.append(entry)
        else:
            raise FileNotFoundError(f"--allowed {entry}: no such file or folder")
    course = assignment.course_root.resolve()
    return {_shown(path, course): read_source(path) for path in files}


def _shown(path: Path, course: Path) -> str:
    """A discounted file's name as the report shows it: relative to the course folder when inside it."""
    try:
        return str(path.resolve().relative_to(course))
    except ValueError:
        return str(path)


def class_sources(submissions: Sequence[Submission]) -> dict[str, str]:
    """student id -> the text of their submission (students without a file are left out)."""
    return {s.id: read_source(s.path) for s in submissions if s.path is not None}


def similarity_files(out: Path, submissions: Sequence[Submission], assignment: Assignment,
                     allowed: Sequence[Path] = (), links: Mapping[str, str] | None = None,
                     people: Mapping[str, Student] | None = None) -> tuple[Comparison, list[Path]]:
    """Compare the class and write similarity.csv and similarity.html into `out`. `people`: student id -> who, as
    the batch knows them (the roster's identity); default: as each submission says (Gradescope's metadata)."""
    comparison = compare(class_sources(submissions), discounted_sources(assignment, allowed))
    people = people if people is not None else {s.id: s.student for s in submissions}
    return comparison, write_similarity(out, comparison, assignment.title, links, people)


def run_similarity(source: Path, assignment: Assignment, out: Path,
                   allowed: Sequence[Path] = ()) -> tuple[Comparison, list[Path]]:
    """`grader similarity`: the submissions in `source` (a folder or a zip) compared, the files written to `out`."""
    discount = discounted_sources(assignment, allowed)  # a missing --allowed fails before anything is written
    with tempfile.TemporaryDirectory(prefix="grader-similarity-") as scratch:
        submissions = discover_submissions(source, assignment.submission_file, Path(scratch))
        comparison = compare(class_sources(submissions), discount)
        out.mkdir(parents=True, exist_ok=True)
        return comparison, write_similarity(out, comparison, assignment.title,
                                            people={s.id: s.student for s in submissions})
