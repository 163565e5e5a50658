"""Time GPU work the way performance cases do; shared by the worker (student and reference targets),
the grader (torch eager baselines, the device's copy bandwidth) and benchmarks/.

`bench` wraps `triton.testing.do_bench`: CUDA events, a warm-up, the L2 cache flushed before every
repetition, the median. Before the first median it keeps the GPU busy with the call for `spin_up_ms`
(discarded). Without it, an H200 that sat idle for 5 s timed a 14 us LayerNorm at 0.0140, 0.0177,
0.0182, 0.0148, 0.0152 ms (+-13.8%); with it +-2.5% (benchmarks/timing_spin_up.py; intermittent, see
docs/timing-spin-up-h200.txt). A grading run times many cases with CPU work in between.
It takes that median `repeats` times and reports them all (their median and
spread are the result), each call on the next of `sets` copies of the inputs, so no repetition reads
what the previous one left in a cache. The caller makes one untimed call first (compilation,
autotuning). Only torch, triton and the protocol are imported: the worker may use this after it confined imports.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from triton.testing import do_bench  # bound before any submission is imported

from grader.running import protocol
from grader.running.worker import scratch

COPY_BYTES = 1 << 30  # the copy-bandwidth probe: a 1 GiB device-to-device copy
DEFAULT_WARMUP_MS = 25.0
DEFAULT_REP_MS = 100.0
DEFAULT_SPIN_UP_MS = 500.0
FOLLOW_UP_SPIN_UP_MS = 30.0  # timings right after another one in the same slot: the clocks are up
# A grade's first timing needs no full spin-up when another grade's timed phase let the GPU go at most this long ago:
# straight after GPU work, a 14 us kernel read +-2.3% with no spin-up at all; after 5 s idle, +-13.8% (H200,
# docs/timing-spin-up-h200.txt; benchmarks/timing_spin_up.py measures 1 s idle with the follow-up spin-up too).
CLOCKS_STAY_UP_S = 1.0
DEFAULT_REPEATS = 7
SAMPLE_MS = 25.0  # one graph-replay sample lasts about this long


@dataclass(frozen=True)
class Timing:
    """`repeats` do_bench medians (ms) of one callable."""

    medians_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.medians_ms))

    @property
    def spread_pct(self) -> float:
        """Half the range of the medians, in % of their median (the report prints it as +-)."""
        mid = self.median_ms
        return 100.0 * (max(self.medians_ms) - min(self.medians_ms)) / 2.0 / mid if mid > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"medians_ms": list(self.medians_ms)}


def bench(
    call: Callable[[int], Any],
    sets: int = 1,
    repeats: int = 5,
    warmup_ms: float = DEFAULT_WARMUP_MS,
    rep_ms: float = DEFAULT_REP_MS,
    spin_up_ms: float = DEFAULT_SPIN_UP_MS,
) -> Timing:
    """Time `call(i)` (i = the input set to use, rotating over `sets`) on the current CUDA device."""
    state = {"i": 0}

    def step() -> None:
        call(state["i"] % sets)
        state["i"] += 1

    if spin_up_ms > 0:
        do_bench(step, warmup=spin_up_ms, rep=1)  # discarded: brings the clocks up from idle

    medians = [
        float(do_bench(step, warmup=warmup_ms, rep=rep_ms, return_mode="median")) for _ in range(repeats)
    ]
    return Timing(tuple(medians))


class GraphSampler:
    """`run` (which makes `calls` calls, e.g. one per input set) captured in a CUDA graph, sampled on demand: each
    sample replays the graph back to back for about `sample_ms` and gives the time per call, between CUDA events.
    Nothing but the captured kernels runs between the events, so the Python around a call (launch overhead, a
    patched clock) is not measured. Held across requests, it lets the grader time two contestants in turn
    (grader.running.timing.runner: the student's sample, the reference's, and so on). `run` must already have run
    once outside the capture (compilation, autotuning, allocations)."""

    def __init__(self, run: Callable[[], Any], calls: int = 1, sample_ms: float = SAMPLE_MS) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            run()  # warm-up on the capture stream, as torch.cuda.graph recommends
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with scratch.kept_by(self.graph), torch.cuda.graph(self.graph):
            run()
        self.calls = calls
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        one = max(self._replays(1), 1e-4)
        self.count = max(1, int(sample_ms / one))

    def _replays(self, count: int) -> float:
        self.start.record()
        for _ in range(count):
            self.graph.replay()
        self.end.record()
        self.end.synchronize()
        return float(self.start.elapsed_time(self.end))

    def spin_up(self, spin_up_ms: float) -> None:
        """Replays, discarded, for about `spin_up_ms`: bring the clocks up from idle."""
        spun, spent = 0.0, 0.0
        while spent < spin_up_ms and spun < 100:
            spent += self._replays(self.count)
            spun += 1

    def samples(self, repeats: int, spin_up_ms: float = 0.0) -> Timing:
        self.spin_up(spin_up_ms)
        return Timing(tuple(self._replays(self.count) / (self.count * self.calls) for _ in range(repeats)))


Step = tuple[Callable[[], None], Callable[[], None]]  # (prepare, work): one timed call


class Watch(Protocol):
    """Around a sample: `before()` as it starts, `after()` as it ends ("" when nothing it watches changed)."""

    def before(self) -> None: ...

    def after(self) -> str: ...


def net_of_events(inside_ms: float, calls: int, empties_ms: Sequence[float]) -> float:
    """Pure: the time inside `calls` intervals less what a pair of events costs by itself (the median of `empties_ms`,
    empty intervals recorded beside them), once per call; never below a hundredth of `inside_ms`."""
    empty = statistics.median(empties_ms) if empties_ms else 0.0
    return max(inside_ms - calls * max(empty, 0.0), inside_ms / 100)


class FreshSampler:
    """Timed calls that each do fresh work, captured in one CUDA graph. A call is a pair of steps: `prepare` (poison its
    outputs, restore what must start from a value) runs outside the timed interval, `work` (the kernel launches) runs
    between two external CUDA events recorded inside the graph; the graph holds `rounds` passes over the calls, so
    one replay lasts about `REPLAY_MS` (= `sample_ms`). A sample replays the graph (once, unless one replay is shorter
    than `sample_ms`) and gives the mean time per call inside the intervals of its last replay: the whole sample's
    calls, as GraphSampler's events span its replays, less the events' own cost: before each call's start event the
    graph records an empty interval (two events back to back), and a call's interval is counted less the median empty
    one (so a 14 us kernel does not pay the ~1 us that two event nodes cost it in the graph). After every sample
    `check()` looks at what the last replay left (the outputs, the inputs' bytes) and says what is wrong, if anything:
    a sample whose check fails is no time. A `watch` (memory_watch.MemoryWatch) fingerprints all other memory before and
    after each sample: nothing may be kept outside the buffers between runs.

    Where CUDA events cannot be recorded inside a graph (`events` False, or the capture refuses them), a sample is the
    difference of two graphs' back-to-back replays, [prepare, work] and [prepare] alone, per call (`mode` says which).

    Nothing but the captured kernels runs between the events, so the Python around a call (launch overhead, a patched
    clock) is not measured, and a kernel that skips work once its output looks done finds its output poisoned again
    before every call. `work` must already have run once outside the capture (compilation, allocations)."""

    REPLAY_MS = SAMPLE_MS  # one replay is a sample: its intervals span it, as GraphSampler's events span its replays
    MAX_CALLS = 4096  # per graph: the capture launches each from Python (tens of us each)

    def __init__(self, steps: list[Step], check: Callable[[], str] | None = None, watch: Watch | None = None,
                 sample_ms: float = SAMPLE_MS, events: bool = True) -> None:
        self.steps = steps
        self.check = check
        self.watch = watch
        self.sample_ms = sample_ms
        self.calls = len(steps)
        self.wall_a, self.wall_b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.mode = "events" if events else "subtracted"
        self.prepare_only: Any = None
        try:
            self.graph, self.starts, self.ends, self.empties = self._capture(1, timed=events, work=True)
            if events:  # an event a graph recorded must be readable once the graph ran
                self._replays(self.graph, 1)
                self._inside()
        except RuntimeError:
            torch.cuda.synchronize()
            self.mode = "subtracted"
            self.graph, self.starts, self.ends, self.empties = self._capture(1, timed=False, work=True)
        one = max(self._replays(self.graph, 1), 1e-4)
        self.rounds = max(1, min(self.MAX_CALLS // self.calls, int(self.REPLAY_MS / one)))
        timed = self.mode == "events"
        if self.rounds > 1:
            self.graph, self.starts, self.ends, self.empties = self._capture(self.rounds, timed=timed, work=True)
            one = max(self._replays(self.graph, 1), 1e-4)
        if not timed:
            self.prepare_only = self._capture(self.rounds, timed=False, work=False)[0]
        self.count = max(1, int(sample_ms / one))

    def _capture(self, rounds: int, timed: bool, work: bool) -> tuple[Any, list[Any], list[Any], list[tuple[Any, Any]]]:
        """A graph of `rounds` passes over the steps; `timed`: with each call's start and end events, and an empty
        interval (a pair of events back to back) before each start."""
        events = rounds * self.calls if timed else 0
        starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(events)]
        ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(events)]
        empties = [(torch.cuda.Event(enable_timing=True, external=True),
                    torch.cuda.Event(enable_timing=True, external=True)) for _ in range(events)]

        def body(record: bool) -> None:
            index = 0
            for _ in range(rounds):
                for prepare, launch in self.steps:
                    prepare()
                    if record:
                        empties[index][0].record()
                        empties[index][1].record()
                        starts[index].record()
                    if work:
                        launch()
                    if record:
                        ends[index].record()
                    index += 1

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            body(False)  # warm-up on the capture stream, as torch.cuda.graph recommends
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with scratch.kept_by(graph), torch.cuda.graph(graph):
            body(timed)
        return graph, starts, ends, empties

    def _replays(self, graph: Any, count: int) -> float:
        """`count` replays of `graph` back to back: their wall time on the GPU (ms)."""
        self.wall_a.record()
        for _ in range(count):
            graph.replay()
        self.wall_b.record()
        self.wall_b.synchronize()
        return float(self.wall_a.elapsed_time(self.wall_b))

    def _inside(self) -> float:
        """The GPU time inside the calls' intervals of the last replay (ms), less the events' own cost (the median
        empty interval, once per call; never below a hundredth of the intervals)."""
        self.ends[-1].synchronize()
        inside = float(sum(start.elapsed_time(end) for start, end in zip(self.starts, self.ends, strict=True)))
        return net_of_events(inside, len(self.starts), [float(start.elapsed_time(end)) for start, end in self.empties])

    def spin_up(self, spin_up_ms: float) -> None:
        """Replays, discarded, for about `spin_up_ms`: bring the clocks up from idle."""
        spent, spun = 0.0, 0
        while spent < spin_up_ms and spun < 10_000:
            spent += self._replays(self.graph, 1)
            spun += 1

    def sample(self) -> float:
        """Mean ms per call: inside the events of the last of about `sample_ms` of back-to-back replays, or (no events)
        the replays' time less the same replays without the launches."""
        per_replay = self.rounds * self.calls
        if self.mode == "events":
            self._replays(self.graph, self.count)
            return self._inside() / per_replay
        without = self._replays(self.prepare_only, self.count)  # first: the last replay must leave the work's outputs
        with_work = self._replays(self.graph, self.count)
        return max(with_work - without, 1e-6) / (self.count * per_replay)

    def samples(self, repeats: int, spin_up_ms: float = 0.0) -> tuple[Timing, str]:
        """`repeats` samples after the spin-up, and what the check after a sample found wrong ("" for nothing)."""
        self.spin_up(spin_up_ms)
        medians = []
        for _ in range(repeats):
            if self.watch is not None:
                self.watch.before()
            medians.append(self.sample())
            problem = (self.watch.after() if self.watch is not None else "") \
                or (self.check() if self.check is not None else "")
            if problem:
                return Timing(tuple(medians)), problem
        return Timing(tuple(medians)), ""


def time_graph(
    run: Callable[[], Any],
    calls: int = 1,
    repeats: int = DEFAULT_REPEATS,
    spin_up_ms: float = DEFAULT_SPIN_UP_MS,
    sample_ms: float = SAMPLE_MS,
) -> Timing:
    """Capture `run` in a CUDA graph (GraphSampler) and take `repeats` samples of its replays after the spin-up."""
    return GraphSampler(run, calls, sample_ms).samples(repeats, spin_up_ms)


def copy_bandwidth_gbs(nbytes: int = COPY_BYTES, repeats: int = 5) -> float:
    """Device-to-device copy of `nbytes`: bytes read + written per second, in GB/s."""
    ms = _time_copy(nbytes, repeats)
    torch.cuda.empty_cache()  # the two buffers died with _time_copy
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _time_copy(nbytes: int, repeats: int) -> float:
    src = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    return bench(lambda i: dst.copy_(src), sets=1, repeats=repeats).median_ms


MATMUL_ROOF_SIZE = 8192  # a square matmul this large runs at the tensor cores' sustained rate


def matmul_tflops(dtype: torch.dtype = torch.float32, tf32: bool = True, size: int = MATMUL_ROOF_SIZE,
                  repeats: int = 5) -> float:
    """The compute roof as torch measures it on this GPU: a `size`^3 matmul in `dtype` (float32 with tf32 allowed
    or not), 2 size^3 flops per call, in TFLOP/s."""
    operands = [torch.empty((size, size), device="cuda", dtype=dtype).normal_() for _ in range(2)]
    with tf32_matmul(tf32):
        ms = bench(lambda i: torch.matmul(operands[0], operands[1]), sets=1, repeats=repeats).median_ms
    operands.clear()
    torch.cuda.empty_cache()
    return 2 * size**3 / (ms * 1e-3) / 1e12


@contextlib.contextmanager
def tf32_matmul(enabled: bool) -> Iterator[None]:
    """`torch.backends.cuda.matmul.allow_tf32 = enabled` for the block only (restored after)."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


# --------------------------------------------------------------------------- a timed call, from plain data


@dataclass(frozen=True)
class PreparedCall:
    """One target bound to `sets` copies of its inputs on the device: `call(i)` runs it on copy i."""

    call: Callable[[int], Any]
    outputs: tuple[tuple[torch.Tensor, ...], ...]  # kernel output buffers per set (empty for functions)
    inputs: tuple[tuple[torch.Tensor, ...], ...] = ()  # the input tensors per set


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def prepare_call(
    target: Any,
    request: protocol.Run,
    device: torch.device,
    grid: Callable[[dict[str, Any]], tuple[int, ...]] | None = None,
    meta: dict[str, Any] | None = None,
) -> PreparedCall:
    """Bind a kernel (launched over `grid` with `meta`) or a function to its encoded arguments.

    `request`: `inputs` (contiguous CPU tensors), `args` / `kwargs` whose items are plain values or
    {"in": i, "T": bool} (input i, transposed if T) or {"out": j} (kernel output buffer j, allocated
    per set from `outputs`: [{"shape": [...], "dtype": "float32"}]), and `sets`.
    """
    sets = request.sets
    first = [t.to(device) for t in request.inputs]
    inputs = [first] + [[t.clone() for t in first] for _ in range(sets - 1)]
    outputs = tuple(
        tuple(torch.empty(tuple(o["shape"]), dtype=_dtype(o["dtype"]), device=device) for o in request.outputs)
        for _ in range(sets)
    )

    def resolve(value: Any, i: int) -> Any:
        if isinstance(value, dict) and "in" in value:
            tensor = inputs[i][value["in"]]
            return tensor.T if value.get("T") else tensor
        if isinstance(value, dict) and "out" in value:
            return outputs[i][value["out"]]
        return value

    bound = [
        (
            [resolve(a, i) for a in request.args],
            {k: resolve(v, i) for k, v in request.kwargs.items()},
        )
        for i in range(sets)
    ]
    if grid is not None:
        launch = target[grid]
        extra = dict(meta or {})

        def call(i: int) -> Any:
            args, _ = bound[i]
            return launch(*args, **extra)
    else:

        def call(i: int) -> Any:
            args, kwargs = bound[i]
            return target(*args, **kwargs)

    return PreparedCall(call, outputs, tuple(tuple(s) for s in inputs))
