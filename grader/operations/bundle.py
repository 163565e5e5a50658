"""Gradescope autograder bundle: `grader gradescope-bundle --assignment ID --out autograder.zip`.

The zip holds, at its root (Gradescope unpacks it into /autograder/source):

    setup.sh           run once as root when Gradescope builds the image: a virtual environment with
                       torch (CPU wheel by default, or the CUDA build) and the grader's dependencies;
                       file permissions that keep student code away from the assignment and results
    run_autograder     run as root for every submission (Gradescope copies it to /autograder/)
    requirements.txt   the grader's dependencies, torch pinned
    bundle.json        what was bundled: assignment, grader version, torch, seed
    kernel-grader/     the grader package and this one assignment's contract: its assignment.toml (all
                       cases: Gradescope grades the hidden ones) and the oracle module it names. Nothing
                       of the course's reference/ (reference solution, mutants, variants: correct
                       solutions too) nor its student_template/ is named, so none of it ships

`run_autograder` calls `python -m grader.operations.bundle run`, which finds the submission file in
/autograder/submission, grades it in a process of its own with a wall-clock limit, the way
`grader batch` grades one student (grader.operations.executors.run_job), and writes
/autograder/results/results.json. Student code never runs in the grader's processes: the grader's
worker runs it, and when the grader runs as root (as on Gradescope) the worker drops to the
unprivileged user `nobody` in its own network namespace (grader.running.processes.client), which can neither
read the assignment's hidden cases nor write the results folder. results.json is written whatever
happens (no file, a submission that crashes or hangs, a grader that fails), and
`run_autograder` writes a last-resort one if Python itself cannot start.

AUTOGRADER_ROOT moves /autograder (tests unpack the bundle into a temporary root), PYTHON chooses
the interpreter (default: the bundle's virtual environment).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.atomic import write_json, write_zip
from grader.authoring.spec import Assignment, course_library_path
from grader.backends import Backend
from grader.environment import declared_requirements, requirement_name

BUNDLE_FORMAT_VERSION = 1
PROJECT_DIR = "kernel-grader"
TORCH_VARIANTS = ("cpu", "cuda")
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
DEFAULT_TORCH_VERSION = "2.13.0"


class BundleError(Exception):
    """A problem building the bundle; the message is for the instructor."""


@dataclass(frozen=True)
class BundleOptions:
    assignment: Assignment
    out: Path
    torch: str = "cpu"
    torch_version: str = DEFAULT_TORCH_VERSION
    seed: int | None = None  # None: the course's seed (grader.authoring.course_seed), written into bundle.json


# ------------------------------------------------------------------------------------------- building


def package_root() -> Path:
    return Path(__file__).resolve().parents[1]


def _tree(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"))


def contract_files(assignment: Assignment) -> tuple[Path, ...]:
    """What grading the assignment needs, by name: its spec and the oracle module the spec names."""
    return (assignment.spec_path, assignment.root / assignment.module)


def grader_requirements(torch_version: str) -> list[str]:
    """The grader's runtime dependencies (pyproject.toml, else the installed metadata), torch pinned."""
    requirements = declared_requirements()
    if requirements is None:
        raise BundleError("cannot tell the grader's dependencies: no pyproject.toml, "
                          "and kernel-grader is not installed")
    pinned = [r for r in requirements if requirement_name(r) != "torch"]
    return [f"torch=={torch_version}", *pinned]


def bundle_files(options: BundleOptions) -> dict[str, tuple[bytes, int]]:
    """Every file of the zip: name -> (bytes, permission bits)."""
    if options.torch not in TORCH_VARIANTS:
        raise BundleError(f"--torch must be one of {', '.join(TORCH_VARIANTS)}")
    assignment = options.assignment
    files: dict[str, tuple[bytes, int]] = {}
    for path in _tree(package_root()):
        if path.relative_to(package_root()).parts[0] == "examples":  # an installed package's examples
            continue
        name = f"{PROJECT_DIR}/grader/{path.relative_to(package_root()).as_posix()}"
        files[name] = (path.read_bytes(), 0o644)
    for path in contract_files(assignment):
        name = f"{PROJECT_DIR}/assignments/{assignment.id}/{path.relative_to(assignment.root).as_posix()}"
        files[name] = (path.read_bytes(), 0o644)
    library = course_library_path(assignment.spec_path)
    if assignment.shared_traps and library.is_file():  # the course's trap library, beside assignments/
        files[f"{PROJECT_DIR}/{library.name}"] = (library.read_bytes(), 0o644)
    seed, source = bundle_seed(options)
    requirements = grader_requirements(options.torch_version)
    header = "# kernel-grader's dependencies (generated by `grader gradescope-bundle`)\n"
    files["requirements.txt"] = ((header + "\n".join(requirements) + "\n").encode(), 0o644)
    files["setup.sh"] = (setup_script(options).encode(), 0o755)
    files["run_autograder"] = (run_script(options).encode(), 0o755)
    manifest = {
        "format_version": BUNDLE_FORMAT_VERSION,
        "assignment": assignment.id,
        "submission_file": assignment.submission_file,
        "grader_version": _grader_version(),
        "torch": options.torch,
        "torch_version": options.torch_version,
        "seed": seed,  # bundle.json is readable by root only (setup.sh): the course's seed stays secret
        "seed_source": source,
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, (data, _) in sorted(files.items())},
    }
    files["bundle.json"] = ((json.dumps(manifest, indent=2) + "\n").encode(), 0o644)
    return files


def _grader_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernel-grader")
    except PackageNotFoundError:
        return "source checkout"


def write_bundle(options: BundleOptions) -> Path:
    """Write the zip (deterministically: sorted names, fixed dates) via a temporary file and os.replace."""
    return write_zip(Path(options.out), bundle_files(options))


def setup_script(options: BundleOptions) -> str:
    index = f"--index-url {CPU_TORCH_INDEX} " if options.torch == "cpu" else ""
    torch_install = f'"$VENV/bin/pip" install {index}"torch=={options.torch_version}"'
    return f"""#!/usr/bin/env bash
# Gradescope runs this once, as root, while building the autograder image (kernel-grader bundle for
# assignment {options.assignment.id}; torch {options.torch_version}, {options.torch} build).
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
SRC="$ROOT/source"
VENV="${{GRADER_VENV:-$ROOT/venv}}"

if ! python3 -m venv --help >/dev/null 2>&1; then
  apt-get install -y python3-venv python3-pip
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install --upgrade pip
{torch_install}
"$VENV/bin/pip" install -r "$SRC/requirements.txt"

# The grader runs as root; each worker (the process that imports and runs student code) drops to the
# unprivileged user `nobody` in its own network namespace (grader.running.processes.client). That user must be able
# to run the environment and import the grader's worker package, and must not read the assignment
# (hidden cases, oracles) or write /autograder/results.
chmod -R a+rX "$VENV" "$SRC/{PROJECT_DIR}/grader"
chmod 755 "$SRC" "$SRC/{PROJECT_DIR}"
chmod -R go-rwx "$SRC/{PROJECT_DIR}/assignments" "$SRC/bundle.json" "$SRC/requirements.txt"
mkdir -p "$ROOT/results" && chmod 755 "$ROOT/results"
"$VENV/bin/python" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
"""


def bundle_seed(options: BundleOptions) -> tuple[int, str]:
    """Every submission of the bundle is graded with one seed: the one given, else the course's."""
    from grader.authoring.course_seed import COURSE, GIVEN, ensure_course_seed

    if options.seed is not None:
        return options.seed, GIVEN
    return ensure_course_seed(options.assignment.course_root)[0].seed, COURSE


def run_script(options: BundleOptions) -> str:
    fallback = json.dumps({
        "score": 0,
        "output": "The autograder could not start (exit status STATUS). This is not a problem with your "
                  "submission: please tell the course staff.",
        "visibility": "visible", "stdout_visibility": "hidden", "tests": [],
    })
    return f"""#!/usr/bin/env bash
# Gradescope runs this as root for every submission (kernel-grader, assignment {options.assignment.id}).
# AUTOGRADER_ROOT moves /autograder; PYTHON picks the interpreter (default: the bundle's environment).
set -u
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{PYTHON:-$ROOT/venv/bin/python}}"
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"
export PYTHONPATH="$ROOT/source/{PROJECT_DIR}${{PYTHONPATH:+:$PYTHONPATH}}"
"$PYTHON" -m grader.operations.bundle run --root "$ROOT" --assignment {options.assignment.id}
status=$?
if [ ! -s "$RESULTS" ]; then
  echo '{fallback}' | sed "s/STATUS/$status/" > "$RESULTS"
fi
exit 0
"""


# ------------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def source(self) -> Path:
        return self.root / "source" / PROJECT_DIR

    @property
    def submission(self) -> Path:
        return self.root / "submission"

    @property
    def results(self) -> Path:
        return self.root / "results" / "results.json"


def failure_results(message: str) -> dict[str, Any]:
    """A results.json with score 0 and a message for the student (Gradescope shows `output`)."""
    return {"score": 0, "output": message, "output_format": "md", "visibility": "visible",
            "stdout_visibility": "hidden", "tests": [], "extra_data": {"grader_failure": True}}


def valid_results(data: Any) -> bool:
    return (isinstance(data, dict) and isinstance(data.get("score"), (int, float))
            and isinstance(data.get("tests"), list))


def run_autograder(root: Path, assignment_id: str, seed: int | None = None) -> int:
    """Grade /autograder/submission into /autograder/results/results.json; always write that file."""
    paths = RunPaths(Path(root))
    paths.results.parent.mkdir(parents=True, exist_ok=True)
    print(f"kernel-grader from {package_root()}", flush=True)
    try:
        results = _grade_submission(paths, assignment_id, seed)
    except Exception as exc:  # the grader itself failed: still a results.json, and the details in stdout
        print(f"grading failed: {type(exc).__name__}: {exc}", flush=True)
        results = failure_results("The autograder failed while grading your submission. This is not a "
                                  "problem with your submission: please tell the course staff.")
    write_json(paths.results, results)
    return 0


def _grade_submission(paths: RunPaths, assignment_id: str, seed: int | None) -> dict[str, Any]:
    from grader.authoring.discovery import find_assignment
    from grader.operations.batch import default_grade_timeout, find_submission_file
    from grader.operations.executors import GradeJob, run_job
    assignments = paths.source / "assignments"
    assignment = find_assignment(assignment_id, assignments)
    found, problem = find_submission_file(paths.submission, assignment.submission_file) \
        if paths.submission.is_dir() else (None, "the submission folder is empty")
    if found is None:
        name = assignment.submission_file
        return failure_results(f"Could not find `{name}` in your submission: {problem}. "
                               f"Upload one file named `{name}`.")
    # Graded the way `grader batch` grades one student: a child process with a deadline
    # (grader.operations.executors), which decides the backend itself.
    chosen, source = (seed, "given") if seed is not None else bundled_seed(paths, assignment.id)
    job = GradeJob("submission", found, assignment.id, assignments, "auto", chosen,
                   default_grade_timeout(assignment, Backend.INTERPRETER), seed_source=source)
    work = Path(tempfile.mkdtemp(prefix="grader-run-"))
    try:
        outcome = run_job(job, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if outcome.error:  # why, and the end of the grading process's output: for the staff, hidden from students
        print(outcome.error, flush=True)
    try:
        data = json.loads(outcome.files["results.json"])
    except (KeyError, ValueError):
        data = None
    if not valid_results(data):
        why = outcome.error.splitlines()[0] if outcome.error else "the grader wrote no valid results"
        return failure_results(f"The grader stopped before writing results ({why}). This is not a problem "
                               "with your submission: please tell the course staff.")
    return data  # type: ignore[no-any-return]


def bundled_seed(paths: RunPaths, assignment_id: str) -> tuple[int, str]:
    """The seed bundle.json names (the course's, chosen when the bundle was built). A bundle without one (built
    by an older grader) grades with the assignment's public seed: the same every time, never a fresh draw."""
    from grader.seeds import public_seed

    try:
        data = json.loads((paths.root / "source" / "bundle.json").read_text(encoding="utf-8"))
        seed = data.get("seed")
        if type(seed) is int:
            return seed, str(data.get("seed_source") or "given")
    except (OSError, ValueError, AttributeError):
        pass
    return public_seed(assignment_id), "public"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.operations.bundle")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="grade /autograder/submission (what run_autograder calls)")
    run.add_argument("--root", type=Path, default=Path(os.environ.get("AUTOGRADER_ROOT", "/autograder")))
    run.add_argument("--assignment", required=True)
    run.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    return run_autograder(args.root, args.assignment, args.seed)


if __name__ == "__main__":
    sys.exit(main())
