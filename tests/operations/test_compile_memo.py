"""grader/operations/compile_memo.py: `grader check` remembers the interpreter's GPU compile check of the same
bytes (same assignment, grader and versions), keeps only the compiler's own verdicts, and ignores a record it
cannot read; a grade never uses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import trap_ids
from grader.authoring.spec import load_assignment
from grader.operations import compile_memo
from grader.operations.compile_memo import CompileMemo, keeps, memo_key
from grader.results import CaseResult
from grader.running import aot
from tests.conftest import ROOT

ASSIGNMENT = ROOT / "assignments" / "fused_layers" / "assignment.toml"


def _result(kernel: str, passed: bool, traps: tuple[str, ...] = ()) -> CaseResult:
    return aot.compile_result(kernel, passed, "accepted" if passed else "refused", traps)


def test_only_the_compilers_own_verdicts_are_kept() -> None:
    compiled = [_result("a_kernel", True), _result("b_kernel", False, (trap_ids.GPU_INCOMPATIBLE,))]
    assert keeps((compiled, []))
    assert not keeps((compiled, ["GPU compile check skipped: the import timed out"]))  # a note: it was skipped
    assert not keeps(([_result("a_kernel", False, (trap_ids.TIMEOUT,))], []))  # the machine's, that day
    assert not keeps(([_result("a_kernel", False, ())], []))  # no trap: nothing says why
    assert not keeps(([], []))


def test_the_key_follows_the_files_bytes_and_the_grader(tmp_path: Path) -> None:
    assignment = load_assignment(ASSIGNMENT)
    first = tmp_path / "fused_layers.py"
    first.write_text("x = 1\n", encoding="utf-8")
    same = tmp_path / "copy.py"
    same.write_text("x = 1\n", encoding="utf-8")
    assert memo_key(assignment, first) == memo_key(assignment, same)  # bytes, not names
    same.write_text("x = 2\n", encoding="utf-8")
    assert memo_key(assignment, first) != memo_key(assignment, same)
    assert len(compile_memo.grader_digest()) == 64


def test_a_check_of_unchanged_bytes_compiles_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.backends import Backend
    from grader.operations.grading_run import GradingRun

    assignment = load_assignment(ASSIGNMENT)
    submission = tmp_path / "fused_layers.py"
    submission.write_text((ROOT / "reference" / "fused_layers" / "reference.py").read_text(), encoding="utf-8")
    compiled: list[Path] = []

    def fake_check(assignment, path, hidden=(), sandbox=None):
        compiled.append(path)
        return [_result(spec.name, True) for spec, _ in aot.compiled_kernels(assignment)], []

    monkeypatch.setattr(aot, "aot_check", fake_check)
    memo_folder = tmp_path / "memo"

    def check() -> tuple[list, list]:
        run = object.__new__(GradingRun)  # only what compile_check reads: no sandbox, no workers
        run.assignment, run.submission, run.hidden, run.compile_memo = assignment, submission, (), memo_folder
        run.backend = Backend.INTERPRETER
        return run.compile_check()

    first = check()
    second = check()
    assert len(compiled) == 1 and [r.to_dict() for r in first[0]] == [r.to_dict() for r in second[0]]
    (entry,) = CompileMemo(memo_folder).entries()
    entry.write_text("{not json", encoding="utf-8")  # a record that does not read back is ignored
    check()
    assert len(compiled) == 2 and json.loads(entry.read_text(encoding="utf-8"))["format"] == compile_memo.MEMO_FORMAT
    submission.write_text(submission.read_text() + "\n# changed\n", encoding="utf-8")
    check()
    assert len(compiled) == 3  # other bytes: compiled again
