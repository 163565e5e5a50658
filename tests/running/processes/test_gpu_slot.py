"""grader/running/processes/gpu_slot.py: the GPU's reader-writer lock across processes, on the CPU (file locks need
no GPU): shared holders coexist, an exclusive holder waits for them and keeps new ones out."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.running.processes.gpu_slot import LOCK_DIR_VARIABLE, GpuSlot, lock_dir
from tests.conftest import ROOT

HOLD = """
import sys, time
from pathlib import Path
from grader.running.processes.gpu_slot import GpuSlot
slot = GpuSlot("GPU-test", Path(sys.argv[1]))
with getattr(slot, sys.argv[2])():
    print("in", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def hold(folder: Path, mode: str, seconds: float) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), mode, str(seconds)], stdout=subprocess.PIPE,
                             text=True, cwd=ROOT)
    return child


def test_lock_folder_and_file_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOCK_DIR_VARIABLE, str(tmp_path / "locks"))
    assert lock_dir() == tmp_path / "locks" and lock_dir().is_dir()
    slot = GpuSlot("GPU-12ab/../x y")
    assert slot.main.parent == tmp_path / "locks" and slot.main.name == "gpu-GPU-12ab_.._x_y.lock"
    assert slot.turnstile.name == "gpu-GPU-12ab_.._x_y.turnstile"


def test_shared_holders_coexist_and_exclusive_waits(tmp_path: Path) -> None:
    slot = GpuSlot("GPU-test", tmp_path)
    with slot.shared():
        other = hold(tmp_path, "shared", 0.0)  # a second shared holder enters while we hold it
        assert other.stdout is not None and other.stdout.readline() == "in\n"
        assert other.wait(timeout=60) == 0
        timed = hold(tmp_path, "exclusive", 0.0)
        time.sleep(1.0)
        assert timed.poll() is None  # the exclusive holder waits for us
    assert timed.stdout is not None and timed.stdout.readline() == "in\n"
    assert timed.wait(timeout=60) == 0


def test_exclusive_keeps_everyone_out(tmp_path: Path) -> None:
    slot = GpuSlot("GPU-test", tmp_path)
    with slot.exclusive():
        shared = hold(tmp_path, "shared", 0.0)
        time.sleep(1.0)
        assert shared.poll() is None
    assert shared.wait(timeout=60) == 0


def test_exclusive_says_how_long_ago_the_last_holder_let_go(tmp_path: Path) -> None:
    slot = GpuSlot("GPU-test", tmp_path)
    with slot.exclusive() as idle_s:
        assert idle_s == float("inf")  # nobody held it before: the clocks may be idle
    time.sleep(0.3)
    other = hold(tmp_path, "exclusive", 0.0)  # another process's holder: the moment is shared through the folder
    assert other.wait(timeout=60) == 0
    with slot.exclusive() as idle_s:
        assert 0.0 <= idle_s < 0.3
    time.sleep(0.5)
    with slot.exclusive() as idle_s:
        assert 0.5 <= idle_s < 5.0
    slot.released.write_text(repr(time.monotonic() + 3600))  # written before this boot's clock began: unknown
    with slot.exclusive() as idle_s:
        assert idle_s == float("inf")
    slot.released.write_text("torn")
    with slot.exclusive() as idle_s:
        assert idle_s == float("inf")


def test_an_exclusive_hold_traces_its_drain_and_its_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """First in line, the exclusive holder waits for the shared holders' requests to end (`gpu-slot/drain`: no GPU
    work starts meanwhile), then holds the slot (`gpu-slot/exclusive`): the spans a class's slot use is read from."""
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("GRADER_PHASE_TRACE", str(trace))
    sharer = hold(tmp_path, "shared", 1.0)
    assert sharer.stdout is not None and sharer.stdout.readline() == "in\n"
    slot = GpuSlot("GPU-test", tmp_path)
    with slot.exclusive():
        time.sleep(0.2)
    assert sharer.wait(timeout=60) == 0
    spans = {span["phase"]: span for span in map(json.loads, trace.read_text(encoding="utf-8").splitlines())}
    drain, held = spans["gpu-slot/drain"], spans["gpu-slot/exclusive"]
    assert 0.5 <= drain["end"] - drain["start"] < 30  # the sharer's second, less its start
    assert held["start"] >= drain["end"] and held["end"] - held["start"] >= 0.2
