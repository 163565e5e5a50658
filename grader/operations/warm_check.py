"""`grader check --warm`: a check process kept ready between a student's checks of one file.

A check spends seconds before it runs a case: the grader importing torch and the submission's sandbox (its zygote
importing torch and Triton). With `--warm`, the first check runs as usual and then leaves a small server behind,
listening on a Unix socket in the user's cache (a folder only the user can enter), which keeps one *held* check
ready: `python -m grader check ... --wait-for-go`, a normal check process paused after those imports and before it
reads the file. The next `grader check --warm` with the same arguments, from the same folder, with the same grader
and Python, connects, the held check goes, its output is relayed line by line and its exit code returned; the
server then prepares the next one. It runs nothing a plain check would not (the held check is the same command;
the file is read when it goes, so an edit since is what is checked), stops after `IDLE_S` without a check, and a
student who never passes `--warm` never has one. Anything wrong with the server (gone, stale socket, another
grader) means the check runs here as if `--warm` were not given.

Cheap to import: no torch (the client is on the path of every warm check).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from grader.operations.compile_memo import grader_digest
from grader.running.timing.calibration import default_folder

IDLE_S = 20 * 60  # a server with no check for this long stops (and its held check with it)
IDLE_VARIABLE = "GRADER_WARM_IDLE_S"  # another idle time (tests)
WARM_FLAG = "--warm"
GO_FLAG = "--wait-for-go"
FOLDER_NAME = "warm-checks"
CONNECT_TIMEOUT_S = 2.0
# What else decides a check's outcome, besides its arguments and folder: the grader's own settings and the GPU.
KEYED_ENVIRONMENT = ("GRADER_ASSIGNMENTS", "GRADER_CACHE_DIR", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET",
                     "PYTHONPATH", "VIRTUAL_ENV")


SOCKET_PATH_MAX = 100  # bytes: a Unix socket's path must fit sockaddr_un (108 with its NUL)


def warm_folder(for_name: str = "x" * 37) -> Path:
    """Where the servers' sockets are: beside the calibration cache, else (a path too long for a socket) a folder of
    the user's own in the temporary folder; entered by the user alone."""
    folder = default_folder().parent / FOLDER_NAME
    if len(os.fsencode(folder / for_name)) > SOCKET_PATH_MAX:
        folder = Path(tempfile.gettempdir()) / f"kernel-grader-warm-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if folder.stat().st_uid != os.getuid():
        raise OSError(f"{folder} belongs to another user")
    os.chmod(folder, 0o700)
    return folder


def check_arguments(argv: Sequence[str]) -> list[str]:
    """The check's own arguments: `argv` without `--warm`."""
    return [a for a in argv if a != WARM_FLAG]


def warm_key(argv: Sequence[str], cwd: Path, environ: dict[str, str] | None = None) -> str:
    """One server per command line, folder, Python, grader source and grader settings."""
    env = os.environ if environ is None else environ
    what = [sys.executable, grader_digest(), str(cwd), list(argv), {k: env.get(k, "") for k in KEYED_ENVIRONMENT}]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]


def socket_path(key: str) -> Path:
    return warm_folder(f"{key}.sock") / f"{key}.sock"


# --------------------------------------------------------------------------------------------- the client


def check_warm(argv: Sequence[str], out: IO[str], err: IO[str]) -> int | None:
    """The check of `argv` run by a warm server, its output written to `out` and `err`: its exit code, or None where
    no server took it (none, or it failed before the check began: the caller runs the check itself)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path = socket_path(warm_key(argv, Path.cwd()))
        connection.settimeout(CONNECT_TIMEOUT_S)
        connection.connect(str(path))
        connection.settimeout(None)
        connection.sendall(json.dumps({"argv": list(argv)}).encode() + b"\n")
        started = False
        for line in connection.makefile("r", encoding="utf-8", errors="replace"):
            frame = json.loads(line)
            if "exit" in frame:
                return int(frame["exit"])
            started = True
            (out if "out" in frame else err).write(frame.get("out", frame.get("err", "")))
        if started:
            err.write("grader: the warm check process stopped before the check ended; run it again\n")
            return 2
        return None
    except (OSError, ValueError):
        return None
    finally:
        connection.close()


def start_server(argv: Sequence[str]) -> bool:
    """A warm server for `argv` in this folder, in the background (its own session: it outlives this command); False
    where there can be none (no folder of the user's own for its socket)."""
    try:
        path = socket_path(warm_key(argv, Path.cwd()))
    except OSError:
        return False
    idle = os.environ.get(IDLE_VARIABLE, "") or str(IDLE_S)
    subprocess.Popen([sys.executable, "-m", "grader.operations.warm_check", "--socket", str(path), "--idle-s", idle,
                      "--", *argv],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)
    return True


# --------------------------------------------------------------------------------------------- the server


class HeldCheck:
    """`python -m grader check ARGS --wait-for-go`: imported and its sandbox started, paused before the check."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "grader", *argv, GO_FLAG], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                                        start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def run(self, connection: socket.socket) -> None:
        """Let it go, send its output to `connection` as it comes, then its exit code."""
        lock = threading.Lock()
        gone = threading.Event()

        def send(frame: dict[str, Any]) -> None:
            with lock:
                if gone.is_set():
                    return
                try:
                    connection.sendall(json.dumps(frame).encode() + b"\n")
                except OSError:  # the student stopped waiting (Ctrl-C): the check stops too
                    gone.set()
                    self.stop()

        def relay(stream: IO[str], key: str) -> None:
            for line in stream:
                send({key: line})

        assert self.process.stdin is not None and self.process.stdout is not None and self.process.stderr is not None
        try:
            self.process.stdin.write("go\n")
            self.process.stdin.close()
        except OSError:
            pass  # it ended before its turn (a mistake in the command line): its output says why
        readers = [threading.Thread(target=relay, args=(self.process.stdout, "out"), daemon=True),
                   threading.Thread(target=relay, args=(self.process.stderr, "err"), daemon=True)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        send({"exit": self.process.wait()})

    def stop(self) -> None:
        """It ends: SIGINT (it stops as on Ctrl-C, closing its sandbox), its whole session SIGKILLed after 5 s."""
        if self.process.poll() is not None:
            return
        try:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass


def serve(path: Path, argv: Sequence[str], idle_s: float = IDLE_S) -> None:
    """Keep a held check of `argv` ready and run it for each client, until `idle_s` pass without one."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path.unlink(missing_ok=True)
        listener.bind(str(path))
    except OSError:
        return  # another server took the name first
    os.chmod(path, 0o600)
    listener.listen(4)
    held = HeldCheck(argv)
    try:
        while True:
            ready, _, _ = select.select([listener], [], [], idle_s)
            if not ready:
                return
            connection, _ = listener.accept()
            with connection:
                try:
                    request = json.loads(connection.makefile("r", encoding="utf-8").readline() or "{}")
                except ValueError:
                    continue
                if request.get("argv") != list(argv):
                    continue  # not this server's check: the client runs it itself
                held.run(connection)
            held = HeldCheck(argv)
    finally:
        held.stop()
        listener.close()
        if path.exists():
            path.unlink(missing_ok=True)


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.operations.warm_check",
                                     description="serve warm `grader check` runs of one command line (internal)")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--idle-s", type=float, default=IDLE_S)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    parsed = parser.parse_args(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: its held check and socket go too
    serve(parsed.socket, parsed.argv[1:] if parsed.argv[:1] == ["--"] else parsed.argv, parsed.idle_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
