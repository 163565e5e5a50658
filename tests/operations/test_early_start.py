"""grader/operations/early_start.py: `grader grade` and `grader check` start the submission's sandbox (its zygote
imports torch meanwhile) before the command imports torch itself; the early sandbox hides what the grade would
hide, and one made for the other backend flavour is closed, not used."""

from __future__ import annotations

from pathlib import Path

from grader.backends import Backend
from grader.operations.early_start import adopt, start_early


def test_grade_and_check_start_the_sandbox_before_importing_torch(tmp_path: Path, repo_root: Path) -> None:
    """`grader grade` starts the submission's sandbox (its zygote imports torch meanwhile) before the CLI
    imports torch itself; the early sandbox hides what the grade would hide, and one made for the other
    backend flavour is closed, not used."""
    import subprocess
    import sys

    probe = ("import sys, grader.cli, grader.operations.grade_files, grader.operations.check_file; "
             "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"

    submission = tmp_path / "student" / "fused_layers.py"
    submission.parent.mkdir()
    submission.write_text("", encoding="utf-8")
    out = tmp_path / "out"
    root = repo_root / "assignments"
    sandbox = start_early(root, "fused_layers", submission, "interpreter", (str(out),), None)
    assert sandbox is not None
    try:
        hidden = set(sandbox.options.hidden_paths)
        assert {str(out), str(root.resolve()), str((repo_root / "reference").resolve()),
                str(submission.parent.resolve())} <= hidden
        assert adopt(sandbox, Backend.INTERPRETER) is sandbox
    finally:
        sandbox.close()
    fitted = start_early(root, None, tmp_path / "student" / "Copy of fused_layers.py", "interpreter", (), None)
    assert fitted is not None  # a renamed copy fits its assignment here too
    assert adopt(fitted, Backend.CUDA) is None and not fitted.root.exists()  # the wrong flavour: closed
    assert start_early(root, "no_such_assignment", submission, "interpreter", (), None) is None
    assert start_early(root, "fused_layers", submission, "rocm", (), None) is None  # a backend it cannot tell
