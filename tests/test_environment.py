"""grader/environment.py: how a result names its backend, and the versions it records; read, never changed."""

from __future__ import annotations

import importlib.metadata
import platform

import torch

from grader.backends import Backend
from grader.environment import backend_label, versions


def test_backend_label() -> None:
    assert backend_label(Backend.INTERPRETER) == "interpreter"
    if torch.cuda.is_available():
        assert backend_label(Backend.CUDA) == f"cuda:{torch.cuda.get_device_name(0)}"


def test_versions() -> None:
    found = versions()
    assert found["python"] == platform.python_version()
    assert found["torch"] == torch.__version__.split("+")[0] or found["torch"].startswith(torch.__version__[:4])
    assert set(found) == {"python", "torch", "triton", "numpy", "kernel-grader"}


def test_github_repo_reads_the_urls_pip_records() -> None:
    from grader.environment import github_repo

    assert github_repo("https://github.com/course/kernel-grader") == "course/kernel-grader"
    assert github_repo("git+https://github.com/course/kernel-grader.git") == "course/kernel-grader"
    assert github_repo("ssh://git@github.com/course/kg.git") == "course/kg"
    assert github_repo("git@github.com:course/kg.git") == "course/kg"
    assert github_repo("https://gitlab.com/course/kg") is None
    assert github_repo("file:///home/me/kernel-grader") is None


def test_installed_from_github_is_none_for_a_checkout() -> None:
    from grader.environment import grader_version, installed_from_github

    # the tests run from an editable install of the checkout: no GitHub repository to name
    assert installed_from_github() is None
    assert grader_version() == importlib.metadata.version("kernel-grader")


def test_pinned_version_reads_an_exact_pin() -> None:
    from grader.environment import pinned_version

    assert pinned_version("triton", ["torch>=2.4", "triton==3.6.0", "numpy"]) == "3.6.0"
    assert pinned_version("triton", ["Triton == 3.6.0 ; platform_system == 'Linux'"]) == "3.6.0"
    assert pinned_version("triton", ["triton>=3.6", "tritonclient==2.0"]) is None
    assert pinned_version("triton", None) is None


def test_pyproject_pins_the_grading_gpus_triton() -> None:
    """One Triton for a course: the CPU interprets with the version the grading GPU compiles with (Triton 3.6 with
    torch 2.11 there; 3.9's interpreter has no tl.make_block_ptr)."""
    from grader.environment import declared_requirements, pinned_version

    assert pinned_version("triton", declared_requirements()) == "3.6.0"


def test_triton_mismatch_is_one_line_naming_both_versions() -> None:
    from grader.environment import triton_mismatch

    assert triton_mismatch(installed="3.6.0", pinned="3.6.0") is None
    assert triton_mismatch(installed="3.6.0+git4a1b2c", pinned="3.6.0") is None  # a local build of the same version
    line = triton_mismatch(installed="3.9.0", pinned="3.6.0")
    assert line is not None and "\n" not in line
    assert line.startswith("warning: ") and "Triton 3.9.0" in line and "triton==3.6.0" in line


def test_a_grade_under_another_triton_warns_once_and_goes_on(tmp_path, monkeypatch, capsys) -> None:
    """`grader` on a machine whose Triton is not the pinned one (a GPU image with its own) prints one warning line
    naming both versions before it runs the command, which then does what it does without it (here: refuses a
    missing file, the cheapest command that gets that far)."""
    import importlib
    from pathlib import Path

    cli = importlib.import_module("grader.cli.main")  # the module: grader.cli exports its `main` function
    monkeypatch.setattr(cli, "triton_mismatch", lambda: "warning: Triton 9.9.0 is running, but ... triton==3.6.0")
    assignments = Path(__file__).resolve().parents[1] / "assignments"
    missing = tmp_path / "missing.py"
    status = cli.main(["--assignments", str(assignments), "grade", str(missing), "--assignment", "fused_layers",
                       "--out", str(tmp_path / "out")])
    assert capsys.readouterr().err.splitlines() == [
        "grader: warning: Triton 9.9.0 is running, but ... triton==3.6.0",
        f"grader: error: submission {missing} is not a file",
    ]
    assert status == 2

    assert cli.main(["--assignments", str(assignments), "list"]) == 0
    assert "Triton 9.9.0" not in capsys.readouterr().err  # only the commands that run kernels say it
