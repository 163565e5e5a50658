"""Facts about where grading runs: the backend and library versions (read, never changed)."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re

from grader.backends import Backend

DISTRIBUTION = "kernel-grader"


def backend_label(backend: Backend) -> str:
    """`cuda:<gpu name>` or `interpreter`, as results.json reports it."""
    if not backend.on_gpu:
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
    out["kernel-grader"] = grader_version()
    return out


def grader_version() -> str:
    """The installed kernel-grader's version (`grader --version`), or "source checkout" when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "source checkout"


_GITHUB = re.compile(r"^(?:git\+)?(?:https://|ssh://git@|git@)github\.com[/:]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")


def github_repo(url: str) -> str | None:
    """`OWNER/NAME` of a GitHub repository URL (https, ssh, with or without `git+` and `.git`); None otherwise."""
    found = _GITHUB.match(url.strip())
    return f"{found.group(1)}/{found.group(2)}" if found else None


def installed_from_github() -> str | None:
    """`OWNER/NAME` of the GitHub repository pip installed this grader from (`pip install git+https://github.com/
    OWNER/NAME`: PEP 610's direct_url.json records it), or None (a wheel, a local or editable checkout)."""
    try:
        text = importlib.metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        record = json.loads(text or "{}")
    except ValueError:
        return None
    if not isinstance(record, dict) or "vcs_info" not in record:
        return None
    return github_repo(str(record.get("url", "")))
