"""The workers a grade's timed cases run in, and their requests: the timer, a kernel host that built the submission's
kernels from data (grader.running.worker.kernel_host: no line of the file runs there, and nothing the sandbox can
write reaches it), and the reference solution's worker. Each runs a case's planned launches once (outputs back,
launches kept), then, inside the exclusive slot, samples of CUDA-graph replays: the two in turn, sample for sample,
so both see the same clocks."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from grader.authoring.spec import Assignment, PerformanceCase
from grader.judging.errors import error_message
from grader.judging.performance import settled
from grader.running import protocol
from grader.running.cases.battery import Battery
from grader.running.processes.client import Deadline, Worker, WorkerFailure, WorkerOptions
from grader.running.processes.sandbox import Sandbox, SandboxFailure
from grader.running.processes.shared_zygote import shared_address
from grader.running.timing.calls import Prepared
from grader.running.timing.launch_plan import PerformancePlan, compile_request, plan_performance_run
from grader.running.worker.measuring import samplers
from grader.trap_ids import TIMED_OUTPUT_CHANGED, TIMEOUT

# A launch at the timed size gets this long to finish, plus SLOWDOWN_ALLOWED x the bar. Measured in a class
# batch on one H200 (10 concurrent grades, CPUs saturated): 3 s stopped an honest 14x-slower kernel's check.
RUN_GRACE_S = 10.0
SLOWDOWN_ALLOWED = 100.0
COMPILE_LIMIT_S = 120.0  # one compilation (an autotuned kernel compiles once per configuration)
COMPILE_AHEAD_CAP_S = 300.0  # every timed case's kernels compiled at once, ahead of the checks (as battery.warm_up's)


def timed_deadline(perf: PerformanceCase, expected_ms: float | None) -> Deadline:
    """Pure: the deadline of one request at `perf`'s timed size, given the bar's median (ms) if known."""
    run_s = RUN_GRACE_S + SLOWDOWN_ALLOWED * (expected_ms or 0.0) / 1000.0
    return Deadline(cap_s=perf.timeout_s, run_s=run_s, compile_s=COMPILE_LIMIT_S)


# Rounds timed in turn with the reference, at least: five blocks of two (who goes first swaps within a block).
# On an H100 at its power cap, five rounds with the student always first read copies of the reference 0.95-1.04
# of it on a 4096^3 tf32 matmul (docs/gpu-runs-2026-12-06.txt); a round costs two ~25 ms samples.
IN_TURN_ROUNDS = 10


def in_turn_rounds(perf: PerformanceCase) -> int:
    """Pure: how many rounds `perf` is timed in turn with the reference: its repeats, at least IN_TURN_ROUNDS, even
    (so that each side goes first equally often)."""
    rounds = max(perf.repeats, IN_TURN_ROUNDS)
    return rounds + rounds % 2


@dataclasses.dataclass(frozen=True)
class InTurn:
    """Samples timed in turn, round by round (`reference` empty where the reference failed), and why there are fewer
    rounds than planned ('' when there are not)."""

    student: list[float]
    reference: list[float]
    cut_short: str = ""


def cut_short(done: int, planned: int, budget_s: float, failure: str = "") -> str:
    """Pure: the words for a timing in turn that ended after `done` of its `planned` rounds."""
    why = (f"a sample did not finish ({failure[:160]})" if failure
           else f"another two would have taken it past the case's {budget_s:g} s")
    return f"timed in {done} of {planned} rounds: {why}; the time is the rounds measured"


Outputs = tuple[tuple[torch.Tensor, ...], tuple[float, ...]]  # a timed run's outputs and medians (ms)


class Contestants:
    """The timer and the reference worker of one grade's timed cases, with what each keeps for the exclusive slot.
    `deadline(perf)`: how long one request at the case's timed size may take."""

    def __init__(self, assignment: Assignment, device: str, folder: Path,
                 deadline: Callable[[PerformanceCase], Deadline], reference_cache: Path | None = None) -> None:
        """`reference_cache`: the Triton cache the reference's workers share across grades (None: each worker's own,
        compiled afresh)."""
        self.assignment = assignment
        self.reference_cache = reference_cache
        self.device = device
        self.folder = folder
        self.deadline = deadline
        self.reference: Worker | None = None
        self.reference_problem = "" if assignment.reference_solution else "the assignment has no reference solution"
        self.unwatched: set[str] = set()  # why the memory watch stood aside in a timer (its replies' `unwatched`)
        self.reference_kept: set[str] = set()  # cases whose reference launches wait in its worker (in turn)
        self.reference_plans: dict[str, PerformancePlan] = {}  # each case's reference launches, as planned
        self.timer: Worker | None = None
        self.timer_problem = "the timer was not started"
        self.timer_kept: set[str] = set()  # cases whose launches wait in the current timer worker
        self.host_budget_bytes: int | None = None  # the timer's and the student's profiled replay's GPU budget
        self._spun = False
        self._shared: Sandbox | None = None  # this grade's connection to the batch's shared zygote
        self._shared_problem = ""  # why the reference's workers start afresh in a batch that has one

    def close(self) -> None:
        for worker in (self.reference, self.timer):
            if worker is not None:
                worker.close()
        self.reference = self.timer = None
        self.reference_kept.clear()
        self.timer_kept.clear()
        if self._shared is not None:  # after every worker forked through it (the runner closes its own first)
            self._shared.close()
            self._shared = None

    def clocks_already_up(self) -> None:
        """The GPU was timing another grade a moment ago (`samplers.CLOCKS_STAY_UP_S`): no full spin-up needed."""
        self._spun = True

    def spin_up_ms(self) -> float:
        """The first timing of a grade brings the clocks up from idle; the rest follow it closely."""
        first = not self._spun
        self._spun = True
        return samplers.DEFAULT_SPIN_UP_MS if first else samplers.FOLLOW_UP_SPIN_UP_MS

    # ------------------------------------------------------------------ the timer

    def new_timer(self, battery: Battery) -> Worker | str:
        """A kernel host (not started) for the timed runs, built from the grade's bundle of the submission's kernels
        (the one its kernel cases ran from), or why there is none."""
        bundle = battery.workers.bundle
        if bundle is None:
            return battery.workers.bundle_problem or "the submission's kernels were not reported"
        return Worker(battery.submission, list(self.assignment.required_symbols), battery.sandbox.options,
                      sandbox=battery.sandbox, bundle=bundle, gpu_budget_bytes=self.host_budget_bytes)

    def adopt_timer(self, worker: Worker | str, reply: protocol.Loaded | None) -> None:
        if isinstance(worker, str) or reply is None:
            self.timer_problem = f"your kernels could not be timed: {worker}"
            return
        if reply.ok:
            self.timer = worker
            self.timer_problem = ""
            return
        worker.close()
        self.timer_problem = ("your kernels could not be built apart from your module's code (timed runs build "
                              "only the @triton.jit functions, with the values of the module-level names they use): "
                              + error_message(reply.error, worker.submission.name))

    def timer_for(self, battery: Battery) -> Worker | str:
        """The timer worker, started now if it is not running (after a failure, say)."""
        if self.timer is None:
            worker = self.new_timer(battery)
            if not isinstance(worker, str):
                try:
                    worker.spawn()
                except (WorkerFailure, OSError) as exc:
                    worker.close()
                    self.timer_problem = f"the grader could not start the timer again ({exc}): a problem of the machine"
                    return self.timer_problem
            self.adopt_timer(worker, finish_start(worker) if not isinstance(worker, str) else None)
        return self.timer if self.timer is not None else self.timer_problem

    def drop_timer(self) -> None:
        if self.timer is not None:
            self.timer.close()
            self.timer = None
        self.timer_kept.clear()  # what it kept died with it

    def kept_timer(self, prepared: Prepared, battery: Battery) -> Worker | str:
        """The timer, with this case's launches kept in it: run once more in a timer started after a failure
        (a worker that died took every case it kept with it)."""
        perf = prepared.perf
        timer = self.timer_for(battery)
        if isinstance(timer, str) or perf.id in self.timer_kept:
            return timer
        run = self.run_plan(timer, prepared, f"running {perf.target}'s launches at {perf.shape}", keep=perf.id,
                            outputs=False)
        if isinstance(run, str):
            self.drop_timer()
            return run
        self.timer_kept.add(perf.id)
        return timer

    def compile_ahead(self, timer: Worker, ready: Sequence[Prepared]) -> bool:
        """These recorded cases' kernels compiled and loaded in `timer` before its checks, with no seat held and the GPU
        not held shared (compiling runs nothing on it), while the student's worker records the next case: the checks
        then find them compiled. False where the timer failed at it (drop it: the first check starts another and
        reports what went wrong, with the student's line)."""
        if self.device != "cuda" or not ready:
            return True
        deadline = Deadline(cap_s=COMPILE_AHEAD_CAP_S, run_s=RUN_GRACE_S, compile_s=COMPILE_LIMIT_S)
        try:
            reply = timer.request(compile_request([prepared.timed for prepared in ready]), deadline,
                                  "compiling your kernels for their timed sizes")
        except WorkerFailure:
            return False
        return reply.ok

    def run_plan(self, worker: Worker, prepared: Prepared, what: str, keep: str = "",
                 profiled: bool = False, outputs: bool = True) -> Outputs | str:
        """Run the planned launches in `worker`: their outputs (first run; empty unless `outputs`) and, unless
        kept there for `time_kept` (`keep`), their medians. `profiled`: kept on one input set, for a profiled
        replay."""
        perf = prepared.perf
        request = prepared.timed.request(prepared.call.inputs, sets=1 if profiled else perf.input_sets,
                                         repeats=perf.repeats, time=self.device == "cuda" and not keep, keep=keep,
                                         spin_up_ms=None if keep else self.spin_up_ms(), rotate=not profiled,
                                         return_outputs=outputs, more_inputs=() if profiled else prepared.more_inputs)
        try:
            reply = worker.request(request, self.deadline(perf), what)
        except WorkerFailure as failure:
            return f"{failure.trap}: {what}: {failure.detail}"
        if not reply.ok:
            return f"{what} raised " + error_message(reply.error, worker.submission.name)
        if reply.outputs is None:
            return f"{what}: the timer sent a malformed reply"
        refused = self._refusal(reply, what)
        if refused:
            return refused
        return reply.outputs, reply.medians_ms

    # ------------------------------------------------------------------ the reference

    def new_reference(self, tool: tuple[str, ...] = ()) -> Worker:
        """The reference solution's worker (not started; under `tool`, e.g. Nsight Compute, where given). The reference
        is the course's code, like its oracles: it runs as the grader's user (never the sandbox user that runs student
        code), so it can reach the course's Triton cache of it in the grader's cache folder, which no student worker
        can read or write."""
        if self.assignment.reference_solution is None:
            raise RuntimeError("the assignment has no reference solution")
        path = self.assignment.reference_solution.resolve()
        options = WorkerOptions(backend="cuda" if self.device == "cuda" else "interpreter",
                                import_timeout_s=self.assignment.import_timeout_s, sandbox_user=None, tool=tool)
        shared = None if tool else self._shared_sandbox(options)
        return Worker(path, list(self.assignment.required_symbols), options, triton_cache=self.reference_cache,
                      sandbox=shared)

    def _shared_sandbox(self, options: WorkerOptions) -> Sandbox | None:
        """In a batch with a shared zygote (grader.running.processes.shared_zygote), the sandbox that forks the
        reference's workers there: no import of torch and triton per grade. None elsewhere, or where it cannot be
        reached (then each reference worker is a fresh process, as in a single grade)."""
        address = shared_address()
        if address is None or self._shared_problem:
            return None
        if self._shared is None:
            sandbox = Sandbox(options, self.reference_cache, zygote_address=address)
            try:
                sandbox.ready()
            except SandboxFailure as failure:
                sandbox.close()
                self._shared_problem = failure.detail
                return None
            self._shared = sandbox
        return self._shared

    def start_reference(self) -> Worker:
        """A worker running the assignment's reference solution (trusted code, same timing path)."""
        worker = self.new_reference()
        worker.spawn()
        reply = finish_start(worker)
        if not reply.ok:
            worker.close()
            raise RuntimeError(reply.failure.message[:300])
        return worker

    def ensure_reference(self) -> None:
        if self.reference is None and not self.reference_problem:
            try:
                self.reference = self.start_reference()
            except (RuntimeError, WorkerFailure, OSError) as exc:
                self.reference_problem = f"the reference solution could not be loaded: {exc}"

    def lose_reference(self) -> None:
        """The reference's worker failed: closed, and nothing it kept is counted on (later cases are timed against the
        bars, or start a new reference worker for them)."""
        if self.reference is not None:
            self.reference.close()
            self.reference = None
        self.reference_kept.clear()

    def adopt_reference(self, worker: Worker, reply: protocol.Loaded) -> None:
        if reply.ok:
            self.reference = worker
        else:
            worker.close()
            self.reference_problem = f"the reference solution could not be loaded: {reply.failure.message[:300]}"

    def reference_plan(self, reference: Worker, prepared: Prepared, what: str) -> PerformancePlan | str:
        """The reference's launches on the case's inputs, recorded in its worker and planned (or why not)."""
        reply = reference.request(
            prepared.call.request(sets=1, repeats=0, time=False, return_outputs=False, record=True),
            self.deadline(prepared.perf), what)
        recorded = reply.record if reply.ok else None
        return plan_performance_run(recorded if isinstance(recorded, Mapping) else {}, prepared.call.inputs,
                                    prepared.perf.target)

    def keep_reference(self, prepared: Prepared) -> None:
        """The reference's launches on the same inputs, recorded, planned and run once in its worker, kept there
        to be timed in turn with the student's (`time_in_turn`). Where the reference cannot, the case is timed
        against the bars alone, as before."""
        self.ensure_reference()
        if self.reference is None:
            return
        perf = prepared.perf
        what = f"running the reference {perf.target} at {perf.shape}"
        try:
            plan = self.reference_plan(self.reference, prepared, what)
        except WorkerFailure:
            self.lose_reference()
            return
        if isinstance(plan, str):
            return
        self.reference_plans[perf.id] = plan
        kept = self.run_plan(self.reference, dataclasses.replace(prepared, timed=plan), what, keep=perf.id,
                             outputs=False)
        if not isinstance(kept, str):
            self.reference_kept.add(perf.id)

    def time_reference(self, prepared: Prepared) -> tuple[list[float] | None, str]:
        """The reference's medians on the same inputs, timed like the student's (its launches recorded,
        then replayed as a CUDA graph), or None and why not (a note on the result)."""
        self.ensure_reference()
        if self.reference is None:
            return None, self.reference_problem
        perf = prepared.perf
        what = f"timing the reference {perf.target} on {perf.shape}"
        try:
            plan = self.reference_plan(self.reference, prepared, what)
            if isinstance(plan, str):
                return None, f"the reference could not be timed: {plan}"
            timed = self.run_plan(self.reference, dataclasses.replace(prepared, timed=plan), what, outputs=False)
        except WorkerFailure as failure:
            self.lose_reference()
            return None, f"the reference could not be timed: {failure.detail}"
        if isinstance(timed, str):
            return None, f"the reference could not be timed: {timed}"
        return list(timed[1]) or None, ""

    # ------------------------------------------------------------------ samples (inside the exclusive slot)

    def time_in_turn(self, timer: Worker, perf: PerformanceCase, what: str) -> InTurn | str:
        """The student's kept launches and the reference's, one sample each in turn, `in_turn_rounds(perf)` rounds,
        who goes first alternating (student, reference; reference, student; ...): both see the same clocks, power
        draw and temperature (a 4096^3 tf32 matmul holds an H200 at its power cap, its SM clock wandering 1410-1560
        MHz: timed apart, identical kernels read +-7.6%; in turn, +-0.15%: benchmarks/timing_noise.py,
        docs/performance.md), and going first favours neither (`paired_speedup` takes the rounds two by two).
        Each worker holds its captured graph between samples. The lists come back in round order. The rounds end
        early once whole blocks of two agree (`judging.performance.settled`: two blocks within 0.5%), and both
        graphs are let go then.

        A slow kernel still gets its time: the rounds go in blocks of two, and once a block has been measured, no
        block starts that would not end within the case's `timeout_s` at the last block's pace, and a sample that
        times out ends the timing with the blocks measured so far; `InTurn.cut_short` says so."""
        assert self.reference is not None
        student: list[float] = []
        reference: list[float] | None = []
        spin = self.spin_up_ms()
        rounds = in_turn_rounds(perf)
        started = block_started = time.monotonic()
        for round_ in range(rounds):
            reference_first = round_ % 2 == 1
            if not reference_first and round_ > 0:  # a block of two rounds begins
                now = time.monotonic()
                last_block_s, block_started = now - block_started, now
                if now - started + last_block_s > perf.timeout_s:
                    return InTurn(student, reference or [], cut_short(round_, rounds, perf.timeout_s))
            hold = round_ < rounds - 1  # the last sample lets the graphs (and their memory) go
            if reference_first and reference is not None:
                reference = self._sample_reference(reference, perf, spin, hold)
                spin = 0.0
            mine = self.sample(timer, perf, what, spin_up_ms=spin, hold=hold)
            if isinstance(mine, str):
                done = round_ - round_ % 2  # the rounds of the blocks measured whole
                if done and mine.startswith(f"{TIMEOUT}:"):
                    return InTurn(student[:done], (reference or [])[:done],
                                  cut_short(done, rounds, perf.timeout_s, mine))
                return mine
            student.extend(mine)
            if not reference_first and reference is not None:
                reference = self._sample_reference(reference, perf, 0.0, hold)
            spin = 0.0
            if hold and reference is not None and reference_first and settled(reference, student):
                self.let_go(timer, perf)  # the blocks agree: no more rounds, and both graphs (and memory) go now
                self.let_go(self.reference, perf)
                break
        return InTurn(student, reference or [])

    def let_go(self, worker: Worker | None, perf: PerformanceCase) -> None:
        """The graph `worker` holds for `perf` let go without another sample (a timing in turn that settled early). A
        worker that fails here is dropped: nothing it timed is lost, and the next case starts a new one."""
        if worker is None:
            return
        request = protocol.TimeKept(key=perf.id, repeats=0, spin_up_ms=0.0, hold=False)
        try:
            reply = worker.request(request, Deadline(cap_s=RUN_GRACE_S), f"letting {perf.target}'s timed graph go")
        except WorkerFailure:
            reply = None
        if reply is None or not reply.ok:
            if worker is self.timer:
                self.drop_timer()
            elif worker is self.reference:
                self.lose_reference()

    def _sample_reference(self, so_far: list[float], perf: PerformanceCase, spin_up_ms: float,
                          hold: bool) -> list[float] | None:
        """One more reference sample in turn; None once the reference has failed (never expected: the comparison
        is then left to the bars)."""
        assert self.reference is not None
        theirs = self.sample(self.reference, perf, f"timing the reference {perf.target}", spin_up_ms=spin_up_ms,
                             hold=hold)
        return so_far + theirs if not isinstance(theirs, str) else None

    def sample(self, worker: Worker, perf: PerformanceCase, what: str, *, spin_up_ms: float,
               hold: bool) -> list[float] | str:
        request = protocol.TimeKept(key=perf.id, repeats=1, spin_up_ms=spin_up_ms, hold=hold)
        run_s = self.deadline(perf).run_s or RUN_GRACE_S
        try:
            reply = worker.request(request, Deadline(cap_s=min(perf.timeout_s, RUN_GRACE_S + run_s)), what)
        except WorkerFailure as failure:
            return f"{failure.trap}: {what}: {failure.detail}"
        if not reply.ok:
            return f"{what} raised " + error_message(reply.error, worker.submission.name)
        refused = self._refusal(reply, what)
        if refused:
            return refused
        return list(reply.medians_ms) if reply.medians_ms else f"{what}: no timing came back"

    def _refusal(self, reply: protocol.Timed, what: str) -> str:
        """A timer's reply read once for the grade: why its memory watch stood aside (kept for the grade's notes),
        and why its samples are no time ("" when they are)."""
        if reply.unwatched:
            self.unwatched.add(reply.unwatched)
        return f"{TIMED_OUTPUT_CHANGED}: {what}: {reply.refused}" if reply.refused else ""

    def time_kept(self, worker: Worker, perf: PerformanceCase, what: str) -> list[float] | str:
        """Time the launches `run_plan(keep=perf.id)` left in `worker`: CUDA-graph replays only."""
        request = protocol.TimeKept(key=perf.id, repeats=perf.repeats, spin_up_ms=self.spin_up_ms())
        run_s = self.deadline(perf).run_s or RUN_GRACE_S
        try:  # graph replays make no progress marks: the cap covers the spin-up and every sample
            reply = worker.request(request, Deadline(cap_s=min(perf.timeout_s, RUN_GRACE_S + perf.repeats * run_s)),
                                   what)
        except WorkerFailure as failure:
            return f"{failure.trap}: {what}: {failure.detail}"
        if not reply.ok:
            return f"{what} raised " + error_message(reply.error, worker.submission.name)
        refused = self._refusal(reply, what)
        if refused:
            return refused
        return list(reply.medians_ms)


def finish_start(worker: Worker) -> protocol.Loaded:
    """A spawned worker's load reply; a worker that did not come up is a failed one, saying why."""
    try:
        return worker.finish_start()
    except WorkerFailure as failure:
        return protocol.failed(protocol.Loaded, protocol.WorkerError(message=failure.detail))
