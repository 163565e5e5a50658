"""Reference solution for the ``attention`` assignment (FlashAttention-style forward pass).

One Triton kernel for scaled dot-product attention and the host function that launches it:

* ``attention_kernel``: one program per (block of ``BLOCK_M`` queries, batch * head). It keeps its
  queries in registers and walks the keys and values in blocks of ``BLOCK_N``, never materialising the
  ``N_Q x N_KV`` score matrix; it writes the output rows and the log-sum-exp of each row's scores.
* ``attention``: ``(out, lse)`` for ``q`` of shape ``(B, H, N_Q, HEAD_DIM)`` and ``k``, ``v`` of shape
  ``(B, H, N_KV, HEAD_DIM)``, in one kernel launch.

What it computes, for each batch, head and query row ``i``::

    s[i, j]  = sm_scale * dot(q[i], k[j])            (masked keys: s[i, j] = -inf)
    out[i]   = sum_j softmax(s[i, :])[j] * v[j]
    lse[i]   = log(sum_j exp(s[i, j]))               (natural log)

Conventions:

* Online softmax. For its rows the program keeps a running maximum ``m_i``, a running sum
  ``l_i = sum exp(s - m_i)`` and an unnormalised output ``acc = sum exp(s - m_i) * v``, all float32.
  When a key block raises the maximum from ``m_old`` to ``m_new``, every term already in ``l_i`` and
  in ``acc`` was computed against ``m_old``: both are multiplied by ``alpha = exp(m_old - m_new)``
  before the block's own terms are added. ``acc`` is divided by ``l_i`` once, at the end, and
  ``lse = m_i + log(l_i)`` (the maximum put back).
* Masking with ``-inf``. Padded keys (``j >= N_KV``, in the last key block) and keys hidden by the
  causal mask get the score ``-inf``: the one value that changes no maximum and whose ``exp`` is 0,
  so they add nothing to ``l_i`` or ``acc``. The key-padding mask is added as a bias row (0 or
  ``-inf``), the causal mask is a ``tl.where``; either form works for finite scores.
* Causal attention is bottom-right aligned (FlashAttention-2, ``causal_lower_right`` in PyTorch):
  query ``i`` sees key ``j`` iff ``j <= i + (N_KV - N_Q)``, so the last query sees every key. With
  ``N_Q > N_KV`` the first ``N_Q - N_KV`` queries see no key at all. Such a *fully masked row* has
  every score ``-inf``: its softmax is 0 / 0. The contract defines it as ``out = 0`` and
  ``lse = -inf``. Two guards make that so: while the running maximum is still ``-inf`` the
  exponentials are taken against 0 instead (``-inf - -inf`` would be NaN), and at the end a row with
  ``l_i == 0`` is divided by 1, not by 0. The causal loop also stops at the last key block any of
  the program's queries can see; a program whose queries see no key runs no iteration at all.
* Precision: q, k, v are float16 (or bfloat16 on a GPU). Scores, ``m_i``, ``l_i`` and ``acc`` are
  float32; the probabilities ``p`` are cast to v's dtype for the second ``tl.dot`` (as FlashAttention
  does, so it runs on tensor cores), and the output is stored in out's dtype.
* Every load and store is masked: query rows ``>= N_Q`` are loaded as 0 and never stored, key and
  value rows ``>= N_KV`` are loaded as 0 (and their scores masked). Strides come from the tensors;
  only the head dimension is assumed contiguous (the contract has no stride for it).
"""

import math

import torch
import triton
import triton.language as tl

# ---------------------------------------------------------------------------
# Attention forward, one program per (query block, batch * head)
# ---------------------------------------------------------------------------


@triton.jit
def attention_kernel(
    q_ptr,  # pointer to the queries, shape (B, H, N_Q, HEAD_DIM), head dim contiguous
    k_ptr,  # pointer to the keys, shape (B, H, N_KV, HEAD_DIM), head dim contiguous
    v_ptr,  # pointer to the values, shape (B, H, N_KV, HEAD_DIM), head dim contiguous
    out_ptr,  # pointer to the output, shape (B, H, N_Q, HEAD_DIM), q's dtype, head dim contiguous
    lse_ptr,  # pointer to the float32 log-sum-exp of each row of scores, shape (B, H, N_Q)
    sm_scale,  # scores are sm_scale * dot(q[i], k[j])
    stride_qb, stride_qh, stride_qm,  # elements between batches, heads, query rows of q
    stride_kb, stride_kh, stride_kn,  # elements between batches, heads, key rows of k
    stride_vb, stride_vh, stride_vn,  # elements between batches, heads, value rows of v
    stride_ob, stride_oh, stride_om,  # elements between batches, heads, rows of out
    stride_lb, stride_lh,  # elements between batches, heads of lse (its rows are contiguous)
    B,  # batch size
    H,  # number of heads
    N_Q,  # number of queries per (batch, head)
    N_KV,  # number of keys (and values) per (batch, head)
    CAUSAL: tl.constexpr,  # bottom-right causal mask: query i sees key j iff j <= i + N_KV - N_Q
    HEAD_DIM: tl.constexpr,  # the head dimension (16, 32, 64 or 128): one block holds a whole row
    BLOCK_M: tl.constexpr,  # queries per program
    BLOCK_N: tl.constexpr,  # keys per step of the loop
):
    """out[b, h, rows] and lse[b, h, rows] for BLOCK_M query rows; grid = (cdiv(N_Q, BLOCK_M), B * H)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)  # = b * H + h
    b = (bh // H).to(tl.int64)  # 64-bit: b * stride_qb can pass 2**31 on large inputs
    h = (bh % H).to(tl.int64)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's query rows
    offs_n = tl.arange(0, BLOCK_N)  # key rows within one key block
    offs_d = tl.arange(0, HEAD_DIM)
    row_mask = offs_m < N_Q

    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh

    # The queries stay in registers for the whole loop; padded rows load 0 and are never stored.
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=row_mask[:, None], other=0.0)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max of each row's scores
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)  # running sum of exp(s - m_i)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)  # running sum of exp(s - m_i) * v

    # Query i sees key j iff j <= i + causal_offset (bottom-right aligned causal mask).
    causal_offset = N_KV - N_Q
    hi = N_KV
    if CAUSAL:
        # Stop after the last key the block's last query can see (<= 0: this block sees no key).
        hi = tl.minimum(N_KV, (start_m + 1) * BLOCK_M + causal_offset)

    for start_n in range(0, hi, BLOCK_N):
        offs_kv = start_n + offs_n
        kv_mask = offs_kv < N_KV
        k = tl.load(k_base + offs_kv[:, None] * stride_kn + offs_d[None, :], mask=kv_mask[:, None], other=0.0)
        v = tl.load(v_base + offs_kv[:, None] * stride_vn + offs_d[None, :], mask=kv_mask[:, None], other=0.0)

        # Scores of this block, float32: (BLOCK_M, HEAD_DIM) x (HEAD_DIM, BLOCK_N).
        s = tl.dot(q, tl.trans(k)) * sm_scale
        # Padded keys (only in the last block) get -inf: no max, and exp(-inf) = 0 in every sum.
        s += tl.where(kv_mask, 0.0, float("-inf"))[None, :]
        if CAUSAL:
            s = tl.where(offs_kv[None, :] <= offs_m[:, None] + causal_offset, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row that has seen only masked keys still has m_new = -inf, and exp(-inf - -inf) is NaN:
        # exponentiate against 0 instead, so its alpha and p are exp(-inf) = 0.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)  # rescales what was summed against the old max
        p = tl.exp(s - m_safe[:, None])

        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc += tl.dot(p.to(v.dtype), v)  # p in v's dtype for the tensor cores, accumulated in float32
        m_i = m_new

    # Epilogue: normalise once. A fully masked row has l_i = 0 and acc = 0: it gets 0 and lse = -inf.
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = m_i + tl.log(l_i)
    lse = tl.where(empty, float("-inf"), lse)

    out_ptrs = out_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=row_mask[:, None])
    tl.store(lse_ptr + b * stride_lb + h * stride_lh + offs_m, lse, mask=row_mask)


# ---------------------------------------------------------------------------
# Host function
# ---------------------------------------------------------------------------

MAX_BLOCK = 64  # queries per program and keys per loop step on long sequences
MIN_BLOCK = 16  # tl.dot on a GPU needs every block dimension >= 16


def _block(n):
    """next_power_of_2(n), capped at MAX_BLOCK and at least MIN_BLOCK."""
    return max(MIN_BLOCK, min(MAX_BLOCK, triton.next_power_of_2(n)))


def attention(q, k, v, causal=False, sm_scale=None):
    """Scaled dot-product attention of q (B, H, N_Q, D) over k, v (B, H, N_KV, D), in one kernel launch.

    Returns ``(out, lse)``: out like q (same dtype and shape), lse float32 of shape (B, H, N_Q), the
    natural-log log-sum-exp of each row of scaled (and, with ``causal``, bottom-right masked) scores.
    ``sm_scale`` defaults to 1 / sqrt(D). Only the head dimension needs to be contiguous.
    """
    assert q.ndim == 4 and k.ndim == 4 and v.ndim == 4, "q, k, v must be (B, H, N, HEAD_DIM)"
    B, H, N_Q, D = q.shape
    N_KV = k.shape[2]
    assert k.shape == (B, H, N_KV, D) and v.shape == (B, H, N_KV, D), "k and v must be (B, H, N_KV, HEAD_DIM)"
    assert D in (16, 32, 64, 128), "HEAD_DIM must be 16, 32, 64 or 128"
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    # The kernel steps along the head dimension one element at a time.
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))

    out = torch.empty_like(q)
    lse = torch.empty((B, H, N_Q), device=q.device, dtype=torch.float32)
    block_m, block_n = _block(N_Q), _block(N_KV)
    grid = (triton.cdiv(N_Q, block_m), B * H)
    attention_kernel[grid](
        q, k, v, out, lse, sm_scale,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        lse.stride(0), lse.stride(1),
        B, H, N_Q, N_KV,
        CAUSAL=causal, HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n,
    )
    return out, lse
