# expect: none
# variant: two passes over the key blocks: the first computes each row's max and sum of exponentials
# (only the scalar sum is rescaled), the second accumulates softmax(s) @ v with the final
# statistics, so the output accumulator is never rescaled and never divided. It reads K twice and
# always walks every key block (no causal early exit), so it is slower, but every output is right.
"""Attention forward in two passes (statistics first, then the weighted sum of values)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _scores(q, k_base, stride_kn, offs_m, start_n, sm_scale, N_Q, N_KV,
            CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    """sm_scale * q @ k[start_n : start_n + BLOCK_N].T, masked entries -inf."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :], mask=offs_n[:, None] < N_KV, other=0.0)
    s = tl.dot(q, tl.trans(k)) * sm_scale
    keep = (offs_n < N_KV)[None, :]
    if CAUSAL:
        keep = keep & (offs_n[None, :] <= offs_m[:, None] + (N_KV - N_Q))
    return tl.where(keep, s, float("-inf"))


@triton.jit
def attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, sm_scale,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    stride_lb, stride_lh,
    B, H, N_Q, N_KV,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """grid = (cdiv(N_Q, BLOCK_M), B * H)"""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh - b * H
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=offs_m[:, None] < N_Q, other=0.0)
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    n_blocks = tl.cdiv(N_KV, BLOCK_N)

    # Pass 1: row max and row sum of exp(s - max).
    row_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BLOCK_M,), tl.float32)
    for j in range(0, n_blocks):
        s = _scores(q, k_base, stride_kn, offs_m, j * BLOCK_N, sm_scale, N_Q, N_KV, CAUSAL, HEAD_DIM, BLOCK_N)
        new_max = tl.maximum(row_max, tl.max(s, axis=1))
        ref = tl.where(new_max == float("-inf"), 0.0, new_max)
        row_sum = row_sum * tl.exp(row_max - ref) + tl.sum(tl.exp(s - ref[:, None]), axis=1)
        row_max = new_max

    # Pass 2: out = sum_j exp(s - max) / sum * v[j], with the final statistics: nothing to rescale.
    ref = tl.where(row_max == float("-inf"), 0.0, row_max)
    inv_sum = tl.where(row_sum > 0.0, 1.0 / row_sum, 0.0)  # a row with no visible key: all p = 0
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for j in range(0, n_blocks):
        s = _scores(q, k_base, stride_kn, offs_m, j * BLOCK_N, sm_scale, N_Q, N_KV, CAUSAL, HEAD_DIM, BLOCK_N)
        p = tl.exp(s - ref[:, None]) * inv_sum[:, None]
        offs_n = j * BLOCK_N + tl.arange(0, BLOCK_N)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=offs_n[:, None] < N_KV, other=0.0)
        acc += tl.dot(p.to(v.dtype), v)

    lse = tl.where(row_sum > 0.0, row_max + tl.log(row_sum), float("-inf"))
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=offs_m[:, None] < N_Q)
    tl.store(lse_ptr + b * stride_lb + h * stride_lh + offs_m, lse, mask=offs_m < N_Q)


def attention(q, k, v, causal=False, sm_scale=None):
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    B, H, N_Q, D = q.shape
    N_KV = k.shape[-2]
    if sm_scale is None:
        sm_scale = D ** -0.5
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N_Q, dtype=torch.float32, device=q.device)
    BLOCK_M = max(16, min(32, triton.next_power_of_2(N_Q)))
    BLOCK_N = max(16, min(64, triton.next_power_of_2(N_KV)))
    grid = (triton.cdiv(N_Q, BLOCK_M), B * H)
    attention_kernel[grid](
        q, k, v, out, lse, float(sm_scale),
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        lse.stride(0), lse.stride(1),
        B, H, N_Q, N_KV,
        CAUSAL=causal, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )
    return out, lse
