"""The grader's side of the worker: start it, talk to it with deadlines, replace it when it dies.

A worker runs in its submission's sandbox (grader.running.processes.sandbox): forked from the sandbox's zygote, or
started fresh when it must run under a tool (compute-sanitizer). The grader holds every deadline: a
worker that hangs past its deadline, exits, crashes or hits a fatal CUDA error has its whole process group
killed here; the next request starts a fresh one and re-imports the submission, so only the affected
case fails.
"""

from __future__ import annotations

import dataclasses
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import trap_ids
from grader.running import protocol
from grader.running.phases import traced
from grader.running.processes.confinement import await_exit, describe_exit, kill_marked
from grader.running.processes.cpu_share import SAID_FROM_S, LoadAllowance, stretched
from grader.running.processes.gpu_memory import Watch
from grader.running.processes.sandbox import Sandbox, SandboxFailure, WorkerOptions
from grader.running.worker.channel import Channel, ChannelClosed, ChannelTimeout
from grader.running.worker.progress import COMPILE_END, COMPILE_START, LAUNCH, STEP

OUTPUT_TAIL_BYTES = 4000
SEND_TIMEOUT_S = 120.0  # a worker that stops reading its requests (a streamed send waits for the reader)
# A request that ran out of GPU memory while its worker was within budget is sent again after these pauses.
OOM_RETRY_PAUSES_S = (0.3, 1.0, 2.0)
WORKER_START_TIMEOUT_S = 120.0
# Seconds of Triton compiling (between the worker's compile marks, on the grader's clock) that a worker's requests
# may take beyond their caps, in all: compiling is not the kernel's run, and a correct kernel with big tiles takes
# a minute to compile (attention's broadcast-and-sum mutant at head dim 128: 63 s on a 2-core CPU against the
# reference's 1.4 s, benchmarks/compile_time.py, docs/gpu-runs-2026-12-06.txt), far past a 30 s call limit. Each
# compile still ends within Deadline.compile_s without a mark; marks a submission forges stretch only its own
# requests, by this much at most.
COMPILE_CREDIT_S = 240.0

__all__ = ["Deadline", "ImportFailure", "Worker", "WorkerFailure", "WorkerOptions", "describe_exit"]


class _Overdue(Exception):
    """A deadline passed while waiting for a reply (the message says which)."""


class WorkerFailure(Exception):
    """The worker did not answer: `trap` is trap_ids.TIMEOUT or trap_ids.CRASH.

    A plain exception, not a frozen dataclass: Python 3.12's contextlib assigns `__traceback__` to an
    exception leaving a `@contextmanager` block, which a frozen dataclass refuses (on the H200 a crash at
    import became "grader internal error: FrozenInstanceError")."""

    def __init__(self, trap: str, detail: str, output_tail: str = "") -> None:
        super().__init__(trap, detail, output_tail)
        self.trap = trap
        self.detail = detail
        self.output_tail = output_tail

    def __str__(self) -> str:
        return self.detail


class ImportFailure(WorkerFailure):
    """The worker did not answer while it imported the submission (module-level code ran past `limit_s`, crashed
    the worker or outgrew its memory): the submission's own doing, unlike a worker that never came up."""

    def __init__(self, trap: str, detail: str, output_tail: str = "", limit_s: float = 0.0) -> None:
        super().__init__(trap, detail, output_tail)
        self.limit_s = limit_s


@dataclass(frozen=True)
class Deadline:
    """How long the grader waits for one reply. `cap_s` bounds the whole request. On a GPU a request also
    ends when no progress mark (grader.running.worker.progress) came for `run_s` seconds while no compile
    is under way, once a kernel was launched, or for `compile_s` while a compile is: a kernel still running `run_s`
    after its last launch is spinning. Before its first launch no kernel can be spinning (the worker receives its
    inputs, starts CUDA, or runs a wrapper's Python): only the cap, so a fresh worker's CUDA start on a busy
    machine is no kernel's timeout. `run_s` None: only the cap."""

    cap_s: float
    run_s: float | None = None
    compile_s: float = 120.0

    def describe(self, compiling: bool, capped: bool, waited_s: float = 0.0, compiled_s: float = 0.0) -> str:
        """Why the request ended; `waited_s`: seconds the worker waited for a CPU meanwhile (not charged to it:
        grader.running.processes.cpu_share); `compiled_s`: seconds Triton compiled meanwhile (not charged either, up
        to the worker's COMPILE_CREDIT_S)."""
        if (capped or self.run_s is None) and compiling:
            said = (f"did not finish within {self.cap_s:g} s: Triton was still compiling its kernels after "
                    f"{compiled_s:.1f} s more, all the compile time a worker may take beyond its calls' limits")
        elif capped or self.run_s is None:
            said = f"did not finish within {self.cap_s:g} s"
            if compiled_s >= SAID_FROM_S:
                said += f" of running (besides {compiled_s:.1f} s of compiling Triton kernels)"
        elif compiling:
            said = f"a compilation did not finish within {self.compile_s:g} s"
        else:
            said = f"did not finish: nothing happened for {self.run_s:g} s after its last kernel launch"
        if waited_s >= SAID_FROM_S:
            said += f" (not counting the {waited_s:.1f} s it waited for a CPU other processes held)"
        return said


class Worker:
    """One worker process running a submission (or the reference, or a submission's kernels only),
    restarted on demand. `sandbox`: the submission's sandbox whose zygote forks it (shared by a grade's
    workers, with its Triton cache). Without one (a single-use worker: the compile check, the reference) or
    with a tool in its options, it is a fresh process in a sandbox of its own (no zygote to wait for)."""

    def __init__(self, submission: Path, names: list[str], options: WorkerOptions,
                 triton_cache: Path | None = None, sandbox: Sandbox | None = None,
                 bundle: protocol.KernelBundle | None = None, gpu_budget_bytes: int | None = None) -> None:
        """`bundle`: a kernel host (grader.running.worker.kernel_host): it builds the submission's kernels from the
        bundle and never imports the file (no copy of it is made); its folder is a clean one (Sandbox.clean_folder).
        `gpu_budget_bytes`: its GPU memory budget (a kernel host that holds a timed case's tensors: the grader's plan
        decides what it allocates, and the timing seats how many such hosts hold them at once); None: the sandbox's."""
        self.submission = Path(submission)
        self.gpu_budget_bytes = gpu_budget_bytes
        self.names = names
        self.options = options
        self.bundle = bundle
        self.own_sandbox = sandbox is None
        self.sandbox_ref = sandbox if sandbox is not None else Sandbox(options, triton_cache)
        self.folder = self.sandbox_ref.clean_folder() if bundle is not None else self.sandbox_ref.worker_folder()
        self.sandboxed_path = self.folder / self.submission.name
        self.process: subprocess.Popen[bytes] | None = None  # a fresh process (tool-wrapped workers)
        self.pid: int | None = None  # the worker's pid (and process group) as the grader sees it
        self._namespace_pid: int | None = None  # as its zygote sees it
        self._exited: int | None = None
        self.channel: Channel | None = None  # requests and replies (grader.running.worker.channel)
        self.progress = -1  # the read end of the worker's progress marks
        self.warm = False  # the last start was a fork from a preloaded zygote
        self.watch: Watch | None = None  # its GPU memory against the sandbox's budget (CUDA)
        self.compile_credit_s = COMPILE_CREDIT_S  # compiling its requests may still take beyond their caps

    @property
    def sandbox(self) -> Path:
        """This worker's folder (its temporary files, its log, its copy of the submission)."""
        return self.folder

    @property
    def triton_cache(self) -> Path:
        return self.sandbox_ref.triton_cache

    # ------------------------------------------------------------------ life cycle

    def start(self) -> protocol.Loaded:
        """Start a worker and import the submission; return the worker's load reply."""
        self.spawn()
        return self.finish_start()

    def spawn(self) -> None:
        """Start the worker process: a fork of the sandbox's zygote (which may still be importing torch:
        then this waits for it), or a fresh process under the options' tool. A fresh process dies with
        the thread that spawned it (PR_SET_PDEATHSIG); `finish_start` may wait for it on any thread."""
        self.stop()
        if self.bundle is None:
            shutil.copyfile(self.submission, self.sandboxed_path)
            identity = self.sandbox_ref.identity
            if identity is not None:
                os.chown(self.sandboxed_path, identity.uid, identity.gid)
        ours, theirs_socket = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        marks_read, marks_write = os.pipe()
        theirs = (theirs_socket.fileno(), marks_write)
        budget = self.sandbox_ref.budget_environment(self.gpu_budget_bytes)
        try:
            if not self.options.tool and not self.own_sandbox:
                try:
                    with traced("worker/fork"):
                        self.pid, self._namespace_pid = self.sandbox_ref.fork(self.folder, self.options.backend,
                                                                              theirs, budget)
                except SandboxFailure as failure:
                    ours.close()
                    os.close(marks_read)
                    raise WorkerFailure(trap_ids.CRASH, failure.detail, failure.output_tail) from None
            else:
                program = [*self.options.tool, sys.executable, "-m", "grader.running.worker", self.options.backend,
                           *(str(fd) for fd in theirs)]
                env = self.sandbox_ref.environment(self.folder, self.options.backend,
                                                   (*self.options.tool_environment, *budget))
                self.process = self.sandbox_ref.popen(program, env, self.folder, self.folder / "output.log", theirs)
                self.pid = self.process.pid
        finally:
            theirs_socket.close()
            os.close(marks_write)
        self._exited = None
        if self.pid is not None:
            self.watch = self.sandbox_ref.watch(self.pid, f"{self.submission.name} worker", self.gpu_budget_bytes)
        os.set_blocking(marks_read, False)
        self.channel, self.progress = Channel(ours), marks_read

    def finish_start(self) -> protocol.Loaded:
        """Wait for the spawned worker to come up, then import the submission: the load reply."""
        what = "starting the worker (importing torch and triton)"
        with traced("worker/ready"):
            ready = self._decoded(protocol.Ready, self._receive(WORKER_START_TIMEOUT_S, what), what)
        self.warm = ready.warm
        limit = self.options.import_timeout_s
        try:
            with traced("worker/load"):
                if self.bundle is not None:
                    loaded = self.request(protocol.LoadKernels(bundle=self.bundle, names=tuple(self.names)), limit,
                                          what=f"building the kernels of {self.submission.name}")
                    if loaded.ok and loaded.digest != self.bundle.digest:  # it built from something else
                        raise WorkerFailure(trap_ids.TAMPERING, "the kernel host built from other kernels than the "
                                            "grader sent")
                    return loaded
                return self.request(protocol.Load(path=str(self.sandboxed_path), names=tuple(self.names)), limit,
                                    what=f"importing {self.submission.name}")
        except WorkerFailure as failure:
            raise ImportFailure(failure.trap, failure.detail, failure.output_tail, limit) from None

    def end(self, wait_s: float) -> bool:
        """Close the channel, so the worker's loop ends and a tool it runs under (ncu) writes its report as the
        process exits; wait at most `wait_s` for that. Whether it exited; `stop` or `close` kill what is left."""
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        deadline = time.monotonic() + wait_s
        while self.process is not None and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.process is None or self.process.poll() is not None

    def stop(self) -> None:
        """Kill the worker's process group (and what escaped it); nothing it started outlives it."""
        self.sandbox_ref.unwatch(self.watch)
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self._exited = self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.process = None
            if self.own_sandbox:  # its daemons carry the token of its own sandbox
                kill_marked(self.sandbox_ref.token)
        elif self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            await_exit(self.pid)  # its CUDA context (and GPU memory) is gone when it is
            self.sandbox_ref.kill_strays()
        self.pid = None
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.progress >= 0:
            try:
                os.close(self.progress)
            except OSError:
                pass
        self.progress = -1

    def close(self) -> None:
        self.stop()
        if self.own_sandbox:
            self.sandbox_ref.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if self.pid is None or self.channel is None:
            return False
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[-1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in (b"Z", b"X")

    # ------------------------------------------------------------------ talking

    def output_size(self) -> int:
        try:
            return (self.folder / "output.log").stat().st_size
        except OSError:
            return 0

    def output_since(self, offset: int, limit: int = 1 << 20) -> str:
        """What the worker printed since `output_size()` returned `offset` (at most `limit` bytes)."""
        try:
            with open(self.folder / "output.log", "rb") as f:
                f.seek(offset)
                return f.read(limit).decode("utf-8", "replace")
        except OSError:
            return ""

    def output_tail(self) -> str:
        path = self.folder / "output.log"
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - OUTPUT_TAIL_BYTES))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _receive(self, deadline: Deadline | float, what: str) -> Any:
        """The next message's tree, within the deadline (WorkerFailure, the worker stopped, if not)."""
        if not isinstance(deadline, Deadline):
            deadline = Deadline(cap_s=float(deadline))
        try:
            left = self._await_reply(deadline)
            assert self.channel is not None
            reply = self.channel.receive(left)
        except _Overdue as overdue:
            tail = self.output_tail()
            self._raise_if_over_budget(what, tail)
            self.stop()
            raise WorkerFailure(trap_ids.TIMEOUT, f"{overdue} ({what})", tail) from None
        except ChannelTimeout:
            tail = self.output_tail()
            self.stop()
            detail = f"{deadline.describe(compiling=False, capped=True)} ({what})"
            raise WorkerFailure(trap_ids.TIMEOUT, detail, tail) from None
        except (ChannelClosed, OSError, EOFError, RuntimeError, ValueError) as exc:
            code = self._exit_code()
            tail = self.output_tail()
            self._raise_if_over_budget(what, tail)
            self.stop()
            raise WorkerFailure(trap_ids.CRASH, f"the worker died while {what} ({describe_exit(code)})", tail) from exc
        return reply

    def _decoded(self, cls: type[protocol.R], tree: Any, what: str) -> protocol.R:
        """A reply of class `cls`; one that does not decode is treated like a dead worker (student code runs
        there and can write anything on its socket)."""
        try:
            return protocol.decode_reply(cls, tree)
        except protocol.ProtocolError as exc:
            self.stop()
            raise WorkerFailure(trap_ids.CRASH, f"the worker sent a malformed reply while {what} ({exc})") from None

    def _await_reply(self, deadline: Deadline) -> float:
        """Wait until the reply starts to arrive, reading progress marks meanwhile; the seconds left of
        the cap for reading it. Raises _Overdue when a deadline passed."""
        started = time.monotonic()
        last = started
        depth = 0  # compilations under way (they nest: the parallel warm-up around each kernel's)
        launched = False  # a kernel was launched (or the kernels finished: a step): the run window applies
        compiled_s, compiling_from = 0.0, started  # seconds between compile marks, on our clock

        def compiling_s(at: float) -> float:
            return min(self.compile_credit_s, compiled_s + (at - compiling_from if depth > 0 else 0.0))

        # the sandbox's other processes are the submission's own load; the rest is what others' load owes it
        load = LoadAllowance(self.pid, self.sandbox_ref.own_processes)
        at_last = load.base  # the worker when the last progress mark came
        while True:
            now = time.monotonic()
            cap = started + deadline.cap_s + compiling_s(now)
            window = None  # only the cap: no run window, or no kernel launched yet and no compile under way
            if deadline.run_s is not None and (depth > 0 or launched):
                window = deadline.compile_s if depth > 0 else deadline.run_s
            limit = cap if window is None else min(cap, last + window)
            if now >= limit:
                waited = load.owed_s()
                own_cap = stretched(cap, waited, started, cap - started)
                limit = own_cap if window is None else \
                    min(own_cap, stretched(last + window, load.owed_s(at_last), last, window))
                if now >= limit:
                    used = compiling_s(now)
                    self.compile_credit_s -= used
                    raise _Overdue(deadline.describe(depth > 0, capped=now >= own_cap, waited_s=waited,
                                                     compiled_s=used))
            if self.channel is None:
                raise ChannelClosed()
            watched = [self.channel.fileno()] + ([self.progress] if self.progress >= 0 else [])
            ready = select.select(watched, [], [], limit - now)[0]
            if self.progress in ready:
                try:
                    marks: bytes | None = os.read(self.progress, 65536)
                except BlockingIOError:
                    marks = None
                if marks:
                    last = time.monotonic()
                    if window is not None:
                        at_last = load.reading()
                    for mark in marks:
                        if mark == COMPILE_START[0]:
                            if depth == 0:
                                compiling_from = last
                            depth += 1
                        elif mark == COMPILE_END[0] and depth > 0:
                            depth -= 1
                            if depth == 0:
                                compiled_s += last - compiling_from
                        elif mark in (LAUNCH[0], STEP[0]):
                            launched = True
                elif marks == b"":  # the worker's end closed (it died): the reply channel says how
                    os.close(self.progress)
                    self.progress = -1
            if self.channel.fileno() in ready:
                now = time.monotonic()
                used = compiling_s(now)
                self.compile_credit_s -= used
                return max(1.0, started + deadline.cap_s + used - now)

    def _raise_if_over_budget(self, what: str, tail: str) -> None:
        """The watchdog stopped this worker for its GPU memory: that is why it died (out-of-memory)."""
        watch = self.watch
        if watch is not None and watch.exceeded:
            self.stop()
            raise WorkerFailure(trap_ids.OUT_OF_MEMORY, f"the worker {watch.message} while {what}", tail)

    def _exit_code(self) -> int | None:
        if self.process is not None:
            try:
                return self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                return None
        if self._namespace_pid is None:
            return None
        return self.sandbox_ref.exit_status(self._namespace_pid)

    def request(self, message: protocol.Request[protocol.R], timeout: Deadline | float, what: str) -> protocol.R:
        """Send `message`, wait for its reply within `timeout` (seconds, or a Deadline); a worker past its
        deadline is killed here (WorkerFailure `timeout`), one that sends something other than the reply too
        (WorkerFailure `crash`)."""
        if not self.alive or self.channel is None:
            raise WorkerFailure(trap_ids.CRASH, "the worker is not running")
        tree = protocol.encode(message)
        try:
            self.channel.send(tree, timeout=SEND_TIMEOUT_S)
        except (OSError, ChannelClosed, ChannelTimeout):
            code = self._exit_code()
            self.stop()
            raise WorkerFailure(trap_ids.CRASH, f"the worker died before {what} ({describe_exit(code)})") from None
        started = time.monotonic()
        reply = self._decoded(message.REPLY, self._receive(timeout, what), what)
        for pause in OOM_RETRY_PAUSES_S:
            if not self._innocent_out_of_memory(reply):
                break
            # CUDA ran out of memory while this worker was within its budget: another worker on the GPU took
            # it (the watchdog stops such a worker within ~0.2 s). The same request, again, after a pause.
            time.sleep(pause)
            try:
                self.channel.send(tree, timeout=SEND_TIMEOUT_S)
            except (OSError, ChannelClosed, ChannelTimeout):
                break
            reply = self._decoded(message.REPLY, self._receive(timeout, what), what)
        if reply.fatal:
            self.stop()
        return dataclasses.replace(reply, elapsed_s=time.monotonic() - started)  # type: ignore[return-value]

    def _innocent_out_of_memory(self, reply: protocol.Reply) -> bool:
        if reply.ok or reply.fatal or self.options.backend != "cuda" or not self.alive:
            return False
        if self.watch is None or self.watch.exceeded:
            return False
        return is_out_of_memory(reply.error)


def is_out_of_memory(error: protocol.WorkerError | None) -> bool:
    """Did the worker's request fail because CUDA had no memory for it (torch's OutOfMemoryError)?"""
    if error is None:
        return False
    chain = " ".join(error.chain) + " " + error.type
    return "OutOfMemoryError" in chain or "out of memory" in error.message.lower()
