"""grader/running/worker/scratch.py: Triton's runtime scratch in a kernel host (the device itself: a GPU test in
tests/running/worker/measuring/test_samplers_gpu_fresh.py)."""

from __future__ import annotations

import triton.runtime._allocation as allocation

from grader.running.worker import scratch


def test_scratch_is_aligned_and_kept_only_when_a_graph_captures_its_launch(monkeypatch) -> None:
    monkeypatch.setattr(scratch, "_KEPT", [])
    for alignment in (1, 128, 1024):
        buffer = scratch._aligned(1000, alignment, "cpu", capturing=False)
        assert buffer.numel() == 1000 and buffer.data_ptr() % alignment == 0
    assert scratch._KEPT == []
    captured = scratch._aligned(256, 128, "cpu", capturing=True)
    assert len(scratch._KEPT) == 1 and scratch._KEPT[0] is captured


def test_install_makes_it_tritons_allocator() -> None:
    before = allocation._allocator.get()
    try:
        scratch.install()
        assert allocation._allocator.get() is scratch.scratch
    finally:
        allocation._allocator.set(before)
