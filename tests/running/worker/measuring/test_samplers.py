"""grader/running/worker/measuring/samplers.py: do_bench medians with the GPU spun up first (faked here:
timing itself needs a GPU, tests/e2e/test_gpu_performance.py), and what a Timing reports."""

from __future__ import annotations

from grader.running.worker.measuring.samplers import Timing


def test_bench_spins_the_gpu_up_and_discards_it(monkeypatch) -> None:
    """samplers.bench: one discarded do_bench of `spin_up_ms` first, then `repeats` medians over the sets."""
    from grader.running.worker.measuring import samplers

    calls: list[tuple[float, float]] = []
    answers = iter([99.0, 1.0, 2.0, 3.0])

    def fake_do_bench(fn, warmup, rep, return_mode="mean"):
        calls.append((warmup, rep))
        fn()
        fn()
        return next(answers)

    sets_used: list[int] = []
    monkeypatch.setattr(samplers, "do_bench", fake_do_bench)
    measured = samplers.bench(sets_used.append, sets=2, repeats=3, warmup_ms=7.0, rep_ms=11.0)
    assert measured.medians_ms == (1.0, 2.0, 3.0)  # the spin-up's 99 is not a median
    assert calls == [(samplers.DEFAULT_SPIN_UP_MS, 1)] + [(7.0, 11.0)] * 3
    assert sets_used == [0, 1] * 4  # input copies rotate through the spin-up too
    calls.clear()
    answers = iter([5.0])
    assert samplers.bench(sets_used.append, repeats=1, spin_up_ms=0).medians_ms == (5.0,)
    assert len(calls) == 1


def test_timing_median_and_spread() -> None:

    timing = Timing((1.0, 3.0, 2.0))
    assert timing.median_ms == 2.0 and timing.spread_pct == 50.0
    assert timing.to_dict() == {"medians_ms": [1.0, 3.0, 2.0]}
    assert Timing((0.0, 0.0)).spread_pct == 0.0


def test_a_fresh_samples_intervals_are_counted_less_the_events_own_cost() -> None:
    """samplers.net_of_events: each call's interval less the median empty interval (an outlier empty one moves
    nothing), never below a hundredth of the intervals (an empty interval slower than the work is not a time of 0)."""
    from grader.running.worker.measuring.samplers import net_of_events

    assert net_of_events(30.0, 2, [1.0, 1.0, 9.0]) == 28.0
    assert net_of_events(30.0, 2, []) == 30.0
    assert net_of_events(3.0, 2, [5.0, 5.0]) == 0.03
