"""Facts about where grading runs: the backend, library versions, the Triton the grader pins (read, never changed)."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
import sys
from pathlib import Path

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
        out[package] = installed_version(package) or "not installed"
    out["kernel-grader"] = grader_version()
    return out


def installed_version(module: str) -> str | None:
    """The version of the distribution that provides `module` (read from its metadata, without importing it):
    `triton`, or `pytorch-triton` where an image ships Triton under that name; None when none does."""
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        pass
    for distribution in importlib.metadata.packages_distributions().get(module, []):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def declared_requirements() -> list[str] | None:
    """The grader's runtime dependencies as pyproject.toml declares them (a checkout, editable or not), else as
    the installed distribution's metadata records them (extras left out); None when neither is there (the copy
    of the package a Gradescope bundle runs)."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        return list(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"])
    try:
        declared = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return [r for r in declared if "extra ==" not in r]


def requirement_name(requirement: str) -> str:
    """The distribution a requirement names, lower-case: `triton==3.6.0` -> `triton`."""
    name = requirement.split(";")[0].strip()
    for stop in "<>=!~[ ":
        name = name.split(stop)[0]
    return name.lower()


def pinned_version(package: str, requirements: list[str] | None) -> str | None:
    """The version `requirements` pin `package` to with `==` (markers ignored), or None."""
    for requirement in requirements or []:
        spec = requirement.split(";")[0].replace(" ", "")
        if requirement_name(spec) == package and spec[len(package):].startswith("=="):
            return spec[len(package) + 2:]
    return None


def triton_mismatch(installed: str | None = None, pinned: str | None = None) -> str | None:
    """One line when the running Triton is not the one pyproject.toml pins (the grading GPU's: its interpreter and
    its compiler accept different code), None when they agree or either is unknown. A local build label
    (`3.6.0+git1234`) is the same version."""
    installed = installed or installed_version("triton")
    if pinned is None:
        try:
            pinned = pinned_version("triton", declared_requirements())
        except (OSError, ValueError, KeyError):  # an unreadable pyproject.toml: nothing to compare with
            return None
    if installed is None or pinned is None or installed.split("+")[0] == pinned.split("+")[0]:
        return None
    return (f"warning: Triton {installed} is running, but this grader pins triton=={pinned} (the grading GPU's): "
            "what the interpreter runs and the GPU compile check accepts may differ from the grading machine's")


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
