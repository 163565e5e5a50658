"""Performance cases on CUDA, the measuring part. Timed runs execute none of the submission's Python:

1. record: the student's worker calls the target once at the timed size (compiling and autotuning it),
   then once more with every kernel launch recorded by layout (grader.running.worker.measuring.planned_launches);
2. plan: every buffer of those launches must be an input, a fresh buffer, a constant fill or a copy of
   an input (grader.running.timing.launch_plan), else the values came from outside the kernels;
3. time: the student's workers are stopped; inside the GPU's exclusive slot (grader.running.processes.gpu_slot)
   a timer worker that built only the submission's kernels, from data (grader.running.worker.kernel_host), runs the
   launches on fresh inputs, sends their outputs back (checked here against torch eager), and times
   CUDA-graph replays of them. The reference solution is timed the same way in a worker of its own,
   torch eager here; both once per assignment, GPU and versions, cached on disk
   (grader.running.timing.calibration).

The student's target is timed only after all of its correctness cases in this run passed. On any other
backend a performance case is "skipped" (it needs a CUDA GPU), never passed and never failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.problem import Problem
from grader.authoring.spec import Assignment, PerformanceCase
from grader.backends import Backend
from grader.evidence.kernel_profiles import CaseProfile
from grader.evidence.observation import Observation
from grader.judging.gpu_performance_traps import counters_can_name_a_trap, why_not_needed
from grader.judging.judge import fusion_problems
from grader.judging.performance import correctness_gate, errored, evaluate, measurement, not_run, skipped
from grader.results import CaseResult, Measurement, PerformanceResult
from grader.running.cases.battery import Battery
from grader.running.phases import PhaseClock, traced
from grader.running.processes.client import Worker
from grader.running.processes.gpu_seats import (
    TimingSeats,
    host_budget_bytes,
    planned_footprint_bytes,
    seat_units,
    timing_footprint_bytes,
)
from grader.running.processes.gpu_slot import GpuSlot, gpu_name
from grader.running.timing.bars import Bars
from grader.running.timing.calibration import CalibrationStore
from grader.running.timing.calls import Prepared, encode_call, input_set
from grader.running.timing.contestants import Contestants, finish_start
from grader.running.timing.failures import failed, out_of_memory
from grader.running.timing.launch_plan import plan_performance_run
from grader.running.timing.memory_retry import again_while_short_of_memory
from grader.running.timing.profiled_replay import Profiler
from grader.running.worker.measuring import samplers
from grader.seeds import case_seed
from grader.trap_ids import NOT_FUSED, TIMED_OUTPUT_CHANGED, TIMEOUT

logger = logging.getLogger(__name__)


class PerformanceRunner(Bars):
    """Times one grading session's performance cases, all at the first one's turn: every case recorded
    in the student's worker, then every one timed in a single exclusive slot (one spin-up).

    `device` is where torch eager runs ("cuda"; tests on a CPU-only machine use "cpu" with a fake
    clock). The reference solution gets a worker of its own, started at its first use."""

    def __init__(self, assignment: Assignment, seed: int, device: str = "cuda",
                 perfs: Sequence[PerformanceCase] | None = None, calibration: CalibrationStore | None = None,
                 profile: bool = True, profile_every_case: bool = True) -> None:
        """`perfs`: the cases this session measures (default: the assignment's); `calibration`: where bars
        are cached (None: measured for this session alone); `profile`: each timed case replayed once under
        Nsight Compute (grader.running.timing.profiled_replay), its profile in `profiles`; `profile_every_case`: off,
        only the cases whose counters could name a trap (a class batch's way: the slot is the class's bottleneck).
        The grades sharing a GPU hold their timing tensors within its timing reserve (gpu_seats, `_seat`)."""
        super().__init__()
        self.assignment = assignment
        self.calibration = calibration
        self.perfs = tuple(assignment.performance if perfs is None else perfs)
        self.seed = seed
        self.problems: Mapping[str, Problem] = load_problems(assignment)
        self.device = device
        self._results: dict[str, PerformanceResult] | None = None
        self._in_turn_failed = ""  # why timing in turn failed in this grade (then cases are timed alone)
        self._failure = ""  # why measuring this grade's cases stopped, for every case it left without a result
        self._folder = Path(tempfile.mkdtemp(prefix="grader-timer-"))
        self.contestants = Contestants(assignment, device, self._folder, self._deadline,
                                       calibration.reference_triton_cache if calibration is not None else None)
        self.profile = profile
        self.profile_every_case = profile_every_case
        self._live_profiler: Profiler | None = None
        self.profiles: dict[str, CaseProfile] = {}  # perf id -> what profiling its timed replay found
        self._early_reference: Worker | None = None  # the reference's worker, spawned while correctness runs
        self._early_tried = False

    def start_reference_early(self) -> None:
        """Spawn the reference's worker now (call it from the grade's thread, as correctness starts): its imports
        overlap the correctness cases instead of the timing phase's start."""
        contestants = self.contestants
        if (self._early_tried or contestants.reference is not None or contestants.reference_problem
                or self.assignment.reference_solution is None):
            return
        self._early_tried = True  # once: a spawn that failed is tried again, and reported, by the timing phase
        reference = None
        try:
            reference = contestants.new_reference()
            reference.spawn()
            self._early_reference = reference
        except Exception:  # noqa: BLE001 - an early start is an optimisation; the timing phase starts its own
            if reference is not None:
                reference.close()

    def close(self) -> None:
        if self._early_reference is not None:
            self._early_reference.close()
            self._early_reference = None
        if self._live_profiler is not None:
            self._live_profiler.close()
            self._live_profiler = None
        self.contestants.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def run(self, perf: PerformanceCase, battery: Battery, cases: Sequence[CaseResult]) -> PerformanceResult:
        """The case's result; all cases are measured at the first call (their gates use `cases`)."""
        if not battery.backend.on_gpu:
            return skipped(perf)
        if self._results is None:
            self._results = {}
            try:
                self.measure_all(battery, cases, self._results)
            except Exception as exc:  # noqa: BLE001 - a defect of the grader's: every case it left says which
                logger.exception("timing this grade's cases failed")
                self._failure = (f"the grader failed while timing this grade's cases ({type(exc).__name__}: "
                                 f"{str(exc)[:300]}): a grader problem, not your code")
            finally:
                self.contestants.close()
        return self._results.get(perf.id) or errored(perf, self._failure or "the case was not measured")

    def measure_all(self, battery: Battery, cases: Sequence[CaseResult],
                    results: dict[str, PerformanceResult] | None = None) -> dict[str, PerformanceResult]:
        """Every case of the grade measured, each result written into `results` as soon as it is known (cases already
        measured keep their results when a later one fails)."""
        results = {} if results is None else results
        todo = []
        for perf in self.perfs:
            reason = correctness_gate(perf.target, cases)
            blocked = None if reason else battery.symbol_problem(perf.target)
            if reason or blocked is not None:
                results[perf.id] = not_run(perf, reason or (blocked.message if blocked else ""))
            else:
                todo.append(perf)
        if not todo:
            return results
        ready: list[Prepared] = []
        clock = battery.clock
        # The timer (and, without a calibration, the reference) start while the student's worker records:
        # spawned here (a worker dies with the thread that spawned it), awaited on the pool's threads.
        contestants = self.contestants
        budget = battery.sandbox.gpu_budget if self.device == "cuda" else None
        if budget is not None:  # the timer's and the profiled replay's hosts: a seat's part of the GPU, not a worker's
            contestants.host_budget_bytes = max(budget.budget_bytes, host_budget_bytes(self._footprint(todo)))
        timer = contestants.new_timer(battery)
        if not isinstance(timer, str):
            timer.spawn()
        profiler = self._profiler(battery)
        self._live_profiler = profiler  # closed with the runner whatever happens before its own `finally`
        reference = None
        # The reference runs in every grade: it is timed in turn with the student's launches (side by side, so a
        # GPU whose clocks sag under a matmul's power draw slows both alike), and measures the bars where none
        # are cached.
        if contestants.reference is None and not contestants.reference_problem and self.assignment.reference_solution:
            reference, self._early_reference = self._early_reference, None
            if reference is None:
                reference = contestants.new_reference()
                reference.spawn()
        compiled: list[Future[bool]] = []  # the timer compiling each recorded case ahead of its check
        with ThreadPoolExecutor(max_workers=2) as pool, ThreadPoolExecutor(max_workers=1) as compiler:
            timer_reply = pool.submit(finish_start, timer) if not isinstance(timer, str) else None
            reference_reply = pool.submit(finish_start, reference) if reference is not None else None
            for perf in todo:
                with clock.phase("timing/record"):
                    prepared = self._record_fairly(perf, battery)
                if isinstance(prepared, PerformanceResult):
                    results[perf.id] = prepared
                    continue
                ready.append(prepared)
                if timer_reply is not None and not isinstance(timer, str):
                    compiled.append(compiler.submit(self._compile_when_up, timer, timer_reply, prepared))
            battery.workers.stop()  # nothing of the student's runs while anything is timed
            with clock.phase("timing/start-workers"):
                contestants.adopt_timer(timer, timer_reply.result() if timer_reply is not None else None)
                if reference is not None and reference_reply is not None:
                    contestants.adopt_reference(reference, reference_reply.result())
            with clock.phase("timing/compile"):  # what of the timer's compiles the recordings did not overlap
                if not all([done.result() for done in compiled]):
                    contestants.drop_timer()
        with contextlib.ExitStack() as holding:
            with clock.phase("timing/seat"):  # the GPU memory of a timing phase: a seat of the GPU's few
                holding.enter_context(self._seat(ready))
            holding.enter_context(traced("gpu-seat/held"))  # benchmarks/class_phases.seat_use
            self._check_and_measure(ready, battery, profiler, results)
            contestants.close()  # the timer's and the reference's tensors go before the seat does (and in `run`)
        return results

    def _compile_when_up(self, timer: Worker, started: Future[Any], prepared: Prepared) -> bool:
        """Once the timer is up, one recorded case's kernels compiled in it ahead of its check
        (Contestants.compile_ahead, outside the seat and the GPU's shared hold); False where the timer failed at it.
        A timer that did not start compiles nothing (adopt_timer reports it)."""
        reply = started.result()
        return self.contestants.compile_ahead(timer, [prepared]) if reply.ok else True

    def _seat(self, ready: Sequence[Prepared]) -> contextlib.AbstractContextManager[Any]:
        """A seat for this grade's timing phase on the GPU (gpu_seats: as many as its memory holds at once)."""
        if self.device != "cuda" or not ready:
            return contextlib.nullcontext()
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        cases = [p.timed.timed_bytes(p.perf.input_sets) for p in ready]
        footprint = planned_footprint_bytes(cases, profilers_beside=self.profile and self.profile_every_case)
        return TimingSeats(gpu_name(), seat_units(total, footprint)).held()

    def _footprint(self, perfs: Sequence[PerformanceCase]) -> int:
        """The GPU memory of a timing phase of these cases from their declared bytes, before anything is recorded
        (gpu_seats.timing_footprint_bytes: the timer's budget)."""
        moved = []
        for perf in perfs:
            spec = self.assignment.kernels.get(perf.target) or self.assignment.functions[perf.target]
            baseline = self.problems[spec.problem].baseline
            moved.append(baseline.bytes_moved(dict(perf.dims)) if baseline is not None and baseline.bytes_moved
                         else None)
        return timing_footprint_bytes(moved)

    def _check_and_measure(self, ready: Sequence[Prepared], battery: Battery, profiler: Profiler | None,
                           results: dict[str, PerformanceResult]) -> None:
        """Each recorded case checked at its timed size (the GPU shared), then timed and profiled (alone). Profiling
        every case, the profilers start with the checks and replay in the timing's hold of the slot; otherwise only
        the timed cases whose counters could name a trap are profiled, afterwards (`_profile_where_needed`)."""
        clock = battery.clock
        checked = []
        # The profiling workers start here, with the timing seat held, not while the student's worker records: a
        # process under Nsight Compute keeps a core busy from its start to its end (ncu's own main thread), and in
        # a class every grade waiting for a seat had two (an H100's 16 cores: ncu 453 of 773 CPU-seconds,
        # docs/performance.md). The seats bound them. The student's loads and runs each case's launches once beside
        # the checks (both only share the GPU); the reference's runs the launches its checks planned, after them.
        # "profile/start" is what the grade waits for beyond the checks.
        early = profiler if self.profile_every_case and ready else None
        if early is not None:
            early = self._guarded(early, early.spawn, [p.perf.id for p in ready])
            self._live_profiler = early
        with ThreadPoolExecutor(max_workers=1) as beside:
            preparing = beside.submit(self._guarded, early, early.prepare_student, ready) if early else None
            for prepared in ready:  # the outputs at the timed size, checked while the GPU is shared
                wrong = self._check_fairly(prepared, battery)
                if wrong is not None:
                    results[prepared.perf.id] = wrong
                else:
                    checked.append(prepared)
            if preparing is not None:
                with clock.phase("profile/start"):
                    early = preparing.result()
                    if early is not None and checked:
                        early = self._guarded(early, early.prepare_reference, checked)
        if early is not None and not checked:
            early.close()
            early = None
        profiled = list(checked)  # the cases whose profiles are read
        try:
            slot = GpuSlot(gpu_name()) if self.device == "cuda" else None
            with self._slot_alone(slot, clock):  # only the timed and profiled replays hold the slot
                for prepared in checked:
                    measured = self._case_alone(prepared, "timing",
                                                functools.partial(self._measure_again_for_memory, prepared, battery))
                    assert measured is not None
                    results[prepared.perf.id] = measured
                if early is not None:
                    with clock.phase("profile/replay"):
                        early = self._guarded(early, early.measure, [p.perf.id for p in checked])
            if early is None and profiler is not None and not self.profile_every_case:
                profiled = [p for p in checked if results[p.perf.id].timed]
                early, profiled = self._profile_where_needed(profiler, profiled, results, slot, clock)
            if early is not None:
                with clock.phase("profile/read"):
                    timed = [p for p in profiled if results[p.perf.id].timed]
                    self._guarded(early, lambda: self.profiles.update(early.finish(timed)))
        finally:
            if early is not None:
                early.close()

    @contextlib.contextmanager
    def _slot_alone(self, slot: GpuSlot | None, clock: PhaseClock) -> Iterator[None]:
        """The GPU's exclusive slot (nothing off CUDA), the wait for it a phase of its own; a slot another grade let go
        within CLOCKS_STAY_UP_S finds the GPU's clocks up."""
        with contextlib.ExitStack() as exclusive:
            with clock.phase("timing/wait-for-slot"):
                idle_s = exclusive.enter_context(slot.exclusive()) if slot else float("inf")
            if idle_s <= samplers.CLOCKS_STAY_UP_S:
                self.contestants.clocks_already_up()
            yield

    def _profile_where_needed(self, profiler: Profiler, timed: Sequence[Prepared],
                              results: Mapping[str, PerformanceResult], slot: GpuSlot | None,
                              clock: PhaseClock) -> tuple[Profiler | None, list[Prepared]]:
        """Profile only the timed cases whose counters could name a trap (`counters_can_name_a_trap`: the student
        measurably slower than the reference); the others' profiles say their counters were not needed, and no
        profiler starts where none is. The profilers start after the timing (the timer's and the reference's workers
        let go first) and replay in a hold of the slot of their own. The profiler, and the cases it profiles."""
        wanted = []
        for prepared in timed:
            result = results[prepared.perf.id]
            if counters_can_name_a_trap(result):
                wanted.append(prepared)
            else:
                self.profiles[prepared.perf.id] = CaseProfile(prepared.perf.id, prepared.perf.target,
                                                              not_needed=why_not_needed(result))
        if not wanted:
            profiler.close()
            self._live_profiler = None
            return None, []
        self.contestants.close()  # their GPU memory goes before the profilers take theirs (the seat is still held)
        with clock.phase("profile/start"):
            started = self._guarded(profiler, profiler.prepare, wanted)
        self._live_profiler = started
        if started is not None:
            with self._slot_alone(slot, clock), clock.phase("profile/replay"):
                started = self._guarded(started, started.measure, [p.perf.id for p in wanted])
        return started, wanted

    def _check_fairly(self, prepared: Prepared, battery: Battery) -> PerformanceResult | None:
        """The timer's check at the timed size with the GPU shared, again where the GPU's memory ran out under it; where
        it timed out on a GPU, once more with the GPU to this grade alone, and that is the case's (a class's busy GPU is
        no student's timeout: `_record_fairly`)."""
        check = functools.partial(self._check_and_keep, prepared, battery)

        def beside_others() -> PerformanceResult | None:
            with battery.clock.phase("timing/check"), battery.workers.shared_gpu():
                return self._case_alone(prepared, "checking", check)

        # short of memory within budget (the timer's run, or the grader's own torch eager): again after a pause taken
        # with the GPU let go, so no other grade's timing waits for it (memory_retry)
        wrong = again_while_short_of_memory(prepared.perf, "checking", beside_others)
        if self.device == "cuda" and wrong is not None and wrong.trap == TIMEOUT:
            with battery.clock.phase("timing/check"), battery.workers.alone_on_gpu():
                wrong = self._case_alone(prepared, "checking", check)
        return wrong

    def _check_and_keep(self, prepared: Prepared, battery: Battery) -> PerformanceResult | None:
        """`_check`, and the reference's launches kept for timing in turn with the student's: beside the check, on a
        thread, where the reference's worker is up (two processes share the GPU; the seat counts both's memory; what
        the reference kept for a case whose check fails is never timed); after a check that passed where it is not
        (starting a worker belongs to the grade's thread: a worker dies with the thread that started it)."""
        contestants = self.contestants
        if contestants.reference is None:
            wrong = self._check(prepared, battery)
            if wrong is None:
                self._keep_reference(prepared)
            return wrong
        with ThreadPoolExecutor(max_workers=1) as beside:
            keeping = beside.submit(self._keep_reference, prepared)
            try:
                wrong = self._check(prepared, battery)
            finally:
                keeping.result()
        return wrong

    def _keep_reference(self, prepared: Prepared) -> None:
        with traced("timing/check/reference"):
            self.contestants.keep_reference(prepared)

    def _case_alone(self, prepared: Prepared, doing: str,
                    step: Callable[[], PerformanceResult | None]) -> PerformanceResult | None:
        """`step` for one case; where it fails in a way nobody foresaw (a defect of the grader's), that case says so
        and the others go on, with a timer started afresh (what it kept for this case is unknown)."""
        try:
            return step()
        except Exception as exc:  # noqa: BLE001 - said in the case's result, never lost
            logger.exception("%s %s failed", doing, prepared.perf.id)
            self.contestants.drop_timer()
            self.contestants.lose_reference()
            short = out_of_memory(str(exc))
            if short:
                return errored(prepared.perf, f"the GPU ran out of memory while the grader was {doing} this case "
                                              f"({short}): a problem of the machine, not your code")
            return errored(prepared.perf, f"the grader failed while {doing} this case ({type(exc).__name__}: "
                                          f"{str(exc)[:300]}): a grader problem, not your code")

    def _measure_again_for_memory(self, prepared: Prepared, battery: Battery) -> PerformanceResult:
        """`_measure`, again while the GPU's memory ran out under it (memory_retry)."""
        return again_while_short_of_memory(prepared.perf, "timing", lambda: self._measure(prepared, battery))

    def _guarded(self, profiler: Profiler, step: Callable[..., None], *args: Any) -> Profiler | None:
        """Run one profiling step; profiling is informational, so a step that fails in a way nobody foresaw ends
        profiling for this grade (every timed case's profile says why) and never the grade."""
        try:
            step(*args)
            return profiler
        except Exception as exc:  # noqa: BLE001 - said in each case's profile, never lost
            profiler.close()
            why = f"profiling failed in the grader ({type(exc).__name__}: {exc})"[:300]
            self.profiles.update({perf.id: CaseProfile(perf.id, perf.target, unmeasured=why) for perf in self.perfs})
            return None

    def _profiler(self, battery: Battery) -> Profiler | None:
        """The grade's profiler (one replay of each timed case under Nsight Compute), where asked for and on CUDA."""
        if not self.profile or self.device != "cuda":
            return None
        keys = {perf.id: self._calibration_key(perf) for perf in self.perfs} if self.calibration is not None else {}
        return Profiler(self.contestants, battery, self.calibration, keys)

    # ------------------------------------------------------------------ 1-2: record and plan

    def _record_fairly(self, perf: PerformanceCase, battery: Battery) -> Prepared | PerformanceResult:
        """`_record`; on a GPU, where it timed out, once more from a fresh worker with the GPU to this grade alone, and
        that is the case's (a class's busy GPU is no student's timeout, as for the correctness cases:
        cases/probes.TimeoutsAlone)."""
        prepared = again_while_short_of_memory(perf, "recording", lambda: self._record(perf, battery))
        if self.device == "cuda" and isinstance(prepared, PerformanceResult) and prepared.trap == TIMEOUT:
            with battery.workers.alone_on_gpu():
                prepared = self._record(perf, battery)
        return prepared

    def _record(self, perf: PerformanceCase, battery: Battery) -> Prepared | PerformanceResult:
        spec = self.assignment.kernels.get(perf.target) or self.assignment.functions[perf.target]
        problem = self.problems[spec.problem]
        assert problem.baseline is not None  # load_problems checks every performance target has one
        inputs = self._make_inputs(perf, problem)
        call = encode_call(perf, self.assignment, problem, {k: v.cpu() if isinstance(v, torch.Tensor) else v
                                                             for k, v in inputs.items()})
        what = f"running {perf.target} at {perf.shape}"
        request = call.request(sets=1, repeats=0, time=False, return_outputs=False, record=True)
        reply = battery.workers.request_for_timing(request, self._deadline(perf), what)
        if isinstance(reply, str):
            return failed(perf, reply)
        if call.kind == "function":
            record = Observation(launches=reply.launches, torch_ops=dict(reply.torch_ops))
            unfused = fusion_problems(record, self.assignment, perf.target)
            if unfused:
                return errored(perf, f"{what}: not fused at this size: " + "; ".join(unfused))
        recorded = reply.record
        timed = plan_performance_run(recorded if isinstance(recorded, Mapping) else {}, call.inputs, perf.target)
        if isinstance(timed, str):
            return errored(perf, f"{what}: {timed}", trap=NOT_FUSED if "outside the kernels" in timed else "")
        more = tuple(input_set(perf, self.assignment, problem, self._make_inputs(perf, problem, f"/set{index + 1}"))
                     for index in range(1, timed.input_sets(perf.input_sets)))
        return Prepared(perf, problem, call, inputs, timed, more)

    def _make_inputs(self, perf: PerformanceCase, problem: Problem, draw: str = "") -> dict[str, Any]:
        """The case's inputs (`draw`: another input set's), drawn on the GPU from the seed (an oracle that only works
        on the CPU gets a CPU generator)."""
        seed, dtype = case_seed(self.seed, perf.id + draw), getattr(torch, perf.dtype)
        if self.device != "cpu":
            try:
                return problem.make_inputs(perf.as_case(), InputMaker(seed, dtype, self.device))
            except (RuntimeError, TypeError):
                pass
        return problem.make_inputs(perf.as_case(), InputMaker(seed, dtype))

    # ------------------------------------------------------------------ 3: time

    def _check(self, prepared: Prepared, battery: Battery) -> PerformanceResult | None:
        """Run the launches once in the timer (kept there for timing) and check their outputs against
        torch eager: None when right, else the case's result."""
        perf, baseline = prepared.perf, prepared.problem.baseline
        assert baseline is not None
        contestants = self.contestants
        timer = contestants.timer_for(battery)
        if isinstance(timer, str):
            return errored(perf, timer)
        with traced("timing/check/timer"):
            run = contestants.run_plan(timer, prepared, f"running {perf.target}'s launches at {perf.shape}",
                                       keep=perf.id)
        if isinstance(run, str):
            contestants.drop_timer()
            return failed(perf, run)
        contestants.timer_kept.add(perf.id)
        tol = self.assignment.tolerances[perf.tolerance].lookup(Backend.CUDA, perf.dtype)
        def eager(inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
            with traced("timing/check/eager"):  # the innermost span: the profile keeps eager apart from compare
                return self._eager_outputs(baseline, inputs, perf)

        with traced("timing/check/compare"):
            wrong = prepared.wrong_set(run[0], eager, tol.atol, tol.rtol)
        if wrong:
            return errored(perf, f"at {perf.shape} the output of your kernel launches differs from "
                                 f"{baseline.label}: {wrong}")
        return None

    def _measure(self, prepared: Prepared, battery: Battery) -> PerformanceResult:
        perf, baseline = prepared.perf, prepared.problem.baseline
        assert baseline is not None
        with battery.clock.phase("timing/bars"):
            bars = self._bars(prepared, battery)
        if isinstance(bars, str):
            return errored(perf, bars)
        roof = bars.matmul_tflops if bars.matmul_tflops is not None else self._matmul_roof(prepared)
        device = self.device_info(bars.copy_gb_per_s, roof)
        what = f"timing {perf.target} at {perf.shape}"
        contestants = self.contestants
        timer = contestants.kept_timer(prepared, battery)
        if isinstance(timer, str):
            return errored(perf, timer, device)
        reference_medians: Sequence[float] | None = bars.reference
        note = bars.reference_note
        paired = False  # the reference's samples taken in turn with the student's, pair by pair
        with battery.clock.phase("timing/student"):
            student_medians: list[float] | str = ""
            if perf.id in contestants.reference_kept and not self._in_turn_failed:
                in_turn = contestants.time_in_turn(timer, perf, what)
                if isinstance(in_turn, str) and in_turn.startswith((TIMED_OUTPUT_CHANGED, f"{TIMEOUT}:")):
                    # forged outputs, or the student's first sample did not finish within its deadline (100x the
                    # reference's time and more): the case's verdict, and no reason to stop timing in turn
                    contestants.drop_timer()
                    return failed(perf, in_turn, device)
                if isinstance(in_turn, str):  # never expected: time alone, against the bars, and say so
                    self._in_turn_failed = in_turn
                    contestants.drop_timer()
                    timer = contestants.kept_timer(prepared, battery)
                    if isinstance(timer, str):
                        return errored(perf, timer, device)
                else:
                    student_medians, beside = in_turn.student, in_turn.reference
                    if beside:
                        reference_medians, note, paired = beside, IN_TURN_NOTE, True
                    if in_turn.cut_short:
                        note = (f"{note}; " if note else "") + in_turn.cut_short
            if not student_medians:
                student_medians = contestants.time_kept(timer, perf, what)
                contestants.timer_kept.discard(perf.id)
                if self._in_turn_failed:
                    note = (f"{note}; " if note else "") + (
                        f"timing in turn with the reference failed ({self._in_turn_failed[:200]}): compared with "
                        "the reference's calibrated timing")
        if isinstance(student_medians, str):
            contestants.drop_timer()
            return failed(perf, student_medians, device)
        if not student_medians:
            return errored(perf, "the timer sent no timing", device)
        nbytes = baseline.bytes_moved(dict(perf.dims)) if baseline.bytes_moved else None
        flops = baseline.flops(dict(perf.dims)) if baseline.flops else None

        def measured(label: str, medians: Sequence[float] | None) -> Measurement | None:
            return (measurement(label, medians, nbytes, flops, device.copy_gb_per_s, device.matmul_tflops)
                    if medians else None)

        mine = measured(f"your {perf.target}", student_medians)
        assert mine is not None
        eager = measured(baseline.label + (" (tf32 allowed)" if baseline.tf32 else ""), bars.torch)
        result = evaluate(perf, mine, measured("reference", reference_medians), eager, device, note,
                          reference_in_turn=paired)
        return dataclasses.replace(result, calibration=bars.id)

IN_TURN_NOTE = "the reference was timed in turn with your kernels, sample for sample, in this grade"
