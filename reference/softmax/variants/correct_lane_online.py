# expect: none
# performance: launch-bound
# variant: the online kernel keeps one running max and one running sum PER LANE
# (vectors of BLOCK_N) and combines the lanes once at the end; the chunk loop counts chunks
# (tl.cdiv) instead of columns, and the wrapper always uses the online kernel with small chunks.
"""Softmax with a lane-wise online kernel (after the FlashAttention-style per-lane statistics)."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(
    x_ptr,  # pointer to the input logits, shape (M, N), column stride 1
    out_ptr,  # pointer to the output, shape (M, N), column stride 1
    M,  # number of rows
    N,  # number of columns
    stride_xm,  # elements between rows of x
    stride_om,  # elements between rows of out
    BLOCK_N: tl.constexpr,  # next_power_of_2(N)
):
    """One program per row; grid = (M,)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(out_ptr + row * stride_om + cols, e / tl.sum(e, 0), mask=cols < N)


@triton.jit
def online_softmax_kernel(
    x_ptr,  # pointer to the input logits, shape (M, N), column stride 1
    out_ptr,  # pointer to the output, shape (M, N), column stride 1
    M,  # number of rows
    N,  # number of columns
    stride_xm,  # elements between rows of x
    stride_om,  # elements between rows of out
    BLOCK_N: tl.constexpr,  # columns per chunk
):
    """Per-lane running max m_i and sum d_i over the chunks, merged at the end; grid = (M,)."""
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK_N)
    m_i = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    d_i = tl.zeros((BLOCK_N,), tl.float32)
    for k in range(0, tl.cdiv(N, BLOCK_N)):
        offs = k * BLOCK_N + lanes
        x = tl.load(x_ptr + row * stride_xm + offs, mask=offs < N, other=float("-inf"))
        m_new = tl.maximum(m_i, x)
        # A lane that has only seen padding has m_i = m_new = -inf: exp(-inf - -inf) would be NaN.
        alive = m_new > float("-inf")
        scale = tl.where(alive, tl.exp(m_i - m_new), 0.0)
        d_i = d_i * scale + tl.where(alive, tl.exp(x - m_new), 0.0)
        m_i = m_new
    m = tl.max(m_i, 0)
    d = tl.sum(tl.where(m_i > float("-inf"), d_i * tl.exp(m_i - m), 0.0), 0)
    inv = 1.0 / d
    for k in range(0, tl.cdiv(N, BLOCK_N)):
        offs = k * BLOCK_N + lanes
        x = tl.load(x_ptr + row * stride_xm + offs, mask=offs < N, other=float("-inf"))
        tl.store(out_ptr + row * stride_om + offs, tl.exp(x - m) * inv, mask=offs < N)


def softmax(x):
    """torch.softmax(x, dim=-1), always through the online kernel with chunks of at most 64."""
    x = x if x.stride(1) == 1 else x.contiguous()
    M, N = x.shape
    out = torch.empty((M, N), device=x.device, dtype=torch.float32)
    block = min(64, triton.next_power_of_2(N))
    online_softmax_kernel[(M,)](x, out, M, N, x.stride(0), out.stride(0), BLOCK_N=block)
    return out
