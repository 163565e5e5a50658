"""The submission's workers for one grade's cases: the worker that runs its code, the replayer that re-runs its
recorded launches (and runs no wrapper code), and the worker under compute-sanitizer (CUDA, where asked or to
name a fault). Each is started on demand, replaced after a case that may have corrupted it, and stopped before
anything is timed. A request's failure comes back as what the case observed, never as an exception."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Mapping
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
        `prestart_replayer`: start the replayer in the background once the submission imported (False for a
        battery that never replays, the CPU companion's)."""
        self.assignment = assignment
        self.submission = submission
        self.sandbox = sandbox
        self.backend = Backend(backend)
        self.clock = clock
        names = list(assignment.required_symbols)
        options = sandbox.options
        self.worker = Worker(submission, names, options, sandbox=sandbox)
        # Replays wrapper launches; it never runs wrapper code, so nothing a wrapper did can touch it.
        self.replayer = Worker(submission, names, options, sandbox=sandbox)
        self.sanitizer = Worker(submission, names, dataclasses.replace(
            options, tool=tool, tool_environment=tuple(SANITIZER_ENV.items())), sandbox=sandbox) if tool else None
        self.sanitizer_unusable = False
        self.prestart_replayer = prestart_replayer
        self.loaded: protocol.Loaded | None = None
        self.load_problem: SymbolProblem | None = None
        self._gpu: GpuSlot | None = None
        self._replayer_start: threading.Thread | None = None
        self._compile_s: dict[str, float] = {}  # per worker: the Triton compile seconds it reported
        self._hint_calls: tuple[HintCall, ...] | None = None

    # ------------------------------------------------------------------ the GPU, deadlines, compile time

    def shared_gpu(self) -> contextlib.AbstractContextManager[None]:
        """Correctness work on CUDA shares the GPU; a grade's timed phase waits for it (gpu_slot)."""
        if not self.backend.on_gpu or not torch.cuda.is_available():
            return contextlib.nullcontext()
        if self._gpu is None:
            self._gpu = GpuSlot(gpu_name())
        return self._gpu.shared()

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
        self._prestart_replayer()
        return None

    def symbol_problem(self, target: str) -> SymbolProblem | None:
        problem = self.ensure()
        if problem is not None:
            return problem
        assert self.loaded is not None
        info = self.loaded.symbols.get(target, {"kind": "missing"})
        return check_symbol(target, info, self.assignment, self.submission.name)

    def replace(self) -> None:
        """The case wrote out of bounds, raised or crashed: whatever it did to the worker's memory or state
        must not reach the next case, which starts a fresh worker (about 1-3 s; only after such cases)."""
        self.worker.stop()
        self.loaded = None

    def request(self, message: protocol.Request[protocol.R], what: str) -> protocol.R | Observation:
        """A case's request to the submission's worker: its reply, or (it timed out or crashed) what the case
        observed; either way a worker that may be broken is replaced before the next case."""
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

    # ------------------------------------------------------------------ the replayer

    def _prestart_replayer(self) -> None:
        """Start the replay worker in the background while the first cases run (it is needed by the
        first passing wrapper case; starting it then would add its start-up to the grade)."""
        if (self._replayer_start is not None or not self.prestart_replayer
                or not any(f.max_launches for f in self.assignment.functions.values())):
            return

        def start() -> None:  # overlaps the cases: not counted as a phase of its own
            try:
                self.replayer.finish_start()
            except WorkerFailure:
                self.replayer.stop()  # replay starts it again and reports what goes wrong

        self.replayer.spawn()  # here: a worker dies with the thread that spawned it
        self._replayer_start = threading.Thread(target=start, name="replayer-start", daemon=True)
        self._replayer_start.start()

    def _await_replayer(self) -> None:
        if self._replayer_start is not None:
            self._replayer_start.join()

    def replay(self, launches: tuple[Mapping[str, Any], ...], target: str) -> dict[int, torch.Tensor] | Finding:
        """Run planned launches in the replay worker: its buffers after the last, or what went wrong, named for
        what it was (failures.replay_failure). A failed replay also replaces the replay worker."""
        self._await_replayer()
        try:
            if not self.replayer.alive:
                with self.clock.phase("start-up"):
                    loaded = self.replayer.start()
                if not loaded.ok:
                    self.replayer.stop()
                    return Finding("import-fails", f"replaying the recorded launches of {target}: importing "
                                   f"{self.submission.name} in a fresh worker failed: "
                                   + error_message(loaded.error, self.submission.name))
            with self.clock.phase("replay"), self.shared_gpu():
                reply = self.replayer.request(protocol.Replay(launches=launches), self.case_deadline(),
                                              "replaying the recorded launches")
            self.note_compile("replayer", reply)
        except WorkerFailure as failure:
            return replay_failure(target, failure=failure, calls=self.hint_calls())
        if not reply.ok:
            self.replayer.stop()
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
        self._await_replayer()
        self.worker.stop()
        self.replayer.stop()
        self.loaded = None
        if self.sanitizer is not None:
            self.sanitizer.stop()

    def close(self) -> None:
        self._await_replayer()
        self.worker.close()
        self.replayer.close()
        if self.sanitizer is not None:
            self.sanitizer.close()
