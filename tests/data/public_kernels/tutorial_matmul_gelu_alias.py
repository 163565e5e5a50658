"""fused_layers with the Triton tutorial's matmul and a GELU epilogue through a module-level alias
`erf = tl.math.erf`.

Sources of `fused_linear_gelu_kernel`: the matmul is triton-lang/triton,
python/tutorials/03-matrix-multiplication.py, `matmul_kernel` (MIT): grouped tile order, K-masked
loads, fp32 accumulator, `tl.dot(a, b, accumulator)`; the tutorial's 1-D grid is the contract's 2-D one
here (the program's index in it is the tutorial's `pid`) and its GROUP_SIZE_M a module-level constexpr.
The epilogue is FlagOpen/FlagGems, src/flag_gems/ops/gelu.py, `gelu_none` (commit 532ff438c703,
Apache-2.0), which calls `erf` bound at module level (`erf = tl_extra_shim.erf`; `tl.math.erf` is the
spelling that works on every backend); the bias is added before it, as the contract says.
Compiles for sm_90; Triton's interpreter alone fails on it ("Did you forget to add @triton.jit ?").
The other kernels and the wrappers are this project's reference.
"""

import torch
import triton
import triton.language as tl

erf = tl.math.erf
GROUP_SIZE_M = tl.constexpr(8)

# ---------------------------------------------------------------------------
# Fused Linear + bias + GELU (after the Triton tutorial's matmul and FlagGems' gelu)
# ---------------------------------------------------------------------------


@triton.jit
def gelu_none(x):
    scale: tl.constexpr = 0.7071067811  # 1 / math.sqrt(2)
    return 0.5 * x * (1 + erf(x.to(tl.float32) * scale))


@triton.jit
def fused_linear_gelu_kernel(
    a_ptr,  # pointer to the input activations A, shape (M, K)
    b_ptr,  # pointer to the weight as a (K, N) matrix, i.e. nn.Linear's weight.T
    bias_ptr,  # pointer to the bias, shape (N,)
    c_ptr,  # pointer to the output C, shape (M, N)
    M,  # rows of A and C
    N,  # columns of B and C
    K,  # the reduction length
    stride_am,  # elements between rows of A
    stride_ak,  # elements between columns of A
    stride_bk,  # elements between rows of B
    stride_bn,  # elements between columns of B
    stride_cm,  # elements between rows of C
    stride_cn,  # elements between columns of C
    BLOCK_M: tl.constexpr,  # rows of C per program
    BLOCK_N: tl.constexpr,  # columns of C per program
    BLOCK_K: tl.constexpr,  # slice of K per loop iteration
):
    # this program's index in the grid, then the tutorial's grouped order of tiles (L2 reuse)
    pid = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # rows and columns wrap around (% M, % N): loads stay inside A and B, the store is masked
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    bias = tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0)
    c = gelu_none(accumulator + bias[None, :])

    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


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
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_m + cols, mask=mask, other=0.0).to(tl.float32)

    # Divide by N, not BLOCK_N: the padded lanes are not part of the row.
    mean = tl.sum(x, axis=0) / N
    # Padded lanes loaded 0, so x - mean would be -mean there: zero them before squaring.
    diff = tl.where(mask, x - mean, 0.0)
    # Biased (population) variance: divide by N, as nn.LayerNorm does.
    var = tl.sum(diff * diff, axis=0) / N

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
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_m + cols, mask=mask, other=0.0).to(tl.float32)

    # The same two-pass statistics as row_mean_var_kernel, from the row already in registers.
    mean = tl.sum(x, axis=0) / N
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / N
    # eps goes INSIDE the square root: 1 / sqrt(var + eps) stays bounded as var -> 0.
    inv_std = 1.0 / tl.sqrt(var + eps)
    x_norm = diff * inv_std

    gamma = tl.load(gamma_ptr + cols, mask=mask, other=1.0).to(tl.float32)
    beta = tl.load(beta_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x_norm * gamma + beta
    tl.store(out_ptr + row * stride_m + cols, y, mask=mask)


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
