"""The grader as an installed package, outside the checkout.

Fast: `--assignments` before or after the subcommand, $GRADER_ASSIGNMENTS, the checkout's default, and
setup.py leaving out what the Gradescope bundle leaves out (but the template).
Slow (minutes: a fresh virtual environment with torch): the wheel built from a copy of the checkout,
installed in a temporary venv, and its `grader` run from outside the checkout on the bundled examples and
on a student bundle: list, check, grade. It needs torch==2.13.0 and the grader's dependencies from the
package indexes pip is configured with (offline mirrors here); it skips when pip cannot install them.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.authoring.discovery import assignments_root
from grader.authoring.spec import AUTHORING_ONLY, TEMPLATE_DIR
from grader.cli import main

TORCH = "torch==2.13.0"  # the local CPU wheel; an unpinned torch would pull the CUDA build
EXAMPLES = ("fused_layers", "softmax")
SOURCES = ("pyproject.toml", "setup.py", "README.md", "grader", "assignments")  # what the wheel is built from


def _listed(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]


def test_assignments_option_before_or_after_the_subcommand(repo_root: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(repo_root / "assignments" / "softmax", tmp_path / "softmax")
    assert main(["--assignments", str(tmp_path), "list"]) == 0
    assert _listed(capsys) == ["softmax"]
    assert main(["list", "--assignments", str(tmp_path)]) == 0
    assert _listed(capsys) == ["softmax"]


def test_assignments_root_default_and_environment(repo_root: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRADER_ASSIGNMENTS", raising=False)
    assert assignments_root() == repo_root / "assignments"  # in the checkout
    monkeypatch.setenv("GRADER_ASSIGNMENTS", str(tmp_path))
    assert assignments_root() == tmp_path.resolve()
    assert assignments_root(repo_root) == repo_root.resolve()  # the option wins


def test_setup_leaves_out_the_authoring_material_but_the_template(repo_root: Path) -> None:
    tree = ast.parse((repo_root / "setup.py").read_text())
    shipped_out = next(ast.literal_eval(node.value) for node in tree.body
                       if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "NOT_SHIPPED")
    assert set(shipped_out) == set(AUTHORING_ONLY) - {TEMPLATE_DIR}


# ------------------------------------------------------------------------------------------- slow: the wheel


def _run(argv: list[str], cwd: Path, timeout: float = 900, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADER_ASSIGNMENTS", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a fresh venv with torch and the wheel built from a copy of the checkout."""
    work = tmp_path_factory.mktemp("package")
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        src = repo_root / name
        if src.is_dir():
            shutil.copytree(src, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, source / name)
    wheel_cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(source)]
    built = _run([*wheel_cmd, "--no-build-isolation"], cwd=work)  # this venv's setuptools: offline
    if built.returncode != 0:  # no setuptools here: pip fetches it from the configured indexes
        built = _run(wheel_cmd, cwd=work)
    assert built.returncode == 0, built.stderr
    wheel = next((work / "dist").glob("kernel_grader-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for example in EXAMPLES:
        assert f"grader/examples/assignments/{example}/assignment.toml" in names
    assert not any(n.endswith(("/reference.py", "/mutants.toml")) or "/mutants/" in n or "/variants/" in n
                   for n in names)

    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    assert made.returncode == 0, made.stderr
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    torch = _run([*pip, TORCH], cwd=work)
    if torch.returncode != 0:
        pytest.skip(f"pip cannot install {TORCH} here: {torch.stderr.strip()[-300:]}")
    grader = _run([*pip, str(wheel)], cwd=work)
    assert grader.returncode == 0, grader.stderr
    return venv / "bin"


@pytest.mark.slow
def test_installed_grader_lists_checks_and_grades_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    grader = str(installed / "grader")

    listed = _run([grader, "list"], cwd=tmp_path)  # the bundled examples
    assert listed.returncode == 0, listed.stderr
    assert [line.split(":")[0] for line in listed.stdout.splitlines() if not line.startswith(" ")] == list(EXAMPLES)

    bundled = _run([grader, "student-bundle", "--assignment", "softmax", "--out", "softmax.zip"], cwd=tmp_path)
    assert bundled.returncode == 0, bundled.stderr
    zipfile.ZipFile(tmp_path / "softmax.zip").extractall(tmp_path / "course")
    folder = tmp_path / "course" / "softmax"
    from_env = _run([grader, "list"], cwd=tmp_path, env={"GRADER_ASSIGNMENTS": str(folder / "assignments")})
    assert from_env.stdout.startswith("softmax: ") and "(5 points, 4 cases)" in from_env.stdout, from_env.stderr

    checked = _run([grader, "check", "softmax.py", "--assignments", "assignments", "--backend", "interpreter",
                    "--seed", "1"], cwd=folder)
    assert checked.returncode == 1, checked.stderr  # the template passes nothing; the report says why
    assert checked.stdout.startswith("softmax: 0 / 5  (interpreter, seed 1, ")
    assert "FAIL  softmax_kernel: 4 rows of 10, N(0, 2) logits  [unwritten-output]" in checked.stdout

    graded = _run([grader, "grade", str(folder / "softmax.py"), "--assignment", "softmax", "--out", "out",
                   "--backend", "interpreter", "--seed", "1"], cwd=tmp_path)  # the bundled example: hidden cases
    assert graded.returncode == 0, graded.stderr
    assert graded.stdout.startswith("softmax.py: 0 / ") and (tmp_path / "out" / "results.json").is_file()
