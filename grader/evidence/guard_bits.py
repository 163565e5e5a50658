"""The bits of a guarded buffer: the NaN patterns that mark guard bands, row gaps and poisoned outputs, and
what a guard check found. Shared by the worker (which poisons a wrapper's allocations), the battery (which
places and checks every buffer: grader.running.guards) and judging (which reads the findings)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grader import trap_ids

# Quiet-NaN bit patterns per float width, and the payloads that mark each role.
_NAN_BITS = {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}
_BF16_NAN_BITS = 0x7FC0
_INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}
PAYLOAD_INPUT_GUARD = 0x11
PAYLOAD_OUTPUT_GUARD = 0x22
PAYLOAD_OUTPUT_POISON = 0x33
INPUT_MODIFIED = "input-modified"  # a guard finding, reported as trap_ids.WRITES_INPUT


def nan_pattern(dtype: torch.dtype, payload: int) -> int:
    """The integer bit pattern of a quiet NaN of `dtype` carrying `payload`."""
    if not dtype.is_floating_point:
        raise TypeError(f"guarded buffers need a floating-point dtype, not {dtype}")
    if dtype == torch.bfloat16:
        return _BF16_NAN_BITS | (payload & 0x3F)
    return _NAN_BITS[dtype.itemsize] | payload


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as integers of the same width (a NaN written over a NaN still shows)."""
    return t.view(_INT_VIEW[t.element_size()])


@dataclass(frozen=True)
class GuardFinding:
    """One thing the guard check found, located in words."""

    trap: str  # trap_ids.OOB_WRITE | INPUT_MODIFIED | trap_ids.UNWRITTEN_OUTPUT
    buffer: str
    count: int
    first: str

    def message(self) -> str:
        what = {
            trap_ids.OOB_WRITE: "out-of-bounds write(s)",
            INPUT_MODIFIED: "write(s) into an input",
            trap_ids.UNWRITTEN_OUTPUT: "output element(s) never written",
        }[self.trap]
        return f"{self.count} {what} in {self.buffer}; first at {self.first}"
