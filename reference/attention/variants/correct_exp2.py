# expect: none
# variant: the online softmax in base 2: log2(e) folded into the score scale (qk_scale = sm_scale *
# log2 e), tl.exp2 everywhere, m_i kept in base-2 units and lse converted back to natural log at the
# end; K loaded pre-transposed as a (HEAD_DIM, BLOCK_N) block; masks applied with one combined where.
"""Attention forward with exp2 (what tl.exp lowers to on a GPU anyway), after FlashAttention-2."""

import math

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # exp(x) = exp2(x * log2 e)
LN2 = tl.constexpr(0.6931471805599453)  # log(x) = log2(x) * ln 2


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
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    off_b = pid_bh // H
    off_h = pid_bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)

    q = tl.load(q_ptr + off_b * stride_qb + off_h * stride_qh + rows[:, None] * stride_qm + dims[None, :],
                mask=rows[:, None] < N_Q, other=0.0)
    # K^T block pointers: (HEAD_DIM, BLOCK_N), so the first dot needs no transpose.
    kt_ptrs = k_ptr + off_b * stride_kb + off_h * stride_kh + cols[None, :] * stride_kn + dims[:, None]
    v_ptrs = v_ptr + off_b * stride_vb + off_h * stride_vh + cols[:, None] * stride_vn + dims[None, :]

    qk_scale = sm_scale * LOG2E  # scores in base-2 units: exp(s) = exp2(s * log2 e)
    m2 = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max, base-2 units
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)

    shift = N_KV - N_Q
    n_end = N_KV
    if CAUSAL:
        n_end = tl.minimum(N_KV, pid_m * BLOCK_M + BLOCK_M + shift)  # past the last visible key
    for n0 in range(0, n_end, BLOCK_N):
        keys = n0 + cols
        kt = tl.load(kt_ptrs + n0 * stride_kn, mask=keys[None, :] < N_KV, other=0.0)
        s2 = tl.dot(q, kt) * qk_scale
        visible = keys[None, :] < N_KV
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None] + shift)
        s2 = tl.where(visible, s2, float("-inf"))
        m_new = tl.maximum(m2, tl.max(s2, 1))
        alive = m_new > float("-inf")  # rows that have seen at least one key
        ref = tl.where(alive, m_new, 0.0)
        p = tl.exp2(s2 - ref[:, None])
        alpha = tl.exp2(m2 - ref)
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(v_ptrs + n0 * stride_vn, mask=keys[:, None] < N_KV, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m2 = m_new

    seen = l > 0.0
    acc = acc * tl.where(seen, 1.0 / l, 0.0)[:, None]
    lse = tl.where(seen, (m2 + tl.log2(l)) * LN2, float("-inf"))  # back to natural log
    tl.store(out_ptr + off_b * stride_ob + off_h * stride_oh + rows[:, None] * stride_om + dims[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=rows[:, None] < N_Q)
    tl.store(lse_ptr + off_b * stride_lb + off_h * stride_lh + rows, lse, mask=rows < N_Q)


def attention(q, k, v, causal=False, sm_scale=None):
    """(out, lse) of scaled dot-product attention, one launch; blocks 64 x 32 at most."""
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    B, H, N_Q, D = q.shape
    N_KV = k.shape[2]
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = torch.empty_like(q)
    lse = torch.empty((B, H, N_Q), device=q.device, dtype=torch.float32)
    block_m = max(16, min(64, triton.next_power_of_2(N_Q)))
    block_n = max(16, min(32, triton.next_power_of_2(N_KV)))
    attention_kernel[(triton.cdiv(N_Q, block_m), B * H)](
        q, k, v, out, lse, sm_scale,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3], *lse.stride()[:2],
        B, H, N_Q, N_KV,
        CAUSAL=causal, HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n,
    )
    return out, lse
