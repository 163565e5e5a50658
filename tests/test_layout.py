"""The shape of the code. tests/ mirrors grader/: every module grader/<path>/<name>.py has
tests/<path>/test_<name>.py (a reader finds one feature's code and its tests by the same name; more files for one
module are test_<name>_<aspect>.py), and every test folder is a package (so two test files may share a name in
different folders); tests/e2e/ (whole grades) and tests/assignments/ (the course's specs) sit outside. And
grader/ keeps its layers (pyproject.toml's import-linter contracts, drawn in docs/architecture.md), no module
over 600 lines, and every worker message declared in grader/running/protocol.py alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

MAX_MODULE_LINES = 600

OUTSIDE_THE_MIRROR = {"e2e", "assignments", "data", "hostile"}  # whole grades, the course's specs, test data


def modules() -> list[str]:
    package = ROOT / "grader"
    return sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py") and "examples" not in p.parts)


def test_every_module_has_a_test_file_at_its_mirrored_path() -> None:
    found = modules()
    assert len(found) >= 60
    missing = [m for m in found if not (ROOT / "tests" / m).with_name(f"test_{(ROOT / 'tests' / m).name}").is_file()]
    assert missing == [], f"no tests/<path>/test_<name>.py for: {missing}"


def test_every_test_file_tests_a_module_or_sits_outside_the_mirror() -> None:
    tests = ROOT / "tests"
    known = set(modules())
    stray = []
    for path in tests.rglob("test_*.py"):
        relative = path.relative_to(tests)
        if relative.parts[0] in OUTSIDE_THE_MIRROR or relative == Path("test_layout.py"):
            continue
        stem = relative.stem.removeprefix("test_")
        siblings = {Path(m).stem for m in known if Path(m).parent == relative.parent}
        # test_<module>.py, or test_<module>_<aspect>.py (test_report_wording.py tests report.py)
        if not any(stem == name or stem.startswith(name + "_") for name in siblings):
            stray.append(str(relative))
    assert stray == [], f"test files named after no module of grader/: {stray}"


def test_every_test_folder_is_a_package() -> None:
    folders = [p for p in (ROOT / "tests").rglob("*") if p.is_dir() and p.name not in ("__pycache__",)
               and not {"data", "hostile"} & set(p.relative_to(ROOT / "tests").parts)]
    assert [str(p) for p in folders if not (p / "__init__.py").is_file()] == []


def test_the_layers_hold(capsys: pytest.CaptureFixture[str]) -> None:
    from importlinter import configuration
    from importlinter.application.use_cases import lint_imports

    configuration.configure()  # what the `lint-imports` command does first
    kept = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_logo=True)
    report = capsys.readouterr().out
    assert kept, report  # the broken contract, with the chain of imports that broke it
    assert "2 kept, 0 broken" in report


def test_no_module_is_over_600_lines() -> None:
    package = ROOT / "grader"
    long = {str(p.relative_to(package)): n for p in package.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_worker_messages_are_built_in_the_protocol_module_alone() -> None:
    """A request or reply written as a dict literal with an "op" (or read back by "op") anywhere but
    grader/running/protocol.py would bypass its codec and its checks."""
    package = ROOT / "grader"
    protocol = package / "running" / "protocol.py"
    pattern = re.compile(r"""["']op["']\s*[:\]]|\.get\(\s*["']op["']""")
    found = [f"{p.relative_to(ROOT)}:{number}" for p in package.rglob("*.py") if p != protocol
             for number, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert found == []
    assert pattern.search('request = {"op": "launch"}') and pattern.search('message.get("op")')
