"""What a timer worker runs for one timed case, checked from the student's launch record. Pure.

The student's worker records, at the timed size, every kernel launch its target made and where each
buffer came from (grader.running.worker.measuring.planned_launches): an input the grader sent, a fresh allocation, or
the size, first bytes and SHA-256 of anything else. Here every buffer must be accounted for by
something the grader can rebuild on its own: an input, a fresh buffer, a constant fill, or a copy of
an input. A buffer holding anything else (a cached answer, a result computed by torch) means the
values came from outside the kernels: nothing is timed. The worker's account can lie only towards a
wrong output, which the grader's check of the timed outputs against torch eager then catches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader.running import protocol
from grader.running.processes.gpu_seats import TimedCaseBytes
from grader.running.worker.measuring.planned_launches import rotated_sets

FILL_WIDTHS = (1, 2, 4, 8)  # a constant fill repeats one element of this many bytes


@dataclass(frozen=True)
class PerformancePlan:
    buffers: Mapping[int, Mapping[str, Any]]  # storage id -> input / fresh / fill / copy_of, with nbytes
    launches: tuple[Mapping[str, Any], ...]  # kernel, grid, args, kwargs (tensors by storage id)
    outputs: tuple[Mapping[str, Any], ...]  # the target's outputs as views of those buffers

    def request(self, inputs: Sequence[torch.Tensor], *, sets: int, repeats: int, time: bool, keep: str = "",
                spin_up_ms: float | None = None, rotate: bool = True, return_outputs: bool = True,
                more_inputs: Sequence[torch.Tensor] = ()) -> protocol.TimeLaunches:
        """The timer's request for these launches on `inputs`: timed (`time`), or kept under `keep` for TimeKept;
        `rotate` off: exactly `sets` input sets (a profiled replay's one); `return_outputs` off: none sent back;
        `more_inputs`: the other sets' own values (then the sets are exactly those)."""
        return protocol.TimeLaunches(inputs=tuple(inputs), buffers=dict(self.buffers), launches=self.launches,
                                     outputs=self.outputs, sets=sets, repeats=repeats, time=time, keep=keep,
                                     spin_up_ms=spin_up_ms, rotate=rotate, return_outputs=return_outputs,
                                     more_inputs=tuple(more_inputs))

    def timed_bytes(self, requested: int) -> TimedCaseBytes:
        """What a timed run of these launches keeps on the GPU per input set, and how many sets it rotates through
        (`requested`: the case's input_sets): the timing seats' measure (gpu_seats.planned_footprint_bytes)."""
        return TimedCaseBytes(set_bytes=self.set_bytes,
                              input_bytes=sum(int(spec["nbytes"]) for spec in self.buffers.values() if "input" in spec),
                              sets=self.input_sets(requested))

    @property
    def set_bytes(self) -> int:
        """Every buffer of one input set: inputs, fills, copies, outputs and scratch."""
        return sum(int(spec["nbytes"]) for spec in self.buffers.values())

    def input_sets(self, requested: int) -> int:
        """How many input sets a timed run of these launches rotates through: one where `requested` is one, else at
        least two and as many as keep one pass over them out of the L2 cache (planned_launches.rotated_sets, the
        timer's own rule)."""
        return rotated_sets(requested, self.set_bytes)


def compile_request(plans: Sequence[PerformancePlan]) -> protocol.TimeLaunches:
    """The timer's request to compile and load every kernel these plans launch, ahead of their first runs: it sends no
    tensor, and the timer allocates none and runs nothing (worker.measuring.compile_ahead)."""
    launches = tuple(launch for plan in plans for launch in plan.launches)
    return protocol.TimeLaunches(inputs=(), buffers={}, launches=launches, outputs=(), return_outputs=False,
                                 compile_only=True)


def input_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.detach().contiguous().view(torch.uint8).numpy().tobytes()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _grounded(described: Mapping[str, Any], inputs: Sequence[torch.Tensor],
              digests: dict[int, str]) -> dict[str, Any] | None:
    nbytes = int(described.get("nbytes", -1))
    if nbytes < 0:
        return None
    if "input" in described:
        index = described["input"]
        if not isinstance(index, int) or not 0 <= index < len(inputs):
            return None
        return {"input": index, "nbytes": nbytes}
    if described.get("fresh") is True:
        return {"fresh": True, "nbytes": nbytes}
    head, digest = described.get("head"), described.get("sha256")
    if not isinstance(head, bytes) or not isinstance(digest, str):
        return None
    for width in FILL_WIDTHS:
        if len(head) >= width and nbytes % width == 0 and _digest(head[:width] * (nbytes // width)) == digest:
            return {"fill": head[:width], "nbytes": nbytes}
    for index, tensor in enumerate(inputs):
        if tensor.numel() * tensor.element_size() == nbytes:
            if index not in digests:
                digests[index] = _digest(input_bytes(tensor))
            if digests[index] == digest:
                return {"copy_of": index, "nbytes": nbytes}
    return None


def _param(launch: Mapping[str, Any], sid: int) -> str:
    names = list(launch.get("params") or [])
    for index, value in enumerate(launch.get("args") or []):
        described = value.get("tensor") if isinstance(value, Mapping) else None
        if isinstance(described, Mapping) and described.get("sid") == sid:
            return names[index] if index < len(names) else f"argument {index + 1}"
    return "a buffer"


def plan_performance_run(record: Mapping[str, Any], inputs: Sequence[torch.Tensor],
                         target: str) -> PerformancePlan | str:
    """The plan, or why these launches cannot be timed without the student's code (for the student)."""
    launches = record.get("launches")
    if not isinstance(launches, list) or not launches:
        return f"{target} launched no Triton kernel at the timed size"
    buffers: dict[int, Mapping[str, Any]] = {}
    planned = []
    digests: dict[int, str] = {}
    for number, launch in enumerate(launches, 1):
        if not isinstance(launch, Mapping) or not launch.get("complete"):
            why = launch.get("why") if isinstance(launch, Mapping) else "no record"
            return f"launch {number} of {target} could not be recorded completely ({why or 'no record'})"
        kernel = launch.get("kernel")
        storages = launch.get("storages")
        if not isinstance(storages, Mapping):
            return f"launch {number} ({kernel}) has no record of its buffers"
        for sid, described in storages.items():
            if sid in buffers:
                continue  # it holds what earlier launches wrote
            grounded = _grounded(described, inputs, digests) if isinstance(described, Mapping) else None
            if grounded is None:
                return (f"launch {number} ({kernel}) was given `{_param(launch, sid)}`, a buffer whose contents "
                        "come from no input and no earlier launch: it was computed outside the kernels")
            buffers[sid] = grounded
        planned.append({"kernel": kernel, "grid": list(launch.get("grid") or ()),
                        "args": list(launch.get("args") or ()), "kwargs": dict(launch.get("kwargs") or {})})
    outputs = record.get("outputs")
    if not isinstance(outputs, list):
        return f"{target}'s outputs were not recorded"
    for index, view in enumerate(outputs, 1):
        if not isinstance(view, Mapping) or view.get("sid") not in buffers:
            return f"output {index} of {target} is not a buffer any of its kernel launches was given"
    return PerformancePlan(buffers, tuple(planned), tuple(outputs))
