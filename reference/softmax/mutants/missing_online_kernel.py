# expect: missing-symbol, runtime-error
# mistake: online_softmax_kernel not written yet; the wrapper raises on rows that need it
"""Reference solution for the ``softmax`` assignment (textbook chapter 19, before fused layers).

Two Triton kernels for a row-wise softmax, ``out[i, j] = exp(x[i, j]) / sum_k exp(x[i, k])``, and the
host function that launches one of them:

* ``softmax_kernel``: one program per row holds the whole row (``BLOCK_N = next_power_of_2(N)``),
  subtracts the row's maximum before ``exp`` and divides by the sum: one read, one write.
* ``online_softmax_kernel``: one program per row walks the row in chunks of ``BLOCK_N`` columns,
  keeping a running maximum and a running sum that is *rescaled* whenever the maximum grows; a
  second loop writes ``exp(x - max) / sum``. It works for rows of any length.
* ``softmax``: ``torch.softmax(x, dim=-1)`` for a 2-D float32 ``x``, in one kernel launch.

Conventions shared by both kernels:

* Every ``tl.load`` and ``tl.store`` is masked. Padded lanes (columns ``>= N``) load ``-inf``, the
  one value that is neutral for a maximum and whose ``exp`` is 0, so they count in no max and no sum.
* Subtracting the row maximum keeps every ``exp`` argument ``<= 0``: no overflow on logits of 100
  (``exp(100)`` is infinite in float32) and no 0/0 on logits of -10000 (``exp(-10000)`` is 0).
* Rows are addressed with their own strides (``stride_xm`` for x, ``stride_om`` for out); columns
  are assumed unit-stride (the contract has no column stride); the host function copies an input
  whose columns are not.
"""

import torch
import triton
import triton.language as tl

# ---------------------------------------------------------------------------
# Softmax, one program per row, the whole row in one block
# ---------------------------------------------------------------------------


@triton.jit
def softmax_kernel(
    x_ptr,  # pointer to the input logits, shape (M, N), column stride 1
    out_ptr,  # pointer to the output probabilities, shape (M, N), column stride 1
    M,  # number of rows
    N,  # number of columns: the length normalised over
    stride_xm,  # elements between consecutive rows of x
    stride_om,  # elements between consecutive rows of out
    BLOCK_N: tl.constexpr,  # next_power_of_2(N): one program holds a whole row
):
    """out[row, :] = exp(x[row, :] - max) / sum(exp(x[row, :] - max)); grid = (M,)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    # Padded lanes load -inf: they cannot win the max, and exp(-inf - max) = 0 adds nothing to the sum.
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=-float("inf")).to(tl.float32)

    # Subtract the row max first: every exponent is <= 0, so exp never overflows, and the largest
    # term is exp(0) = 1, so the sum is >= 1 and never 0.
    z = x - tl.max(x, axis=0)
    numerator = tl.exp(z)
    denominator = tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * stride_om + cols, numerator / denominator, mask=mask)


# ---------------------------------------------------------------------------
# Host function
# ---------------------------------------------------------------------------

# Rows up to this many columns are held by one program (softmax_kernel); longer rows are walked in
# chunks (online_softmax_kernel), so registers do not spill.
MAX_SINGLE_BLOCK = 4096
ONLINE_BLOCK_N = 1024


def _num_warps(block_n):
    """More warps for wider blocks (after Triton's fused-softmax tutorial)."""
    if block_n >= 8192:
        return 16
    if block_n >= 2048:
        return 8
    return 4


def softmax(x):
    """torch.softmax(x, dim=-1) for a 2-D float32 x, in one kernel launch.

    Returns a new (M, N) float32 tensor on x.device; x may have rows further apart than N.
    """
    assert x.ndim == 2, "x must be (M, N)"
    if x.stride(1) != 1:  # the kernels step along a row one element at a time
        x = x.contiguous()
    M, N = x.shape
    out = torch.empty((M, N), device=x.device, dtype=torch.float32)

    block_n = triton.next_power_of_2(N)
    if block_n <= MAX_SINGLE_BLOCK:
        softmax_kernel[(M,)](
            x, out, M, N, x.stride(0), out.stride(0), BLOCK_N=block_n, num_warps=_num_warps(block_n),
        )
    else:
        raise NotImplementedError("rows longer than MAX_SINGLE_BLOCK")
    return out
