"""grader/running/worker/scratch.py: Triton's runtime scratch in a kernel host (the device itself: a GPU test in
tests/running/worker/measuring/test_samplers_gpu_fresh.py)."""

from __future__ import annotations

import gc
import weakref

import triton.runtime._allocation as allocation

from grader.running.worker import scratch


class _Graph:
    """Stands for a CUDA graph: something the scratch of a capture can be kept on."""


def test_scratch_is_aligned_and_not_kept_outside_a_capture(monkeypatch) -> None:
    monkeypatch.setattr(scratch, "_FOR_LIFE", [])
    for alignment in (1, 128, 1024):
        buffer = scratch._aligned(1000, alignment, "cpu", capturing=False)
        assert buffer.numel() == 1000 and buffer.data_ptr() % alignment == 0
    assert scratch._FOR_LIFE == []


def test_a_captures_launches_share_a_buffer_per_size_and_it_dies_with_the_graph(monkeypatch) -> None:
    monkeypatch.setattr(scratch, "_FOR_LIFE", [])
    graph = _Graph()
    with scratch.kept_by(graph):
        first = scratch._aligned(256, 128, "cpu", capturing=True)
        again = scratch._aligned(256, 128, "cpu", capturing=True)
        other = scratch._aligned(512, 128, "cpu", capturing=True)
        outside = scratch._aligned(256, 128, "cpu", capturing=False)  # a launch outside the capture: its own
    assert first.data_ptr() == again.data_ptr() and other.data_ptr() != first.data_ptr()
    assert outside.data_ptr() != first.data_ptr()
    assert {t.data_ptr() for t in graph.grader_scratch} == {first.data_ptr(), other.data_ptr()}
    assert scratch._FOR_LIFE == [] and scratch._CAPTURES == []
    with scratch.kept_by(_Graph()):  # another graph: its own buffers, never the first graph's
        assert scratch._aligned(256, 128, "cpu", capturing=True).data_ptr() != first.data_ptr()
    alive = weakref.ref(graph.grader_scratch[0])
    del first, again, other
    gc.collect()
    assert alive() is not None  # the graph keeps it
    del graph
    gc.collect()
    assert alive() is None


def test_a_launch_captured_outside_kept_by_is_kept_for_the_process(monkeypatch) -> None:
    monkeypatch.setattr(scratch, "_FOR_LIFE", [])
    captured = scratch._aligned(256, 128, "cpu", capturing=True)
    assert len(scratch._FOR_LIFE) == 1 and scratch._FOR_LIFE[0] is captured


def test_install_makes_it_tritons_allocator() -> None:
    before = allocation._allocator.get()
    try:
        scratch.install()
        assert allocation._allocator.get() is scratch.scratch
    finally:
        allocation._allocator.set(before)
