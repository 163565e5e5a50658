"""The Gradescope bundle: what the zip holds (fast), and run_autograder run for real on a temporary
root that stands in for /autograder (the zip unpacked into ROOT/source, run_autograder copied to
ROOT/, the submission in ROOT/submission/), with AUTOGRADER_ROOT and PYTHON (this interpreter:
setup.sh cannot run in a test) set. results.json must be written in every case.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.cli import main
from grader.operations.bundle import BundleOptions, write_bundle
from tests.conftest import all_traps


@pytest.fixture(scope="module")
def assignment(repo_root: Path) -> Assignment:
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    assert main(["--assignments", str(repo_root / "assignments"), "gradescope-bundle", "--assignment",
                 "fused_layers", "--out", str(out)]) == 0
    return out


def test_bundle_contents(bundle: Path, tmp_path: Path, assignment: Assignment, repo_root: Path) -> None:
    with zipfile.ZipFile(bundle) as zf:
        names = set(zf.namelist())
        modes = {info.filename: (info.external_attr >> 16) & 0o777 for info in zf.infolist()}
        manifest = json.loads(zf.read("bundle.json"))
        requirements = zf.read("requirements.txt").decode().splitlines()
        setup = zf.read("setup.sh").decode()
        run = zf.read("run_autograder").decode()
        for name, digest in manifest["sha256"].items():
            assert hashlib.sha256(zf.read(name)).hexdigest() == digest, name
    assert {"setup.sh", "run_autograder", "requirements.txt", "bundle.json"} <= names
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    for needed in ("grader/__init__.py", "grader/cli/main.py", "grader/running/worker/__main__.py",
                   "grader/operations/bundle.py",
                   "grader/authoring/generic_traps.toml", "grader/publishing/templates/report.md.j2",
                   "assignments/fused_layers/assignment.toml", "assignments/fused_layers/oracles.py"):
        assert f"kernel-grader/{needed}" in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # of the course, the contract only: the spec, its oracles and the course's trap library (fused_layers takes
    # eps-outside-sqrt from it); nothing of reference/ or student_template/
    assert {n for n in names if not n.startswith("kernel-grader/grader/")} - {
        "setup.sh", "run_autograder", "requirements.txt", "bundle.json"} == {
        "kernel-grader/assignments/fused_layers/assignment.toml", "kernel-grader/assignments/fused_layers/oracles.py",
        "kernel-grader/traps.toml"}
    with zipfile.ZipFile(bundle) as zf:
        everything = b"".join(zf.read(n) for n in names)
    secrets = [*(repo_root / "reference" / "fused_layers").rglob("*.py"),
               (repo_root / "reference" / "fused_layers" / "mutants.toml")]
    assert len(secrets) > 5 and not [s for s in secrets if s.read_bytes() in everything]
    assert manifest["assignment"] == "fused_layers" and manifest["torch"] == "cpu"
    assert manifest["submission_file"] == assignment.submission_file
    assert requirements[1] == "torch==2.13.0"
    assert not [r for r in requirements[2:] if r.startswith("torch")]
    assert any(r.startswith("pytest-json-report") for r in requirements)
    assert "triton==3.6.0" in requirements  # the Triton pyproject.toml pins: the image grades with the GPU's
    assert "--index-url https://download.pytorch.org/whl/cpu \"torch==2.13.0\"" in setup
    assert 'chmod -R go-rwx "$SRC/kernel-grader/assignments"' in setup
    assert run.startswith("#!/usr/bin/env bash\n") and 'ROOT="${AUTOGRADER_ROOT:-/autograder}"' in run
    # deterministic: the same sources give the same bytes
    again = tmp_path / "again.zip"
    write_bundle(BundleOptions(assignment, again))
    assert again.read_bytes() == bundle.read_bytes()


def test_cuda_bundle_installs_the_default_torch_build(tmp_path: Path, assignment: Assignment) -> None:
    out = write_bundle(BundleOptions(assignment, tmp_path / "gpu.zip", torch="cuda", torch_version="2.11.0",
                                     seed=5))
    with zipfile.ZipFile(out) as zf:
        setup = zf.read("setup.sh").decode()
        run = zf.read("run_autograder").decode()
        manifest = json.loads(zf.read("bundle.json"))
        assert zf.read("requirements.txt").decode().splitlines()[1] == "torch==2.11.0"
    assert '"$VENV/bin/pip" install "torch==2.11.0"' in setup and "whl/cpu" not in setup
    # the seed is in bundle.json (root-only on Gradescope), never on run_autograder's command line
    assert "--assignment fused_layers" in run and "--seed" not in run
    assert (manifest["seed"], manifest["seed_source"]) == (5, "given")


# ------------------------------------------------------------------------------------------- run_autograder


def autograder_root(bundle: Path, root: Path, submission: dict[str, str]) -> Path:
    """Lay out ROOT the way Gradescope does: zip in ROOT/source, run_autograder in ROOT/, submission."""
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(root / "source")
    shutil.copyfile(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    (root / "submission").mkdir()
    for name, text in submission.items():
        (root / "submission" / name).write_text(text, encoding="utf-8")
    return root


def run_autograder(root: Path, python: str = sys.executable) -> tuple[dict[str, Any], str]:
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": python}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    return results, done.stdout + done.stderr


@pytest.mark.slow
def test_run_autograder_grades_the_submission(bundle: Path, tmp_path: Path, reference_source: str) -> None:
    root = autograder_root(bundle, tmp_path / "autograder", {"fused_layers.py": reference_source})
    results, log = run_autograder(root)
    assert results["score"] == results["extra_data"]["max_score"] == 40
    assert all_traps(results) == [] and len(results["tests"]) > 30
    assert all(t["status"] == "passed" for t in results["tests"])
    assert f"kernel-grader from {root / 'source' / 'kernel-grader' / 'grader'}" in log  # the bundled copy ran
    assert stat.S_IMODE((root / "results").stat().st_mode) & 0o022 == 0  # nobody else may write results


@pytest.mark.slow
def test_run_autograder_on_a_crashing_submission(bundle: Path, tmp_path: Path, reference_source: str) -> None:
    root = autograder_root(bundle, tmp_path / "autograder",
                           {"my_kernels.py": "import os\nos._exit(3)\n" + reference_source})
    results, _ = run_autograder(root)  # the only .py file is graded whatever its name
    assert results["score"] == 0 and all_traps(results) == ["crash"]
    assert all(t["status"] == "failed" for t in results["tests"])


def test_run_autograder_without_a_python_file(bundle: Path, tmp_path: Path) -> None:
    root = autograder_root(bundle, tmp_path / "autograder", {"README.txt": "oops"})
    results, _ = run_autograder(root)
    assert results["score"] == 0 and results["tests"] == []
    assert "Could not find `fused_layers.py`" in results["output"]


def test_run_autograder_when_python_cannot_start(bundle: Path, tmp_path: Path) -> None:
    root = autograder_root(bundle, tmp_path / "autograder", {"fused_layers.py": "x = 1\n"})
    results, _ = run_autograder(root, python=str(tmp_path / "no-such-python"))
    assert results["score"] == 0 and results["tests"] == []
    assert "could not start (exit status 127)" in results["output"]


def test_a_bundle_without_a_seed_grades_with_the_course_seed(tmp_path: Path) -> None:
    """Every submission of a bundle is graded with the course's seed (a resubmission draws the same inputs), kept
    in bundle.json, which setup.sh makes root-only; run_autograder reads it there."""
    from grader.authoring.course_seed import read_course_seed
    from grader.authoring.spec import load_assignment
    from grader.operations.bundle import RunPaths, bundled_seed
    from tests.conftest import copy_course

    course_spec = load_assignment(copy_course("fused_layers", tmp_path / "course") / "assignment.toml")
    out = write_bundle(BundleOptions(course_spec, tmp_path / "autograder.zip"))
    seed = read_course_seed(tmp_path / "course")
    assert seed is not None  # created by the bundle, once
    with zipfile.ZipFile(out) as zf:
        manifest = json.loads(zf.read("bundle.json"))
        assert "--seed" not in zf.read("run_autograder").decode()
        assert "chmod -R go-rwx" in zf.read("setup.sh").decode() and "bundle.json" in zf.read("setup.sh").decode()
        zf.extractall(tmp_path / "root" / "source")
    assert (manifest["seed"], manifest["seed_source"]) == (seed.seed, "course")
    assert bundled_seed(RunPaths(tmp_path / "root"), "fused_layers") == (seed.seed, "course")
    assert bundled_seed(RunPaths(tmp_path / "nowhere"), "fused_layers")[1] == "public"  # an older bundle
