"""The submission's workers for one grade's cases: the worker that imports its file and calls its wrappers, the kernel
host that runs none of its Python (its kernels built from data: grader.running.worker.kernel_host), which launches
every kernel case and replays every wrapper's recorded launches, and the worker under compute-sanitizer (CUDA, where
asked or to name a fault). Each is started on demand, replaced after a case that may have corrupted it, and stopped
before anything is timed. A request's failure comes back as what the case observed, never as an exception.

Values that score come only from the kernel host: a kernel case's storages are what the host's launch left; a
wrapper's returned values count only where the host's replay of its recorded launches reproduces them. Where
autotune or heuristics choose a kernel's meta-parameters (student Python), the submission's worker makes the launch
first and reports what they chose; the host then launches its bare kernel with those values."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from grader import trap_ids
from grader.authoring.spec import Assignment
from grader.backends import Backend
from grader.evidence.observation import Finding, Observation
from grader.judging.errors import error_message
from grader.judging.false_hints import HintCall, hint_calls
from grader.running import protocol
from grader.running.bundle import build_bundle, wrapped_symbols
from grader.running.cases.failures import failed_request, import_failure_sentence, replay_failure, tail
from grader.running.cases.sanitizer import SANITIZER_ENV
from grader.running.cases.symbols import SymbolProblem, check_symbol
from grader.running.phases import PhaseClock
from grader.running.processes.client import Deadline, Worker, WorkerFailure
from grader.running.processes.gpu_slot import GpuSlot, gpu_name
from grader.running.processes.sandbox import Sandbox

# On a GPU a correctness case's kernels finish in milliseconds: one still running this long after its last
# launch is spinning, and the worker is stopped (compiles get their own time: grader.running.processes.client).
CASE_RUN_S = 5.0
# Kernels run this many times slower under compute-sanitizer memcheck (deadline factor).
SANITIZER_SLOWDOWN = 20
# After a fault under memcheck the worker ends itself; the tool writes its report as the process ends.
SANITIZER_REPORT_WAIT_S = 30.0


class SubmissionWorkers:
    """One submission's workers in its sandbox, for one grade."""

    def __init__(self, assignment: Assignment, submission: Path, backend: Backend, sandbox: Sandbox,
                 clock: PhaseClock, *,
                 tool: tuple[str, ...] | None = None, prestart_replayer: bool = True) -> None:
        """`tool`: the compute-sanitizer command a third worker runs under (None: no such worker).
        `prestart_replayer`: start the kernel host in the background once the submission imported (False for a
        battery that never replays, the CPU companion's)."""
        self.assignment = assignment
        self.submission = submission
        self.sandbox = sandbox
        self.backend = Backend(backend)
        self.clock = clock
        names = list(assignment.required_symbols)
        options = sandbox.options
        self.names = names
        self.worker = Worker(submission, names, options, sandbox=sandbox)
        self.bundle: protocol.KernelBundle | None = None  # the kernels as data, once the worker reported them
        self.bundle_problem = ""  # why there is none
        self.host: Worker | None = None  # runs none of the submission's Python: kernel cases, replays
        self.host_loaded: protocol.Loaded | None = None
        self.host_problem = ""  # why the host could not build the kernels (deterministic: not retried)
        self.sanitizer = Worker(submission, names, dataclasses.replace(
            options, tool=tool, tool_environment=tuple(SANITIZER_ENV.items())), sandbox=sandbox) if tool else None
        self.sanitizer_unusable = False
        self.prestart_replayer = prestart_replayer
        self.loaded: protocol.Loaded | None = None
        self.load_problem: SymbolProblem | None = None
        self._gpu: GpuSlot | None = None
        self._alone = False  # inside alone_on_gpu: the exclusive slot is this grade's, shared_gpu takes nothing
        self._host_start: threading.Thread | None = None
        self._host_lock = threading.Lock()
        self._compile_s: dict[str, float] = {}  # per worker: the Triton compile seconds it reported
        self._hint_calls: tuple[HintCall, ...] | None = None

    # ------------------------------------------------------------------ the GPU, deadlines, compile time

    def shared_gpu(self) -> contextlib.AbstractContextManager[None]:
        """Correctness work on CUDA shares the GPU; a grade's timed phase waits for it (gpu_slot)."""
        if not self.backend.on_gpu or not torch.cuda.is_available() or self._alone:
            return contextlib.nullcontext()
        return self._slot().shared()

    @contextlib.contextmanager
    def alone_on_gpu(self) -> Iterator[None]:
        """The GPU to this grade alone, as a timed phase has it: no other grade's kernels run meanwhile (a case
        that timed out beside them runs again so: probes.TimeoutsAlone). Nothing to hold off the GPU."""
        if not self.backend.on_gpu or not torch.cuda.is_available():
            yield
            return
        with self._slot().exclusive():
            self._alone = True
            try:
                yield
            finally:
                self._alone = False

    def _slot(self) -> GpuSlot:
        if self._gpu is None:
            self._gpu = GpuSlot(gpu_name())
        return self._gpu

    def case_deadline(self) -> Deadline:
        """A correctness request's deadline: the spec's call_timeout_s; on a GPU also CASE_RUN_S after the
        last kernel launch (the cases are small: a kernel still running then is spinning)."""
        cap = self.assignment.call_timeout_s
        return Deadline(cap_s=cap, run_s=min(cap, CASE_RUN_S) if self.backend.on_gpu else None)

    def note_compile(self, role: str, reply: protocol.Reply) -> None:
        """Workers report their cumulative JIT compile seconds with every reply (informational)."""
        if reply.compile_s >= 0:
            self._compile_s[role] = reply.compile_s

    def compile_seconds(self) -> float:
        return round(sum(self._compile_s.values()), 4)

    def hint_calls(self) -> tuple[HintCall, ...]:
        """The tl.multiple_of / tl.max_contiguous calls in the submission's source (read once, never run)."""
        if self._hint_calls is None:
            try:
                self._hint_calls = hint_calls(self.submission.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                self._hint_calls = ()
        return self._hint_calls

    # ------------------------------------------------------------------ the submission's worker

    def ensure(self) -> SymbolProblem | None:
        """Start (or restart) the worker; return why the submission cannot run, if it cannot."""
        if self.worker.alive and self.loaded is not None:
            return None
        if self.load_problem is not None:
            return self.load_problem  # importing failed once; it is deterministic, do not retry
        try:
            with self.clock.phase("start-up"):
                reply = self.worker.start()
        except WorkerFailure as failure:
            self.load_problem = SymbolProblem(failure.trap, import_failure_sentence(self.submission.name, failure)
                                              + tail(failure.output_tail), at_import=True)
            return self.load_problem
        if not reply.ok:
            self.worker.stop()
            self.load_problem = SymbolProblem(trap_ids.IMPORT_FAILS, f"{self.submission.name} could not be imported: "
                                              + error_message(reply.error, self.submission.name), at_import=True)
            return self.load_problem
        self.loaded = reply
        if self.bundle is None and not self.bundle_problem:
            self._make_bundle(reply)
        self._prestart_host()
        return None

    def _make_bundle(self, reply: protocol.Loaded) -> None:
        """The kernels as data: their source from the grader's own copy of the file, their module-level values as the
        worker reported them (once per grade: every kernel host of the grade builds from the same bundle)."""
        try:
            text = self.submission.read_text(encoding="utf-8", errors="replace")
            self.bundle = build_bundle(text, self.submission.name, reply.kernels)
        except (OSError, SyntaxError, ValueError) as exc:
            self.bundle_problem = f"the grader could not read the kernels of {self.submission.name}: {exc}"

    def symbol_problem(self, target: str) -> SymbolProblem | None:
        problem = self.ensure()
        if problem is not None:
            return problem
        assert self.loaded is not None
        info = self.loaded.symbols.get(target, {"kind": "missing"})
        found = check_symbol(target, info, self.assignment, self.submission.name)
        if found is not None or target not in self.assignment.kernels:
            return found
        return self.host_symbol_problem(target)

    def host_symbol_problem(self, target: str) -> SymbolProblem | None:
        """Why the kernel host cannot run the kernel `target` (a kernel that needs more than data from the module),
        if it cannot."""
        host = self.ensure_host()
        if isinstance(host, str):
            return SymbolProblem(trap_ids.KERNEL_NEEDS_MODULE_CODE, host)
        assert self.host_loaded is not None
        why = self.host_loaded.unavailable.get(target)
        if why:
            return SymbolProblem(trap_ids.KERNEL_NEEDS_MODULE_CODE,
                                 f"`{target}` cannot run apart from your module's code: {why}.")
        return None

    @property
    def wrapped(self) -> dict[str, tuple[str, ...]]:
        """Kernels whose autotune or heuristics choose meta-parameters (resolved in the submission's worker)."""
        return wrapped_symbols(self.bundle) if self.bundle is not None else {}

    # ------------------------------------------------------------------ the kernel host

    def ensure_host(self) -> Worker | str:
        """The kernel host, started (once per grade, again after a bad case) from the bundle; or why it cannot be."""
        self._await_host()
        with self._host_lock:
            if self.host_problem:
                return self.host_problem
            if self.host is not None and self.host.alive and self.host_loaded is not None:
                return self.host
            return self._start_host()

    def _start_host(self) -> Worker | str:
        if self.host is not None and self.host.alive and self.host_loaded is not None:
            return self.host
        if self.bundle is None:
            if self.loaded is None and self.ensure() is not None:
                return self.load_problem.message if self.load_problem else "the submission could not be imported"
            if self.bundle is None:
                self.host_problem = self.bundle_problem or "the submission's worker reported no kernels"
                return self.host_problem
        if self.host is None:
            self.host = Worker(self.submission, self.names, self.sandbox.options, sandbox=self.sandbox,
                               bundle=self.bundle)
        try:
            with self.clock.phase("start-up"):
                loaded = self.host.start()
        except WorkerFailure as failure:
            self.host.stop()
            return f"building the kernels apart from your module failed: {failure.detail}"
        if not loaded.ok:
            self.host.stop()
            self.host_problem = ("your kernels could not be built apart from your module's code: "
                                 + error_message(loaded.error, self.submission.name))
            return self.host_problem
        self.host_loaded = loaded
        return self.host

    def _prestart_host(self) -> None:
        """Start the kernel host in the background while the first cases run."""
        if self._host_start is not None or not self.prestart_replayer or self.bundle is None:
            return

        def start() -> None:  # overlaps the cases: not counted as a phase of its own
            with self._host_lock:
                self._start_host()

        self._host_start = threading.Thread(target=start, name="kernel-host-start", daemon=True)
        self._host_start.start()

    def _await_host(self) -> None:
        if self._host_start is not None:
            self._host_start.join()
            self._host_start = None

    def replace(self) -> None:
        """The case wrote out of bounds, raised or crashed: whatever it did to the worker's memory or state
        must not reach the next case, which starts a fresh worker (about 1-3 s; only after such cases)."""
        self.worker.stop()
        self.loaded = None
        if self.host is not None:
            self._await_host()
            self.host.stop()
            self.host_loaded = None

    def request(self, message: protocol.Request[protocol.R], what: str) -> protocol.R | Observation:
        """A case's request: a kernel's launch to the kernel host (after the submission's worker resolved what its
        autotune or heuristics choose), a wrapper's call to the submission's worker. Its reply, or (it timed out or
        crashed) what the case observed; either way a worker that may be broken is replaced before the next case."""
        if isinstance(message, protocol.Launch):
            return self._launch(message, what)  # type: ignore[return-value]
        return self._ask_worker(message, what)

    def _ask_worker(self, message: protocol.Request[protocol.R], what: str) -> protocol.R | Observation:
        try:
            with self.shared_gpu():
                reply = self.worker.request(message, self.case_deadline(), what)
        except WorkerFailure as failure:
            self.loaded = None  # the next case starts a fresh worker
            return failed_request(what, failure, self.hint_calls(), self.submission.name)
        self.note_compile("worker", reply)
        if reply.fatal:
            self.loaded = None
        return reply

    def _launch(self, message: protocol.Launch, what: str) -> protocol.Launched | Observation:
        resolved: dict[str, Any] = {}
        if message.kernel in self.wrapped:
            first = self._ask_worker(dataclasses.replace(message, resolve=True, count_traffic=False), what)
            if isinstance(first, Observation) or not first.ok:
                return first  # the submission's own autotune or heuristics failed: that is the case's outcome
            resolved = dict(first.resolved or {})
        host = self.ensure_host()
        if isinstance(host, str):
            return Observation(trap=trap_ids.KERNEL_NEEDS_MODULE_CODE, message=host)
        request = dataclasses.replace(message, resolved=resolved)
        try:
            with self.shared_gpu():
                reply = host.request(request, self.case_deadline(), what)
        except WorkerFailure as failure:
            self.host_loaded = None
            host.stop()
            return failed_request(what, failure, self.hint_calls(), self.submission.name)
        self.note_compile("host", reply)
        if reply.fatal:
            host.stop()
            self.host_loaded = None
        if resolved and reply.ok:  # the host ran the bare kernel with these: the case was launched with them
            reply = dataclasses.replace(reply, resolved=resolved)
        return reply

    def output_tail(self, message: protocol.Request[Any]) -> str:
        """What the worker that served `message` printed last (the kernel host for a launch)."""
        if isinstance(message, protocol.Launch) and self.host is not None:
            return self.host.output_tail()
        return self.worker.output_tail()

    def request_for_timing(self, message: protocol.Request[protocol.R], timeout_s: Deadline | float,
                           what: str) -> protocol.R | str:
        """A request of a performance case to the student's worker: its reply, or what went wrong
        ("timeout: ...", "crash: ...", "... raised ..."), for the case's message."""
        blocked = self.ensure()
        if blocked is not None:
            return blocked.message
        try:
            with self.shared_gpu():
                reply = self.worker.request(message, timeout_s, what)
        except WorkerFailure as failure:
            self.loaded = None  # the next request starts a fresh worker
            return f"{failure.trap}: {what}: {failure.detail}"
        if not reply.ok:
            if reply.fatal:
                self.loaded = None
            return f"{what} raised " + error_message(reply.error, self.submission.name)
        return reply

    # ------------------------------------------------------------------ replays (in the kernel host)

    def replay(self, launches: tuple[Mapping[str, Any], ...], target: str) -> dict[int, torch.Tensor] | Finding:
        """Run planned launches in the replay worker: its buffers after the last, or what went wrong, named for
        what it was (failures.replay_failure). A failed replay also replaces the kernel host."""
        host = self.ensure_host()
        if isinstance(host, str):
            return Finding(trap_ids.KERNEL_NEEDS_MODULE_CODE, f"replaying the recorded launches of {target}: {host}")
        try:
            with self.clock.phase("replay"), self.shared_gpu():
                reply = host.request(protocol.Replay(launches=launches), self.case_deadline(),
                                     "replaying the recorded launches")
            self.note_compile("host", reply)
        except WorkerFailure as failure:
            host.stop()
            self.host_loaded = None
            return replay_failure(target, failure=failure, calls=self.hint_calls())
        if not reply.ok:
            host.stop()
            self.host_loaded = None
            return replay_failure(target, reply=reply, submission=self.submission.name, calls=self.hint_calls())
        return dict(reply.buffers)

    # ------------------------------------------------------------------ under compute-sanitizer

    def under_sanitizer(self, message: protocol.Launch | protocol.Call, what: str) -> str | None:
        """Run a case's request once more in the worker under compute-sanitizer memcheck: what the worker and the
        tool printed meanwhile (memcheck's report, the announced addresses), or None when the worker could not be
        started under the tool (then never again in this grade)."""
        if self.sanitizer is None or self.sanitizer_unusable:
            return None
        try:
            with self.clock.phase("sanitizer"):
                if not self.sanitizer.alive and not self.sanitizer.start().ok:
                    self.sanitizer_unusable = True  # deterministic: importing fails the same way every time
                    return None
        except WorkerFailure:
            self.sanitizer_unusable = True  # the tool does not start here (gVisor refuses it, say): not again
            return None
        offset = self.sanitizer.output_size()
        reply: protocol.Reply | None = None
        request: protocol.Request[protocol.Launched] = dataclasses.replace(message, announce_pointers=True)
        try:  # an invalid access usually ends the worker (its CUDA context is lost): the report is in its log
            timeout_s = self.assignment.call_timeout_s * SANITIZER_SLOWDOWN
            with self.clock.phase("sanitizer"), self.shared_gpu():
                reply = self.sanitizer.request(request, timeout_s, what + " under compute-sanitizer")
        except WorkerFailure:
            pass
        self._await_report(ending=(reply is not None and reply.exits) or not self.sanitizer.alive)
        text = self.sanitizer.output_since(offset)
        if reply is None or reply.exits or not reply.ok:
            self.sanitizer.stop()  # its CUDA context is gone, or the case failed: a fresh one for the next
        return text

    def _await_report(self, ending: bool) -> None:
        """memcheck's report is written by the tool process, next to the reply; after a fault the worker ends
        itself and the tool writes the rest as the process ends: wait for that (bounded), then read the log."""
        if not ending or self.sanitizer is None:
            time.sleep(0.2)
            return
        deadline = time.monotonic() + SANITIZER_REPORT_WAIT_S
        while self.sanitizer.alive and time.monotonic() < deadline:
            time.sleep(0.05)

    # ------------------------------------------------------------------ the end

    def stop(self) -> None:
        """Stop every process running the submission (restarted on demand): nothing of the student's
        may run while something is timed."""
        self._await_host()
        self.worker.stop()
        if self.host is not None:
            self.host.stop()
            self.host_loaded = None
        self.loaded = None
        if self.sanitizer is not None:
            self.sanitizer.stop()

    def close(self) -> None:
        self._await_host()
        self.worker.close()
        if self.host is not None:
            self.host.close()
        if self.sanitizer is not None:
            self.sanitizer.close()
