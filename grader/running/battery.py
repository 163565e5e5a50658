"""Run one submission's cases: build inputs, place them in guarded buffers, ask the worker, observe.

This module does the I/O with the worker; judging what came back is `grader.judging.judge` (pure).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grader import trap_ids
from grader.authoring.catalog import trap_catalog
from grader.authoring.inputs import InputMaker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.problem import In, Out, Problem
from grader.authoring.spec import Assignment, Case, FunctionSpec, KernelSpec
from grader.evidence import guard_bits
from grader.evidence.observation import Finding, Observation
from grader.judging import faults
from grader.judging.compare import close_mask
from grader.judging.diagnosis import nan_leaks
from grader.judging.errors import classify_error, error_message, failure_message
from grader.judging.false_hints import HintCall, gpu_fault_note, hint_calls, names_false_hint
from grader.judging.judge import judge_case
from grader.judging.replay import ReplayPlan, check_outputs, explain_replay_mismatch, plan_replay, same_buffers
from grader.results import CaseResult
from grader.running import arguments, guards
from grader.running.arguments import buffer_key
from grader.running.client import Deadline, Worker, WorkerFailure
from grader.running.gpu_slot import GpuSlot, gpu_name
from grader.running.phases import PhaseClock
from grader.running.placement import Placed, launch_grid, place_buffers
from grader.running.sandbox import Sandbox, sandbox_options
from grader.running.sanitizer import (
    SANITIZER_ENV,
    announced_allocations,
    announced_pointers,
    memcheck_findings,
    parse_memcheck,
)
from grader.seeds import case_seed

# Finite value put into every guard band for the second run that confirms an out-of-bounds read.
GUARD_PROBE_VALUE = 7.0


# On a GPU a correctness case's kernels finish in milliseconds: one still running this long after its last
# launch is spinning, and the worker is stopped (compiles get their own time: grader.running.client.Deadline).
CASE_RUN_S = 5.0
WARM_UP_TIMEOUT_S = 300.0  # compiling every kernel case's specialisation at once

# Kernels run this many times slower under compute-sanitizer memcheck (deadline factor).
SANITIZER_SLOWDOWN = 20
# After a fault under memcheck the worker ends itself; the tool writes its report as the process ends.
SANITIZER_REPORT_WAIT_S = 30.0

@dataclass(frozen=True)
class SymbolProblem:
    """Why a target cannot be run at all (missing, wrong signature, import failure)."""

    trap: str
    message: str


class Battery:
    """Grades cases of one assignment for one submission, through one (restartable) worker."""

    def __init__(self, assignment: Assignment, submission: Path, backend: str, seed: int,
                 hidden: tuple[str, ...] = (),
                 sanitizer: tuple[str, ...] | None = None, sandbox: Sandbox | None = None, *,
                 fault_tool: tuple[str, ...] | None = None,
                 cpu_rerun: Callable[[Case, int], CaseResult | None] | None = None,
                 replayer: bool = True) -> None:
        """`sandbox`: the grade's sandbox for this submission (its zygote forks every worker here, and its
        Triton cache holds the submission's kernels compiled once per grade); by default one of its own.
        `sanitizer`: `--sanitize`, every kernel case once more under this memcheck command. A case that ends in
        a GPU memory fault (grader/judging/faults.py) is run again alone under `fault_tool` (memcheck, where it
        is installed), else graded again by `cpu_rerun(case, seed)` (the same case in Triton's interpreter), to name
        it; a GPU case whose wrong values nothing named (`unknown`) is graded there too (a wild access that lands in
        another allocation is invisible to memcheck and to the guards; the interpreter's fence stops it).
        `replayer`: False for a battery that never needs a replay started ahead (the CPU companion's)."""
        self.assignment = assignment
        self.problems: Mapping[str, Problem] = load_problems(assignment)
        self.submission = Path(submission)
        self.backend = backend
        self.seed = seed
        self.own_sandbox = sandbox is None
        self.sandbox = sandbox if sandbox is not None else Sandbox(sandbox_options(assignment, submission, backend,
                                                                                    hidden))
        self.sandbox.start()
        options = self.sandbox.options
        self.triton_cache = self.sandbox.triton_cache
        names = list(assignment.required_symbols)
        self.worker = Worker(self.submission, names, options, sandbox=self.sandbox)
        # Replays wrapper launches; it never runs wrapper code, so nothing a wrapper did can touch it.
        self.replayer = Worker(self.submission, names, options, sandbox=self.sandbox)
        # `--sanitize` on CUDA: kernel cases run once more under this memcheck command (a fresh process); a
        # faulted case under it or under `fault_tool`.
        tool = sanitizer or fault_tool
        self.sanitize_all = bool(sanitizer)
        self.sanitizer = Worker(self.submission, names, dataclasses.replace(
            options, tool=tool, tool_environment=tuple(SANITIZER_ENV.items())),
            sandbox=self.sandbox) if tool else None
        self.sanitizer_unusable = False
        self.cpu_rerun = cpu_rerun
        self.prestart_replayer = replayer
        self.load_reply: dict[str, Any] | None = None
        self.load_problem: SymbolProblem | None = None
        self.clock = PhaseClock()
        self._gpu: GpuSlot | None = None
        self._replayer_start: threading.Thread | None = None
        self._compile_s: dict[str, float] = {}  # per worker: the Triton compile seconds it reported
        self._hint_calls: tuple[HintCall, ...] | None = None

    def shared_gpu(self) -> contextlib.AbstractContextManager[None]:
        """Correctness work on CUDA shares the GPU; a grade's timed phase waits for it (gpu_slot)."""
        if self.backend != "cuda" or not torch.cuda.is_available():
            return contextlib.nullcontext()
        if self._gpu is None:
            self._gpu = GpuSlot(gpu_name())
        return self._gpu.shared()

    def case_deadline(self) -> Deadline:
        """A correctness request's deadline: the spec's call_timeout_s; on a GPU also CASE_RUN_S after the
        last kernel launch (the cases are small: a kernel still running then is spinning)."""
        cap = self.assignment.call_timeout_s
        return Deadline(cap_s=cap, run_s=min(cap, CASE_RUN_S) if self.backend == "cuda" else None)

    def note_compile(self, role: str, reply: Mapping[str, Any]) -> None:
        """Workers report their cumulative JIT compile seconds with every reply (informational)."""
        seconds = reply.get("compile_s")
        if isinstance(seconds, float) and seconds >= 0:
            self._compile_s[role] = seconds

    def phases(self) -> dict[str, float]:
        return {**self.clock.seconds, "compile": round(sum(self._compile_s.values()), 4)}

    # ------------------------------------------------------------------ submission loading

    def _ensure_worker(self) -> SymbolProblem | None:
        """Start (or restart) the worker; return why the submission cannot run, if it cannot."""
        if self.worker.alive and self.load_reply is not None:
            return None
        if self.load_problem is not None:
            return self.load_problem  # importing failed once; it is deterministic, do not retry
        try:
            with self.clock.phase("start-up"):
                reply = self.worker.start()
        except WorkerFailure as failure:
            problem = SymbolProblem(
                failure.trap,
                f"Importing {self.submission.name} {'timed out' if failure.trap == trap_ids.TIMEOUT else 'crashed'}: "
                f"{failure.detail}." + _tail(failure.output_tail),
            )
            self.load_problem = self.load_problem or problem
            return problem
        if not reply.get("ok"):
            self.worker.stop()
            problem = SymbolProblem(
                trap_ids.IMPORT_FAILS,
                f"{self.submission.name} could not be imported: "
                + error_message(reply.get("error", {}), self.submission.name),
            )
            self.load_problem = self.load_problem or problem
            return problem
        self.load_reply = reply
        self._prestart_replayer()
        return None

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
                self.replayer.stop()  # _replay starts it again and reports what goes wrong

        self.replayer.spawn()  # here: a worker dies with the thread that spawned it
        self._replayer_start = threading.Thread(target=start, name="replayer-start", daemon=True)
        self._replayer_start.start()

    def symbol_problem(self, target: str) -> SymbolProblem | None:
        problem = self._ensure_worker()
        if problem is not None:
            return problem
        assert self.load_reply is not None
        info = self.load_reply["symbols"].get(target, {"kind": "missing"})
        return check_symbol(target, info, self.assignment, self.submission.name)

    def _replace_worker(self) -> None:
        """The case wrote out of bounds, raised or crashed: whatever it did to the worker's memory or state
        must not reach the next case, which starts a fresh worker (about 1-3 s; only after such cases)."""
        self.worker.stop()
        self.load_reply = None

    def stop_workers(self) -> None:
        """Stop every process running the submission (restarted on demand): nothing of the student's
        may run while something is timed."""
        self._await_replayer()
        self.worker.stop()
        self.replayer.stop()
        self.load_reply = None
        if self.sanitizer is not None:
            self.sanitizer.stop()

    def request_for_timing(self, message: dict[str, Any], timeout_s: Deadline | float,
                           what: str) -> dict[str, Any] | str:
        """A request of a performance case to the student's worker: its reply, or what went wrong
        ("timeout: ...", "crash: ...", "... raised ..."), for the case's message."""
        blocked = self._ensure_worker()
        if blocked is not None:
            return blocked.message
        try:
            with self.shared_gpu():
                reply = self.worker.request(message, timeout_s, what)
        except WorkerFailure as failure:
            self.load_reply = None  # the next request starts a fresh worker
            return f"{failure.trap}: {what}: {failure.detail}"
        if not reply.get("ok"):
            if reply.get("fatal"):
                self.load_reply = None
            return f"{what} raised " + error_message(reply.get("error", {}), self.submission.name)
        return reply

    def _await_replayer(self) -> None:
        if self._replayer_start is not None:
            self._replayer_start.join()

    def close(self) -> None:
        self._await_replayer()
        self.worker.close()
        self.replayer.close()
        if self.sanitizer is not None:
            self.sanitizer.close()
        if self.own_sandbox:
            self.sandbox.close()

    # ------------------------------------------------------------------ running cases

    def warm_up(self, cases: Sequence[Case]) -> None:
        """On a GPU, before the first case: compile every kernel case's specialisation at once, in parallel
        in the worker (the 'warmup' op), instead of one after the other as each case launches. The
        launches are built exactly as the cases will build them (same seeds, same guard layout), so each
        case then finds its kernel compiled. Informational: a failure here is reported by the case itself."""
        if self.backend != "cuda" or self._ensure_worker() is not None:
            return
        launches = []
        for case in cases:
            spec = self.assignment.kernels.get(case.target)
            if spec is None or self.symbol_problem(case.target) is not None:
                continue
            problem = self.problems[spec.problem]
            inputs = problem.make_inputs(case, InputMaker(case_seed(self.seed, case.id)))
            launches.append(self._launch_message(spec, case, problem, inputs)[1])
        if not launches:
            return
        with self.clock.phase("compile"):
            try:  # compiling runs no kernel: another grade's timed replays may go on meanwhile
                reply = self.worker.request({"op": "warmup", "launches": launches},
                                            Deadline(cap_s=WARM_UP_TIMEOUT_S, run_s=self.case_deadline().run_s),
                                            "compiling the kernels")
                self.note_compile("worker", reply)
            except WorkerFailure:
                self.load_reply = None  # the cases start a fresh worker and report what happens

    def run_case(self, case: Case, seed: int | None = None) -> CaseResult:
        """Grade one case on the inputs of `seed` (default: the battery's own; a run graded at several seeds
        passes each, grader.operations.grading_run)."""
        with self.clock.phase("correctness"):
            return self._run_case(case, self.seed if seed is None else seed)

    def _run_case(self, case: Case, seed: int) -> CaseResult:
        started = time.monotonic()
        problem = self.problems[self._problem_name(case.target)]
        inputs = problem.make_inputs(case, InputMaker(case_seed(seed, case.id)))
        expected = problem.expected(inputs)
        blocked = self.symbol_problem(case.target)
        if blocked is not None:
            observation = Observation(trap=blocked.trap, message=blocked.message)
        else:
            observation = self._run(case, problem, inputs)
            observation = self._probe_nondeterminism(case, problem, inputs, expected, observation)
            observation = self._probe_guard_reads(case, problem, inputs, expected, observation)
            observation = self._verify_by_replay(case, inputs, expected, observation)
            observation = self._sanitize(case, problem, inputs, observation)
            observation = self._name_fault(case, problem, inputs, observation, seed)
            if needs_fresh_worker(observation):
                self._replace_worker()
        tolerance = self.assignment.tolerances[case.tolerance].lookup(self.backend, "float32")
        result = judge_case(
            case=case,
            assignment=self.assignment,
            inputs=inputs,
            expected=expected,
            observation=observation,
            tolerance=tolerance,
            traps=problem.traps,
            elapsed_s=time.monotonic() - started,
        )
        return self._name_unexplained(case, result, seed)

    def _name_unexplained(self, case: Case, result: CaseResult, seed: int) -> CaseResult:
        """CUDA: a case whose wrong values nothing named, graded again on the CPU (faults.name_unexplained)."""
        if (self.backend != "cuda" or self.cpu_rerun is None or not faults.unexplained(result)
                or not case.runs_on("interpreter")):
            return result
        with self.clock.phase("cpu-rerun"):
            rerun = self.cpu_rerun(case, seed)
        return faults.name_unexplained(result, rerun, trap_catalog(self.assignment))

    def observe(self, case: Case) -> Observation:
        """What the worker reports for one run of `case`: no probes, replays, reruns or judgement (the CPU
        companion's check of a GPU grade's tl.multiple_of / tl.max_contiguous promises reads `false_hint`)."""
        problem = self.problems[self._problem_name(case.target)]
        inputs = problem.make_inputs(case, InputMaker(case_seed(self.seed, case.id)))
        blocked = self.symbol_problem(case.target)
        if blocked is not None:
            return Observation(trap=blocked.trap, message=blocked.message)
        observation = self._run(case, problem, inputs)
        if needs_fresh_worker(observation):
            self._replace_worker()
        return observation

    def _problem_name(self, target: str) -> str:
        spec: KernelSpec | FunctionSpec = self.assignment.kernels.get(target) or self.assignment.functions[target]
        return spec.problem

    def _request(self, message: dict[str, Any], what: str) -> dict[str, Any] | Observation:
        try:
            with self.shared_gpu():
                reply = self.worker.request(message, self.case_deadline(), what)
            self.note_compile("worker", reply)
            return reply
        except WorkerFailure as failure:
            self.load_reply = None  # the next case starts a fresh worker
            text = failure_sentence(what, failure) + _tail(failure.output_tail)
            kind = failure.trap
            calls = self.hint_calls()
            if kind == trap_ids.CRASH and names_false_hint(f"{failure.detail} {failure.output_tail}", calls):
                kind = trap_ids.FALSE_HINT  # a GPU fault a false tl.multiple_of / tl.max_contiguous explains
                text += "\n" + gpu_fault_note(calls, self.submission.name)
            return Observation(trap=kind, message=text, output_tail=failure.output_tail)

    def hint_calls(self) -> tuple[HintCall, ...]:
        """The tl.multiple_of / tl.max_contiguous calls in the submission's source (read once, never run)."""
        if self._hint_calls is None:
            try:
                self._hint_calls = hint_calls(self.submission.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                self._hint_calls = ()
        return self._hint_calls

    def _error_observation(self, reply: dict[str, Any], what: str) -> Observation:
        if reply.get("fatal"):
            self.load_reply = None
        error = reply.get("error", {})
        failure = classify_error(error, self.hint_calls())
        message = failure_message(error, what, self.submission.name)
        if failure == trap_ids.FALSE_HINT:
            message += "\n" + gpu_fault_note(self.hint_calls(), self.submission.name)
        return Observation(trap=failure, message=message, output_tail=self.worker.output_tail(),
                           false_hint=reply.get("false_hint"))

    def _run(
        self, case: Case, problem: Problem, inputs: Mapping[str, Any], finite_guard: float | None = None
    ) -> Observation:
        if case.target in self.assignment.kernels:
            return self._run_kernel(self.assignment.kernels[case.target], case, problem, inputs, finite_guard)
        return self._run_function(self.assignment.functions[case.target], case, problem, inputs, finite_guard)

    def _probe_guard_reads(self, case: Case, problem: Problem, inputs: Mapping[str, Any],
                           expected: Mapping[str, torch.Tensor], observation: Observation) -> Observation:
        """NaN in an output where the oracle is finite: run the case again with finite guard values.
        Positions that turn finite were read from the guards (an out-of-bounds read); NaN that stays
        comes from the arithmetic (0/0, sqrt of a negative) and is left to the trap signatures."""
        leaks = nan_leaks(observation.outputs, expected, observation.unwritten)
        if observation.trap or not leaks:
            return observation
        probe = self._run(case, problem, inputs, finite_guard=GUARD_PROBE_VALUE)
        confirmed = {}
        for name, leak in leaks.items():
            again = probe.outputs.get(name)
            if probe.trap or again is None or again.shape != leak.shape:
                continue
            from_guards = leak & ~torch.isnan(again.to(torch.float64))
            if from_guards.any():
                confirmed[name] = from_guards
        return dataclasses.replace(observation, guard_reads=confirmed)

    def _probe_nondeterminism(self, case: Case, problem: Problem, inputs: Mapping[str, Any],
                              expected: Mapping[str, torch.Tensor], observation: Observation) -> Observation:
        """A wrong output: run the identical case once more. Different bits on identical inputs mean a
        race or a read of memory nothing wrote (on a GPU; the interpreter runs programs in order)."""
        if observation.trap or not observation.outputs:
            return observation
        if outputs_close(observation.outputs, expected, self._tol(case)):
            return observation
        again = self._run(case, problem, inputs)
        if again.trap:
            return observation
        differing = tuple(
            name for name, out in observation.outputs.items()
            if name in again.outputs and (out.shape != again.outputs[name].shape
                                          or not torch.equal(guard_bits.bits(out.contiguous()),
                                                             guard_bits.bits(again.outputs[name].contiguous())))
        )
        return dataclasses.replace(observation, nondeterministic=differing) if differing else observation

    def _verify_by_replay(self, case: Case, inputs: Mapping[str, Any], expected: Mapping[str, torch.Tensor],
                          observation: Observation) -> Observation:
        """A wrapper case whose values pass: do its recorded kernel launches, replayed in a fresh worker
        that runs no wrapper code, produce those values? (grader/judging/replay.py)"""
        spec = self.assignment.functions.get(case.target)
        if (spec is None or spec.max_launches == 0 or observation.trap or not observation.launches
                or not outputs_close(observation.outputs, expected, self._tol(case))):
            return observation
        plan = plan_replay(observation.launches, observation.sent_storages, inputs)
        finding: Finding | None = None
        if plan.trap:
            finding = Finding(plan.trap, plan.problem)
        else:
            reply = self._replay(plan, case.target)
            if isinstance(reply, Finding):
                finding = reply
            else:
                tol = self._tol(case)
                finding = check_outputs(observation.outputs, observation.result_views, plan, reply, tol.atol, tol.rtol)
                if finding is not None and finding.trap == trap_ids.NOT_FUSED:
                    finding = self._race_or_not_fused(finding, plan, case, reply, observation)
        return dataclasses.replace(observation, replay_finding=finding) if finding else observation

    def _race_or_not_fused(self, finding: Finding, plan: ReplayPlan, case: Case, first: Mapping[int, torch.Tensor],
                           observation: Observation) -> Finding:
        """The replay gave other values: computed outside the kernels, or the kernels race (a stray store landing
        before or after a neighbour program's, differently on every run)? A case that writes out of bounds races
        by itself; otherwise the launches are replayed once more, and two replays that disagree are a race."""
        writes_out = any(f.trap == trap_ids.OOB_WRITE for f in observation.guard_findings)
        agree = True
        if not writes_out:
            second = self._replay(plan, case.target)
            agree = isinstance(second, Finding) or same_buffers(first, second)
        return explain_replay_mismatch(finding, writes_out_of_bounds=writes_out, replays_agree=agree)

    def _replay(self, plan: ReplayPlan, target: str) -> dict[int, torch.Tensor] | Finding:
        """Run the planned launches in the replay worker: its buffers after the last, or what went wrong,
        named for what it was (replay_failure). A failed replay also replaces the replay worker."""
        self._await_replayer()
        try:
            if not self.replayer.alive:
                with self.clock.phase("start-up"):
                    loaded = self.replayer.start()
                if not loaded.get("ok"):
                    self.replayer.stop()
                    return Finding("import-fails", f"replaying the recorded launches of {target}: importing "
                                   f"{self.submission.name} in a fresh worker failed: "
                                   + error_message(loaded.get("error", {}), self.submission.name))
            with self.clock.phase("replay"), self.shared_gpu():
                reply = self.replayer.request({"op": "replay", "launches": list(plan.launches)},
                                              self.case_deadline(), "replaying the recorded launches")
            self.note_compile("replayer", reply)
        except WorkerFailure as failure:
            return replay_failure(target, failure=failure, calls=self.hint_calls())
        buffers = reply.get("buffers")
        if not reply.get("ok") or not isinstance(buffers, dict):
            self.replayer.stop()
            return replay_failure(target, reply=reply, submission=self.submission.name, calls=self.hint_calls())
        return buffers

    def _tol(self, case: Case):
        return self.assignment.tolerances[case.tolerance].lookup(self.backend, "float32")

    def _launch_message(self, spec: KernelSpec, case: Case, problem: Problem, inputs: Mapping[str, Any],
                        finite_guard: float | None = None) -> tuple[Placed, dict[str, Any], str]:
        """The grader's own launch of a kernel case: guarded buffers, the request, and its description."""
        binding = arguments.kernel_binding(problem, inputs)
        by_param = {p: buffer_key(v) for p, v in binding.items() if isinstance(v, (In, Out))}
        placed = place_buffers(case, arguments.kernel_buffers(binding), inputs, by_param, finite_guard,
                             grid=launch_grid(spec, binding, case))
        args = arguments.kernel_arguments(spec, binding, placed)
        what = f"{spec.name}[grid]({', '.join(f'{k}={v}' for k, v in case.meta.items())})"
        message = {"op": "launch", "kernel": spec.name, "storages": placed.storages, "views": placed.views(),
                   "args": args, "meta": dict(case.meta), "grid": list(spec.grid),
                   "count_traffic": self.backend == "interpreter"}
        return placed, message, what

    def _run_kernel(self, spec: KernelSpec, case: Case, problem: Problem, inputs: Mapping[str, Any],
                    finite_guard: float | None = None) -> Observation:
        placed, message, what = self._launch_message(spec, case, problem, inputs, finite_guard)
        reply = self._request(message, what)
        if isinstance(reply, Observation):
            return reply
        if not reply.get("ok"):
            return self._error_observation(reply, what)
        return self._observe(placed, reply, launches=None, case=case)

    def _sanitize(self, case: Case, problem: Problem, inputs: Mapping[str, Any],
                  observation: Observation) -> Observation:
        """`--sanitize`: the kernel case once more in a worker under compute-sanitizer memcheck; its
        reports of invalid global accesses become oob-read / oob-write findings naming the buffer. A case
        that faulted is left to _name_fault, which reruns it (kernel or wrapper) under the same worker."""
        ran = observation.trap in (None, trap_ids.RUNTIME_ERROR, trap_ids.CRASH, trap_ids.FALSE_HINT)
        if (not self.sanitize_all or case.target not in self.assignment.kernels or not ran
                or faults.gpu_fault(observation.trap, observation.message, self.hint_calls()) is not None):
            return observation
        findings = self._sanitizer_rerun(case, problem, inputs)
        return dataclasses.replace(observation, sanitizer_findings=findings) if findings else observation

    def _name_fault(self, case: Case, problem: Problem, inputs: Mapping[str, Any],
                    observation: Observation, seed: int) -> Observation:
        """A case that ended in a GPU memory fault, named for what it is (grader/judging/faults.py): from the case
        run again alone under compute-sanitizer memcheck where it is installed, else from the same case graded
        in Triton's interpreter on the CPU; else `memory-fault`, which the grade names from the submission's
        other cases where they show out-of-bounds accesses (grader.operations.grade)."""
        if self.backend != "cuda" and self.sanitizer is None and self.cpu_rerun is None:
            return observation  # the interpreter's fence names its stray accesses itself
        fault = faults.gpu_fault(observation.trap, observation.message, self.hint_calls())
        if fault is None:
            return observation
        naming = faults.from_sanitizer(self._sanitizer_rerun(case, problem, inputs)) if self.sanitizer else None
        if naming is None and self.cpu_rerun is not None and case.runs_on("interpreter"):
            with self.clock.phase("cpu-rerun"):
                rerun = self.cpu_rerun(case, seed)
            naming = faults.from_cpu_rerun(rerun) if rerun is not None else None
        return faults.fault_observation(observation, fault, naming)

    def _sanitizer_rerun(self, case: Case, problem: Problem, inputs: Mapping[str, Any]) -> tuple[Finding, ...]:
        """Run the case (a kernel launch or a wrapper call) once more in the worker under compute-sanitizer
        memcheck: its invalid global accesses as oob-read / oob-write findings naming the buffer, () if none or
        if the worker could not be started under the tool."""
        if self.sanitizer is None or self.sanitizer_unusable:
            return ()
        spec = self.assignment.kernels.get(case.target)
        if spec is not None:
            placed, message, what = self._launch_message(spec, case, problem, inputs)
        else:
            placed, message, what = self._call_message(self.assignment.functions[case.target], case, problem, inputs)
        try:
            with self.clock.phase("sanitizer"):
                if not self.sanitizer.alive and not self.sanitizer.start().get("ok"):
                    self.sanitizer_unusable = True  # deterministic: importing fails the same way every time
                    return ()
        except WorkerFailure:
            self.sanitizer_unusable = True  # the tool does not start here (gVisor refuses it, say): not again
            return ()
        offset = self.sanitizer.output_size()
        reply: Mapping[str, Any] = {}
        try:  # an invalid access usually ends the worker (its CUDA context is lost): the report is in its log
            timeout_s = self.assignment.call_timeout_s * SANITIZER_SLOWDOWN
            with self.clock.phase("sanitizer"), self.shared_gpu():
                reply = self.sanitizer.request(dict(message, announce_pointers=True), timeout_s,
                                               what + " under compute-sanitizer")
        except WorkerFailure:
            pass
        self._await_report(ending=bool(reply.get("exits")) or not self.sanitizer.alive)
        text = self.sanitizer.output_since(offset)
        buffers = {placed.plans[key].name: (ptr, storage.numel() * storage.element_size())
                   for key, ptr, storage in zip(placed.keys, announced_pointers(text), placed.storages, strict=False)}
        if spec is None:
            buffers.update(announced_allocations(text, case.target))
        if reply.get("exits") or not reply.get("ok"):
            self.sanitizer.stop()  # its CUDA context is gone, or the case failed: a fresh one for the next
        return memcheck_findings(parse_memcheck(text), buffers)

    def _await_report(self, ending: bool) -> None:
        """memcheck's report is written by the tool process, next to the reply; after a fault the worker ends
        itself and the tool writes the rest as the process ends: wait for that (bounded), then read the log."""
        if not ending or self.sanitizer is None:
            time.sleep(0.2)
            return
        deadline = time.monotonic() + SANITIZER_REPORT_WAIT_S
        while self.sanitizer.alive and time.monotonic() < deadline:
            time.sleep(0.05)

    def _call_message(self, spec: FunctionSpec, case: Case, problem: Problem, inputs: Mapping[str, Any],
                      finite_guard: float | None = None) -> tuple[Placed, dict[str, Any], str]:
        """A wrapper case's call: guarded buffers, the request, and its description."""
        args, kwargs = arguments.call_binding(problem, inputs)
        placed = place_buffers(case, arguments.call_buffers(args, kwargs), inputs, finite_guard=finite_guard)
        wired_args, wired_kwargs = arguments.call_arguments(args, kwargs, placed)
        message = {"op": "call", "function": spec.name, "storages": placed.storages, "views": placed.views(),
                   "args": wired_args, "kwargs": wired_kwargs, "count_traffic": self.backend == "interpreter"}
        return placed, message, f"{spec.name}(...)"

    def _run_function(self, spec: FunctionSpec, case: Case, problem: Problem, inputs: Mapping[str, Any],
                      finite_guard: float | None = None) -> Observation:
        placed, message, what = self._call_message(spec, case, problem, inputs, finite_guard)
        reply = self._request(message, what)
        if isinstance(reply, Observation):
            return reply
        if not reply.get("ok"):
            return self._error_observation(reply, what)
        returned, problem_text = unpack_returns(reply["result"], spec.returns, self.backend)
        if problem_text:
            return Observation(trap=trap_ids.BAD_OUTPUT, message=f"{spec.name} returned {problem_text}",
                               launches=tuple(reply.get("launches", ())),
                               torch_ops=dict(reply.get("torch_ops", {})), false_hint=reply.get("false_hint"))
        observation = self._observe(placed, reply, launches=tuple(reply.get("launches", ())), case=case)
        unwritten, findings = poisoned_outputs(returned)
        result_views = tuple(reply.get("result_views") or ())
        own = allocation_guard_findings(reply.get("allocation_findings"), result_views, spec)
        return Observation(
            outputs=returned,
            sent_storages=tuple(placed.storages),
            result_views=result_views,
            unwritten=unwritten,
            guard_findings=observation.guard_findings + own + findings,
            launches=observation.launches,
            torch_ops=dict(reply.get("torch_ops", {})),
            output_tail=observation.output_tail,
            elapsed_s=float(reply.get("elapsed_s", 0.0)),
            row_strides=placed.row_strides(),
            false_hint=observation.false_hint,
            traffic=observation.traffic,
        )

    def _observe(self, placed: Placed, reply: dict[str, Any], launches: Any, case: Case) -> Observation:
        after = reply.get("storages") or []
        if len(after) != len(placed.storages):
            return Observation(trap=trap_ids.CRASH, message="the worker returned a malformed reply")
        findings: list[guard_bits.GuardFinding] = []
        outputs: dict[str, torch.Tensor] = {}
        unwritten: dict[str, torch.Tensor] = {}
        for key, before, now in zip(placed.keys, placed.storages, after, strict=True):  # length checked above
            plan = placed.plans[key]
            if type(now) is not torch.Tensor or now.shape != before.shape or now.dtype != before.dtype:
                return Observation(trap=trap_ids.CRASH, message="the worker returned a malformed buffer")
            findings.extend(guards.check_storage(plan, before, now))
            if plan.role == "output":
                outputs[plan.name] = guards.view_of(now, plan).clone()
                unwritten[plan.name] = guards.unwritten_mask(plan, now)
        return Observation(
            outputs=outputs,
            guard_findings=tuple(findings),
            unwritten=unwritten,
            launches=launches,
            output_tail=self.worker.output_tail(),
            elapsed_s=float(reply.get("elapsed_s", 0.0)),
            block_meta=dict(case.meta),
            row_strides=placed.row_strides(),
            false_hint=reply.get("false_hint"),
            traffic=_traffic(reply),
        )


def outputs_close(outputs: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], tol: Any) -> bool:
    for name, exp in expected.items():
        out = outputs.get(name)
        if out is None or tuple(out.shape) != tuple(exp.shape):
            return False
        if not bool(close_mask(out, exp, tol.atol, tol.rtol).all()):
            return False
    return True


# Failures after which a worker may hold memory the student's code corrupted, or state it left behind.
RESTART_AFTER = frozenset({"runtime-error", "compile-error", "crash", "timeout", "oob-write", "oob-read",
                           "out-of-memory", "memory-fault"})


def needs_fresh_worker(observation: Observation) -> bool:
    """Did the case write out of bounds, raise or crash? Then the next case gets a fresh worker."""
    return (observation.trap in RESTART_AFTER
            or any(f.trap == "oob-write" for f in observation.guard_findings)
            or any(f.trap == "oob-write" for f in (*observation.sanitizer_findings, *observation.fault_findings)))


def replay_failure(target: str, failure: WorkerFailure | None = None, reply: Mapping[str, Any] | None = None,
                   submission: str = "", calls: Sequence[HintCall] = ()) -> Finding:
    """Name what went wrong when replaying a wrapper's recorded launches: the student's kernel crashing,
    timing out, running out of bounds or raising is that trap; a GPU memory fault is `memory-fault` (which the
    grade names from the other cases, grader/judging/faults.py); only a record the replay worker could not
    even decode (or a malformed reply) is `tampering`. `calls`: the submission's hints (a misaligned address
    in code that makes some is `false-hint`)."""
    finding = _replay_failure(target, failure, reply, submission, calls)
    fault = faults.gpu_fault(finding.trap, finding.message, calls)
    if fault is None:
        return finding
    return Finding(trap_ids.MEMORY_FAULT, f"Replaying the recorded launches of {target} in a fresh worker, the "
                   f"kernel stopped on the GPU with {fault.what}: a load or store outside every allocation. What the "
                   f"GPU reported: {fault.message}")


def _replay_failure(target: str, failure: WorkerFailure | None, reply: Mapping[str, Any] | None,
                    submission: str, calls: Sequence[HintCall]) -> Finding:
    head = f"replaying the recorded launches of {target} in a fresh worker"
    if failure is not None:
        return Finding(failure.trap, failure_sentence(head, failure) + _tail(failure.output_tail))
    error = (reply or {}).get("error")
    if not isinstance(error, Mapping) or (reply or {}).get("ok"):
        return Finding("tampering", f"{head} gave a malformed reply")
    if (reply or {}).get("stage") == "record":
        return Finding("tampering", f"{head} failed: the launch record could not be decoded "
                       f"({error_message(error, submission)}): the worker's account of what the wrapper ran "
                       "was altered")
    return Finding(classify_error(error, calls), failure_message(error, head, submission))


def failure_sentence(what: str, failure: WorkerFailure) -> str:
    """A failed request in one plain sentence: a timeout says what did not finish within how long ("Did not finish
    within 15 s (layernorm(...)): the grader stopped it."); a crash says that `what` crashed the worker, and how."""
    if failure.trap == trap_ids.TIMEOUT:
        detail = failure.detail if failure.detail.endswith(")") else f"{failure.detail} ({what})"
        return f"{detail[:1].upper()}{detail[1:]}: the grader stopped it."
    return f"{what} crashed the worker: {failure.detail}."


def _tail(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    return "\nLast output of the submission:\n" + text[-1500:]


def check_symbol(target: str, info: Mapping[str, Any], assignment: Assignment, filename: str) -> SymbolProblem | None:
    """Is the student's symbol there, the right kind, with the contract's parameters?"""
    kind = info.get("kind")
    line = info.get("line") or 0
    where = f" ({filename}, line {line})" if line else ""
    if kind == "missing":
        return SymbolProblem(trap_ids.MISSING_SYMBOL, f"{filename} does not define `{target}`.")
    if target in assignment.kernels:
        spec_k = assignment.kernels[target]
        if kind != "kernel":
            return SymbolProblem(
                trap_ids.WRONG_SIGNATURE,
                f"`{target}`{where} must be a Triton kernel (decorated with @triton.jit), "
                f"but it is a {info.get('type', kind)}.",
            )
        if not info.get("triton_class", False):
            return SymbolProblem(
                trap_ids.TAMPERING,
                f"`{target}`{where} is a {info.get('type')} posing as a Triton kernel (a class of its own, not "
                "Triton's JIT/autotune/heuristics object): kernels must be written with @triton.jit.",
            )
        expected = list(spec_k.params)
    else:
        spec_f = assignment.functions[target]
        if kind != "function":
            return SymbolProblem(trap_ids.WRONG_SIGNATURE,
                                 f"`{target}`{where} must be a function, not a {info.get('type')}.")
        expected = list(spec_f.params)
    got = list(info.get("params", []))
    comparable = got if target in assignment.kernels else got[: len(expected)]
    if comparable != expected:
        pairs = enumerate(zip(comparable, expected, strict=False))
        diff = next((i for i, (a, b) in pairs if a != b), min(len(got), len(expected)))
        detail = (
            f"parameter {diff + 1} is `{got[diff]}` but the contract says `{expected[diff]}`"
            if diff < min(len(got), len(expected))
            else f"it has {len(got)} parameters, the contract has {len(expected)}"
        )
        return SymbolProblem(
            trap_ids.WRONG_SIGNATURE,
            f"`{target}`{where} has the wrong signature: {detail}.\n"
            f"  expected: {target}({', '.join(expected)})\n  found:    {target}({', '.join(got)})",
        )
    return None


def unpack_returns(
    encoded: Mapping[str, Any], names: tuple[str, ...], backend: str
) -> tuple[dict[str, torch.Tensor], str]:
    """Map a wrapper's encoded return value onto the spec's output names; say what is wrong if not."""
    if len(names) == 1:
        items = [encoded]
    elif "sequence" in encoded and len(encoded["sequence"]) == len(names):
        items = list(encoded["sequence"])
    else:
        got = f"a {encoded.get('type')} of {len(encoded['sequence'])}" if "sequence" in encoded else _what(encoded)
        return {}, f"{got}, but it must return {len(names)} tensors ({', '.join(names)})"
    out: dict[str, torch.Tensor] = {}
    expected_device = "cuda" if backend == "cuda" else "cpu"
    for name, item in zip(names, items, strict=True):  # lengths checked above
        tensor = item.get("tensor") if isinstance(item, Mapping) else None
        if type(tensor) is not torch.Tensor:
            return {}, f"{_what(item)} for `{name}`, not a torch.Tensor"
        if not str(item.get("device", "")).startswith(expected_device):
            device = item.get("device")
            return {}, f"`{name}` on device {device}; it must stay on the input's device ({expected_device})"
        out[name] = tensor
    return out, ""


def allocation_guard_findings(
    found: Any, result_views: tuple[Any, ...], spec: FunctionSpec
) -> tuple[guard_bits.GuardFinding, ...]:
    """Stores past the buffers a wrapper allocated itself (the worker guards them, harness._guarded):
    `oob-write`, named after the output the buffer was returned as, else by its shape."""
    if not isinstance(found, list):
        return ()
    names = {view["sid"]: name for name, view in zip(spec.returns, result_views, strict=False)
             if isinstance(view, Mapping) and isinstance(view.get("sid"), int)}
    findings = []
    for item in found:
        if not isinstance(item, Mapping):
            continue
        shape = item.get("shape")
        shape_text = tuple(shape) if isinstance(shape, list) else "?"
        sid = item.get("sid")
        name = ((names.get(sid) if isinstance(sid, int) else None)
                or f"a buffer {spec.name} allocated (shape {shape_text})")
        finding = guards.allocation_guard_finding(dict(item), name)
        if finding is not None:
            findings.append(finding)
    return tuple(findings)


def poisoned_outputs(
    outputs: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], tuple[guard_bits.GuardFinding, ...]]:
    """Elements of returned tensors still holding the poison the worker put into fresh allocations."""
    unwritten: dict[str, torch.Tensor] = {}
    findings = []
    for name, tensor in outputs.items():
        if not tensor.dtype.is_floating_point:
            continue
        poison = guard_bits.nan_pattern(tensor.dtype, guard_bits.PAYLOAD_OUTPUT_POISON)
        mask = guard_bits.bits(tensor.contiguous()) == poison
        unwritten[name] = mask
        if mask.any():
            first = tuple(int(i) for i in torch.nonzero(mask)[0])
            findings.append(
                guard_bits.GuardFinding(trap_ids.UNWRITTEN_OUTPUT, name, int(mask.sum()), f"{name}{list(first)}"))
    return unwritten, tuple(findings)


def _what(item: Any) -> str:
    if isinstance(item, Mapping) and "other" in item:
        return f"a {item['other']} ({item.get('repr', '')[:60]})"
    if isinstance(item, Mapping) and "sequence" in item:
        return f"a {item.get('type')}"
    return "something else"


def _traffic(reply: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...] | None:
    """The memory traffic the worker counted (interpreter), as plain data; None where it counted none."""
    counted = reply.get("traffic")
    if not isinstance(counted, list):
        return None
    return tuple(dict(launch) for launch in counted if isinstance(launch, dict))
