"""Run one submission's cases: build inputs, place them in guarded buffers, ask the worker, observe, probe.

This module orders a case's steps; each step lives in a module of its own (grader.running.cases), and judging
what came back is `grader.judging.judge` (pure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from grader.authoring.inputs import case_maker
from grader.authoring.oracle_loader import load_problems
from grader.authoring.problem import Problem
from grader.authoring.spec import Assignment, Case, FunctionSpec, KernelSpec, Tolerance
from grader.backends import Backend
from grader.evidence.observation import Observation
from grader.judging.judge import judge_case
from grader.results import CaseResult
from grader.running import protocol
from grader.running.cases import observe, probes
from grader.running.cases.fault_recovery import FaultNaming
from grader.running.cases.placement import Placed
from grader.running.cases.requests import call_request, launch_request
from grader.running.cases.symbols import SymbolProblem
from grader.running.cases.workers import SubmissionWorkers
from grader.running.phases import PhaseClock
from grader.running.processes.client import Deadline, WorkerFailure
from grader.running.processes.sandbox import Sandbox, sandbox_options
from grader.seeds import case_seed

WARM_UP_TIMEOUT_S = 300.0  # compiling every kernel case's specialisation at once


class Battery:
    """Grades cases of one assignment for one submission, through its (restartable) workers."""

    def __init__(self, assignment: Assignment, submission: Path, backend: Backend, seed: int,
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
        self.backend = Backend(backend)  # a name is taken too
        self.seed = seed
        self.own_sandbox = sandbox is None
        self.sandbox = sandbox if sandbox is not None else Sandbox(sandbox_options(assignment, submission, backend,
                                                                                    hidden))
        self.sandbox.start()
        self.clock = PhaseClock()
        self.workers = SubmissionWorkers(assignment, self.submission, backend, self.sandbox, self.clock,
                                         tool=sanitizer or fault_tool, prestart_replayer=replayer)
        self.faults = FaultNaming(self.workers, self._request_for, sanitize_all=bool(sanitizer), cpu_rerun=cpu_rerun)
        self.timeouts = probes.TimeoutsAlone(self.backend.on_gpu)

    def phases(self) -> dict[str, float]:
        return {**self.clock.seconds, "compile": self.workers.compile_seconds()}

    def symbol_problem(self, target: str) -> SymbolProblem | None:
        return self.workers.symbol_problem(target)

    @property
    def import_problem(self) -> SymbolProblem | None:
        """Why the submission could not be imported, if a case tried and it could not (importing is not retried)."""
        return self.workers.load_problem

    def close(self) -> None:
        self.workers.close()
        if self.own_sandbox:
            self.sandbox.close()

    # ------------------------------------------------------------------ running cases

    def warm_up(self, cases: Sequence[Case]) -> None:
        """On a GPU, before the first case: compile every kernel case's specialisation at once, in parallel
        in the worker (a `Warmup` request), instead of one after the other as each case launches. The
        launches are built exactly as the cases will build them (same seeds, same guard layout), so each
        case then finds its kernel compiled. Informational: a failure here is reported by the case itself."""
        if not self.backend.on_gpu or self.workers.ensure() is not None:
            return
        host = self.workers.ensure_host()  # kernel cases launch there
        if isinstance(host, str):
            return
        launches = []
        for case in cases:
            spec = self.assignment.kernels.get(case.target)
            if spec is None or self.symbol_problem(case.target) is not None:
                continue
            problem = self.problems[spec.problem]
            inputs = problem.make_inputs(case, case_maker(case, case_seed(self.seed, case.id)))
            launches.append(launch_request(spec, case, problem, inputs, count_traffic=False)[1])
        if not launches:
            return
        with self.clock.phase("compile"):
            try:  # compiling runs no kernel: another grade's timed replays may go on meanwhile
                deadline = Deadline(cap_s=WARM_UP_TIMEOUT_S, run_s=self.workers.case_deadline().run_s)
                reply = host.request(protocol.Warmup(launches=tuple(launches)), deadline, "compiling the kernels")
                self.workers.note_compile("host", reply)
            except WorkerFailure:
                self.workers.replace()  # the cases start fresh workers and report what happens

    def run_case(self, case: Case, seed: int | None = None) -> CaseResult:
        """Grade one case on the inputs of `seed` (default: the battery's own; a run graded at several seeds
        passes each, grader.operations.grading_run)."""
        with self.clock.phase("correctness"):
            return self._run_case(case, self.seed if seed is None else seed)

    def _run_case(self, case: Case, seed: int) -> CaseResult:
        started = time.monotonic()
        problem = self.problems[self._problem_name(case.target)]
        inputs = problem.make_inputs(case, case_maker(case, case_seed(seed, case.id)))
        expected = problem.expected(inputs)
        tolerance = self._tolerance(case)
        blocked = self.symbol_problem(case.target)
        if blocked is not None:
            observation = Observation(trap=blocked.trap, message=blocked.message, at_import=blocked.at_import)
        else:
            def run_again(finite_guard: float | None) -> Observation:
                return self._run(case, problem, inputs, finite_guard)

            observation = self._run(case, problem, inputs)
            observation = self.timeouts.settle(case.target, observation,
                                               lambda: self._run_alone(case, problem, inputs))
            if probes.runs_again_for_memory(observation):
                self.workers.replace()  # the run again starts from a fresh worker, as the next case would
                observation = probes.retry_out_of_memory(run_again, observation)
            observation = probes.probe_nondeterminism(run_again, expected, tolerance, observation)
            observation = probes.probe_guard_reads(run_again, expected, observation)
            observation = probes.verify_by_replay(self.workers, case.target, inputs, expected, tolerance, observation)
            observation = self.faults.sanitize(case, problem, inputs, observation)
            observation = self.faults.name_fault(case, problem, inputs, observation, seed)
            if observe.needs_fresh_worker(observation):
                self.workers.replace()
        result = judge_case(
            case=case,
            assignment=self.assignment,
            inputs=inputs,
            expected=expected,
            observation=observation,
            tolerance=tolerance,
            traps=problem.traps,
            elapsed_s=time.monotonic() - started,
            output_dtypes=problem.dtypes_of_outputs(inputs, expected, case.dtype),
        )
        return self.faults.name_unexplained(case, result, seed)

    def _run_alone(self, case: Case, problem: Problem, inputs: Mapping[str, Any]) -> Observation:
        """The case again from a fresh worker with the GPU to this grade alone (probes.TimeoutsAlone)."""
        self.workers.replace()
        with self.workers.alone_on_gpu():
            return self._run(case, problem, inputs)

    def observe(self, case: Case) -> Observation:
        """What the worker reports for one run of `case`: no probes, replays, reruns or judgement (the CPU
        companion's check of a GPU grade's tl.multiple_of / tl.max_contiguous promises reads `false_hint`)."""
        problem = self.problems[self._problem_name(case.target)]
        inputs = problem.make_inputs(case, case_maker(case, case_seed(self.seed, case.id)))
        blocked = self.symbol_problem(case.target)
        if blocked is not None:
            return Observation(trap=blocked.trap, message=blocked.message, at_import=blocked.at_import)
        observation = self._run(case, problem, inputs)
        if observe.needs_fresh_worker(observation):
            self.workers.replace()
        return observation

    def _problem_name(self, target: str) -> str:
        spec: KernelSpec | FunctionSpec = self.assignment.kernels.get(target) or self.assignment.functions[target]
        return spec.problem

    def _tolerance(self, case: Case) -> Tolerance:
        return self.assignment.tolerances[case.tolerance].lookup(self.backend, case.dtype)

    def _request_for(self, case: Case, problem: Problem, inputs: Mapping[str, Any],
                     finite_guard: float | None = None) -> tuple[Placed, protocol.Launch | protocol.Call, str]:
        """The case's request: a kernel's launch or a wrapper's call, on freshly guarded buffers."""
        count_traffic = self.backend.counts_traffic
        kernel = self.assignment.kernels.get(case.target)
        if kernel is not None:
            return launch_request(kernel, case, problem, inputs, count_traffic=count_traffic, finite_guard=finite_guard)
        return call_request(self.assignment.functions[case.target], case, problem, inputs,
                            count_traffic=count_traffic, finite_guard=finite_guard)

    def _run(self, case: Case, problem: Problem, inputs: Mapping[str, Any],
             finite_guard: float | None = None) -> Observation:
        """One run of the case, observed (a kernel case in the kernel host, a wrapper case in the submission's
        worker)."""
        placed, message, what = self._request_for(case, problem, inputs, finite_guard)
        request: protocol.Request[protocol.Launched] = message  # a call's reply is a launch's with more
        reply = self.workers.request(request, what)
        if isinstance(reply, Observation):
            return reply
        tail = self.workers.output_tail(message)
        if not reply.ok:
            return observe.raised(reply, what, self.submission.name, self.workers.hint_calls(), tail,
                                  reply.false_hint)
        if isinstance(reply, protocol.Called):
            return observe.called(self.assignment.functions[case.target], placed, reply, case, self.backend, tail)
        return observe.launched(placed, reply, case, tail)
