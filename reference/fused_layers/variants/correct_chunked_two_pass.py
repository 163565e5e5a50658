# expect: none
# performance: re-reading, launch-bound
# performance-cuda: launch-bound
# variant: row kernels loop over 32-wide chunks, two passes for stats, one for output
"""Reference solution for the ``fused_layers`` assignment (textbook chapter 20).

Three Triton kernels, each followed by the host function that launches it:

* ``fused_linear_gelu_kernel`` / ``fused_linear_gelu``: ``gelu(x @ weight.T + bias)`` for an
  ``nn.Linear`` weight of shape ``[N, K]``, with the bias add and the exact (erf) GELU fused into
  the matmul's epilogue, so the ``[M, N]`` result is written to memory once.
* ``row_mean_var_kernel`` / ``row_mean_var``: per-row mean and *biased* (divide-by-N) variance,
  the reduction LayerNorm is built on.
* ``layernorm_forward_kernel`` / ``layernorm``: ``(x - mean) / sqrt(var + eps) * gamma + beta``
  per row, one program per row, reading the row once and writing it once.

Conventions shared by all three:

* Every ``tl.load`` and ``tl.store`` is masked, so any block size works on any shape and nothing
  outside the tensors is read or written.
* Statistics and the matmul accumulate in float32, whatever the input dtype.
* Strides are always taken from the tensors; nothing assumes a contiguous layout. The row
  kernels assume a column stride of 1 (the contract has no ``stride_n``); the host functions
  copy an input whose columns are not unit-stride.
* On a GPU ``tl.dot`` on float32 inputs uses TF32 tensor cores by default, so the fused linear
  layer agrees with a float64 oracle to a relative error of about 1e-3, not 1e-6.
"""

import torch
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
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's rows of A and C
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # this program's columns of B and C
    row_ok = rows < M
    col_ok = cols < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K  # the last slice of K may stick out past the end
        a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
        b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
        # Masked lanes load 0, which adds nothing to the dot product.
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc += tl.dot(a, b)

    # Fused epilogue, still in registers: the bias has one value per output COLUMN, so it is
    # indexed by `cols`, bounded by N, and broadcast down the rows of the tile.
    bias = tl.load(bias_ptr + cols, mask=col_ok, other=0.0)
    acc = acc + bias[None, :].to(tl.float32)
    # Exact GELU: gelu(x) = x * 0.5 * (1 + erf(x / sqrt(2))).
    SQRT_HALF: tl.constexpr = 0.7071067811865476
    result = acc * 0.5 * (1.0 + tl.math.erf(acc * SQRT_HALF))

    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, result, mask=row_ok[:, None] & col_ok[None, :])


def _linear_launch_config(M, N, K):
    """Block sizes, warps and pipeline stages for ``fused_linear_gelu_kernel``.

    Plain constants, no autotuning. Every block is at least 16, which ``tl.dot`` needs on a GPU.
    Problems with enough output tiles to fill a large GPU (at least 128 of them) get 128x256
    tiles on 8 warps with a 4-stage pipeline (measured on the H200 at 4096^3: 0.435 ms, 316 TFLOP/s,
    against 0.590 ms for 128x128x32 with 3 stages; benchmarks/kernel_timings.py --explore);
    smaller ones get 64x64 tiles, shrunk towards the problem when it is smaller still, so few
    lanes are wasted on masking.
    """
    if triton.cdiv(M, 128) * triton.cdiv(N, 256) >= 128:
        return 128, 256, 32, 8, 4
    block_m = min(64, max(16, triton.next_power_of_2(M)))
    block_n = min(64, max(16, triton.next_power_of_2(N)))
    block_k = min(32, max(16, triton.next_power_of_2(K)))
    return block_m, block_n, block_k, 4, 3


def fused_linear_gelu(x, weight, bias):
    """gelu(x @ weight.T + bias) with the exact GELU, in one kernel launch.

    x: (M, K); weight: (N, K) as stored by nn.Linear; bias: (N,). Returns float32 (M, N) on
    x.device. The weight is never transposed or copied: its strides are swapped instead.
    """
    assert x.ndim == 2 and weight.ndim == 2 and bias.ndim == 1, "x (M, K), weight (N, K), bias (N,)"
    M, K = x.shape
    N, K_w = weight.shape
    assert K_w == K and bias.shape[0] == N, "shapes do not match nn.Linear(K, N)"
    if bias.stride(0) != 1:  # the kernel indexes the bias as bias_ptr + col
        bias = bias.contiguous()
    out = torch.empty((M, N), device=x.device, dtype=torch.float32)

    block_m, block_n, block_k, num_warps, num_stages = _linear_launch_config(M, N, K)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    fused_linear_gelu_kernel[grid](
        x, weight, bias, out, M, N, K,
        x.stride(0), x.stride(1),
        weight.stride(1), weight.stride(0),  # B = weight.T: B's row step is weight's column step
        out.stride(0), out.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=num_warps, num_stages=num_stages,
    )
    return out


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
    row = tl.program_id(0)
    row_ptr = x_ptr + row * stride_m
    # Walk the row in fixed CHUNK-wide pieces instead of holding all BLOCK_N lanes at once.
    CHUNK: tl.constexpr = 32
    # Pass 1: the mean.
    acc = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        acc += tl.load(row_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    # Pass 2: the biased variance around that mean; padded lanes contribute nothing.
    acc = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        mask = cols < N
        x = tl.load(row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        diff = tl.where(mask, x - mean, 0.0)
        acc += diff * diff
    var = tl.sum(acc, axis=0) / N

    tl.store(mean_ptr + row, mean, mask=row < M)
    tl.store(var_ptr + row, var, mask=row < M)


def _row_launch_config(N):
    """BLOCK_N and num_warps for the one-program-per-row kernels (after Liger-Kernel)."""
    block_n = triton.next_power_of_2(N)
    num_warps = 4
    if block_n >= 2048:
        num_warps = 8
    if block_n >= 8192:
        num_warps = 16
    if block_n >= 32768:
        num_warps = 32
    return block_n, num_warps


def row_mean_var(x):
    """Per-row mean and biased variance of a 2-D x, as float32 tensors of shape (M,)."""
    assert x.ndim == 2, "x must be (M, N)"
    if x.stride(1) != 1:  # the kernel steps along a row one element at a time
        x = x.contiguous()
    M, N = x.shape
    mean = torch.empty((M,), device=x.device, dtype=torch.float32)
    var = torch.empty((M,), device=x.device, dtype=torch.float32)

    block_n, num_warps = _row_launch_config(N)
    row_mean_var_kernel[(M,)](x, mean, var, M, N, x.stride(0), BLOCK_N=block_n, num_warps=num_warps)
    return mean, var


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
    row = tl.program_id(0)
    row_ptr = x_ptr + row * stride_m
    # Walk the row in fixed CHUNK-wide pieces instead of holding all BLOCK_N lanes at once.
    CHUNK: tl.constexpr = 32
    # Pass 1: the mean.
    acc = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        acc += tl.load(row_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    # Pass 2: the biased variance around that mean; padded lanes contribute nothing.
    acc = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        mask = cols < N
        x = tl.load(row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        diff = tl.where(mask, x - mean, 0.0)
        acc += diff * diff
    var = tl.sum(acc, axis=0) / N
    # eps goes INSIDE the square root: 1 / sqrt(var + eps) stays bounded as var -> 0.
    inv_std = 1.0 / tl.sqrt(var + eps)
    # Last pass: normalise, scale, shift and store, chunk by chunk.
    out_row_ptr = out_ptr + row * stride_m
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        mask = cols < N
        x = tl.load(row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        gamma = tl.load(gamma_ptr + cols, mask=mask, other=1.0).to(tl.float32)
        beta = tl.load(beta_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * inv_std * gamma + beta
        tl.store(out_row_ptr + cols, y, mask=mask)


def layernorm(x, weight, bias, eps=1e-5):
    """nn.LayerNorm(N) forward over the last dimension of a 2-D x, in one kernel launch.

    weight and bias are the LayerNorm's gamma and beta, shape (N,). The output has x's dtype,
    device and row stride.
    """
    assert x.ndim == 2, "x must be (M, N)"
    if x.stride(1) != 1:  # the kernel steps along a row one element at a time
        x = x.contiguous()
    M, N = x.shape
    assert weight.shape == (N,) and bias.shape == (N,), "weight and bias must have shape (N,)"
    if weight.stride(0) != 1:
        weight = weight.contiguous()
    if bias.stride(0) != 1:
        bias = bias.contiguous()
    # The kernel writes out with x's row stride, so allocate out with that stride.
    out = torch.empty_strided((M, N), (x.stride(0), 1), device=x.device, dtype=x.dtype)

    block_n, num_warps = _row_launch_config(N)
    layernorm_forward_kernel[(M,)](
        x, weight, bias, out, M, N, x.stride(0), eps, BLOCK_N=block_n, num_warps=num_warps,
    )
    return out
