"""Facts about where grading runs: the backend and library versions (read, never changed)."""

from __future__ import annotations

import importlib.metadata
import platform


def detect_backend(requested: str = "auto") -> str:
    """'cuda' when a GPU is usable (or asked for), else 'interpreter'."""
    if requested in ("interpreter", "cuda"):
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "interpreter"


def backend_label(backend: str) -> str:
    """`cuda:<gpu name>` or `interpreter`, as results.json reports it."""
    if backend != "cuda":
        return "interpreter"
    import torch

    return f"cuda:{torch.cuda.get_device_name(0)}"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("torch", "triton", "numpy"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "not installed"
    try:
        out["kernel-grader"] = importlib.metadata.version("kernel-grader")
    except importlib.metadata.PackageNotFoundError:
        out["kernel-grader"] = "source checkout"
    return out
