"""Find assignments: `--assignments DIR`, else $GRADER_ASSIGNMENTS, else the checkout's assignments/ (in a
source checkout) or the example assignments shipped inside the installed package (grader/examples/assignments,
copied there by setup.py's build step, without the reference solutions and mutant corpora)."""

from __future__ import annotations

import os
from pathlib import Path

from grader.authoring.mutants import CORPUS_NAMES, load_mutants
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import Assignment, load_assignment
from grader.authoring.validation import validate

SPEC_NAME = "assignment.toml"
BUNDLED_EXAMPLES = Path("examples") / "assignments"  # under the installed grader package


class AssignmentNotFound(Exception):
    def __init__(self, assignment_id: str, root: Path, known: list[str]) -> None:
        super().__init__(
            f"no assignment {assignment_id!r} under {root} (known: {', '.join(known) or 'none'})"
        )


def assignments_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    if explicit:
        return Path(explicit).resolve()
    env = os.environ.get("GRADER_ASSIGNMENTS")
    if env:
        return Path(env).resolve()
    return default_assignments_root()


def default_assignments_root() -> Path:
    """The checkout's assignments/ when the grader runs from a source checkout, else the bundled examples."""
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "assignments").is_dir():
        return checkout / "assignments"
    return package / BUNDLED_EXAMPLES


def list_assignment_ids(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob(f"*/{SPEC_NAME}"))


def find_assignment(assignment_id: str, root: Path) -> Assignment:
    spec = root / assignment_id / SPEC_NAME
    if not spec.is_file():
        raise AssignmentNotFound(assignment_id, root, list_assignment_ids(root))
    return load_validated(spec)


def load_validated(spec: Path) -> Assignment:
    """Load an assignment folder and validate it as a whole (spec, oracles, mutant corpus)."""
    assignment = load_assignment(spec)
    validate(assignment, load_problems(assignment), proven_traps(assignment))
    return assignment


def proven_traps(assignment: Assignment) -> set[str] | None:
    """Every trap some mutant of the folder's corpus must get (any backend); None without a corpus."""
    if not any((assignment.root / name).exists() for name in CORPUS_NAMES):
        return None
    proven: set[str] = set()
    for mutant in load_mutants(assignment.root):
        proven.update(mutant.traps)
        for _, traps in mutant.overrides:
            proven.update(traps)
    return proven


def assignment_for_submission(submission: Path, root: Path) -> Assignment | None:
    """The assignment whose submission_file has this file's name (or, for a notebook, its stem), if exactly
    one does."""
    matches = []
    for assignment_id in list_assignment_ids(root):
        assignment = find_assignment(assignment_id, root)
        wanted = assignment.submission_file
        if submission.suffix.lower() == ".ipynb":
            wanted = Path(wanted).stem + submission.suffix
        if wanted == submission.name:
            matches.append(assignment)
    return matches[0] if len(matches) == 1 else None
