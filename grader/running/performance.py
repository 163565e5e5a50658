"""Performance cases on CUDA, the measuring part. Timed runs execute none of the submission's Python:

1. record: the student's worker calls the target once at the timed size (compiling and autotuning it),
   then once more with every kernel launch recorded by layout (grader.running.worker.performance_run);
2. plan: every buffer of those launches must be an input, a fresh buffer, a constant fill or a copy of
   an input (grader.running.performance_plan), else the values came from outside the kernels;
3. time: the student's workers are stopped; inside the GPU's exclusive slot (grader.running.gpu_slot)
   a timer worker that loaded only the submission's kernels (grader.running.kernel_source) runs the
   launches on fresh inputs, sends their outputs back (checked here against torch eager), and times
   CUDA-graph replays of them. The reference solution is timed the same way in a worker of its own,
   torch eager here; both once per assignment, GPU and versions, cached on disk
   (grader.running.calibration).

The student's target is timed only after all of its correctness cases in this run passed. On any other
backend a performance case is "skipped" (it needs a CUDA GPU), never passed and never failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.problem import Baseline, Problem
from grader.authoring.spec import Assignment, PerformanceCase
from grader.environment import versions
from grader.evidence.observation import Observation
from grader.judging.compare import close_mask
from grader.judging.errors import error_message
from grader.judging.judge import fusion_problems
from grader.judging.performance import correctness_gate, errored, evaluate, measurement, not_run, skipped
from grader.results import CaseResult, DeviceInfo, Measurement, PerformanceResult
from grader.running import arguments
from grader.running.battery import Battery
from grader.running.calibration import (
    Calibration,
    CalibrationKey,
    CalibrationStore,
    Machine,
    calibration_key,
    this_machine,
)
from grader.running.client import Deadline, Worker, WorkerFailure, WorkerOptions
from grader.running.gpu_slot import GpuSlot, gpu_name
from grader.running.kernel_source import KernelSource, kernels_only
from grader.running.performance_plan import PerformancePlan, plan_performance_run
from grader.running.worker import performance_timing
from grader.seeds import case_seed
from grader.trap_ids import CRASH, NOT_FUSED, OUT_OF_MEMORY, RUNTIME_ERROR, TIMEOUT

# --------------------------------------------------------------------------- what the worker runs (pure)


@dataclass(frozen=True)
class CallPlan:
    """A target and its arguments as plain data for the worker's "time" op (performance_timing.prepare_call)."""

    kind: str  # "kernel" | "function"
    target: str
    inputs: tuple[torch.Tensor, ...]  # contiguous CPU tensors
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    outputs: tuple[Mapping[str, Any], ...]  # kernel output buffers: shape, dtype
    output_names: tuple[str, ...]
    meta: Mapping[str, int]
    grid: tuple[str, ...]

    def request(self, *, sets: int, repeats: int, time: bool, return_outputs: bool,
                record: bool = False) -> dict[str, Any]:
        return {
            "record": record,
            "op": "time",
            "kind": self.kind,
            "target": self.target,
            "inputs": list(self.inputs),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "outputs": [dict(o) for o in self.outputs],
            "meta": dict(self.meta),
            "grid": list(self.grid),
            "sets": sets,
            "repeats": repeats,
            "time": time,
            "return_outputs": return_outputs,
        }


def encode_call(
    perf: PerformanceCase, assignment: Assignment, problem: Problem, inputs: Mapping[str, Any]
) -> CallPlan:
    """Bind the target to its inputs the way correctness cases do (grader.running.arguments), with
    every tensor contiguous and without guard buffers."""
    if perf.target in assignment.kernels:
        spec = assignment.kernels[perf.target]
        binding = arguments.kernel_binding(problem, inputs)
        placement = arguments.Contiguous(inputs, arguments.kernel_buffers(binding))
        args = arguments.kernel_arguments(spec, binding, placement)
        return CallPlan(
            "kernel",
            perf.target,
            placement.tensors(),
            tuple(args),
            {},
            tuple(placement.outputs),
            tuple(placement.output_names),
            dict(perf.meta),
            spec.grid,
        )
    function = assignment.functions[perf.target]
    call_args, call_kwargs = arguments.call_binding(problem, inputs)
    placement = arguments.Contiguous(inputs, arguments.call_buffers(call_args, call_kwargs))
    args_w, kwargs_w = arguments.call_arguments(call_args, call_kwargs, placement)
    return CallPlan(
        "function",
        perf.target,
        placement.tensors(),
        tuple(args_w),
        kwargs_w,
        (),
        function.returns,
        {},
        (),
    )


def compare_outputs(
    actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], atol: float, rtol: float
) -> str:
    """'' when every output matches within the tolerance; else which one does not, and how far off."""
    for name, exp in expected.items():
        got = actual.get(name)
        if got is None or tuple(got.shape) != tuple(exp.shape):
            shape = None if got is None else tuple(got.shape)
            return f"`{name}` has shape {shape}, expected {tuple(exp.shape)}"
        ok = close_mask(got.to(exp.device), exp, atol, rtol)
        wrong = int((~ok).sum())
        if wrong:
            diff = (got.to(exp.device).double() - exp.double()).abs().nan_to_num(nan=math.inf)
            worst = float(diff.max())
            return (
                f"`{name}`: {wrong} of {exp.numel()} elements differ (max |error| {worst:.3g}, "
                f"atol={atol:g}, rtol={rtol:g})"
            )
    return ""


def baseline_outputs(baseline: Baseline, result: Any) -> dict[str, torch.Tensor]:
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(items) != len(baseline.outputs):
        raise ValueError(f"{baseline.label} returned {len(items)} values for outputs {baseline.outputs}")
    return dict(zip(baseline.outputs, items, strict=True))


# --------------------------------------------------------------------------- measuring (I/O)


@dataclass(frozen=True)
class _Prepared:
    """A case recorded in the student's worker and planned, ready to time."""

    perf: PerformanceCase
    problem: Problem
    call: CallPlan
    inputs: Mapping[str, Any]
    timed: PerformancePlan


class PerformanceRunner:
    """Times one grading session's performance cases, all at the first one's turn: every case recorded
    in the student's worker, then every one timed in a single exclusive slot (one spin-up).

    `device` is where torch eager runs ("cuda"; tests on a CPU-only machine use "cpu" with a fake
    clock). The reference solution gets a worker of its own, started at its first use."""

    def __init__(self, assignment: Assignment, seed: int, device: str = "cuda",
                 perfs: Sequence[PerformanceCase] | None = None, calibration: CalibrationStore | None = None) -> None:
        """`perfs`: the cases this session measures (default: the assignment's); `calibration`: where bars
        are cached (None: measured for this session alone)."""
        self.assignment = assignment
        self.calibration = calibration
        self._machine: Machine | None = None
        self.perfs = tuple(assignment.performance if perfs is None else perfs)
        self.seed = seed
        self.problems: Mapping[str, Problem] = load_problems(assignment)
        self.device = device
        self._copy_gb_per_s: float | None = None
        self._reference: Worker | None = None
        self._reference_problem = "" if assignment.reference_solution else "the assignment has no reference solution"
        self._timer: Worker | None = None
        self._timer_problem = "the timer was not started"
        self._results: dict[str, PerformanceResult] | None = None
        self._reference_kept: set[str] = set()  # cases whose reference launches wait in its worker (in turn)
        self._timer_kept: set[str] = set()  # cases whose launches wait in the current timer worker
        self._in_turn_failed = ""  # why timing in turn failed in this grade (then cases are timed alone)
        self._spun = False
        self._folder = Path(tempfile.mkdtemp(prefix="grader-timer-"))

    def close(self) -> None:
        for worker in (self._reference, self._timer):
            if worker is not None:
                worker.close()
        self._reference = self._timer = None
        shutil.rmtree(self._folder, ignore_errors=True)

    def device_info(self, copy_gb_per_s: float | None = None) -> DeviceInfo:
        found = versions()
        if copy_gb_per_s is None:
            if self._copy_gb_per_s is None:
                self._copy_gb_per_s = performance_timing.copy_bandwidth_gbs()
            copy_gb_per_s = self._copy_gb_per_s
        return DeviceInfo(gpu=torch.cuda.get_device_name(0) if self.device == "cuda" else self.device,
                          copy_gb_per_s=copy_gb_per_s, torch=found.get("torch", "?"), triton=found.get("triton", "?"))

    def run(self, perf: PerformanceCase, battery: Battery, cases: Sequence[CaseResult]) -> PerformanceResult:
        """The case's result; all cases are measured at the first call (their gates use `cases`)."""
        if battery.backend != "cuda":
            return skipped(perf)
        if self._results is None:
            self._results = self.measure_all(battery, cases)
        return self._results.get(perf.id) or errored(perf, "the case was not measured")

    def measure_all(self, battery: Battery, cases: Sequence[CaseResult]) -> dict[str, PerformanceResult]:
        results: dict[str, PerformanceResult] = {}
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
        ready: list[_Prepared] = []
        clock = battery.clock
        # The timer (and, without a calibration, the reference) start while the student's worker records:
        # spawned here (a worker dies with the thread that spawned it), awaited on the pool's threads.
        timer, reduced = self._new_timer(battery)
        timer.spawn()
        reference = None
        # The reference runs in every grade: it is timed in turn with the student's launches (side by side, so a
        # GPU whose clocks sag under a matmul's power draw slows both alike), and measures the bars where none
        # are cached.
        if self._reference is None and not self._reference_problem and self.assignment.reference_solution:
            reference = self._new_reference()
            reference.spawn()
        with ThreadPoolExecutor(max_workers=2) as pool:
            timer_reply = pool.submit(_finish_start, timer)
            reference_reply = pool.submit(_finish_start, reference) if reference is not None else None
            for perf in todo:
                with clock.phase("timing/record"):
                    prepared = self._record(perf, battery)
                if isinstance(prepared, PerformanceResult):
                    results[perf.id] = prepared
                else:
                    ready.append(prepared)
            battery.stop_workers()  # nothing of the student's runs while anything is timed
            with clock.phase("timing/start-workers"):
                self._adopt_timer(timer, reduced, timer_reply.result())
                if reference is not None and reference_reply is not None:
                    self._adopt_reference(reference, reference_reply.result())
        checked = []
        for prepared in ready:  # the outputs at the timed size, checked while the GPU is shared
            with clock.phase("timing/check"), battery.shared_gpu():
                wrong = self._check(prepared, battery)
                if wrong is None:
                    self._keep_reference(prepared)
            if wrong is not None:
                results[prepared.perf.id] = wrong
            else:
                checked.append(prepared)
        slot = GpuSlot(gpu_name()) if self.device == "cuda" else None
        with slot.exclusive() if slot else contextlib.nullcontext():  # only the timed replays in here
            for prepared in checked:
                results[prepared.perf.id] = self._measure(prepared, battery)
        return results

    def _calibrated(self, perf: PerformanceCase) -> Calibration | None:
        return self.calibration.load(self._calibration_key(perf)) if self.calibration is not None else None

    def _calibration_key(self, perf: PerformanceCase) -> CalibrationKey:
        if self._machine is None:
            self._machine = this_machine(self.device)
        return calibration_key(self.assignment, perf, self.problems, self._machine)

    def _deadline(self, perf: PerformanceCase) -> Deadline:
        """How long a request at the timed size may take: from the reference's measured time when a
        calibration has it (a kernel still running 100x that plus a few seconds after its last launch is
        spinning), compiles allowed their own time, the case's `timeout_s` as the cap."""
        found = self._calibrated(perf)
        bars = (found.reference or found.torch) if found is not None else None
        return timed_deadline(perf, statistics.median(bars) if bars else None)

    def _spin_up_ms(self) -> float:
        """The first timing of a grade brings the clocks up from idle; the rest follow it closely."""
        first = not self._spun
        self._spun = True
        return performance_timing.DEFAULT_SPIN_UP_MS if first else performance_timing.FOLLOW_UP_SPIN_UP_MS

    def _ensure_reference(self) -> None:
        if self._reference is None and not self._reference_problem:
            try:
                self._reference = self.start_reference()
            except RuntimeError as exc:
                self._reference_problem = f"the reference solution could not be loaded: {exc}"

    def _adopt_reference(self, worker: Worker, reply: dict[str, Any]) -> None:
        if reply.get("ok"):
            self._reference = worker
        else:
            worker.close()
            message = str(reply.get("error", {}).get("message", ""))[:300]
            self._reference_problem = f"the reference solution could not be loaded: {message}"

    # ------------------------------------------------------------------ 1-2: record and plan

    def _record(self, perf: PerformanceCase, battery: Battery) -> _Prepared | PerformanceResult:
        spec = self.assignment.kernels.get(perf.target) or self.assignment.functions[perf.target]
        problem = self.problems[spec.problem]
        assert problem.baseline is not None  # load_problems checks every performance target has one
        inputs = self._make_inputs(perf, problem)
        call = encode_call(perf, self.assignment, problem, {k: v.cpu() if isinstance(v, torch.Tensor) else v
                                                             for k, v in inputs.items()})
        what = f"running {perf.target} at {perf.shape}"
        request = call.request(sets=1, repeats=0, time=False, return_outputs=False, record=True)
        reply = battery.request_for_timing(request, self._deadline(perf), what)
        if isinstance(reply, str):
            return _failed(perf, reply)
        if call.kind == "function":
            record = Observation(launches=tuple(reply.get("launches") or ()),
                                 torch_ops=dict(reply.get("torch_ops") or {}))
            unfused = fusion_problems(record, self.assignment, perf.target)
            if unfused:
                return errored(perf, f"{what}: not fused at this size: " + "; ".join(unfused))
        recorded = reply.get("record")
        timed = plan_performance_run(recorded if isinstance(recorded, Mapping) else {}, call.inputs, perf.target)
        if isinstance(timed, str):
            return errored(perf, f"{what}: {timed}", trap=NOT_FUSED if "outside the kernels" in timed else "")
        return _Prepared(perf, problem, call, inputs, timed)

    def _make_inputs(self, perf: PerformanceCase, problem: Problem) -> dict[str, Any]:
        """The case's inputs, drawn on the GPU from the seed (an oracle that only works on the CPU
        gets a CPU generator)."""
        seed, dtype = case_seed(self.seed, perf.id), getattr(torch, perf.dtype)
        if self.device != "cpu":
            try:
                return problem.make_inputs(perf.as_case(), InputMaker(seed, dtype, self.device))
            except (RuntimeError, TypeError):
                pass
        return problem.make_inputs(perf.as_case(), InputMaker(seed, dtype))

    # ------------------------------------------------------------------ 3: time

    def _check(self, prepared: _Prepared, battery: Battery) -> PerformanceResult | None:
        """Run the launches once in the timer (kept there for timing) and check their outputs against
        torch eager: None when right, else the case's result."""
        perf, baseline = prepared.perf, prepared.problem.baseline
        assert baseline is not None
        timer = self._timer_for(battery)
        if isinstance(timer, str):
            return errored(perf, timer)
        run = self._time_plan(timer, prepared, f"running {perf.target}'s launches at {perf.shape}", keep=perf.id)
        if isinstance(run, str):
            self._drop_timer()
            return _failed(perf, run)
        self._timer_kept.add(perf.id)
        expected = self._eager_outputs(baseline, prepared.inputs, perf)
        tol = self.assignment.tolerances[perf.tolerance].lookup("cuda", perf.dtype)
        named = dict(zip(prepared.call.output_names, run[0], strict=False))
        wrong = compare_outputs(named, expected, tol.atol, tol.rtol)
        if wrong:
            return errored(perf, f"at {perf.shape} the output of your kernel launches differs from "
                                 f"{baseline.label}: {wrong}")
        return None

    def _measure(self, prepared: _Prepared, battery: Battery) -> PerformanceResult:
        perf, baseline = prepared.perf, prepared.problem.baseline
        assert baseline is not None
        with battery.clock.phase("timing/bars"):
            bars = self._bars(prepared, battery)
        if isinstance(bars, str):
            return errored(perf, bars)
        device = self.device_info(bars.copy_gb_per_s)
        what = f"timing {perf.target} at {perf.shape}"
        timer = self._kept_timer(prepared, battery)
        if isinstance(timer, str):
            return errored(perf, timer, device)
        reference_medians: Sequence[float] | None = bars.reference
        note = bars.reference_note
        with battery.clock.phase("timing/student"):
            student_medians: list[float] | str = ""
            if perf.id in self._reference_kept and not self._in_turn_failed:
                in_turn = self._time_in_turn(timer, perf, what)
                if isinstance(in_turn, str):  # never expected: time alone, against the bars, and say so
                    self._in_turn_failed = in_turn
                    self._drop_timer()
                    timer = self._kept_timer(prepared, battery)
                    if isinstance(timer, str):
                        return errored(perf, timer, device)
                else:
                    student_medians, beside = in_turn
                    if beside:
                        reference_medians, note = beside, IN_TURN_NOTE
            if not student_medians:
                student_medians = self._time_kept(timer, perf, what)
                self._timer_kept.discard(perf.id)
                if self._in_turn_failed:
                    note = (f"{note}; " if note else "") + (
                        f"timing in turn with the reference failed ({self._in_turn_failed[:200]}): compared with "
                        "the reference's calibrated timing")
        if isinstance(student_medians, str):
            self._drop_timer()
            return _failed(perf, student_medians, device)
        if not student_medians:
            return errored(perf, "the timer sent no timing", device)
        nbytes = baseline.bytes_moved(dict(perf.dims)) if baseline.bytes_moved else None
        flops = baseline.flops(dict(perf.dims)) if baseline.flops else None

        def measured(label: str, medians: Sequence[float] | None) -> Measurement | None:
            return measurement(label, medians, nbytes, flops, device.copy_gb_per_s) if medians else None

        mine = measured(f"your {perf.target}", student_medians)
        assert mine is not None
        eager = measured(baseline.label + (" (tf32 allowed)" if baseline.tf32 else ""), bars.torch)
        result = evaluate(perf, mine, measured("reference", reference_medians), eager, device, note)
        return dataclasses.replace(result, calibration=bars.id)

    def _bars(self, prepared: _Prepared, battery: Battery) -> Calibration | str:
        """The reference's and torch eager's medians on this case: from the calibration store (an earlier
        grade on this GPU and versions measured them), or measured now and stored for the next grades.
        Bars without the reference's time are not stored when the assignment has a reference (its failure
        may have been passing)."""
        key = self._calibration_key(prepared.perf)

        def measure() -> Calibration:
            made = self._measure_bars(prepared, key)
            if isinstance(made, str):
                raise _NoBars(made)
            return made

        def keep(bars: Calibration) -> bool:
            return bars.reference is not None or not self.assignment.reference_solution

        try:
            return self.calibration.measure_once(key, measure, keep) if self.calibration is not None else measure()
        except _NoBars as failure:
            return str(failure)

    def _measure_bars(self, prepared: _Prepared, key: CalibrationKey) -> Calibration | str:
        perf = prepared.perf
        assert prepared.problem.baseline is not None
        try:
            eager = self._time_eager(prepared.problem.baseline, prepared.inputs, perf)
        except Exception as exc:  # torch eager itself failed (out of memory): no bar to compare with
            return f"torch eager could not be timed at {perf.shape}: {type(exc).__name__}: {exc}"[:400]
        reference, note = self._time_reference(prepared)
        copy = self._copy_gb_per_s if self._copy_gb_per_s is not None else performance_timing.copy_bandwidth_gbs()
        self._copy_gb_per_s = copy
        now = time.time()
        return Calibration(id=f"{key.digest}@{int(now)}", reference=tuple(reference) if reference else None,
                           torch=tuple(eager), reference_note=note, copy_gb_per_s=copy, measured_at=now)

    def _new_timer(self, battery: Battery) -> tuple[Worker, KernelSource]:
        """A worker (not started) that will load only the submission's kernels: no other line of it."""
        reduced = kernels_only(battery.submission.read_text(encoding="utf-8", errors="replace"))
        path = self._folder / battery.submission.name
        path.write_text(reduced.text, encoding="utf-8")
        worker = Worker(path, list(reduced.kernels), battery.sandbox.options, sandbox=battery.sandbox)
        return worker, reduced

    def _adopt_timer(self, worker: Worker, reduced: KernelSource, reply: dict[str, Any]) -> None:
        if reply.get("ok"):
            self._timer = worker
            self._timer_problem = ""
            return
        worker.close()
        dropped = "; ".join(f"line {line}: {what}" for line, what in reduced.dropped[:5])
        self._timer_problem = (
            "your kernels could not be loaded on their own (timed runs load only the @triton.jit functions and "
            f"constants of your file): {error_message(reply.get('error', {}), worker.submission.name)}"
            + (f" (left out: {dropped})" if dropped else ""))

    def _timer_for(self, battery: Battery) -> Worker | str:
        """The timer worker, started now if it is not running (after a failure, say)."""
        if self._timer is None:
            worker, reduced = self._new_timer(battery)
            worker.spawn()
            self._adopt_timer(worker, reduced, _finish_start(worker))
        return self._timer if self._timer is not None else self._timer_problem

    def _drop_timer(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        self._timer_kept.clear()  # what it kept died with it

    def _kept_timer(self, prepared: _Prepared, battery: Battery) -> Worker | str:
        """The timer, with this case's launches kept in it: run once more in a timer started after a failure
        (a worker that died took every case it kept with it)."""
        perf = prepared.perf
        timer = self._timer_for(battery)
        if isinstance(timer, str) or perf.id in self._timer_kept:
            return timer
        run = self._time_plan(timer, prepared, f"running {perf.target}'s launches at {perf.shape}", keep=perf.id)
        if isinstance(run, str):
            self._drop_timer()
            return run
        self._timer_kept.add(perf.id)
        return timer

    def _time_plan(self, worker: Worker, prepared: _Prepared, what: str,
                   keep: str = "") -> tuple[list[torch.Tensor], list[float]] | str:
        """Run the planned launches in `worker`: their outputs (first run) and, unless kept there for
        `_time_kept` (`keep`), their medians."""
        perf = prepared.perf
        request = prepared.timed.request(list(prepared.call.inputs), sets=perf.input_sets, repeats=perf.repeats,
                                         time=self.device == "cuda" and not keep)
        if keep:
            request["keep"] = keep
        else:
            request["spin_up_ms"] = self._spin_up_ms()
        try:
            reply = worker.request(request, self._deadline(perf), what)
        except WorkerFailure as failure:
            return f"{failure.trap}: {what}: {failure.detail}"
        if not reply.get("ok"):
            return f"{what} raised " + error_message(reply.get("error", {}), worker.submission.name)
        outputs = reply.get("outputs")
        if not isinstance(outputs, list) or any(type(t) is not torch.Tensor for t in outputs):
            return f"{what}: the timer sent a malformed reply"
        return outputs, list(reply.get("timing", {}).get("medians_ms", []))

    def _keep_reference(self, prepared: _Prepared) -> None:
        """The reference's launches on the same inputs, recorded, planned and run once in its worker, kept there
        to be timed in turn with the student's (`_time_in_turn`). Where the reference cannot, the case is timed
        against the bars alone, as before."""
        self._ensure_reference()
        if self._reference is None:
            return
        perf = prepared.perf
        what = f"running the reference {perf.target} at {perf.shape}"
        try:
            plan = self._reference_plan(self._reference, prepared, what)
        except WorkerFailure:
            self._reference.close()
            self._reference = None
            return
        if isinstance(plan, str):
            return
        kept = self._time_plan(self._reference, dataclasses.replace(prepared, timed=plan), what, keep=perf.id)
        if not isinstance(kept, str):
            self._reference_kept.add(perf.id)

    def _reference_plan(self, reference: Worker, prepared: _Prepared, what: str) -> PerformancePlan | str:
        """The reference's launches on the case's inputs, recorded in its worker and planned (or why not)."""
        reply = reference.request(
            prepared.call.request(sets=1, repeats=0, time=False, return_outputs=False, record=True),
            self._deadline(prepared.perf), what)
        recorded = reply.get("record") if reply.get("ok") else None
        return plan_performance_run(recorded if isinstance(recorded, Mapping) else {}, prepared.call.inputs,
                                    prepared.perf.target)

    def _time_in_turn(self, timer: Worker, perf: PerformanceCase, what: str) -> tuple[list[float], list[float]] | str:
        """The student's kept launches and the reference's, one sample each in turn, `repeats` rounds: both see the
        same clocks, power draw and temperature (a 4096^3 tf32 matmul holds an H200 at its power cap, its SM clock
        wandering 1410-1560 MHz: timed apart, identical kernels read +-7.6%; in turn, +-0.15%:
        benchmarks/timing_noise.py, docs/performance.md). Each worker holds its captured graph between samples."""
        assert self._reference is not None
        student: list[float] = []
        reference: list[float] | None = []
        spin = self._spin_up_ms()
        for round_ in range(perf.repeats):
            hold = round_ < perf.repeats - 1  # the last sample lets the graphs (and their memory) go
            mine = self._sample(timer, perf, what, spin_up_ms=spin, hold=hold)
            if isinstance(mine, str):
                return mine
            student.extend(mine)
            if reference is not None:
                theirs = self._sample(self._reference, perf, f"timing the reference {perf.target}",
                                      spin_up_ms=spin, hold=hold)
                # a reference that fails (never expected) leaves the comparison to the bars
                reference = reference + theirs if not isinstance(theirs, str) else None
            spin = 0.0
        return student, reference or []

    def _sample(self, worker: Worker, perf: PerformanceCase, what: str, *, spin_up_ms: float,
                hold: bool) -> list[float] | str:
        request = {"op": "time_kept", "key": perf.id, "repeats": 1, "spin_up_ms": spin_up_ms, "hold": hold}
        run_s = self._deadline(perf).run_s or RUN_GRACE_S
        try:
            reply = worker.request(request, Deadline(cap_s=min(perf.timeout_s, RUN_GRACE_S + run_s)), what)
        except WorkerFailure as failure:
            return f"{failure.trap}: {what}: {failure.detail}"
        if not reply.get("ok"):
            return f"{what} raised " + error_message(reply.get("error", {}), worker.submission.name)
        medians = reply.get("timing", {}).get("medians_ms", [])
        return [float(m) for m in medians] if isinstance(medians, list) and medians else f"{what}: no timing came back"

    def _time_kept(self, worker: Worker, perf: PerformanceCase, what: str) -> list[float] | str:
        """Time the launches `_time_plan(keep=perf.id)` left in `worker`: CUDA-graph replays only."""
        request = {"op": "time_kept", "key": perf.id, "repeats": perf.repeats, "spin_up_ms": self._spin_up_ms()}
        run_s = self._deadline(perf).run_s or RUN_GRACE_S
        try:  # graph replays make no progress marks: the cap covers the spin-up and every sample
            reply = worker.request(request, Deadline(cap_s=min(perf.timeout_s, RUN_GRACE_S + perf.repeats * run_s)),
                                   what)
        except WorkerFailure as failure:
            return f"{failure.trap}: {what}: {failure.detail}"
        if not reply.get("ok"):
            return f"{what} raised " + error_message(reply.get("error", {}), worker.submission.name)
        return list(reply.get("timing", {}).get("medians_ms", []))

    def _eager_outputs(self, baseline: Baseline, inputs: Mapping[str, Any],
                       perf: PerformanceCase) -> dict[str, torch.Tensor]:
        on_device = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        with performance_timing.tf32_matmul(baseline.tf32):
            return baseline_outputs(baseline, baseline.run(on_device))

    def _time_eager(self, baseline: Baseline, inputs: Mapping[str, Any], perf: PerformanceCase) -> list[float]:
        """Torch eager on `input_sets` copies of the inputs, timed as CUDA-graph replays like the kernels."""
        first = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        copies = [first] + [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in first.items()}
                            for _ in range(perf.input_sets - 1)]
        if self.device != "cuda":
            return []
        with performance_timing.tf32_matmul(baseline.tf32):
            def run_all() -> None:
                for copy in copies:
                    baseline.run(copy)

            run_all()
            measured = performance_timing.time_graph(run_all, calls=len(copies), repeats=perf.repeats,
                                                     spin_up_ms=self._spin_up_ms())
        torch.cuda.empty_cache()
        return list(measured.medians_ms)

    def _new_reference(self) -> Worker:
        if self.assignment.reference_solution is None:
            raise RuntimeError("the assignment has no reference solution")
        path = self.assignment.reference_solution.resolve()
        return Worker(path, list(self.assignment.required_symbols),
                      WorkerOptions(backend="cuda" if self.device == "cuda" else "interpreter",
                                    import_timeout_s=self.assignment.import_timeout_s))

    def start_reference(self) -> Worker:
        """A worker running the assignment's reference solution (trusted code, same timing path)."""
        worker = self._new_reference()
        worker.spawn()
        reply = _finish_start(worker)
        if not reply.get("ok"):
            worker.close()
            raise RuntimeError(str(reply.get("error", {}).get("message", ""))[:300])
        return worker

    def _time_reference(self, prepared: _Prepared) -> tuple[list[float] | None, str]:
        """The reference's medians on the same inputs, timed like the student's (its launches recorded,
        then replayed as a CUDA graph), or None and why not (a note on the result)."""
        self._ensure_reference()
        if self._reference is None:
            return None, self._reference_problem
        perf = prepared.perf
        what = f"timing the reference {perf.target} on {perf.shape}"
        try:
            plan = self._reference_plan(self._reference, prepared, what)
            if isinstance(plan, str):
                return None, f"the reference could not be timed: {plan}"
            timed = self._time_plan(self._reference, dataclasses.replace(prepared, timed=plan), what)
        except WorkerFailure as failure:
            self._reference.close()
            self._reference = None
            return None, f"the reference could not be timed: {failure.detail}"
        if isinstance(timed, str):
            return None, f"the reference could not be timed: {timed}"
        return timed[1] or None, ""


class _NoBars(Exception):
    """Bars that could not be measured (torch eager failed): the message says why; nothing is stored."""


IN_TURN_NOTE = "the reference was timed in turn with your kernels, sample for sample, in this grade"

# A launch at the timed size gets this long to finish, plus SLOWDOWN_ALLOWED x the bar. Measured in a class
# batch on one H200 (10 concurrent grades, CPUs saturated): 3 s stopped an honest 14x-slower kernel's check.
RUN_GRACE_S = 10.0
SLOWDOWN_ALLOWED = 100.0
COMPILE_LIMIT_S = 120.0  # one compilation (an autotuned kernel compiles once per configuration)


def timed_deadline(perf: PerformanceCase, expected_ms: float | None) -> Deadline:
    """Pure: the deadline of one request at `perf`'s timed size, given the bar's median (ms) if known."""
    run_s = RUN_GRACE_S + SLOWDOWN_ALLOWED * (expected_ms or 0.0) / 1000.0
    return Deadline(cap_s=perf.timeout_s, run_s=run_s, compile_s=COMPILE_LIMIT_S)


def _finish_start(worker: Worker) -> dict[str, Any]:
    try:
        return worker.finish_start()
    except WorkerFailure as failure:
        return {"ok": False, "error": {"message": failure.detail}}


def _failed(perf: PerformanceCase, detail: str, device: DeviceInfo | None = None) -> PerformanceResult:
    """A case that failed at the timed size, named for what happened (timeout, out of memory, a crash)."""
    lowered = detail.lower()
    if detail.startswith("timeout") or "did not finish" in lowered:
        return errored(perf, detail, device, trap=TIMEOUT)
    if detail.startswith(OUT_OF_MEMORY) or "out of memory" in lowered or "outofmemoryerror" in lowered:
        return errored(perf, detail, device, trap=OUT_OF_MEMORY)
    if detail.startswith("crash"):
        return errored(perf, detail, device, trap=CRASH)
    return errored(perf, detail, device, trap=RUNTIME_ERROR)
