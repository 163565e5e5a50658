"""How to time a kernel so that every timed run does fresh work, without moving an honest kernel's time.

    python benchmarks/fresh_samples.py [--samples 7]

For the reference's kernels at the fused_layers performance sizes, one CUDA graph per method, the methods timed in
turn (sample for sample, so all see the same clocks), each sample's median and spread printed with its ratio to
`back-to-back` (how the timer measured before issue 47):

- back-to-back: the launches of S rotated input sets captured once, the graph replayed for ~25 ms, total / calls;
- events: the same launches, an external CUDA event before and after each launch inside the graph (the interval
  between them only);
- poison+events: each launch's outputs set to NaN (0xFF bytes) before its start event, outside the interval;
- poison+flush+events: as above, then a read of a buffer twice the L2's size before the start event (the poison's
  dirty lines written back outside the interval);
- poison+events-empty: poison+events, each interval less an empty one (a start and an end event recorded back to
  back before it, in the same graph): the events' own cost taken out;
- poison-subtracted: back-to-back replays of [poison, launch] minus back-to-back replays of [poison] alone;
- poison-all+events-empty: every set's outputs poisoned at once, then each set's launch between its events (less an
  empty interval): one gap per pass over the sets instead of one per launch (the power limiter sees half as many on
  a case of two sets), and still every launch finds its own outputs poisoned since its last run.

Input sets: as many as pass 128 MiB, at least two (the timer's rule, planned_launches.rotated_sets).

Needs a CUDA GPU. Prints a table; docs/performance.md quotes it.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
L2_FLUSH_BYTES = 128 << 20
MAX_SETS = 16
SAMPLE_MS = 25.0


def reference_module():
    spec = importlib.util.spec_from_file_location("reference_kernels", ROOT / "reference/fused_layers/reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(ref) -> dict[str, tuple[Callable[[], list[torch.Tensor]], Callable[[list[torch.Tensor]], None], list[int]]]:
    """name -> (make one set of tensors, launch on a set, indices of the set's outputs)."""

    def rows(m: int, n: int):
        def make():
            return [torch.randn(m, n, device="cuda"), torch.randn(n, device="cuda"), torch.randn(n, device="cuda"),
                    torch.empty(m, n, device="cuda")]

        block, warps = ref._row_launch_config(n)

        def launch(t):
            ref.layernorm_forward_kernel[(m,)](t[0], t[1], t[2], t[3], m, n, t[0].stride(0), 1e-5, BLOCK_N=block,
                                               num_warps=warps)
        return make, launch, [3]

    def stats(m: int, n: int):
        def make():
            return [torch.randn(m, n, device="cuda"), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")]

        block, warps = ref._row_launch_config(n)

        def launch(t):
            ref.row_mean_var_kernel[(m,)](t[0], t[1], t[2], m, n, t[0].stride(0), BLOCK_N=block, num_warps=warps)
        return make, launch, [1, 2]

    def linear(size: int):
        def make():
            return [torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda"),
                    torch.randn(size, device="cuda"), torch.empty(size, size, device="cuda")]

        bm, bn, bk, warps, stages = ref._linear_launch_config(size, size, size)
        grid = (triton_cdiv(size, bm), triton_cdiv(size, bn))

        def launch(t):
            x, w, b, out = t
            ref.fused_linear_gelu_kernel[grid](x, w, b, out, size, size, size, x.stride(0), x.stride(1), w.stride(1),
                                               w.stride(0), out.stride(0), out.stride(1), BLOCK_M=bm, BLOCK_N=bn,
                                               BLOCK_K=bk, num_warps=warps, num_stages=stages)
        return make, launch, [3]

    return {"perf-row-mean-var 8192x8192": stats(8192, 8192), "perf-layernorm 8192x8192": rows(8192, 8192),
            "perf-layernorm-small 4096x1024": rows(4096, 1024), "perf-linear-gelu 4096^3": linear(4096)}


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Method:
    """One way of timing: a captured graph and how to read a sample from it."""

    def __init__(self, name: str, sets: list[list[torch.Tensor]], launch, outputs: list[int], *, events: bool,
                 poison: bool, flush: torch.Tensor | None = None, launch_kernels: bool = True,
                 empty: bool = False, poison_all: bool = False) -> None:
        self.name = name
        self.events = events
        iterations = len(sets)
        self.starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(iterations)]
        self.ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(iterations)]
        pairs = iterations if empty else 0
        self.empties = [(torch.cuda.Event(enable_timing=True, external=True),
                         torch.cuda.Event(enable_timing=True, external=True)) for _ in range(pairs)]

        def body() -> None:
            if poison_all:
                for tensors in sets:
                    for o in outputs:
                        tensors[o].view(torch.uint8).fill_(0xFF)
            for i, tensors in enumerate(sets):
                if poison:
                    for o in outputs:
                        tensors[o].view(torch.uint8).fill_(0xFF)
                if flush is not None:
                    flush.sum()
                if self.empties:
                    self.empties[i][0].record()
                    self.empties[i][1].record()
                if events:
                    self.starts[i].record()
                if launch_kernels:
                    launch(tensors)
                if events:
                    self.ends[i].record()

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            body()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            body()
        self.calls = iterations
        self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        one = max(self._total(1), 1e-4)
        self.count = max(1, int(SAMPLE_MS / one))

    def _total(self, count: int) -> float:
        self.a.record()
        for _ in range(count):
            self.graph.replay()
        self.b.record()
        self.b.synchronize()
        return float(self.a.elapsed_time(self.b))

    def sample(self) -> float:
        """ms per launch."""
        if not self.events:
            return self._total(self.count) / (self.count * self.calls)
        spent = 0.0
        for _ in range(self.count):
            self.graph.replay()
            torch.cuda.synchronize()
            spent += sum(s.elapsed_time(e) for s, e in zip(self.starts, self.ends, strict=True))
            if self.empties:
                spent -= len(self.starts) * statistics.median(s.elapsed_time(e) for s, e in self.empties)
        return spent / (self.count * self.calls)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args()
    ref = reference_module()
    flush = torch.empty(2 * (50 << 20) // 4, device="cuda")
    print(torch.cuda.get_device_name(0), "torch", torch.__version__)
    for name, (make, launch, outputs) in cases(ref).items():
        one = make()
        set_bytes = sum(t.numel() * t.element_size() for t in one)
        count = min(max(2, -(-L2_FLUSH_BYTES // set_bytes)), MAX_SETS)
        sets = [one] + [make() for _ in range(count - 1)]
        launch(one)
        torch.cuda.synchronize()
        methods = [Method("back-to-back", sets, launch, outputs, events=False, poison=False),
                   Method("events", sets, launch, outputs, events=True, poison=False),
                   Method("poison+events", sets, launch, outputs, events=True, poison=True),
                   Method("poison+events-empty", sets, launch, outputs, events=True, poison=True, empty=True),
                   Method("poison+flush+events", sets, launch, outputs, events=True, poison=True, flush=flush),
                   Method("poison-all+events-empty", sets, launch, outputs, events=True, poison=False, empty=True,
                          poison_all=True)]
        with_poison = Method("poison+launch", sets, launch, outputs, events=False, poison=True)
        poison_only = Method("poison", sets, launch, outputs, events=False, poison=True, launch_kernels=False)
        for method in methods + [with_poison, poison_only]:  # spin up
            for _ in range(3):
                method.sample()
        samples: dict[str, list[float]] = {m.name: [] for m in methods}
        samples["poison-subtracted"] = []
        for _ in range(args.samples):
            for method in methods:
                samples[method.name].append(method.sample())
            samples["poison-subtracted"].append(with_poison.sample() - poison_only.sample())
        base = statistics.median(samples["back-to-back"])
        print(f"\n{name}: {len(sets)} sets of {set_bytes / 2**20:.0f} MiB")
        for method_name, values in samples.items():
            mid = statistics.median(values)
            spread = 100 * (max(values) - min(values)) / 2 / mid if mid else 0.0
            print(f"  {method_name:22s} {mid * 1000:9.2f} us  +-{spread:4.1f}%  x{mid / base:5.3f}")
        del methods, with_poison, poison_only, sets, one
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
