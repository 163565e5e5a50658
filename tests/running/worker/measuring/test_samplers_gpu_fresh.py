"""On a CUDA machine: FreshSampler times planned launches as a timer worker does (grader.running.worker.measuring
.planned_launches.time_kept), in both of its modes, and every sample leaves the work's outputs for the check: an
honest kernel passes the check after every sample, and a kernel that skips its work once its output looks done
still does the work in every timed run (its output is poisoned before each), so it takes the honest kernel's time."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from grader.running import protocol
from grader.running.worker.measuring.planned_launches import PlannedRun
from grader.running.worker.measuring.samplers import FreshSampler

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

N = 1 << 22


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def _double_unless_done(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    seen = tl.load(out_ptr + tl.program_id(0) * BLOCK)
    mask = (offsets < n) & (seen != seen)  # only where the output still holds the NaN poison
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _planned(kernel, sets: int = 2) -> PlannedRun:
    x = torch.randn(N)
    view = {"sid": 2, "offset": 0, "shape": [N], "stride": [1], "dtype": "float32"}
    request = protocol.TimeLaunches(
        inputs=(x,), buffers={1: {"input": 0, "nbytes": 4 * N}, 2: {"fresh": True, "nbytes": 4 * N}},
        launches=({"kernel": "k", "grid": [N // 1024], "args": [{"tensor": {**view, "sid": 1}}, {"tensor": view}, N],
                   "kwargs": {"BLOCK": 1024}},), outputs=(view,), sets=sets)
    planned = PlannedRun(lambda name: kernel, request, torch.device("cuda"), sets)
    planned.run(0)
    torch.cuda.synchronize()
    planned.keep_first_outputs()
    for index in range(sets):
        planned.run(index)
    return planned


@pytest.mark.parametrize("events", [True, False], ids=["events", "subtracted"])
def test_every_sample_leaves_checked_outputs_and_skipping_work_saves_no_time(events: bool) -> None:
    times = {}
    for name, kernel in {"honest": _double, "skips-when-done": _double_unless_done}.items():
        planned = _planned(kernel)
        sampler = FreshSampler(planned.steps(), planned.check, events=events)
        assert sampler.mode == ("events" if events else "subtracted")
        timing, refused = sampler.samples(5, spin_up_ms=50)
        assert refused == "", (name, refused)
        assert len(timing.medians_ms) == 5 and min(timing.medians_ms) > 0
        assert torch.equal(planned.outputs(1)[0], 2 * planned.inputs[1][0])
        times[name] = timing.median_ms
    print(f"\nFreshSampler ({'events' if events else 'subtracted'}) ms per run: {times}")
    assert times["skips-when-done"] >= 0.7 * times["honest"], times
