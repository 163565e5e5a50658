"""Shared fixtures: the checkout's paths, planted-bug copies of the reference, and grading through the CLI.

Submissions are always written into tmp_path; nothing checked in is ever edited. Grading goes through
`grader.cli.main` (the real CLI, in this process) and the test reads the results.json it wrote.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from grader.authoring.mutants import Mutant
from grader.authoring.public import COURSE_TRAPS
from grader.authoring.spec import load_assignment
from grader.cli import main
from grader.operations.selftest import corpus, reference_path
from grader.running.timing.calibration import CACHE_DIR_VARIABLE

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "fused_layers"
SEED = 3


@dataclass(frozen=True)
class Graded:
    """One `grader grade` run: exit code, the parsed results.json, where it was written, what it printed."""

    exit_code: int
    results: dict[str, Any]
    out_dir: Path
    stdout: str

    def tests_for(self, target: str) -> list[dict[str, Any]]:
        return [t for t in self.results["tests"] if t["extra_data"]["target"] == target]

    def test(self, case_id: str) -> dict[str, Any]:
        (found,) = [t for t in self.results["tests"] if t["extra_data"]["case_id"] == case_id]
        return found


def plant(source: str, old: str, new: str, count: int = 1) -> str:
    """Replace `old` by `new` in `source`; `old` must occur exactly `count` times (or, with a negative
    count, at least once and only the first occurrence is replaced)."""
    found = source.count(old)
    if count < 0:
        assert found >= 1, f"{old!r} is not in the source"
        return source.replace(old, new, 1)
    assert found == count, f"{old!r} occurs {found} times, expected {count}"
    return source.replace(old, new)


def corpus_mutant(mutant_id: str, assignment_id: str = ASSIGNMENT) -> tuple[Mutant, str]:
    """A mutant (or variant) of an assignment's corpus and its submission text: a patch applied to the
    reference, or the whole file."""
    assignment = load_assignment(ROOT / "assignments" / assignment_id / "assignment.toml")
    (mutant,) = [m for m in corpus(assignment) if m.id == mutant_id]
    return mutant, mutant.source(reference_path(assignment).read_text(encoding="utf-8"))


COURSE_FOLDERS = ("assignments", "reference", "student_template")


def copy_course(assignment_id: str, course: Path) -> Path:
    """Copy one assignment of the checkout, all three of its folders (and the course's traps.toml), into the
    course folder `course`;
    return the copy's assignment folder (course/assignments/<id>)."""
    for top in COURSE_FOLDERS:
        source = ROOT / top / assignment_id
        if source.is_dir():
            shutil.copytree(source, course / top / assignment_id, ignore=shutil.ignore_patterns("__pycache__"))
    if (ROOT / COURSE_TRAPS).is_file() and not (course / COURSE_TRAPS).exists():  # the course's trap library
        shutil.copy2(ROOT / COURSE_TRAPS, course / COURSE_TRAPS)
    return course / "assignments" / assignment_id


def all_traps(results: dict[str, Any]) -> list[str]:
    """Every trap a results.json names, hidden cases' included: the union of its tests' traps, in order.
    (Its top-level extra_data.traps names only what the public cases show: students may see the top level.)"""
    return list(dict.fromkeys(t for test in results["tests"] for t in test["extra_data"]["traps"]))


def _reject_constant(name: str) -> None:
    raise ValueError(f"results.json contains {name}, which is not JSON")


def read_results(path: Path) -> dict[str, Any]:
    """Parse results.json strictly: NaN/Infinity literals (which Gradescope rejects) are an error."""
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)


def run_grade(submission: Path, out: Path, seed: int = SEED) -> Graded:
    """`grader grade SUBMISSION --out OUT --seed SEED --backend interpreter` through `main(argv)`."""
    argv = ["--assignments", str(ROOT / "assignments"), "grade", str(submission), "--assignment", ASSIGNMENT,
            "--out", str(out), "--seed", str(seed), "--backend", "interpreter"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exit_code = main(argv)
    return Graded(exit_code, read_results(out / "results.json"), out, printed.getvalue())


def skip_outside_ci(reason: str) -> None:
    """Skip for want of something CI provides (chromium, root with unshare, a pip that installs torch); in
    CI (`CI` set, as .ci/run runs) the same is a failure: nothing is skipped there silently."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


def chromium() -> str:
    """Debian's chromium (.ci/run installs it), for the tests that open reports in a real browser."""
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    skip_outside_ci("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def reference_source() -> str:
    return (ROOT / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def planted() -> Callable[..., str]:
    """`planted(old, new, count=1, into=None)`: the reference's text (or `into`) with one bug planted by
    string replacement; chain calls through `into` to plant several."""
    source = (ROOT / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")

    def make(old: str, new: str, count: int = 1, into: str | None = None) -> str:
        return plant(source if into is None else into, old, new, count)

    return make


@pytest.fixture(scope="session")
def grade_text(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Graded]:
    """`grade_text(text, seed=SEED)`: write `text` as fused_layers.py into a fresh temporary folder,
    grade it through the CLI and return the run. Session-scoped so module fixtures can share runs."""

    def grade(text: str, seed: int = SEED) -> Graded:
        folder = tmp_path_factory.mktemp("submission")
        path = folder / "fused_layers.py"
        path.write_text(text, encoding="utf-8")
        return run_grade(path, folder / "out", seed=seed)

    return grade


@pytest.fixture(scope="session")
def reference_graded(tmp_path_factory: pytest.TempPathFactory, reference_source: str) -> Graded:
    """The reference solution graded once per run (a copy in a temporary folder), seed SEED. Under
    pytest-xdist the first worker to ask grades it and the others read its results (under a file lock, as
    xdist's documentation does it): its files are read, never written, by the tests."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # not distributed
        return _grade_reference(tmp_path_factory.mktemp("reference"), reference_source)
    shared = tmp_path_factory.getbasetemp().parent / "reference-graded"  # one folder per run, all workers
    with FileLock(str(shared) + ".lock"):
        record = shared / "graded.json"
        if record.is_file():
            saved = json.loads(record.read_text(encoding="utf-8"))
            return Graded(saved["exit_code"], read_results(shared / "out" / "results.json"), shared / "out",
                          saved["stdout"])
        graded = _grade_reference(shared, reference_source)
        record.write_text(json.dumps({"exit_code": graded.exit_code, "stdout": graded.stdout}), encoding="utf-8")
        return graded


def _grade_reference(folder: Path, text: str) -> Graded:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fused_layers.py"
    path.write_text(text, encoding="utf-8")
    return run_grade(path, folder / "out")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`, each test file runs in one xdist worker (its module fixtures, which grade
    submissions, are computed once) unless a test names a group of its own (the selftest: one per corpus).
    The groups are handed out in collection order (pyproject's --no-loadscope-reorder; xdist would
    otherwise hand out the groups with the most tests first), so the longest come first: the selftest's corpora, then
    the files with slow tests, then the rest (each file's own order kept)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    rank: dict[str, int] = {}
    for item in items:  # a file's rank: its costliest test's (files stay whole, in their own order)
        rank[_file(item)] = min(rank.get(_file(item), 2), _cost_rank(item))
    items.sort(key=lambda item: rank[_file(item)])


def pytest_collection_finish(session: pytest.Session) -> None:
    """In an xdist worker under --dist loadgroup, every test must carry its group in its node id (xdist adds
    `@group`): where it does not (pytest-xdist and pytest out of step), the groups are ignored and each corpus
    is graded in both workers, doubling the suite's time. Stop then, saying so."""
    if "PYTEST_XDIST_WORKER" not in os.environ or not session.config.getvalue("loadgroup") or not session.items:
        return
    ungrouped = [item.nodeid for item in session.items if "@" not in item.nodeid.rsplit("]", 1)[-1]]
    if ungrouped:
        raise pytest.UsageError(f"pytest-xdist's --dist loadgroup is not in effect (pytest {pytest.__version__}): "
                                f"{ungrouped[0]} has no @group in its node id; install the dev extra's pytest")


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def _cost_rank(item: pytest.Item) -> int:
    if _file(item) == "tests/operations/test_selftest.py":
        return 0
    return 1 if item.get_closest_marker("slow") else 2


@pytest.fixture(scope="session", autouse=True)
def private_calibration_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test reads or writes the user's cache of performance bars (grader.running.timing.calibration): the
    default folder, for this process and the grading processes it starts, is a temporary one."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_VARIABLE, str(tmp_path_factory.mktemp("grader-cache")))
        yield
