"""grader/running/cases/cpu_companion.py without a worker: whether a submission makes promises worth checking on
the CPU (read, never run), and which cases a CPU grade would check them on. (The companion at work, on
a GPU grade: tests/judging/test_faults.py, tests/e2e/test_gpu_faults.py.)"""

from __future__ import annotations

from pathlib import Path

from grader.authoring.spec import load_assignment
from grader.running.cases.cpu_companion import hint_check_cases, makes_promises
from tests.conftest import ROOT


def test_makes_promises(tmp_path: Path) -> None:
    promising = tmp_path / "a.py"
    promising.write_text("offs = tl.max_contiguous(tl.multiple_of(offs, 16), 16)\n", encoding="utf-8")
    plain = tmp_path / "b.py"
    plain.write_text("offs = tl.arange(0, BLOCK)\n", encoding="utf-8")
    assert makes_promises(promising) and not makes_promises(plain) and not makes_promises(tmp_path / "absent.py")


def test_hint_check_cases_are_the_interpreter_s() -> None:
    assignment = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    assert hint_check_cases(assignment) == assignment.cases_for("interpreter")
    public = hint_check_cases(assignment, public_only=True, targets=frozenset({"softmax"}))
    assert public and all(c.is_public and c.target == "softmax" for c in public)
