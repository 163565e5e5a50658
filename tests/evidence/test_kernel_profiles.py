"""grader/evidence/kernel_profiles.py: one profiled launch read by name, with the grid and block columns where
ncu gave no launch__ counters; the metric set asked of ncu."""

from __future__ import annotations

from grader.evidence import kernel_profiles as counters
from grader.evidence.kernel_profiles import KernelProfile, StaticFacts


def test_profile_falls_back_to_the_grid_and_block_columns() -> None:
    profile = KernelProfile(0, "k", (4, 2, 1), (128, 1, 1), {})
    assert (profile.programs, profile.threads, profile.time_ns) == (8, 128, 0.0)


def test_profile_reads_its_launch_counters_first() -> None:
    profile = KernelProfile(3, "k", (4, 2, 1), (128, 1, 1),
                            {counters.GRID_SIZE: 16.0, counters.BLOCK_SIZE: 64.0, counters.DURATION: 2500.0})
    assert (profile.programs, profile.threads, profile.time_ns) == (16, 64, 2500.0)
    assert profile.get(counters.DRAM_READ) == 0.0 and profile.get(counters.DRAM_READ, -1.0) == -1.0


def test_every_counter_is_asked_for_once() -> None:
    assert len(set(counters.METRICS)) == len(counters.METRICS)
    assert counters.TENSOR_PIPE in counters.METRICS and counters.DURATION in counters.METRICS


def test_static_facts_are_plain_values() -> None:
    facts = StaticFacts(tensor_cores=True, vector_loads=False, registers=40, spills=0)
    assert (facts.tensor_cores, facts.vector_loads, facts.registers, facts.spills) == (True, False, 40, 0)
