"""grader/publishing/classroom.py: GitHub Classroom's autograding workflow (one step per target, worth its
public cases) and `grader check --target`, which its steps run."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import yaml

from grader.authoring.spec import load_assignment
from grader.cli import main
from grader.publishing.classroom import classroom_steps
from tests.conftest import ASSIGNMENT, SEED


def test_classroom_workflow_shape(tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / ".github" / "workflows" / "classroom.yml"
    assert main(["--assignments", str(repo_root / "assignments"), "classroom-workflow", "--assignment", ASSIGNMENT,
                 "--out", str(out), "--grader-repo", "course/kernel-grader"]) == 0
    assert "autograding steps" in capsys.readouterr().out
    flow = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert flow["on"] == ["push", "repository_dispatch"]
    assert flow["permissions"] == {"checks": "write", "actions": "read", "contents": "read"}
    (job,) = flow["jobs"].values()
    steps = job["steps"]
    graders = [s for s in steps if s.get("uses") == "classroom-resources/autograding-command-grader@v1"]
    (reporter,) = [s for s in steps if s.get("uses") == "classroom-resources/autograding-grading-reporter@v1"]
    assert steps[-1] is reporter
    spec = load_assignment(repo_root / "assignments" / ASSIGNMENT / "assignment.toml")
    public_targets = [t for t in spec.targets if any(c.target == t and c.is_public for c in spec.cases)]
    assert [g["with"]["test-name"] for g in graders] == public_targets
    for step in graders:
        target = step["with"]["test-name"]
        # worth the cases it runs: `check --target T` runs T's public cases
        points = sum(c.points for c in spec.cases_for("interpreter", public_only=True) if c.target == target)
        assert set(step["with"]) == {"test-name", "setup-command", "command", "timeout", "max-score"}
        assert step["with"]["max-score"] == points and step["with"]["timeout"] == 10
        assert step["with"]["command"] == (f"grader --assignments assignments check fused_layers.py --assignment "
                                           f"{ASSIGNMENT} --target {target} --backend interpreter")
        assert reporter["env"][f"{step['id'].upper()}_RESULTS"] == f"${{{{steps.{step['id']}.outputs.result}}}}"
    assert reporter["with"]["runners"] == ",".join(g["id"] for g in graders)
    public_points = sum(c.points for c in spec.cases if c.is_public)
    assert sum(g["with"]["max-score"] for g in graders) == public_points == 6 < spec.max_score
    # nothing of the course is checked out where the student's code (and workflow) runs: the grader is a
    # package, the public assignment is the template repository's own assignments/ (the student bundle's)
    assert not [s for s in steps if s.get("with", {}).get("repository")]
    (install,) = [s for s in steps if "pip install" in s.get("run", "")]
    assert '"kernel-grader @ git+https://github.com/course/kernel-grader"' in install["run"]
    assert "-e " not in install["run"] and ".grader" not in out.read_text(encoding="utf-8")
    assert "public cases only" in out.read_text(encoding="utf-8").lower()

def test_classroom_commands_run_against_the_student_bundle_layout(tmp_path: Path, repo_root: Path) -> None:
    """The template repository is the student bundle's folder: the steps' `--assignments assignments` is there."""
    assert main(["--assignments", str(repo_root / "assignments"), "student-bundle", "--assignment", ASSIGNMENT,
                 "--out", str(tmp_path / "s.zip")]) == 0
    zipfile.ZipFile(tmp_path / "s.zip").extractall(tmp_path / "repo")
    repo = tmp_path / "repo" / ASSIGNMENT
    spec = load_assignment(repo_root / "assignments" / ASSIGNMENT / "assignment.toml")
    for step in classroom_steps(spec):
        assignments = step.command.split("--assignments ")[1].split()[0]
        assert (repo / assignments / ASSIGNMENT / "assignment.toml").is_file()
        assert (repo / step.command.split(" check ")[1].split()[0]).is_file()  # the submission file

def test_check_rejects_an_unknown_target(tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    submission = tmp_path / "fused_layers.py"
    submission.write_text("", encoding="utf-8")
    assert main(["--assignments", str(repo_root / "assignments"), "check", str(submission),
                 "--target", "nope"]) == 2
    assert "no target 'nope' in fused_layers" in capsys.readouterr().err

@pytest.mark.slow
def test_check_target_exits_zero_iff_that_targets_public_cases_pass(tmp_path: Path, repo_root: Path,
                                                                     reference_source: str) -> None:
    broken = 'def layernorm(*args, **kwargs):\n    raise RuntimeError("planted")\n'  # row_mean_var untouched
    submission = tmp_path / "fused_layers.py"
    submission.write_text(reference_source + "\n\n" + broken, encoding="utf-8")
    base = ["--assignments", str(repo_root / "assignments"), "check", str(submission), "--seed", str(SEED),
            "--backend", "interpreter"]
    assert main([*base, "--target", "row_mean_var"]) == 0
    assert main([*base, "--target", "layernorm"]) == 1
