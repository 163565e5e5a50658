"""What the memory watch costs a timed sample, and whether it moves an honest kernel's time.

    python benchmarks/memory_watch_cost.py [--gib 1,4,16] [--samples 21]

For each size, the process holds that many GiB of tensors (as a timer holding a grade's kept cases does) and times
one honest kernel (a 64 MiB copy-and-double) with FreshSampler twice in turn, sample for sample: without the watch
and with it (grader.running.worker.measuring.memory_watch.MemoryWatch). Prints, per size: the watch's own time per
sample (before + after, wall, median and spread), the kernel's median time per run with and without it and their
ratio, and any sample the watch refused (an honest kernel: none may be). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.running.worker.measuring.memory_watch import MemoryWatch, self_test  # noqa: E402
from grader.running.worker.measuring.samplers import FreshSampler  # noqa: E402


@triton.jit
def _double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


class TimedWatch:
    """A MemoryWatch whose before() and after() are timed (wall, each synchronised; the sample between them is not)."""

    def __init__(self, watch: MemoryWatch) -> None:
        self.watch, self.spent_ms, self.before_ms = watch, [], 0.0

    def before(self) -> None:
        torch.cuda.synchronize()
        started = time.perf_counter()
        self.watch.before()
        torch.cuda.synchronize()
        self.before_ms = 1e3 * (time.perf_counter() - started)

    def after(self) -> str:
        started = time.perf_counter()
        problem = self.watch.after()
        torch.cuda.synchronize()
        self.spent_ms.append(self.before_ms + 1e3 * (time.perf_counter() - started))
        return problem


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", default="1,4,16", help="GiB of tensors the process holds, comma-separated")
    parser.add_argument("--samples", type=int, default=21)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 2
    device = torch.device("cuda")
    problem = self_test(device)
    print(f"self-test: {problem or 'ok'}")
    n = 16 << 20  # 64 MiB of float32
    x = torch.randn(n, device=device)
    out = torch.empty(n, device=device)

    def prepare() -> None:
        out.view(torch.uint8).fill_(0xFF)

    def launch() -> None:
        _double[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)

    launch()
    check = lambda: "" if torch.equal(out, 2 * x) else "wrong output"  # noqa: E731
    print("GiB held | watch ms per sample (median, spread) | kernel ms without / with | ratio | refused")
    for gib in (float(g) for g in args.gib.split(",")):
        held = [torch.empty(1 << 30, dtype=torch.uint8, device=device) for _ in range(int(gib))]
        watch = TimedWatch(MemoryWatch([out], device))
        plain = FreshSampler([(prepare, launch)], check)
        watched = FreshSampler([(prepare, launch)], check, watch)
        plain.spin_up(300)
        without, with_watch, refused = [], [], []
        for _ in range(args.samples):
            without.append(plain.samples(1)[0].medians_ms[0])
            timing, problem = watched.samples(1)
            with_watch.append(timing.medians_ms[0])
            if problem:
                refused.append(problem)
        spent = watch.spent_ms
        mid = statistics.median(spent)
        print(f"{gib:8.0f} | {mid:7.2f} (+-{(max(spent) - min(spent)) / 2:.2f}) | "
              f"{statistics.median(without):.4f} / {statistics.median(with_watch):.4f} | "
              f"{statistics.median(with_watch) / statistics.median(without):.3f} | {len(refused)} {refused[:1]}")
        del held, watched, plain
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
