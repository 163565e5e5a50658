"""Where a matmul's timing noise comes from, and whether timing two contestants in turn removes it.

    python benchmarks/timing_noise.py [--rounds 6] [--repeats 7]

Two contestants run the same reference kernel (byte-identical files: their speedup must be 1.00), timed
as the grader times a performance case (CUDA-graph replays, `samplers.time_graph`):

* sequential: all of A's samples, then all of B's (today's grader: the student's samples, and the
  reference's from another moment); the ratio of their medians;
* in turn: one sample of A, one of B, and so on; the median of the per-pair ratios.

Each is repeated `rounds` times; the spread of the ratios over the rounds is what three identical files
in one batch would see. For every sample it also reads (NVML, read-only) the SM clock, the power draw and
the clocks-event reasons, so a slow sample can be put beside its clock. Cases: the reference's 4096^3
tf32 fused Linear+GELU (the noisy one) and its 8192x8192 LayerNorm (quiet). Needs a CUDA GPU; never
changes the GPU's settings.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from kernel_timings import load_reference  # benchmarks/ is on the path: this script lives there

from grader.running.worker.measuring import samplers


def nvml_reader() -> Callable[[], dict[str, float]]:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # no NVML: samples carry no clock
        print(f"NVML unavailable: {exc}")
        return lambda: {}

    def read() -> dict[str, float]:
        reasons = 0
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(pynvml, name, None)
            if fn is not None:
                try:
                    reasons = int(fn(handle))
                    break
                except Exception:
                    pass
        return {"sm_mhz": float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                "watts": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                "temp_c": float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
                "reasons": float(reasons)}

    return read


class Graphed:
    """One contestant captured in a CUDA graph (the grader's own GraphSampler); `sample()` replays it back to back
    for about SAMPLE_MS and gives the time per replay."""

    def __init__(self, run: Callable[[], Any]) -> None:
        run()
        torch.cuda.synchronize()
        self.sampler = samplers.GraphSampler(run)

    def sample(self) -> float:
        return self.sampler.samples(1).medians_ms[0]


def spread(values: list[float]) -> float:
    mid = statistics.median(values)
    return 100.0 * (max(values) - min(values)) / 2.0 / mid


def run_case(name: str, a: Graphed, b: Graphed, rounds: int, repeats: int, read: Callable[[], dict[str, float]]):
    for _ in range(20):  # spin up, as the grader does before its first sample
        a.sample()
    sequential, in_turn, rows = [], [], []
    for r in range(rounds):
        sa = [a.sample() for _ in range(repeats)]
        sb = [b.sample() for _ in range(repeats)]
        sequential.append(statistics.median(sb) / statistics.median(sa))
        pairs = []
        for _ in range(repeats):
            ta, clock_a = a.sample(), read()
            tb, clock_b = b.sample(), read()
            pairs.append(tb / ta)
            rows.append((r, ta, tb, clock_a, clock_b))
        in_turn.append(statistics.median(pairs))
        print(f"  {name} round {r}: A {statistics.median(sa):.4f} ms ±{spread(sa):.1f}%, "
              f"B {statistics.median(sb):.4f} ms ±{spread(sb):.1f}%; sequential ratio {sequential[-1]:.4f}, "
              f"in-turn ratio {in_turn[-1]:.4f} (pairs ±{spread(pairs):.1f}%)", flush=True)
    print(f"{name}: sequential ratios {' '.join(f'{x:.4f}' for x in sequential)} -> ±{spread(sequential):.2f}%")
    print(f"{name}: in-turn ratios    {' '.join(f'{x:.4f}' for x in in_turn)} -> ±{spread(in_turn):.2f}%")
    clocks = [c.get("sm_mhz") for _, _, _, c, _ in rows if c]
    if clocks:
        times = [ta for _, ta, _, c, _ in rows if c]
        watts = [c["watts"] for _, _, _, c, _ in rows if c]
        print(f"{name}: SM clock {min(clocks):.0f}-{max(clocks):.0f} MHz, power {min(watts):.0f}-{max(watts):.0f} W, "
              f"A's samples {min(times):.4f}-{max(times):.4f} ms; reasons seen "
              f"{sorted({int(c['reasons']) for _, _, _, c, _ in rows if c})}")
        fastest = sorted(zip(times, clocks, strict=True))
        print(f"{name}: fastest samples at {[f'{c:.0f}' for _, c in fastest[:3]]} MHz, "
              f"slowest at {[f'{c:.0f}' for _, c in fastest[-3:]]} MHz")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    ref = load_reference()
    read = nvml_reader()
    print(f"device {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    torch.manual_seed(0)
    x, w, b = (torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda") * 0.02,
               torch.randn(4096, device="cuda"))
    started = time.monotonic()
    matmul = [Graphed(lambda: ref.fused_linear_gelu(x, w, b)) for _ in range(2)]
    run_case("linear-gelu 4096^3", matmul[0], matmul[1], args.rounds, args.repeats, read)
    xs = torch.randn(8192, 8192, device="cuda")
    g, beta = torch.randn(8192, device="cuda"), torch.randn(8192, device="cuda")
    rows = [Graphed(lambda: ref.layernorm(xs, g, beta)) for _ in range(2)]
    run_case("layernorm 8192^2", rows[0], rows[1], args.rounds, args.repeats, read)
    print(f"took {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
