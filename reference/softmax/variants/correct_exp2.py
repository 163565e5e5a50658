# expect: none
# variant: exp via tl.exp2 on log2(e)-scaled logits, a reciprocal multiply instead
# of a divide, 0.0 padding made harmless with tl.where, and an online kernel whose loops run over
# chunk starts held in a while loop.
"""Softmax written with exp2 (what tl.exp lowers to on a GPU anyway)."""

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # a global a kernel may read: created as tl.constexpr


@triton.jit
def softmax_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    """grid = (M,)"""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    valid = cols < N
    raw = tl.load(x_ptr + row * stride_xm + cols, mask=valid, other=0.0)
    x = tl.where(valid, raw, float("-inf"))  # padding made neutral after the load
    p = tl.exp2((x - tl.max(x, axis=0)) * LOG2E)
    tl.store(out_ptr + row * stride_om + cols, p * (1.0 / tl.sum(p, axis=0)), mask=valid)


@triton.jit
def online_softmax_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    """grid = (M,)"""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = float("-inf")
    d = 0.0
    start = 0
    while start < N:
        valid = start + cols < N
        raw = tl.load(x_ptr + row * stride_xm + start + cols, mask=valid, other=0.0)
        x = tl.where(valid, raw, float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp2((m - m_new) * LOG2E) + tl.sum(tl.exp2((x - m_new) * LOG2E), axis=0)
        m = m_new
        start += BLOCK_N
    inv = 1.0 / d
    start = 0
    while start < N:
        valid = start + cols < N
        x = tl.load(x_ptr + row * stride_xm + start + cols, mask=valid, other=0.0)
        tl.store(out_ptr + row * stride_om + start + cols, tl.exp2((x - m) * LOG2E) * inv, mask=valid)
        start += BLOCK_N


def softmax(x):
    """torch.softmax(x, dim=-1) in one launch: online kernel with 256-column chunks for long rows."""
    x = x if x.stride(1) == 1 else x.contiguous()
    M, N = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if N <= 1024:
        softmax_kernel[(M,)](x, out, M, N, x.stride(0), out.stride(0), BLOCK_N=triton.next_power_of_2(N))
    else:
        online_softmax_kernel[(M,)](x, out, M, N, x.stride(0), out.stride(0), BLOCK_N=256)
    return out
