"""Find assignments: `--assignments DIR`, else $GRADER_ASSIGNMENTS, else the checkout's assignments/ (in a
source checkout) or the example assignments shipped inside the installed package (grader/examples/assignments,
written there by setup.py's build step in their public form: public cases only, no reference).

An assignments folder sits in a course folder beside reference/ and student_template/ (grader.authoring.spec);
each assignment loads with the paths of its own two."""

from __future__ import annotations

import os
from pathlib import Path

from grader.authoring.mutants import CORPUS_NAMES, Mutant, MutantError, load_mutants
from grader.authoring.spec import Assignment, SpecError, load_assignment, load_public_assignment
from grader.submission_file import fit

SPEC_NAME = "assignment.toml"
BUNDLED_EXAMPLES = Path("examples") / "assignments"  # under the installed grader package


class AssignmentNotFound(Exception):
    def __init__(self, assignment_id: str, root: Path, known: list[str]) -> None:
        super().__init__(
            f"no assignment {assignment_id!r} under {root} (known: {', '.join(known) or 'none'})"
        )


class NoAssignmentsFolder(AssignmentNotFound):
    """`--assignments` (or $GRADER_ASSIGNMENTS) names a folder that is not there."""

    def __init__(self, root: Path) -> None:
        Exception.__init__(self, f"no assignments folder at {root} (check --assignments or $GRADER_ASSIGNMENTS)")
        self.root = root


def require_folder(root: Path) -> Path:
    if not Path(root).is_dir():
        raise NoAssignmentsFolder(Path(root))
    return Path(root)


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


def load_spec(assignment_id: str, root: Path) -> Assignment:
    """The assignment's spec alone (cheap: no oracles, no corpus check), or AssignmentNotFound now: what a command
    checks before it starts anything."""
    spec = require_folder(root) / assignment_id / "assignment.toml"
    if not spec.is_file():
        raise AssignmentNotFound(assignment_id, root, list_assignment_ids(root))
    return load_assignment(spec)


def find_assignment(assignment_id: str, root: Path, public: bool = False) -> Assignment:
    """The assignment `assignment_id` of the folder `root`, validated; with `public`, its public form."""
    spec = require_folder(root) / assignment_id / SPEC_NAME
    if not spec.is_file():
        raise AssignmentNotFound(assignment_id, root, list_assignment_ids(root))
    return load_validated(spec, public)


def load_validated(spec: Path, public: bool = False) -> Assignment:
    """Load an assignment and validate it as a whole (spec, oracles, mutant corpus); with `public`, its
    public form (grader.authoring.public), which has no reference and so no corpus to check against."""
    assignment = load_public_assignment(spec) if public else load_assignment(spec)
    from grader.authoring.oracle_loader import load_problems  # imports torch: only when an assignment loads
    from grader.authoring.validation import validate

    validate(assignment, load_problems(assignment), proven_traps(assignment))
    return assignment


def checked_corpus(assignment: Assignment) -> tuple[Mutant, ...] | None:
    """The mutant corpus of reference/<id>/, every patch applied to today's reference: a stale edit (its
    `find` no longer in the reference, or there a different number of times) fails when the assignment
    loads, as a SpecError naming mutants.toml and the mutant, not first in a selftest. None without a
    corpus."""
    folder = assignment.reference_dir
    if folder is None or not any((folder / name).exists() for name in CORPUS_NAMES):
        return None
    try:
        mutants = load_mutants(folder)
        if assignment.reference_solution is not None:
            text = assignment.reference_solution.read_text(encoding="utf-8")
            for mutant in mutants:
                mutant.source(text, str(assignment.reference_solution))
    except MutantError as exc:
        raise SpecError(exc.origin, f"mutant {exc.mutant_id}" if exc.mutant_id else "", exc.problem) from None
    return mutants


def proven_traps(assignment: Assignment) -> set[str] | None:
    """Every trap some mutant of the corpus (reference/<id>/) must get (any backend); None without a corpus.
    The corpus is checked on the way (`checked_corpus`)."""
    mutants = checked_corpus(assignment)
    if mutants is None:
        return None
    proven: set[str] = set()
    for mutant in mutants:
        proven.update(mutant.traps)
        for _, traps in mutant.overrides:
            proven.update(traps)
    return proven


def assignments_fitting(submission: Path, root: Path, public: bool = False) -> list[Assignment]:
    """The assignments whose submission file this file's name fits (grader.submission_file.fit): those it
    names exactly (`fused_layers.py`, `fused_layers.ipynb`) if any, else those it names once renamed
    (`Copy of fused_layers.py`, `fused_layers (1).py`, `softmax_final.ipynb`)."""
    exact: list[Assignment] = []
    renamed: list[Assignment] = []
    for assignment_id in list_assignment_ids(require_folder(root)):
        assignment = find_assignment(assignment_id, root, public)
        fits = fit(submission.name, assignment.submission_file)
        if fits is not None:
            (renamed if fits.renamed else exact).append(assignment)
    return exact or renamed


def assignment_for_submission(submission: Path, root: Path, public: bool = False) -> Assignment | None:
    """The assignment this file's name fits, if exactly one does."""
    matches = assignments_fitting(submission, root, public)
    return matches[0] if len(matches) == 1 else None
