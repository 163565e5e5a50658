"""The grader as an installed package, outside the checkout.

Fast: `--assignments` before or after the subcommand, $GRADER_ASSIGNMENTS, the checkout's default, and the
wheel built from a copy of the checkout (reference/ included, seconds: this venv's setuptools, no
install): it ships each example's public form, oracles and template, and no hidden case and nothing of
reference/, by name or by content.
Slow (a fresh virtual environment): that wheel, installed in a temporary venv by pip (which checks its
dependencies), and its `grader` run from outside the checkout on the bundled examples and on a student
bundle: list, check, grade. The venv borrows this interpreter's installed dependencies (torch, triton,
...) through a .pth path entry instead of installing torch again; GRADER_TEST_FULL_INSTALL=1 installs
torch==2.13.0 into it from the package indexes pip is configured with (a minute more; it skips outside CI
when pip cannot).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.authoring.discovery import BUNDLED_EXAMPLES, assignments_root, list_assignment_ids, load_validated
from grader.authoring.public import hidden_case_ids
from grader.authoring.spec import read_spec
from grader.cli import main
from tests.conftest import skip_outside_ci

TORCH = "torch==2.13.0"  # the local CPU wheel; an unpinned torch would pull the CUDA build
EXAMPLES = ("attention", "fused_layers", "softmax")
# what the wheel is built from: the whole course folder, reference/ included, so leaving it out is tested
SOURCES = ("pyproject.toml", "setup.py", "README.md", "traps.toml", "grader", "assignments", "reference",
           "student_template")


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


# ------------------------------------------------------------------------------------------- slow: the wheel


def _run(argv: list[str], cwd: Path, timeout: float = 900, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADER_ASSIGNMENTS", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _build_wheel(repo_root: Path, work: Path) -> Path:
    """The wheel built from a copy of the checkout (no install): `pip wheel --no-deps`, with this venv's
    setuptools (offline), else with the setuptools pip fetches from the configured indexes."""
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        src = repo_root / name
        if src.is_dir():
            shutil.copytree(src, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(src, source / name)
    wheel_cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(source)]
    built = _run([*wheel_cmd, "--no-build-isolation"], cwd=work)
    if built.returncode != 0:
        built = _run(wheel_cmd, cwd=work)
    assert built.returncode == 0, built.stderr
    return next((work / "dist").glob("kernel_grader-*.whl"))


@pytest.fixture(scope="module")
def wheel(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(repo_root, tmp_path_factory.mktemp("wheel"))


def test_the_wheel_ships_public_forms_and_templates_only(wheel: Path, repo_root: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        everything = b"\n".join(zf.read(n) for n in names)
        shipped_examples = b"\n".join(zf.read(n) for n in names if n.startswith("grader/examples/"))
        zf.extractall(tmp_path / "installed")
    examples = sorted(n for n in names if n.startswith("grader/examples/"))
    assert examples == sorted(
        [f"grader/examples/assignments/{e}/{f}" for e in EXAMPLES for f in ("assignment.toml", "oracles.py")]
        + [f"grader/examples/student_template/{e}/{f}" for e in EXAMPLES for f in ("README.md", f"{e}.py")])
    # nothing of reference/ by content (each file, and each reference's first kernel), nor by name
    secrets = [p for p in (repo_root / "reference").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(secrets) >= 10
    assert not [str(p) for p in secrets if p.read_bytes() in everything]
    for example in EXAMPLES:
        text = (repo_root / "reference" / example / "reference.py").read_text()
        start = text.index("@triton.jit")
        assert text[start:text.index("\n\n", start)].encode() not in everything, example
    # no hidden case in what the wheel ships of the course: each example has exactly its public cases
    installed = tmp_path / "installed" / "grader" / BUNDLED_EXAMPLES
    assert list_assignment_ids(installed) == list(EXAMPLES)
    for example in EXAMPLES:
        raw = read_spec(repo_root / "assignments" / example / "assignment.toml")
        hidden = hidden_case_ids(raw)
        assert len(hidden) >= 10
        assert not [h for h in hidden if f'"{h}"'.encode() in shipped_examples], example
        shipped = load_validated(installed / example / "assignment.toml")
        assert [c.id for c in shipped.cases] == [c["id"] for c in raw["cases"] if c["visibility"] == "public"]
        assert shipped.reference_solution is None and shipped.reference_dir is None
        assert shipped.template_dir == installed.parent / "student_template" / example


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a fresh venv with torch and the wheel built from a copy of the checkout."""
    work = tmp_path_factory.mktemp("package")
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if os.environ.get(FULL_INSTALL):
        torch = _run([*pip, TORCH], cwd=work)
        if torch.returncode != 0:
            skip_outside_ci(f"pip cannot install {TORCH} here: {torch.stderr.strip()[-300:]}")
        grader = _run([*pip, str(wheel)], cwd=work)
    else:
        borrow_dependencies(python)
        # the borrowed folder holds this checkout's editable kernel-grader of the same version, which pip
        # would take as the wheel installed already: install the wheel itself, then check its dependencies
        grader = _run([*pip, "--no-deps", "--force-reinstall", str(wheel)], cwd=work)
        unmet = _run([python, "-c", UNMET_REQUIREMENTS], cwd=work)
        assert unmet.returncode == 0 and unmet.stdout.strip() == "", (unmet.stdout, unmet.stderr)
    assert grader.returncode == 0, grader.stderr
    found = _run([python, "-c", "import grader, torch; print(grader.__file__); print(torch.__file__)"], cwd=work)
    where_grader, where_torch = found.stdout.split()
    assert where_grader.startswith(str(venv)), found  # the wheel's grader, never the checkout's
    assert os.environ.get(FULL_INSTALL) or not where_torch.startswith(str(venv))
    return venv / "bin"


UNMET_REQUIREMENTS = """
import importlib.metadata as md, re
from packaging.requirements import Requirement
for line in md.requires("kernel-grader") or ():
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        found = md.version(req.name)
    except md.PackageNotFoundError:
        print("missing", req)
        continue
    if not req.specifier.contains(found, prereleases=True):
        print("wrong version", req, found)
"""
FULL_INSTALL = "GRADER_TEST_FULL_INSTALL"  # set: the fresh venv installs torch itself (minutes) instead


def borrow_dependencies(python: str) -> None:
    """Give the fresh venv this interpreter's installed packages (torch, triton, numpy, pytest, ...) as a
    plain path entry (a .pth line), so installing the wheel resolves its dependencies without unpacking
    torch again (a minute of the suite's two cores). Only the path is added: that folder's own .pth files
    (this checkout's editable install among them) are not run, so `import grader` finds the wheel's."""
    import torch

    site = Path(torch.__file__).resolve().parents[1]
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=site).stdout
    (Path(purelib.strip()) / "borrowed-dependencies.pth").write_text(f"{site}\n", encoding="utf-8")


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
    assert checked.stdout.startswith("softmax.py (softmax): 0 / 5  (interpreter, seed 1, ")
    assert "FAIL  softmax_kernel: 4 rows of 10, N(0, 2) logits  [unwritten-output]" in checked.stdout

    graded = _run([grader, "grade", str(folder / "softmax.py"), "--assignment", "softmax", "--out", "out",
                   "--backend", "interpreter", "--seed", "1"], cwd=tmp_path)  # the bundled example: public cases
    assert graded.returncode == 0, graded.stderr
    assert graded.stdout.startswith("softmax.py: 0 / ") and (tmp_path / "out" / "results.json").is_file()
