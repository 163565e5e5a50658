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
