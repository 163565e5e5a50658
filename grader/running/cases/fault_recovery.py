"""On a GPU: what names a memory fault, and what a case's unexplained wrong values were. `--sanitize` runs every
kernel case once more under compute-sanitizer memcheck; a case that ended in a GPU memory fault
(grader/judging/faults.py) runs again alone under memcheck where it is installed, else is graded again in Triton's
interpreter on the CPU (grader.running.cases.cpu_companion), whose guard bands and fence name the stray access;
a GPU case whose wrong values nothing named is graded there too."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from grader import trap_ids
from grader.authoring.catalog import trap_catalog
from grader.authoring.problem import Problem
from grader.authoring.spec import Case
from grader.backends import Backend
from grader.evidence.observation import Finding, Observation
from grader.judging import faults
from grader.results import CaseResult
from grader.running import protocol
from grader.running.cases.placement import Placed
from grader.running.cases.sanitizer import announced_allocations, announced_pointers, memcheck_findings, parse_memcheck
from grader.running.cases.workers import SubmissionWorkers

BuildRequest = Callable[[Case, Problem, Mapping[str, Any]], tuple[Placed, protocol.Launch | protocol.Call, str]]
CpuRerun = Callable[[Case, int], CaseResult | None]


@dataclasses.dataclass(frozen=True)
class FaultNaming:
    """How a battery names faults: its workers (the one under memcheck among them), how it builds a case's
    request, whether every kernel case runs under memcheck (`--sanitize`), and the CPU rerun (CUDA grades)."""

    workers: SubmissionWorkers
    build_request: BuildRequest
    sanitize_all: bool = False
    cpu_rerun: CpuRerun | None = None

    def sanitize(self, case: Case, problem: Problem, inputs: Mapping[str, Any],
                 observation: Observation) -> Observation:
        """`--sanitize`: the kernel case once more under compute-sanitizer memcheck; its reports of invalid global
        accesses become oob-read / oob-write findings naming the buffer. A case that faulted is left to
        `name_fault`, which reruns it (kernel or wrapper) under the same worker."""
        ran = observation.trap in (None, trap_ids.RUNTIME_ERROR, trap_ids.CRASH, trap_ids.FALSE_HINT)
        if (not self.sanitize_all or case.target not in self.workers.assignment.kernels or not ran
                or faults.gpu_fault(observation.trap, observation.message, self.workers.hint_calls()) is not None):
            return observation
        findings = self.memcheck(case, problem, inputs)
        return dataclasses.replace(observation, sanitizer_findings=findings) if findings else observation

    def name_fault(self, case: Case, problem: Problem, inputs: Mapping[str, Any], observation: Observation,
                   seed: int) -> Observation:
        """A case that ended in a GPU memory fault, named for what it is (grader/judging/faults.py): from the case
        run again alone under compute-sanitizer memcheck where it is installed, else from the same case graded in
        Triton's interpreter on the CPU; else `memory-fault`, which the grade names from the submission's other
        cases where they show out-of-bounds accesses (grader.operations.grade)."""
        if not self.workers.backend.on_gpu and self.workers.sanitizer is None and self.cpu_rerun is None:
            return observation  # the interpreter's fence names its stray accesses itself
        fault = faults.gpu_fault(observation.trap, observation.message, self.workers.hint_calls())
        if fault is None:
            return observation
        naming = faults.from_sanitizer(self.memcheck(case, problem, inputs)) if self.workers.sanitizer else None
        if naming is None and self.cpu_rerun is not None and case.runs_on(Backend.INTERPRETER):
            with self.workers.clock.phase("cpu-rerun"):
                rerun = self.cpu_rerun(case, seed)
            naming = faults.from_cpu_rerun(rerun) if rerun is not None else None
        return faults.fault_observation(observation, fault, naming)

    def name_unexplained(self, case: Case, result: CaseResult, seed: int) -> CaseResult:
        """CUDA: a case whose wrong values nothing named, graded again on the CPU (faults.name_unexplained)."""
        if (not self.workers.backend.on_gpu or self.cpu_rerun is None or not faults.unexplained(result)
                or not case.runs_on(Backend.INTERPRETER)):
            return result
        with self.workers.clock.phase("cpu-rerun"):
            rerun = self.cpu_rerun(case, seed)
        return faults.name_unexplained(result, rerun, trap_catalog(self.workers.assignment))

    def memcheck(self, case: Case, problem: Problem, inputs: Mapping[str, Any]) -> tuple[Finding, ...]:
        """The case (a kernel launch or a wrapper call) once more under compute-sanitizer memcheck: its invalid
        global accesses as oob-read / oob-write findings naming the buffer; () if none or if the worker could not
        be started under the tool."""
        if self.workers.sanitizer is None or self.workers.sanitizer_unusable:
            return ()
        placed, message, what = self.build_request(case, problem, inputs)
        text = self.workers.under_sanitizer(message, what)
        if text is None:
            return ()
        buffers = {placed.plans[key].name: (ptr, storage.numel() * storage.element_size())
                   for key, ptr, storage in zip(placed.keys, announced_pointers(text), placed.storages, strict=False)}
        if case.target not in self.workers.assignment.kernels:
            buffers.update(announced_allocations(text, case.target))
        return memcheck_findings(parse_memcheck(text), buffers)
