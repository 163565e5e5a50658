# expect: none
# performance: re-reading
# variant: the chunked kernel makes three passes (max, then sum, then write)
# instead of the online rescaling; the wrapper picks the chunked kernel with 128 columns above
# 128 columns. Slower (one more read of the row), but every output is right, so full marks.
"""Softmax with a three-pass chunked kernel."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    """grid = (M,)"""
    pid = tl.program_id(axis=0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    logits = tl.load(x_ptr + pid * stride_xm + offs, mask=mask, other=-float("inf"))
    shifted = logits - tl.max(logits, axis=0)
    num = tl.exp(shifted)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + pid * stride_om + offs, num / den, mask=mask)


@triton.jit
def online_softmax_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    """grid = (M,)"""
    pid = tl.program_id(axis=0)
    offs = tl.arange(0, BLOCK_N)
    row_max = tl.full((BLOCK_N,), -float("inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        v = tl.load(x_ptr + pid * stride_xm + start + offs, mask=start + offs < N, other=-float("inf"))
        row_max = tl.maximum(row_max, v)
    mx = tl.max(row_max, axis=0)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, N, BLOCK_N):
        v = tl.load(x_ptr + pid * stride_xm + start + offs, mask=start + offs < N, other=-float("inf"))
        acc += tl.exp(v - mx)
    den = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK_N):
        mask = start + offs < N
        v = tl.load(x_ptr + pid * stride_xm + start + offs, mask=mask, other=-float("inf"))
        tl.store(out_ptr + pid * stride_om + start + offs, tl.exp(v - mx) / den, mask=mask)


def softmax(x):
    x = x.contiguous() if x.stride(-1) != 1 else x
    M, N = x.shape
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if N > 128:
        online_softmax_kernel[(M,)](x, out, M, N, x.stride(0), out.stride(0), BLOCK_N=128)
    else:
        softmax_kernel[(M,)](x, out, M, N, x.stride(0), out.stride(0), BLOCK_N=triton.next_power_of_2(N))
    return out
