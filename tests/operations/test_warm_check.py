"""`grader check --warm`: the second check of a file is run by the process the first left ready, says what a plain
check says about the file as it is now, and anything wrong with the server means a plain check."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.operations import warm_check

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "reference" / "softmax" / "reference.py"
KEPT_NOTE = "a check process is kept ready"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("GRADER_CACHE_DIR", str(folder))
    return folder


def check(folder: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GRADER_CACHE_DIR=str(cache), GRADER_WARM_IDLE_S="120", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "grader", "check", "softmax.py", "--assignment", "softmax",
                           "--backend", "interpreter", "--seed", "3", *extra], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


def servers() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "grader.operations.warm_check"], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def test_arguments_and_keys() -> None:
    argv = ["check", "a.py", "--warm", "--seed", "3"]
    assert warm_check.check_arguments(argv) == ["check", "a.py", "--seed", "3"]
    key = warm_check.warm_key(argv, Path("/a"), {})
    assert key == warm_check.warm_key(list(argv), Path("/a"), {})
    assert key != warm_check.warm_key(argv, Path("/b"), {})  # relative paths mean another file
    assert key != warm_check.warm_key([*argv, "--timed"], Path("/a"), {})
    assert key != warm_check.warm_key(argv, Path("/a"), {"CUDA_VISIBLE_DEVICES": "1"})


def test_no_server_or_a_stale_socket_is_a_plain_check(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["check", "softmax.py"]
    out, err = io.StringIO(), io.StringIO()
    assert warm_check.check_warm(argv, out, err) is None  # nothing listens
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(warm_check.socket_path(warm_check.warm_key(argv, tmp_path))))
    stale.close()  # a server killed with SIGKILL leaves its socket file
    assert warm_check.check_warm(argv, out, err) is None
    assert out.getvalue() == err.getvalue() == ""
    assert oct(warm_check.warm_folder().stat().st_mode & 0o777) == "0o700"


def test_the_second_check_is_the_warm_process_and_sees_the_file_as_it_is_now(tmp_path: Path, cache: Path) -> None:
    before = set(servers())
    sockets = warm_check.warm_folder()  # the folder this test's checks use (its cache's path is long: /tmp's)
    sockets_before = set(sockets.glob("*.sock"))
    submission = tmp_path / "softmax.py"
    submission.write_text(REFERENCE.read_text(encoding="utf-8"), encoding="utf-8")
    plain = check(tmp_path, cache)
    try:
        first = check(tmp_path, cache, "--warm")
        assert first.returncode == plain.returncode == 0, first.stderr
        assert KEPT_NOTE in first.stderr
        assert len(set(servers()) - before) == 1
        deadline = time.monotonic() + 60
        while len(set(sockets.glob("*.sock")) - sockets_before) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)  # the server listens
        second = check(tmp_path, cache, "--warm")  # served: no new server, the same report
        assert second.returncode == 0 and KEPT_NOTE not in second.stderr, second.stderr
        assert _report(second.stdout) == _report(plain.stdout)
        assert len(set(servers()) - before) == 1
        # the student breaks the file: the held check, prepared before the edit, checks the edited file
        submission.write_text(submission.read_text(encoding="utf-8").replace(
            "numerator / denominator", "numerator / (denominator + 1.0)", 1), encoding="utf-8")
        broken = check(tmp_path, cache, "--warm")
        assert broken.returncode == 1 and "FAIL" in broken.stdout, broken.stdout[-2000:]
        assert KEPT_NOTE not in broken.stderr
        other = check(tmp_path, cache, "--warm", "--target", "softmax_kernel")  # other arguments: another server
        assert KEPT_NOTE in other.stderr and len(set(servers()) - before) == 2
    finally:
        for pid in set(servers()) - before:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while set(servers()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(servers()) - before
    assert set(sockets.glob("*.sock")) <= sockets_before  # a stopped server takes its socket along
    held = subprocess.run(["pgrep", "-f", "--", "--wait-for-go"], capture_output=True, text=True).stdout.split()
    assert not held


def _report(text: str) -> list[str]:
    """The report without its timings."""
    return [line for line in text.splitlines() if " s)" not in line and "seconds" not in line]
