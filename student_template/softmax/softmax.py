"""Your submission for the ``softmax`` assignment (textbook chapter 19).

Two Triton kernels for a row-wise softmax, ``out[i, j] = exp(x[i, j]) / sum_k exp(x[i, k])``, and the
host function that launches one of them:

* ``softmax_kernel``: one program per row holds the whole row (``BLOCK_N = next_power_of_2(N)``),
  subtracts the row's maximum before ``exp`` and divides by the sum: one read, one write.
* ``online_softmax_kernel``: one program per row walks the row in chunks of ``BLOCK_N`` columns,
  keeping a running maximum and a running sum that is *rescaled* whenever the maximum grows; a
  second loop writes ``exp(x - max) / sum``. It works for rows of any length.
* ``softmax``: ``torch.softmax(x, dim=-1)`` for a 2-D float32 ``x``, in one kernel launch.

Keep every name and every parameter order exactly as given: the grader launches your kernels
directly, with its own block sizes, strides and grids, as well as through your host function.
Replace each ``pass`` / ``raise NotImplementedError`` with your code. See README.md.
"""

import torch  # noqa: F401  (you will need it in the host function)
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
    # TODO 1: this program's row is tl.program_id(0). Load the whole row (it starts at
    #         x_ptr + row * stride_xm) into a BLOCK_N-wide block, masked to columns < N.
    #         BLOCK_N is usually larger than N: what value must a padded lane hold so that it
    #         changes neither the row's maximum nor the sum of exps? (Hint: not 0.)
    # TODO 2: subtract the row's maximum, exponentiate, divide by the sum. Why subtract the max,
    #         when it cancels mathematically? Try a row of logits around 100, and around -10000,
    #         in float32.
    # TODO 3: store the row at out_ptr + row * stride_om (not stride_xm: the two may differ),
    #         masked to columns < N.
    pass


# ---------------------------------------------------------------------------
# Online softmax: the row in chunks of BLOCK_N, one pass for the statistics
# ---------------------------------------------------------------------------


@triton.jit
def online_softmax_kernel(
    x_ptr,  # pointer to the input logits, shape (M, N), column stride 1
    out_ptr,  # pointer to the output probabilities, shape (M, N), column stride 1
    M,  # number of rows
    N,  # number of columns: the length normalised over (any length, not one block)
    stride_xm,  # elements between consecutive rows of x
    stride_om,  # elements between consecutive rows of out
    BLOCK_N: tl.constexpr,  # columns per chunk; usually much smaller than N
):
    """The same softmax with the row read in chunks of BLOCK_N columns; grid = (M,)."""
    # TODO 1: pass 1, over the chunks start = 0, BLOCK_N, 2 * BLOCK_N, ... < N: load the chunk
    #         (masked to columns < N, padded the same way as in softmax_kernel) and update a
    #         running maximum m and a running sum d of exp(x - m). When the chunk raises the
    #         maximum from m to m_new, the terms already in d were computed against the old m:
    #         what must d be multiplied by before this chunk's exp(x - m_new) are added?
    # TODO 2: pass 2, over the same chunks: store exp(x - m) / d at out_ptr + row * stride_om,
    #         masked to columns < N.
    pass


# ---------------------------------------------------------------------------
# Host function
# ---------------------------------------------------------------------------


def softmax(x):
    """torch.softmax(x, dim=-1) for a 2-D float32 x, in one kernel launch.

    Returns a new (M, N) float32 tensor on x.device; x may have rows further apart than N.
    """
    # TODO: allocate the float32 (M, N) output on x.device; launch ONE of the two kernels once,
    #       with grid (M,) and the row strides taken from x and from the output. Rows can be
    #       long (thousands of columns): one block per row does not scale forever, the online
    #       kernel does. Do not compute anything with torch.
    raise NotImplementedError("TODO: softmax")
