"""Runs of a case beyond the first, each asked by what the first showed: the same inputs again (a wrong output
that changes between identical runs is a race or a read of memory nothing wrote), finite guard values (NaN that
turns finite came from the guards: an out-of-bounds read), and a passing wrapper's recorded launches replayed in a
worker that runs no wrapper code (grader/judging/replay.py). Each takes the observation so far and returns it
with what the probe found."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from grader import trap_ids
from grader.evidence import guard_bits
from grader.evidence.observation import Finding, Observation
from grader.judging.diagnosis import nan_leaks
from grader.judging.replay import ReplayPlan, check_outputs, explain_replay_mismatch, plan_replay, same_buffers
from grader.running.cases.observe import outputs_close
from grader.running.cases.workers import SubmissionWorkers
from grader.running.processes.gpu_memory import names_own_budget

# Finite value put into every guard band for the second run that confirms an out-of-bounds read.
GUARD_PROBE_VALUE = 7.0

RunAgain = Callable[[float | None], Observation]  # the case run once more (finite guard value, or None)


# A case that ran out of GPU memory is run once more after this wait: a neighbour's hog is stopped by the watchdog
# within a poll and the driver frees its memory ~0.1 s later (grader/running/processes/gpu_memory.py).
OUT_OF_MEMORY_WAIT_S = 2.0


def retry_out_of_memory(run_again: RunAgain, observation: Observation,
                        wait: Callable[[float], None] = time.sleep) -> Observation:
    """A case that failed as out-of-memory runs once more, after OUT_OF_MEMORY_WAIT_S, and the second run is the
    case's: a GPU another process had filled must not cost a student a case, and a submission that asks for more
    than it may have asks again and gets the same verdict. A worker stopped for going over its own budget (the
    watchdog's words name the budget) is final."""
    if not runs_again_for_memory(observation):
        return observation
    wait(OUT_OF_MEMORY_WAIT_S)
    return run_again(None)


def runs_again_for_memory(observation: Observation) -> bool:
    """Is this an out-of-memory `retry_out_of_memory` runs again (not a worker stopped for its own budget)?"""
    return observation.trap == trap_ids.OUT_OF_MEMORY and not names_own_budget(observation.message)


class TimeoutsAlone:
    """A case that timed out on a GPU runs once more from a fresh worker with the GPU to its grade alone (the slot
    every timed phase takes), and the second run is the case's: beside a class's other grades a kernel waits for
    the GPU and its driver (contexts, module loads, other contexts' time slices) in ways no CPU allowance sees, and
    correct code must never lose a case to a busy machine. A kernel that spins forever spins alone too and keeps
    its timeout; that target's later timeouts are then final (one spinning kernel holds the class's GPU for one
    case, not for each). On the CPU a worker's waits for a CPU are already not charged to it (cpu_share)."""

    def __init__(self, on_gpu: bool) -> None:
        self.on_gpu = on_gpu
        self.spinning: set[str] = set()  # targets that timed out alone

    def settle(self, target: str, observation: Observation, run_alone: Callable[[], Observation]) -> Observation:
        if not self.on_gpu or observation.trap != trap_ids.TIMEOUT or observation.at_import \
                or target in self.spinning:
            return observation
        again = run_alone()
        if again.trap == trap_ids.TIMEOUT:
            self.spinning.add(target)
        return again


def probe_nondeterminism(run_again: RunAgain, expected: Mapping[str, torch.Tensor], tol: Any,
                         observation: Observation) -> Observation:
    """A wrong output: run the identical case once more. Different bits on identical inputs mean a
    race or a read of memory nothing wrote (on a GPU; the interpreter runs programs in order)."""
    if observation.trap or not observation.outputs:
        return observation
    if outputs_close(observation.outputs, expected, tol):
        return observation
    again = run_again(None)
    if again.trap:
        return observation
    differing = tuple(
        name for name, out in observation.outputs.items()
        if name in again.outputs and (out.shape != again.outputs[name].shape
                                      or not torch.equal(guard_bits.bits(out.contiguous()),
                                                         guard_bits.bits(again.outputs[name].contiguous())))
    )
    return dataclasses.replace(observation, nondeterministic=differing) if differing else observation


def probe_guard_reads(run_again: RunAgain, expected: Mapping[str, torch.Tensor],
                      observation: Observation) -> Observation:
    """NaN in an output where the oracle is finite: run the case again with finite guard values.
    Positions that turn finite were read from the guards (an out-of-bounds read); NaN that stays
    comes from the arithmetic (0/0, sqrt of a negative) and is left to the trap signatures."""
    leaks = nan_leaks(observation.outputs, expected, observation.unwritten)
    if observation.trap or not leaks:
        return observation
    probe = run_again(GUARD_PROBE_VALUE)
    confirmed = {}
    for name, leak in leaks.items():
        again = probe.outputs.get(name)
        if probe.trap or again is None or again.shape != leak.shape:
            continue
        from_guards = leak & ~torch.isnan(again.to(torch.float64))
        if from_guards.any():
            confirmed[name] = from_guards
    return dataclasses.replace(observation, guard_reads=confirmed)


def verify_by_replay(workers: SubmissionWorkers, target: str, inputs: Mapping[str, Any],
                     expected: Mapping[str, torch.Tensor], tol: Any, observation: Observation) -> Observation:
    """A wrapper case whose values pass: do its recorded kernel launches, replayed in a fresh worker
    that runs no wrapper code, produce those values? (grader/judging/replay.py)"""
    spec = workers.assignment.functions.get(target)
    if (spec is None or spec.max_launches == 0 or observation.trap or not observation.launches
            or not outputs_close(observation.outputs, expected, tol)):
        return observation
    plan = plan_replay(observation.launches, observation.sent_storages, inputs)
    finding: Finding | None
    if plan.trap:
        finding = Finding(plan.trap, plan.problem)
    else:
        replayed = workers.replay(plan.launches, target)
        if isinstance(replayed, Finding):
            finding = replayed
        else:
            finding = check_outputs(observation.outputs, observation.result_views, plan, replayed, tol.atol, tol.rtol)
            if finding is not None and finding.trap == trap_ids.NOT_FUSED:
                finding = _race_or_not_fused(workers, finding, plan, target, replayed, observation)
    return dataclasses.replace(observation, replay_finding=finding) if finding else observation


def _race_or_not_fused(workers: SubmissionWorkers, finding: Finding, plan: ReplayPlan, target: str,
                       first: Mapping[int, torch.Tensor], observation: Observation) -> Finding:
    """The replay gave other values: computed outside the kernels, or the kernels race (a stray store landing
    before or after a neighbour program's, differently on every run)? A case that writes out of bounds races
    by itself; otherwise the launches are replayed once more, and two replays that disagree are a race."""
    writes_out = any(f.trap == trap_ids.OOB_WRITE for f in observation.guard_findings)
    agree = True
    if not writes_out:
        second = workers.replay(plan.launches, target)
        agree = isinstance(second, Finding) or same_buffers(first, second)
    return explain_replay_mismatch(finding, writes_out_of_bounds=writes_out, replays_agree=agree)
