"""grader/operations/environment.py: the backend (asked for, else what the machine has) and the versions a
result records; read, never changed."""

from __future__ import annotations

import platform

import torch

from grader.operations.environment import backend_label, detect_backend, versions


def test_backend() -> None:
    assert detect_backend("interpreter") == "interpreter" and detect_backend("cuda") == "cuda"
    assert detect_backend("auto") == ("cuda" if torch.cuda.is_available() else "interpreter")
    assert backend_label("interpreter") == "interpreter"


def test_versions() -> None:
    found = versions()
    assert found["python"] == platform.python_version()
    assert found["torch"] == torch.__version__.split("+")[0] or found["torch"].startswith(torch.__version__[:4])
    assert set(found) == {"python", "torch", "triton", "numpy", "kernel-grader"}
