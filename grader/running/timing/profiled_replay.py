"""One profiled replay per timed case on CUDA: the launches the timer already ran and checked, run once more under
Nsight Compute (grader.running.profiling.ncu) in a worker of the submission's sandbox that loaded only its kernels
(no line of its Python runs). The reference's launches of the same cases are profiled the same way in a worker of
its own, and kept per GPU and versions where a calibration store is given. Nothing here changes the GPU's clocks or
settings (`--clock-control none`).

In three steps, so that only the profiled launches themselves hold the GPU's exclusive slot:
1. `spawn` (as the timer starts, so the imports overlap the recording and the checks) and `prepare` (outside the
   exclusive slot; the student's side beside the timing checks, the reference's after them, as its launches are
   planned there): one worker per side under ncu loads the kernels, then, holding the slot shared as correctness
   work does, runs every case's launches once and keeps them there (`--profile-from-start off`: nothing of this
   is profiled);
2. `measure` (inside the slot, after the timed samples): each case's launches once more inside the profiler's
   range (`ProfileKept`), one case after another, so the device-wide counters see no other grade's kernels;
3. `finish`: the workers exit, ncu writes its counters to their logs, and each case gets its launches back.

Where ncu is missing or refused (ERR_NVGPUCTRPERM), every case's profile says so in one line and still carries what
the compiler says of each kernel (registers, spills, tensor-core and 128-bit load instructions): the workers report
those whether or not the counters could be read.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from grader.atomic import write_json
from grader.evidence.kernel_profiles import CaseProfile, KernelProfile, SideProfile, StaticFacts
from grader.running import protocol
from grader.running.cases.battery import Battery
from grader.running.processes.client import Deadline, Worker, WorkerFailure
from grader.running.profiling.ncu import (
    MAX_PROFILED_LAUNCHES,
    NOT_INSTALLED,
    classify_failure,
    parse_ncu_csv,
    range_profiler_command,
)
from grader.running.timing.calibration import CalibrationKey, CalibrationStore
from grader.running.timing.calls import Prepared
from grader.running.timing.contestants import Contestants, finish_start

REPORT_WAIT_S = 60.0  # ncu writes its counters as the profiled worker exits: how long to wait for them
# One case's launches under ncu: each kernel is replayed once per pass of the counters (several passes), with the
# GPU's memory saved and restored between them; a case the timer already timed gets this long in all.
PROFILE_LIMIT_S = 90.0
PROFILE_FORMAT = 1
REPORT_LIMIT_BYTES = 8 << 20  # ncu's CSV: ~3 KB a launch (12 counters), 64 launches a grade at most
STATIC_ONLY = "; the static facts of the compiled kernels are used instead"


def short_count(counted: int, launched: int, before: int, reported: int) -> str:
    """Pure: why a case's counters fall short ('' when ncu counted all `launched` of its launches): ncu's report held
    `reported` launches in all, `before` of them the earlier cases'."""
    if counted >= launched:
        return ""
    return (f"Nsight Compute counted {counted} of this case's {launched} kernel launches (its report held {reported}, "
            f"{min(before, reported)} of them the earlier cases'; it counts at most {MAX_PROFILED_LAUNCHES} a "
            f"grade)" + (STATIC_ONLY if counted == 0 else "; the counters are those of the launches counted"))


def no_counters(mine: SideProfile | None, theirs: SideProfile | None) -> str:
    """Pure: the line a timed case without counters carries where nothing else said why ('' when both sides have
    counters): never a case that lacks them in silence."""
    missing = [label for label, side in (("your kernels", mine), ("the reference", theirs))
               if side is None or not side.launches]
    if not missing:
        return ""
    return (f"Nsight Compute gave no counters for {' or '.join(missing)} in this case (its report held none of the "
            "case's launches)" + STATIC_ONLY)


@dataclasses.dataclass
class _Side:
    """One side's profiling worker and what it answered, case by case (`problem`: why the side has no profile)."""

    label: str
    worker: Worker | None = None
    ready: list[Prepared] = dataclasses.field(default_factory=list)  # cases whose launches wait in the worker
    replies: dict[str, protocol.Profiled] = dataclasses.field(default_factory=dict)
    problems: dict[str, str] = dataclasses.field(default_factory=dict)
    problem: str = ""


class Profiler:
    """Profiles the timed cases of one grade. `command`: the ncu prefix (default: found on this machine; None
    where ncu is not installed: then the workers run bare and only the static facts come back)."""

    def __init__(self, contestants: Contestants, battery: Battery, calibration: CalibrationStore | None,
                 keys: dict[str, CalibrationKey] | None = None, command: Sequence[str] | None = None,
                 find: bool = True) -> None:
        self.contestants = contestants
        self.battery = battery
        self.calibration = calibration
        self.keys = keys or {}  # perf id -> its calibration key (where the reference's profile is kept)
        self.command = tuple(command) if command is not None else (range_profiler_command() if find else None)
        self.student = _Side("your kernels")
        self.reference = _Side("the reference")
        self.cached: dict[str, SideProfile] = {}

    # ------------------------------------------------------------------ 1. outside the slot

    def spawn(self, perf_ids: Sequence[str]) -> None:
        """Start the profiling workers for these cases now (their imports overlap the grade's recording and checks):
        the student's always, the reference's where some case has no kept profile of the reference."""
        if not perf_ids:
            return
        battery, contestants = self.battery, self.contestants
        options = dataclasses.replace(battery.sandbox.options, tool=self._tool(), tool_environment=())
        bundle = battery.workers.bundle
        if bundle is None:
            self.student.problem = battery.workers.bundle_problem or "the submission's kernels were not reported"
        else:  # a kernel host, like the timer: the profiled replay runs none of the submission's Python
            self._spawn(self.student, Worker(battery.submission, list(contestants.assignment.required_symbols), options,
                                             sandbox=battery.sandbox, bundle=bundle,
                                             gpu_budget_bytes=contestants.host_budget_bytes))
        for perf_id in perf_ids:
            cached = self._cached(self.keys.get(perf_id))
            if cached is not None:
                self.cached[perf_id] = cached
        if len(self.cached) < len(perf_ids) and contestants.assignment.reference_solution is not None:
            self._spawn(self.reference, contestants.new_reference(tool=self._tool()))

    def prepare(self, cases: Sequence[Prepared]) -> None:
        """Load the spawned workers (spawned here where `spawn` was not called) and run each case's launches once
        there (kept for `measure`)."""
        if cases and self.student.worker is None and not self.student.problem:
            self.spawn([p.perf.id for p in cases])
        self.prepare_student(cases)
        self.prepare_reference(cases)

    def prepare_student(self, cases: Sequence[Prepared]) -> None:
        """The student's side of `prepare`; it needs nothing of the timing checks, so it may run beside them, on
        another thread (it spawns nothing: a worker dies with the thread that spawned it)."""
        if not cases:
            return
        self._load(self.student)
        # Running the launches is GPU work: it takes the GPU's slot shared, as correctness work does, so no other
        # grade's timed samples run beside it (the imports above need no GPU and do not wait for the slot).
        with self.battery.workers.shared_gpu():
            self._keep(self.student, cases, lambda p: p)

    def prepare_reference(self, cases: Sequence[Prepared]) -> None:
        """The reference's side of `prepare`, for the cases whose reference launches the timing checks planned
        (`Contestants.keep_reference`) and whose reference profile is not kept from an earlier grade (looked for
        again here: in a class, a grade that started beside this one may have kept it meanwhile)."""
        contestants = self.contestants
        wanted = []
        for prepared in cases:
            if prepared.perf.id not in self.cached:
                kept = self._cached(self.keys.get(prepared.perf.id))
                if kept is not None:
                    self.cached[prepared.perf.id] = kept
            if prepared.perf.id in self.cached:
                continue
            if prepared.perf.id in contestants.reference_plans:
                wanted.append(prepared)
            else:
                self.reference.problems[prepared.perf.id] = "the reference's launches were not recorded for this case"
        if not wanted:
            self.close_side(self.reference)  # spawned for cases whose profile another grade has since kept
            return
        self._load(self.reference)
        with self.battery.workers.shared_gpu():
            self._keep(self.reference, wanted,
                       lambda p: dataclasses.replace(p, timed=contestants.reference_plans[p.perf.id]))

    @staticmethod
    def _spawn(side: _Side, worker: Worker) -> None:
        side.worker = worker
        try:
            worker.spawn()
        except WorkerFailure as failure:
            side.problem = f"{side.label} under the profiler: {failure.trap}: {failure.detail}"[:300]
            side.worker = None
            worker.close()

    @staticmethod
    def _load(side: _Side) -> None:
        """Wait for the side's worker to come up and load its kernels (or the reference)."""
        worker = side.worker
        if worker is None:
            return
        try:
            loaded = finish_start(worker)
            if not loaded.ok:
                side.problem = f"{side.label} could not be loaded under the profiler: {loaded.failure.message[:200]}"
                Profiler.close_side(side)
        except WorkerFailure as failure:
            side.problem = f"{side.label} under the profiler: {failure.trap}: {failure.detail}"[:300]
            Profiler.close_side(side)

    def _keep(self, side: _Side, cases: Sequence[Prepared], plan_of: Callable[[Prepared], Prepared]) -> None:
        """Run each case's launches once in the side's worker, kept there for `measure`."""
        worker = side.worker
        if worker is None or not cases:
            return
        try:
            for n, prepared in enumerate(cases):
                what = f"running {side.label}' launches for {prepared.perf.target} under the profiler"
                ran = self.contestants.run_plan(worker, plan_of(prepared), what, keep=prepared.perf.id, profiled=True,
                                                outputs=False)
                if isinstance(ran, str):
                    side.problems[prepared.perf.id] = ran[:300]
                    if not worker.alive:  # what it kept died with it; the cases after it are not profiled, and say so
                        for later in cases[n + 1:]:
                            side.problems.setdefault(later.perf.id, f"not profiled: {side.label}' profiling worker "
                                                                    f"ended at {prepared.perf.target}'s launches")
                        break
                else:
                    side.ready.append(prepared)
        except WorkerFailure as failure:
            side.problem = f"{side.label} under the profiler: {failure.trap}: {failure.detail}"[:300]

    # ------------------------------------------------------------------ 2. inside the slot

    def measure(self, perf_ids: Collection[str] | None = None) -> None:
        """Each ready case's launches (of `perf_ids`: the cases whose outputs passed the timing check; default all)
        once inside the profiler's range, in order. After a failure the side stops: ncu may have profiled part of
        that case's launches, and the report is split by the replies' counts."""
        for side in (self.student, self.reference):
            worker = side.worker
            stopped = ""
            for prepared in side.ready:
                if perf_ids is not None and prepared.perf.id not in perf_ids:
                    continue
                if stopped or worker is None or not worker.alive:
                    side.problems.setdefault(prepared.perf.id, stopped or f"{side.label}' profiling worker ended early")
                    continue
                what = f"profiling {side.label}' launches for {prepared.perf.target}"
                try:
                    reply = worker.request(protocol.ProfileKept(key=prepared.perf.id),
                                           Deadline(cap_s=min(prepared.perf.timeout_s, PROFILE_LIMIT_S)), what)
                except WorkerFailure as failure:
                    side.problems[prepared.perf.id] = f"{what}: {failure.trap}: {failure.detail}"[:300]
                    stopped = f"not profiled: profiling {side.label} failed on an earlier case"
                    continue
                if reply.ok:
                    side.replies[prepared.perf.id] = reply
                else:
                    side.problems[prepared.perf.id] = f"{what}: {reply.failure.message[:300]}"
                    stopped = f"not profiled: profiling {side.label} failed on an earlier case"

    # ------------------------------------------------------------------ 3. the counters

    def finish(self, cases: Sequence[Prepared]) -> dict[str, CaseProfile]:
        """Every case's profile (the workers are ended here, whatever happened)."""
        student = self._collect(self.student)
        reference = self._collect(self.reference)
        out: dict[str, CaseProfile] = {}
        for prepared in cases:
            perf = prepared.perf
            mine, why_mine = student.get(perf.id, (None, self.student.problems.get(perf.id) or self.student.problem))
            theirs: SideProfile | None = self.cached.get(perf.id)
            why_theirs = ""
            if theirs is None:
                theirs, why_theirs = reference.get(
                    perf.id, (None, self.reference.problems.get(perf.id) or self.reference.problem))
                key = self.keys.get(perf.id)
                if theirs is not None and theirs.launches and key is not None:
                    self._store(key, theirs)
            unmeasured = why_mine or why_theirs
            if self.command is None:
                unmeasured = NOT_INSTALLED + STATIC_ONLY
            unmeasured = unmeasured or no_counters(mine, theirs)
            out[perf.id] = CaseProfile(perf.id, perf.target, mine, theirs, unmeasured)
        return out

    def close(self) -> None:
        for side in (self.student, self.reference):
            if side.worker is not None:
                side.worker.close()
                side.worker = None

    def _collect(self, side: _Side) -> dict[str, tuple[SideProfile | None, str]]:
        """Each answered case's profile: its launches from ncu's report (split by the launch counts the replies
        gave, in request order) and its kernels' static facts; with the reason where the counters are missing."""
        worker = side.worker
        if worker is None or not side.replies:
            self.close_side(side)
            return {}
        profiled = bool(worker.options.tool)
        ended = worker.end(REPORT_WAIT_S) if profiled else True
        output = worker.output_since(0, REPORT_LIMIT_BYTES) if profiled else ""
        self.close_side(side)
        launches = parse_ncu_csv(output) if profiled else ()
        why = ""  # without ncu, `finish` says so once per case
        if profiled and not ended:
            why = f"Nsight Compute did not finish writing its counters within {REPORT_WAIT_S:g} s" + STATIC_ONLY
        elif profiled and not launches:
            why = (classify_failure(0, output, 0) or "Nsight Compute gave no counters") + STATIC_ONLY
        out: dict[str, tuple[SideProfile | None, str]] = {}
        at = 0
        for perf_id, reply in side.replies.items():
            mine: tuple[KernelProfile, ...] = tuple(launches[at:at + reply.launches]) if launches else ()
            case_why = (why or short_count(len(mine), reply.launches, at, len(launches))) if launches else why
            at += reply.launches
            try:
                kernels = kernels_of(reply)
            except (TypeError, ValueError, AttributeError):
                kernels = {}
            out[perf_id] = (SideProfile(mine, kernels), case_why)
        return out

    @staticmethod
    def close_side(side: _Side) -> None:
        if side.worker is not None:
            side.worker.close()
            side.worker = None

    def _tool(self) -> tuple[str, ...]:
        return tuple(self.command) if self.command is not None else ()

    # ------------------------------------------------------------------ the reference's profiles, kept per GPU

    def _cache_path(self, key: CalibrationKey | None) -> Path | None:
        if key is None or self.calibration is None:
            return None
        return self.calibration.folder / (key.file_name.removesuffix(".json") + ".profile.json")

    def _cached(self, key: CalibrationKey | None) -> SideProfile | None:
        path = self._cache_path(key)
        if path is None or self.calibration is None:
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != PROFILE_FORMAT or data.get("command") != list(self.command or ()):
                return None
            if not self.calibration.not_before <= float(data["measured_at"]) <= self.calibration.clock() + 60:
                return None
            if self.calibration.clock() - float(data["measured_at"]) > self.calibration.max_age_s:
                return None
            return SideProfile.from_dict(data["profile"])
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _store(self, key: CalibrationKey, profile: SideProfile) -> None:
        path = self._cache_path(key)
        if path is None:
            return
        try:
            write_json(path, {"format": PROFILE_FORMAT, "command": list(self.command or ()), "measured_at": time.time(),
                              "profile": profile.to_dict()})
        except OSError:
            pass  # an unwritable cache costs the next grade one more profile, nothing else


def kernels_of(reply: protocol.Profiled) -> dict[str, StaticFacts]:
    """The reply's per-kernel facts as values (ValueError / TypeError where they are not numbers)."""
    return {str(name): StaticFacts(bool(f.get("tensor_cores")), bool(f.get("vector_loads")),
                                   int(f.get("registers", 0)), int(f.get("spills", 0)))
            for name, f in reply.kernels.items()}
