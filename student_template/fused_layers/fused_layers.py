"""Your submission for the ``fused_layers`` assignment (textbook chapter 20).

Three Triton kernels, each followed by the host function that launches it:

* ``fused_linear_gelu_kernel`` / ``fused_linear_gelu``: ``gelu(x @ weight.T + bias)`` for an
  ``nn.Linear`` weight of shape ``[N, K]``, with the bias add and the exact (erf) GELU fused into
  the matmul's epilogue, so the ``[M, N]`` result is written to memory once.
* ``row_mean_var_kernel`` / ``row_mean_var``: per-row mean and *biased* (divide-by-N) variance,
  the reduction LayerNorm is built on.
* ``layernorm_forward_kernel`` / ``layernorm``: ``(x - mean) / sqrt(var + eps) * gamma + beta``
  per row, one program per row, reading the row once and writing it once.

Keep every name and every parameter order exactly as given: the grader launches your kernels
directly, with its own block sizes, strides and grids, as well as through your host functions.
Replace each ``pass`` / ``raise NotImplementedError`` with your code. See README.md.
"""

import torch  # noqa: F401  (you will need it in the host functions)
import triton
import triton.language as tl

# ---------------------------------------------------------------------------
# Fused Linear + bias + GELU
# ---------------------------------------------------------------------------


@triton.jit
def fused_linear_gelu_kernel(
    a_ptr,  # pointer to the input activations A, shape (M, K)
    b_ptr,  # pointer to the weight as a (K, N) matrix, i.e. nn.Linear's weight.T
    bias_ptr,  # pointer to the bias, shape (N,), contiguous
    c_ptr,  # pointer to the output C, shape (M, N)
    M,  # number of rows of A and C
    N,  # number of columns of B and C (output features)
    K,  # reduction length: columns of A, rows of B (input features)
    stride_am,  # elements between consecutive rows of A
    stride_ak,  # elements between consecutive columns of A
    stride_bk,  # elements between consecutive rows of B (= weight.stride(1))
    stride_bn,  # elements between consecutive columns of B (= weight.stride(0))
    stride_cm,  # elements between consecutive rows of C
    stride_cn,  # elements between consecutive columns of C
    BLOCK_M: tl.constexpr,  # rows of C computed by one program
    BLOCK_N: tl.constexpr,  # columns of C computed by one program
    BLOCK_K: tl.constexpr,  # slice of K consumed per loop iteration
):
    """C[M, N] = gelu_exact(A[M, K] @ B[K, N] + bias[N]); grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))."""
    # TODO 1: find this program's tile: rows from tl.program_id(0) and BLOCK_M, columns from
    #         tl.program_id(1) and BLOCK_N (use tl.arange).
    # TODO 2: accumulate A[rows, k-slice] @ B[k-slice, cols] into a float32 (BLOCK_M, BLOCK_N)
    #         accumulator with tl.dot, looping over K in steps of BLOCK_K. Address every element
    #         through the strides. Mask both loads: rows must be < M, columns < N, and the k
    #         indices < K (K need not be a multiple of BLOCK_K). Masked lanes must load 0.
    # TODO 3: the epilogue, before anything is stored: add the bias (one value per output
    #         COLUMN; which indices and which bound does its load need?), then apply the exact
    #         GELU, x * 0.5 * (1 + erf(x / sqrt(2))), using tl.math.erf.
    # TODO 4: store the tile into C through stride_cm / stride_cn, masked to rows < M and
    #         columns < N.
    pass


def fused_linear_gelu(x, weight, bias):
    """gelu(x @ weight.T + bias) with the exact GELU, in one kernel launch.

    x: (M, K); weight: (N, K) as stored by nn.Linear; bias: (N,). Returns float32 (M, N) on
    x.device.
    """
    # TODO: allocate the float32 (M, N) output on x.device; pick block sizes (each at least 16,
    #       which tl.dot needs on a GPU); compute the grid with triton.cdiv; launch
    #       fused_linear_gelu_kernel exactly once. Do not transpose or copy the weight, and do
    #       not compute anything with torch: pass strides taken from the tensors, choosing
    #       stride_bk / stride_bn so that B is weight.T.
    raise NotImplementedError("TODO: fused_linear_gelu")


# ---------------------------------------------------------------------------
# Row-wise mean and biased variance
# ---------------------------------------------------------------------------


@triton.jit
def row_mean_var_kernel(
    x_ptr,  # pointer to the input, shape (M, N), column stride 1
    mean_ptr,  # pointer to the output means, shape (M,)
    var_ptr,  # pointer to the output biased variances, shape (M,)
    M,  # number of rows
    N,  # number of columns: the length being reduced
    stride_m,  # elements between consecutive rows of x
    BLOCK_N: tl.constexpr,  # next_power_of_2(N): one program holds a whole row
):
    """mean[row] = sum(x) / N, var[row] = sum((x - mean)^2) / N; grid = (M,)."""
    # TODO 1: this program's row is tl.program_id(0). Load the whole row (it starts at
    #         x_ptr + row * stride_m) into a BLOCK_N-wide block, masked to columns < N.
    # TODO 2: mean = sum / N. BLOCK_N is usually larger than N: the padded lanes are not part
    #         of the row, in the division or in the sum of squared deviations.
    # TODO 3: the BIASED variance: mean of (x - mean)^2, divided by N.
    # TODO 4: store the two numbers at mean_ptr + row and var_ptr + row.
    pass


def row_mean_var(x):
    """Per-row mean and biased variance of a 2-D x, as float32 tensors of shape (M,)."""
    # TODO: allocate mean and var (float32, shape (M,), on x.device); launch
    #       row_mean_var_kernel once with grid (M,), BLOCK_N = triton.next_power_of_2(N) and
    #       the row stride taken from x (rows may be further apart than N).
    raise NotImplementedError("TODO: row_mean_var")


# ---------------------------------------------------------------------------
# LayerNorm forward
# ---------------------------------------------------------------------------


@triton.jit
def layernorm_forward_kernel(
    x_ptr,  # pointer to the input, shape (M, N), column stride 1
    gamma_ptr,  # pointer to the scale (LayerNorm weight), shape (N,), contiguous
    beta_ptr,  # pointer to the shift (LayerNorm bias), shape (N,), contiguous
    out_ptr,  # pointer to the output, shape (M, N), same row stride as x
    M,  # number of rows
    N,  # number of columns: the normalised length
    stride_m,  # elements between consecutive rows of x and of out
    eps,  # added to the variance inside the square root
    BLOCK_N: tl.constexpr,  # next_power_of_2(N): one program holds a whole row
):
    """out = (x - mean) / sqrt(var + eps) * gamma + beta, row by row; grid = (M,)."""
    # TODO 1: load this program's row, masked, as in row_mean_var_kernel, and compute its mean
    #         and biased variance the same way, in float32.
    # TODO 2: normalise: (x - mean) / sqrt(var + eps). Where exactly does eps belong, and what
    #         happens to a row whose values are all (nearly) equal if it is somewhere else?
    # TODO 3: scale by gamma and shift by beta (one value per column each).
    # TODO 4: store the row at out_ptr + row * stride_m, every one of the N columns, masked.
    pass


def layernorm(x, weight, bias, eps=1e-5):
    """nn.LayerNorm(N) forward over the last dimension of a 2-D x, in one kernel launch.

    weight and bias are the LayerNorm's gamma and beta, shape (N,). The output has x's dtype,
    device and row stride.
    """
    # TODO: allocate an output with x's row stride (the kernel uses one stride for both), launch
    #       layernorm_forward_kernel once with grid (M,) and BLOCK_N = triton.next_power_of_2(N).
    raise NotImplementedError("TODO: layernorm")
