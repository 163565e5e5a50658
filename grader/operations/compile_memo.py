"""`grader check`'s memory of the interpreter's GPU compile check: the same file, assignment, grader and versions
compile the same way, so a student's second check of unchanged kernels does not wait for the sm_90 compiler again
(1.2 s of a 4.0 s check on a 2-core machine: docs/performance.md).

Only `grader check` uses it (its verdict is the student's own feedback, on the student's machine); a grade, a batch
and every autograder compile afresh. The key is a digest of everything the check's verdict depends on: the file's
bytes, every file of the assignment's folder, every source file of the grader, and Python's, torch's and Triton's
versions.
What is stored is data (the check's CaseResults and notes as JSON), read back through `CaseResult.from_dict`; a
record that does not read back is ignored. Only deterministic verdicts are kept: every kernel compiled, or failed
to compile (gpu-incompatible, a symbol's problem); a check that timed out, crashed or could not start is not.
The folder: $GRADER_CACHE_DIR/compile-checks, else the user's cache (next to the calibration folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from grader import trap_ids
from grader.authoring.spec import Assignment
from grader.environment import versions
from grader.results import CaseResult
from grader.running.timing.calibration import default_folder

MEMO_FORMAT = 1
FOLDER_NAME = "compile-checks"
# Verdicts that say what the compiler made of the file (kept); anything else (a timeout, a crash, a worker that did
# not start) may say more about the machine that day.
DETERMINISTIC_TRAPS = frozenset({trap_ids.GPU_INCOMPATIBLE, trap_ids.COMPILE_ERROR, trap_ids.MISSING_SYMBOL,
                                 trap_ids.WRONG_SIGNATURE})

Checked = tuple[list[CaseResult], list[str]]


def default_memo_folder() -> Path:
    return default_folder().parent / FOLDER_NAME


@lru_cache(maxsize=1)
def grader_digest() -> str:
    """Every source file of the grader package, hashed once per process: a grader changed in any way (a checkout
    being worked on) is another grader."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def memo_key(assignment: Assignment, submission: Path) -> str:
    """The digest of what a compile check's verdict depends on (see the module's docstring)."""
    parts = {"format": MEMO_FORMAT, "assignment": assignment.id,
             "submission": hashlib.sha256(submission.read_bytes()).hexdigest(),
             "assignment_files": _folder_digest(assignment.root), "grader": grader_digest(), "versions": versions()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def keeps(checked: Checked) -> bool:
    """Pure: is this verdict the compiler's alone (every check passed, or failed with a deterministic trap), with
    no note (a note says the check was skipped)?"""
    results, notes = checked
    return not notes and bool(results) and all(
        r.passed or (r.traps and set(r.traps) <= DETERMINISTIC_TRAPS) for r in results)


class CompileMemo:
    """Compile checks remembered in `folder`, one JSON file per key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def load(self, key: str) -> Checked | None:
        try:
            data = json.loads((self.folder / f"{key}.json").read_text(encoding="utf-8"))
            if data.get("format") != MEMO_FORMAT:
                return None
            return [CaseResult.from_dict(r) for r in data["results"]], [str(n) for n in data["notes"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def store(self, key: str, checked: Checked) -> None:
        """Keep `checked` under `key` when `keeps` says so; a folder that cannot be written keeps nothing."""
        if not keeps(checked):
            return
        results, notes = checked
        record = json.dumps({"format": MEMO_FORMAT, "results": [r.to_dict() for r in results], "notes": notes})
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.folder, suffix=".tmp", delete=False,
                                             encoding="utf-8") as handle:
                handle.write(record)
            os.replace(handle.name, self.folder / f"{key}.json")
        except OSError:
            return

    def entries(self) -> Iterable[Path]:
        return sorted(self.folder.glob("*.json")) if self.folder.is_dir() else ()
