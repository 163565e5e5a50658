"""Candidate forms of the fused Linear+bias+GELU kernel at 4096^3 float32 (tf32), against torch eager.

    python benchmarks/matmul_candidates.py [--only LABEL-PART]

Each candidate keeps the assignment's contract (same parameters, grid (cdiv(M, BLOCK_M),
cdiv(N, BLOCK_N))) and changes one thing: masking only the K tail, grouped program order for L2
reuse, the launch configuration, or (`tma` forms) loads through device-side tensor descriptors
(Hopper TMA: no masks, the hardware zero-fills out of range; needs 16-byte aligned row strides, so
not a drop-in for the assignment's odd shapes) with or without Triton's warp specialization and a
TMA store. Needs a CUDA GPU. Timing as in kernel_timings.py: do_bench medians (L2 flushed), three
rotated input sets, median of five. cuBLAS's F.linear alone is printed too: the bar under the bar.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench


@triton.jit
def _bias_gelu(acc, bias_ptr, cols, N):
    """The fused epilogue every candidate shares: the bias by output column, then the exact GELU."""
    acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    return acc * 0.5 * (1.0 + tl.math.erf(acc * 0.7071067811865476))


@triton.jit
def _tile_position(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row, column) of output tile number `tile`; in groups of GROUP_M tile rows when GROUP_M > 1,
    so programs running together share rows of A and columns of B in L2."""
    if GROUP_M > 1:
        first_m = (tile // (GROUP_M * tiles_n)) * GROUP_M
        group_size = min(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group_size)
        pid_n = (tile % (GROUP_M * tiles_n)) // group_size
    else:
        pid_m = tile // tiles_n
        pid_n = tile % tiles_n
    return pid_m, pid_n


@triton.jit
def _pointer_tile(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    pid_m,
    pid_n,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    TAIL_ONLY: tl.constexpr,
):
    """Tile (pid_m, pid_n) of C with masked pointer loads and store: the reference's form."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if TAIL_ONLY:
        k_full = K - K % BLOCK_K
        for k0 in range(0, k_full, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(
                a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak, mask=row_ok[:, None], other=0.0
            )
            b = tl.load(
                b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn, mask=col_ok[None, :], other=0.0
            )
            acc = tl.dot(a, b, acc)
        if k_full < K:
            ks = k_full + tl.arange(0, BLOCK_K)
            k_ok = ks < K
            a = tl.load(
                a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                mask=row_ok[:, None] & k_ok[None, :],
                other=0.0,
            )
            b = tl.load(
                b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                mask=k_ok[:, None] & col_ok[None, :],
                other=0.0,
            )
            acc = tl.dot(a, b, acc)
    else:
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_ok = ks < K
            a = tl.load(
                a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                mask=row_ok[:, None] & k_ok[None, :],
                other=0.0,
            )
            b = tl.load(
                b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                mask=k_ok[:, None] & col_ok[None, :],
                other=0.0,
            )
            acc = tl.dot(a, b, acc)
    out = _bias_gelu(acc, bias_ptr, cols, N)
    tl.store(
        c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
        out,
        mask=row_ok[:, None] & col_ok[None, :],
    )




@triton.jit
def _linear_gelu(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    TAIL_ONLY: tl.constexpr,
):
    if GROUP_M > 1:
        pid_m, pid_n = tl.swizzle2d(
            tl.program_id(0), tl.program_id(1), tl.num_programs(0), tl.num_programs(1), GROUP_M
        )
    else:
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
    _pointer_tile(
        a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        pid_m, pid_n, BLOCK_M, BLOCK_N, BLOCK_K, TAIL_ONLY,
    )


@triton.jit
def _linear_gelu_tma(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    TMA_STORE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, stride_ak], block_shape=[BLOCK_M, BLOCK_K]
    )
    # the weight as nn.Linear stores it, (N, K) with K contiguous: both tf32 operands K-major
    w_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[N, K], strides=[stride_bn, stride_bk], block_shape=[BLOCK_N, BLOCK_K]
    )
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES, warp_specialize=WARP_SPECIALIZE):
        a = a_desc.load([pid_m * BLOCK_M, k0])
        w = w_desc.load([pid_n * BLOCK_N, k0])
        acc = tl.dot(a, w.T, acc)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    out = _bias_gelu(acc, bias_ptr, cols, N)
    if TMA_STORE:
        c_desc = tl.make_tensor_descriptor(
            c_ptr, shape=[M, N], strides=[stride_cm, stride_cn], block_shape=[BLOCK_M, BLOCK_N]
        )
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], out)
    else:
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        tl.store(
            c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
            out,
            mask=(rows < M)[:, None] & (cols < N)[None, :],
        )


@triton.jit
def _linear_gelu_persistent(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    FLATTEN: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    """Outside the contract (grid = one program per SM, each loops over output tiles), after
    Triton's persistent-matmul tutorial: how far the assignment's grid is from the ceiling."""
    a_desc = tl.make_tensor_descriptor(
        a_ptr, shape=[M, K], strides=[stride_am, stride_ak], block_shape=[BLOCK_M, BLOCK_K]
    )
    w_desc = tl.make_tensor_descriptor(
        b_ptr, shape=[N, K], strides=[stride_bn, stride_bk], block_shape=[BLOCK_N, BLOCK_K]
    )
    c_desc = tl.make_tensor_descriptor(
        c_ptr, shape=[M, N], strides=[stride_cm, stride_cn], block_shape=[BLOCK_M, BLOCK_N]
    )
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(
        tl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE
    ):
        pid_m, pid_n = _tile_position(tile, tiles_m, tiles_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            w = w_desc.load([pid_n * BLOCK_N, ki * BLOCK_K])
            acc = tl.dot(a, w.T, acc)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        out = _bias_gelu(acc, bias_ptr, cols, N)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], out)


@triton.jit
def _linear_gelu_grid_stride(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    """The contract's kernel with a grid-stride loop over output tiles: launched over the contract's
    grid every program computes one tile, as the reference does; launched over one program per SM
    (persistent), each loops over tiles and its epilogue can overlap the next tile's loads."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    first = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    step = tl.num_programs(0) * tl.num_programs(1)
    for tile in tl.range(first, tiles_m * tiles_n, step, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _tile_position(tile, tiles_m, tiles_n, GROUP_M)
        _pointer_tile(
            a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
            stride_cn, pid_m, pid_n, BLOCK_M, BLOCK_N, BLOCK_K, False,
        )


def timed(call, sets: int) -> tuple[float, float]:
    state = {"i": 0}

    def run():
        call(state["i"] % sets)
        state["i"] += 1

    medians = [do_bench(run, warmup=100, rep=300, return_mode="median") for _ in range(5)]
    mid = statistics.median(medians)
    return mid, 100.0 * (max(medians) - min(medians)) / 2 / mid


def main(only: str = "") -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    m = n = k = 4096
    sets = 3
    xs = [torch.randn(m, k, device="cuda") for _ in range(sets)]
    layer = torch.nn.Linear(k, n, device="cuda")
    weight, bias = layer.weight.detach(), layer.bias.detach()
    out = torch.empty(m, n, device="cuda")
    flops = 2 * m * n * k
    t_torch, s_torch = timed(lambda i: F.gelu(F.linear(xs[i], weight, bias)), sets)
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}")
    print(
        f"torch eager F.gelu(F.linear) (tf32): {t_torch:.4f} ms ±{s_torch:.1f}%  "
        f"{flops / (t_torch * 1e-3) / 1e12:.1f} TFLOP/s"
    )
    t_mm, s_mm = timed(lambda i: F.linear(xs[i], weight, bias), sets)
    tflops_mm = flops / (t_mm * 1e-3) / 1e12
    print(f"cuBLAS F.linear alone (tf32, no GELU): {t_mm:.4f} ms ±{s_mm:.1f}%  {tflops_mm:.1f} TFLOP/s")
    # device-side tensor descriptors need scratch memory for the descriptors themselves
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    expected = F.gelu(F.linear(xs[0].double(), weight.double(), bias.double()))
    print("candidate: ms, TFLOP/s, vs torch eager, max abs err vs float64")
    pointer_forms = (  # (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, TAIL_ONLY, warps, stages)
        (128, 256, 32, 1, False, 8, 4),  # the reference's configuration
        (128, 256, 32, 1, True, 8, 3),
        (128, 256, 32, 8, True, 8, 4),
        (256, 128, 32, 1, True, 8, 4),
        (128, 256, 64, 1, True, 8, 2),
        (128, 128, 32, 1, True, 4, 4),
    )
    tma_forms = (  # (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, warp specialize, TMA store)
        (128, 256, 32, 8, 3, False, False),
        (128, 256, 32, 8, 4, False, True),
        (128, 256, 32, 8, 3, True, False),
        (128, 256, 32, 8, 4, True, False),
        (128, 128, 32, 8, 4, True, False),
    )
    args = lambda x: (  # noqa: E731
        x, weight, bias, out, m, n, k, x.stride(0), x.stride(1), weight.stride(1), weight.stride(0),
        out.stride(0), out.stride(1),
    )
    candidates = []
    for bm, bn, bk, gm, tail, warps, stages in pointer_forms:

        def call(i, bm=bm, bn=bn, bk=bk, gm=gm, tail=tail, warps=warps, stages=stages):
            _linear_gelu[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
                *args(xs[i]), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, TAIL_ONLY=tail,
                num_warps=warps, num_stages=stages,
            )

        tail_note = " tail-mask" if tail else ""
        label = f"pointers {bm}x{bn}x{bk} group {gm}{tail_note} {warps} warps {stages} stages"
        candidates.append((label, call))
    for bm, bn, bk, warps, stages, ws, tma_store in tma_forms:

        def call(i, bm=bm, bn=bn, bk=bk, warps=warps, stages=stages, ws=ws, tma_store=tma_store):
            _linear_gelu_tma[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
                *args(xs[i]), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, WARP_SPECIALIZE=ws,
                TMA_STORE=tma_store, num_warps=warps,
            )

        extra = (" warp-specialized" if ws else "") + (" TMA store" if tma_store else "")
        candidates.append((f"tma {bm}x{bn}x{bk} {warps} warps {stages} stages{extra}", call))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # the TMA store stages the whole C tile in shared memory: 128x256 fits 2 stages, 128x128 fits 4
    for bn, stages, flatten, ws in ((256, 2, True, False), (256, 2, False, True), (128, 4, True, False),
                                    (128, 4, False, True)):

        def call(i, bn=bn, stages=stages, flatten=flatten, ws=ws):
            _linear_gelu_persistent[(min(sms, triton.cdiv(m, 128) * triton.cdiv(n, bn)),)](
                *args(xs[i]), BLOCK_M=128, BLOCK_N=bn, BLOCK_K=32, GROUP_M=8, NUM_PROGRAMS=sms,
                FLATTEN=flatten, WARP_SPECIALIZE=ws, num_warps=8, num_stages=stages,
            )

        extra = (" flattened" if flatten else "") + (" warp-specialized" if ws else "")
        label = f"persistent tma 128x{bn}x32 8 warps {stages} stages{extra} (not the contract)"
        candidates.append((label, call))
    for persistent, gm, stages, flatten, ws in (
        (False, 1, 4, False, False),  # the contract's grid: should match the reference's form
        (True, 1, 3, False, False),
        (True, 8, 3, False, False),
        (True, 8, 3, True, False),
        (True, 8, 4, True, False),
        (True, 8, 3, False, True),
    ):
        grid = (min(sms, triton.cdiv(m, 128) * triton.cdiv(n, 256)), 1) if persistent else (
            triton.cdiv(m, 128), triton.cdiv(n, 256))

        def call(i, grid=grid, gm=gm, stages=stages, flatten=flatten, ws=ws):
            _linear_gelu_grid_stride[grid](
                *args(xs[i]), BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, GROUP_M=gm, FLATTEN=flatten,
                WARP_SPECIALIZE=ws, num_warps=8, num_stages=stages,
            )

        extra = (" flattened" if flatten else "") + (" warp-specialized" if ws else "")
        where = "persistent" if persistent else "contract grid"
        label = f"grid-stride pointers 128x256x32 group {gm} {stages} stages{extra}, {where}"
        candidates.append((label, call))
    wanted = [c for c in candidates if not only or only in c[0]]
    for label, call in wanted:
        try:
            out.zero_()
            call(0)
            err = float((out.double() - expected).abs().max())
            t, spread = timed(call, sets)
        except Exception as exc:  # out of shared memory for this configuration
            print(f"  {label}: failed ({type(exc).__name__}: {str(exc)[:80]})")
            continue
        print(
            f"  {label:80} {t:.4f} ms ±{spread:.1f}%  {flops / (t * 1e-3) / 1e12:6.1f} TFLOP/s  "
            f"{t_torch / t:.3f}x  {err:.1e}",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="time only the candidates whose label contains this")
    main(parser.parse_args().only)
