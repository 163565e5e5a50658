"""On a CUDA machine: FreshSampler times planned launches as a timer worker does (grader.running.worker.measuring
.planned_launches.time_kept), in both of its modes, and every sample leaves the work's outputs for the check: an
honest kernel passes the check after every sample, and a kernel that skips its work once its output looks done
still does the work in every timed run (its output is poisoned before each), so it takes the honest kernel's time."""

from __future__ import annotations

import gc

import pytest
import torch
import triton
import triton.language as tl

from grader.running import protocol
from grader.running.worker import scratch
from grader.running.worker.measuring.memory_watch import MemoryWatch
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


@triton.jit
def _double_or_stash(x_ptr, out_ptr, n, stash, BLOCK: tl.constexpr):
    """Doubles x once, keeping the answer and a mark at `stash` elements past out (a free block it learned of);
    every later run copies the kept answer back instead."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    mark = tl.load(out_ptr + stash + n + tl.program_id(0))
    if mark == 12345.0:
        tl.store(out_ptr + offsets, tl.load(out_ptr + stash + offsets, mask=mask), mask=mask)
    else:
        value = 2 * tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, value, mask=mask)
        tl.store(out_ptr + stash + offsets, value, mask=mask)
        tl.store(out_ptr + stash + n + tl.program_id(0), 12345.0)


def _steps(kernel, n: int, stash: bool) -> tuple[list, torch.Tensor, torch.Tensor]:
    """One timed call of `kernel` on x -> out (out poisoned before each run); with `stash`, the kernel is told where a
    free block of the allocator lies, relative to out (in a segment that x and out keep)."""
    gc.collect()  # what earlier tests left goes, and its segments with it
    torch.cuda.empty_cache()
    room = torch.empty(5 * n, device="cuda")  # one segment, then free: x, out and the hole are cut from it, so the
    del room  # hole stays in a segment that x and out keep (a segment all free goes back to the driver)
    x = torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    extra = ()
    if stash:
        hole = torch.empty(2 * n, device="cuda")  # a free block of the allocator once let go
        extra = ((hole.data_ptr() - out.data_ptr()) // out.element_size(),)
        del hole

    def prepare() -> None:
        out.view(torch.uint8).fill_(0xFF)

    def launch() -> None:
        kernel[(n // 1024,)](x, out, n, *extra, BLOCK=1024)

    launch()
    torch.cuda.synchronize()
    return [(prepare, launch)], x, out


def _verdict(kernel, watched: bool, n: int = 1 << 20) -> str:
    """What five samples of `kernel` on x -> out found wrong (with the memory watch or the output check alone); its
    tensors and graphs die with the call, so the next call's segment is its own."""
    steps, x, out = _steps(kernel, n, stash=kernel is _double_or_stash)
    watch = MemoryWatch([out], torch.device("cuda")) if watched else None
    sampler = FreshSampler(steps, lambda: "" if torch.equal(out, 2 * x) else "wrong output", watch)
    return sampler.samples(5, spin_up_ms=20)[1]


def test_a_kernel_that_keeps_its_answer_past_its_buffers_is_refused_and_an_honest_one_is_not() -> None:
    """The stash lives in a free block of the allocator: the output check alone passes it (every run leaves the right
    answer); the memory watch sees memory outside the case's buffers change during the sample and refuses it. An honest
    kernel under the same watch, and PlannedRun's own watch, refuse nothing."""
    verdicts = {name: _verdict(kernel, watched) for name, kernel, watched in (
        ("stash, output check only", _double_or_stash, False), ("stash, watched", _double_or_stash, True),
        ("honest, watched", _double, True))}
    print(f"\nverdicts: {verdicts}")
    assert verdicts["stash, output check only"] == ""
    assert "outside the case's buffers" in verdicts["stash, watched"]
    assert verdicts["honest, watched"] == ""
    planned = _planned(_double)
    assert FreshSampler(planned.steps(), planned.check, planned.memory_watch()).samples(5, spin_up_ms=20)[1] == ""


@triton.jit
def _double_by_descriptor(x_ptr, out_ptr, rows, BLOCK_R: tl.constexpr):
    """Doubles x (rows x 128) through tensor descriptors built on the device: Triton asks its allocator for scratch
    at every launch."""
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[rows, 128], strides=[128, 1], block_shape=[BLOCK_R, 128])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[rows, 128], strides=[128, 1], block_shape=[BLOCK_R, 128])
    row = tl.program_id(0) * BLOCK_R
    out_desc.store([row, 0], 2 * x_desc.load([row, 0]))


def test_a_kernel_that_builds_descriptors_on_the_device_gets_scratch_and_no_false_alarm() -> None:
    """A kernel host's scratch (grader.running.worker.scratch): the kernel runs, and its scratch, written at every
    replay of the captured graph, is no change the memory watch refuses."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("tensor descriptors need sm_90 or newer")
    scratch.install()
    gc.collect()
    torch.cuda.empty_cache()
    n, block_r = 1 << 20, 8
    x = torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")

    def prepare() -> None:
        out.view(torch.uint8).fill_(0xFF)

    def launch() -> None:
        _double_by_descriptor[(n // 128 // block_r,)](x, out, n // 128, BLOCK_R=block_r)

    launch()
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * x)
    sampler = FreshSampler([(prepare, launch)], lambda: "" if torch.equal(out, 2 * x) else "wrong output",
                           MemoryWatch([out], torch.device("cuda")))
    timing, refused = sampler.samples(5, spin_up_ms=20)
    print(f"\ndescriptor kernel: {timing.median_ms:.4f} ms, refused: {refused!r}")
    assert refused == ""
