"""grader/evidence/guard_bits.py: the NaN patterns that mark guard bands and poisoned outputs, compared as bits;
what a guard finding says."""

from __future__ import annotations

import pytest
import torch

from grader import trap_ids
from grader.evidence import guard_bits
from grader.evidence.guard_bits import GuardFinding


def test_nan_pattern_is_a_nan_with_the_payload() -> None:
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        pattern = guard_bits.nan_pattern(dtype, guard_bits.PAYLOAD_OUTPUT_POISON)
        value = torch.tensor([pattern], dtype=guard_bits._INT_VIEW[dtype.itemsize]).view(dtype)
        assert torch.isnan(value).all(), dtype
    assert guard_bits.nan_pattern(torch.float32, 0x22) != guard_bits.nan_pattern(torch.float32, 0x33)
    with pytest.raises(TypeError):
        guard_bits.nan_pattern(torch.int32, 0x11)


def test_bits_see_a_nan_written_over_another_nan() -> None:
    x = torch.full((4,), float("nan"))
    guard_bits.bits(x)[1] = guard_bits.nan_pattern(torch.float32, guard_bits.PAYLOAD_OUTPUT_POISON)
    assert torch.isnan(x).all()
    plain = guard_bits.bits(torch.full((4,), float("nan")))
    assert (guard_bits.bits(x) != plain).tolist() == [False, True, False, False]


def test_a_finding_says_what_where_and_how_many() -> None:
    assert GuardFinding(trap_ids.OOB_WRITE, "out", 3, "out[2, 5]").message() == \
        "3 out-of-bounds write(s) in out; first at out[2, 5]"
    assert GuardFinding(guard_bits.INPUT_MODIFIED, "x", 1, "x[0]").message() == \
        "1 write(s) into an input in x; first at x[0]"
    assert "never written" in GuardFinding(trap_ids.UNWRITTEN_OUTPUT, "y", 2, "y[1]").message()
