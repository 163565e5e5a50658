"""Why grader.running.worker.measuring.samplers.bench spins the GPU up before it times: medians of a small
kernel from idle.

    python benchmarks/timing_spin_up.py

Times the reference LayerNorm at 4096x1024 float32 (about 14 us, where a slow start shows most)
straight after compiling it in a fresh process, then after the GPU sat idle for IDLE_S seconds,
each with the spin-up off and on, then after samplers.CLOCKS_STAY_UP_S of idle with the follow-up spin-up only (what a
grade's first timing gets when another grade's timed phase let the slot go that recently), and prints the five do_bench
medians of each. A fresh process on
a freshly started H200 read its first medians up to 1.6x slow; the spin-up discards that. Needs a
CUDA GPU.
"""

from __future__ import annotations

import time

import torch
from kernel_timings import load_reference  # benchmarks/ is on the path: this script lives there

from grader.running.worker.measuring import samplers  # kernel_timings put the repository on the path

IDLE_S = 5.0


def main() -> None:
    ref = load_reference()
    xs = [torch.randn(4096, 1024, device="cuda") for _ in range(3)]
    w, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    ref.layernorm(xs[0], w, b)  # compile
    torch.cuda.synchronize()
    device = torch.cuda.get_device_name(0)
    print(f"device {device}; reference layernorm 4096x1024 float32, first straight after compiling")
    warm_s, follow_ms = samplers.CLOCKS_STAY_UP_S, samplers.FOLLOW_UP_SPIN_UP_MS
    for idle_s, spin_up_ms in ((0.0, 0.0), (0.0, samplers.DEFAULT_SPIN_UP_MS), (IDLE_S, 0.0),
                               (IDLE_S, samplers.DEFAULT_SPIN_UP_MS), (warm_s, follow_ms), (warm_s, follow_ms),
                               (warm_s, follow_ms)):
        time.sleep(idle_s)
        measured = samplers.bench(lambda i: ref.layernorm(xs[i], w, b), sets=3, spin_up_ms=spin_up_ms)
        medians = " ".join(f"{m:.4f}" for m in measured.medians_ms)
        print(f"  after {idle_s:.1f} s idle, spin-up {spin_up_ms:3.0f} ms: medians {medians} ms; "
              f"median {measured.median_ms:.4f}, spread ±{measured.spread_pct:.1f}%")


if __name__ == "__main__":
    main()
