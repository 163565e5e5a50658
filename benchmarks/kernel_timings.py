"""GPU timings of the reference kernels against torch eager, with the device's measured ceilings.

    python benchmarks/kernel_timings.py [--explore] [--fidelity]

Prints one table: kernel, shape, reference time, torch time, % of measured copy bandwidth (row
kernels) or TFLOP/s (matmul), and the spread of five repeated medians. `--explore` also times
candidate launch configurations of the fused matmul (a copy of the reference kernel with an
optional grouped program order), to choose the reference's configuration. `--fidelity` times each
reference kernel FIDELITY_RUNS times in this one run, the way a performance case does (median of five
do_bench medians), prints the runs and their spread, and exits 1 if any spread exceeds +-3%.
Needs a CUDA GPU. Timing: grader.running.worker.measuring.samplers.bench, the grader's own (triton.testing.do_bench:
CUDA events, L2 flushed between repetitions, median), inputs rotated among several sets so no
repetition hits a warm cache.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.running.worker.measuring import samplers  # noqa: E402

REPEATS = 5
FIDELITY_RUNS = 5
FIDELITY_LIMIT_PCT = 3.0


def load_reference():
    path = ROOT / "reference" / "fused_layers" / "reference.py"
    spec = importlib.util.spec_from_file_location("reference_fused_layers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn_for_set, sets: int, warmup_ms: float = 100, rep_ms: float = 500) -> tuple[float, float]:
    """Median of REPEATS do_bench medians (ms) and their full spread (max-min over median, %)."""
    fn_for_set(0)  # compile (and autotune) before timing
    measured = samplers.bench(fn_for_set, sets=sets, repeats=REPEATS, warmup_ms=warmup_ms, rep_ms=rep_ms)
    return measured.median_ms, 2 * measured.spread_pct


def copy_bandwidth() -> float:
    """Device-to-device copy of 1 GiB, bytes read + written per second (GB/s)."""
    return samplers.copy_bandwidth_gbs()


def fidelity(name: str, fn_for_set, sets: int) -> bool:
    """Time one kernel FIDELITY_RUNS times as a performance case does (grader defaults: warm-up 25 ms,
    100 ms of repetitions, REPEATS medians); print the runs and their spread; True if within the limit."""
    fn_for_set(0)
    runs = [samplers.bench(fn_for_set, sets=sets, repeats=REPEATS).median_ms for _ in range(FIDELITY_RUNS)]
    mid = statistics.median(runs)
    spread = 100.0 * (max(runs) - min(runs)) / 2 / mid
    ok = spread <= FIDELITY_LIMIT_PCT
    print(f"{name:20} " + " ".join(f"{r:.4f}" for r in runs) + f" ms  spread ±{spread:.2f}%  "
          f"{'ok' if ok else 'OVER'} (limit ±{FIDELITY_LIMIT_PCT:g}%)")
    return ok


@triton.jit
def _grouped_linear_gelu(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                         stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The reference kernel with programs remapped in groups of GROUP_M row tiles (L2 reuse)."""
    pid_m, pid_n = tl.swizzle2d(tl.program_id(0), tl.program_id(1), tl.num_programs(0), tl.num_programs(1), GROUP_M)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    out = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, out,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--explore", action="store_true")
    parser.add_argument("--fidelity", action="store_true",
                        help=f"also time each reference kernel {FIDELITY_RUNS} times and check the spread")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True  # fair: Triton's tl.dot uses tf32 on float32 too
    ref = load_reference()
    gbs = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}")
    print(f"measured copy bandwidth: {gbs:.0f} GB/s (read + write)")
    rows = []
    sets = 3
    stable = True
    if args.fidelity:
        print(f"timing fidelity: each reference kernel timed {FIDELITY_RUNS} times in this run "
              "(ms, each the median of 5 do_bench medians)")

    m = n = 8192
    xs = [torch.randn(m, n, device="cuda") for _ in range(sets)]
    ln = torch.nn.LayerNorm(n, device="cuda")
    w, b = ln.weight.detach(), ln.bias.detach()
    bytes_stats = m * n * 4 + 2 * m * 4
    bytes_ln = 2 * m * n * 4 + 2 * n * 4
    for name, fn, torch_fn, nbytes in (
        ("row_mean_var", lambda i: ref.row_mean_var(xs[i]), lambda i: torch.var_mean(xs[i], dim=-1, unbiased=False),
         bytes_stats),
        ("layernorm", lambda i: ref.layernorm(xs[i], w, b), lambda i: F.layer_norm(xs[i], (n,), w, b), bytes_ln),
    ):
        t_ref, spread = timed(fn, sets)
        t_torch, _ = timed(torch_fn, sets)
        pct = 100.0 * nbytes / (t_ref * 1e-3) / 1e9 / gbs
        rows.append((name, f"{m}x{n}", t_ref, t_torch, f"{pct:5.1f}% of copy BW", spread))
        if args.fidelity:
            stable = fidelity(name, fn, sets) and stable
    del xs

    mm = nn_ = kk = 4096
    xs = [torch.randn(mm, kk, device="cuda") for _ in range(sets)]
    layer = torch.nn.Linear(kk, nn_, device="cuda")
    weight, bias = layer.weight.detach(), layer.bias.detach()
    flops = 2 * mm * nn_ * kk
    t_ref, spread = timed(lambda i: ref.fused_linear_gelu(xs[i], weight, bias), sets)
    t_torch, _ = timed(lambda i: F.gelu(F.linear(xs[i], weight, bias)), sets)
    rows.append(("fused_linear_gelu", f"{mm}x{nn_}x{kk}", t_ref, t_torch,
                 f"{flops / (t_ref * 1e-3) / 1e12:6.1f} TFLOP/s", spread))
    if args.fidelity:
        linear = lambda i: ref.fused_linear_gelu(xs[i], weight, bias)  # noqa: E731
        stable = fidelity("fused_linear_gelu", linear, sets) and stable

    print(f"{'kernel':20} {'shape':16} {'reference ms':>12} {'torch ms':>9} {'speedup':>8}  {'throughput':22} spread")
    for name, shape, t_ref, t_torch, throughput, spread in rows:
        print(f"{name:20} {shape:16} {t_ref:12.4f} {t_torch:9.4f} {t_torch / t_ref:7.2f}x  {throughput:22} "
              f"±{spread / 2:.1f}%")

    if args.explore:
        out = torch.empty(mm, nn_, device="cuda")
        print("\nfused matmul candidates (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages): ms, TFLOP/s")
        for bm, bn, bk, gm, warps, stages in (
            (128, 256, 32, 8, 8, 3), (128, 256, 32, 8, 8, 4), (128, 256, 32, 4, 8, 4), (128, 256, 32, 16, 8, 4),
            (256, 128, 32, 8, 8, 4), (128, 256, 16, 8, 8, 5), (256, 128, 16, 8, 8, 5), (128, 256, 32, 8, 4, 3),
            (256, 256, 32, 8, 8, 2), (128, 256, 32, 1, 8, 4),
        ):
            def run(i, bm=bm, bn=bn, bk=bk, gm=gm, warps=warps, stages=stages):
                x = xs[i]
                grid = (triton.cdiv(mm, bm), triton.cdiv(nn_, bn))
                _grouped_linear_gelu[grid](x, weight, bias, out, mm, nn_, kk, x.stride(0), x.stride(1),
                                           weight.stride(1), weight.stride(0), out.stride(0), out.stride(1),
                                           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm,
                                           num_warps=warps, num_stages=stages)
            try:
                t, spread = timed(run, sets)
            except Exception as exc:  # out of resources for this configuration
                print(f"  {bm, bn, bk, gm, warps, stages}: failed ({type(exc).__name__})")
                continue
            print(f"  {bm, bn, bk, gm, warps, stages}: {t:.4f} ms  {flops / (t * 1e-3) / 1e12:6.1f} TFLOP/s "
                  f"±{spread / 2:.1f}%")

    if args.fidelity:
        verdict = "every spread within" if stable else "SOME SPREAD OVER"
        print(f"timing fidelity: {verdict} ±{FIDELITY_LIMIT_PCT:g}%")
    return 0 if stable else 1


if __name__ == "__main__":
    sys.exit(main())
