"""grader/operations/child_template.py: a batch's children forked from a process that imported the grader already:
each runs its `python -m` module as a fresh interpreter would (arguments, folder, environment, log, exit status,
a session of its own, held until "go"), and ends with the template."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.operations import child_template
from grader.operations.child import Child
from grader.operations.child_template import Template, TemplateUnavailable, forkable
from tests.conftest import ROOT
from tests.operations.test_child import alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the template serves Linux batches")

PROBE = [sys.executable, "-m", "tests.operations.child_probe"]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture(scope="module")
def template():
    made = Template(_env(), preload=("torch", "tests.operations.child_probe"))
    yield made
    made.close()


def _report(log: Path) -> dict:
    return json.loads(log.read_text(encoding="utf-8").strip().splitlines()[-1])


def test_forkable_takes_only_this_interpreters_module_commands() -> None:
    assert forkable([sys.executable, "-m", "grader.operations.executors", "--x"]) == "grader.operations.executors"
    assert forkable(["/usr/bin/python3.0", "-m", "x"]) is None
    assert forkable([sys.executable, "-c", "pass"]) is None


def test_a_forked_child_runs_its_module_as_python_m_would(template: Template, tmp_path: Path) -> None:
    child = Child([*PROBE, "exit", "3"], tmp_path, _env(PROBE="seen"), tmp_path / "log", timeout_s=60,
                  template=template)
    assert child.wait() == 3 and child.returncode == 3
    report = _report(tmp_path / "log")
    assert report["argv"] == ["exit", "3"] and report["cwd"] == str(tmp_path) and report["probe"] == "seen"
    assert report["pid"] == child.pid == report["pgid"]  # a session, and a process group, of its own
    assert report["ppid"] == template.pid  # the template's child, not the test's
    assert report["torch"]  # imported already: the point of the template


def test_an_exception_and_a_signal_end_it_as_they_end_an_interpreter(template: Template, tmp_path: Path) -> None:
    raised = Child([*PROBE, "raise"], tmp_path, _env(), tmp_path / "raised.log", timeout_s=60, template=template)
    assert raised.wait() == 1
    assert "ValueError: the probe raised" in raised.tail(2000)
    slept = Child([*PROBE, "sleep"], tmp_path, _env(), tmp_path / "slept.log", timeout_s=60, template=template)
    while not slept.tail(100):
        time.sleep(0.05)
    os.kill(slept.pid, signal.SIGKILL)
    assert slept.wait() == -signal.SIGKILL


def test_a_held_child_waits_for_go_and_its_deadline_starts_then(template: Template, tmp_path: Path) -> None:
    child = Child([*PROBE, "wait-for-go"], tmp_path, _env(), tmp_path / "log", timeout_s=0.01, held=True,
                  template=template)
    time.sleep(0.3)
    assert not child.overdue and child.poll() is None
    child.timeout_s = 60
    child.go()
    assert child.wait() == 0
    assert child.tail(1000).splitlines()[0] == "went"


def test_an_overdue_forked_child_is_stopped_with_its_group(template: Template, tmp_path: Path) -> None:
    child = Child([*PROBE, "sleep"], tmp_path, _env(), tmp_path / "log", timeout_s=0.5, template=template)
    assert child.wait() is None  # stopped at its deadline
    assert not alive(child.pid)


def test_its_children_end_with_the_template(tmp_path: Path) -> None:
    """The batch's executor makes a child's `--parent` the template: a child whose parent goes ends (here the probe
    is a grading child's stand-in that watches its parent as executors.child_main does)."""
    watcher = tmp_path / "watcher.py"
    watcher.write_text(textwrap.dedent("""
        import os, sys, time
        parent = os.getppid()
        print("ready", flush=True)
        while os.getppid() == parent:
            time.sleep(0.05)
    """), encoding="utf-8")
    made = Template(_env(PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}"), preload=())
    child = Child([sys.executable, "-m", "watcher"], tmp_path, _env(PYTHONPATH=str(tmp_path)), tmp_path / "log",
                  timeout_s=60, template=made)
    while "ready" not in child.tail(100):
        time.sleep(0.05)
    made.process.kill()
    made.process.wait()
    deadline = time.monotonic() + 10
    while alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child.pid)
    assert child.poll() == -signal.SIGKILL  # its status died with the template: known as ended
    with pytest.raises(TemplateUnavailable):
        Child([*PROBE], tmp_path, _env(), tmp_path / "late.log", timeout_s=60, template=made)
    made.close()


def test_the_template_ends_when_its_stdin_closes_and_the_grader_it_preloads_starts_no_cuda(tmp_path: Path) -> None:
    """Forked children may use CUDA only if the template never initialised it: importing what a grading child
    imports (PRELOAD) calls none of torch's CUDA entry points and makes no Triton driver."""
    script = textwrap.dedent(f"""
        import torch
        calls = []
        for name in ("init", "_lazy_init", "is_available", "device_count", "current_device"):
            def record(*args, _name=name, **kwargs):
                calls.append(_name)
                raise RuntimeError("CUDA touched at import: " + _name)
            setattr(torch.cuda, name, record)
        for module in {child_template.PRELOAD!r}:
            __import__(module)
        import sys
        triton_driver = sys.modules["triton.runtime.driver"].driver  # Triton's driver starts CUDA when made
        print(calls + (["triton's driver"] if triton_driver._default is not None else []))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
    made = Template(_env(), preload=())
    made.close()
    assert made.process.returncode == 0
