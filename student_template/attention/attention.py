"""Your submission for the ``attention`` assignment (FlashAttention-style forward pass).

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

Causal attention is bottom-right aligned: query ``i`` sees key ``j`` iff ``j <= i + (N_KV - N_Q)``.
A query row that sees no key at all (causal, ``N_Q > N_KV``) must give ``out = 0`` and
``lse = -inf``, not NaN.

Keep every name and every parameter order exactly as given: the grader launches your kernel
directly, with its own block sizes, strides and grids, as well as through your host function.
Replace each ``pass`` / ``raise NotImplementedError`` with your code. See README.md.
"""

import math  # noqa: F401  (for the default sm_scale)

import torch  # noqa: F401  (you will need it in the host function)
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
    # TODO 1: this program's query block is tl.program_id(0); tl.program_id(1) is b * H + h. Find
    #         b and h, and the start of this (b, h) in q, k, v, out and lse from their own strides.
    #         Load the (BLOCK_M, HEAD_DIM) block of queries, masked to rows < N_Q.
    # TODO 2: set up the online softmax state for the BLOCK_M rows, all float32: a running max m_i,
    #         a running sum l_i of exp(s - m_i), and an output accumulator acc of shape
    #         (BLOCK_M, HEAD_DIM). What must m_i start at?
    # TODO 3: loop over the keys in blocks of BLOCK_N. Load the K and V blocks, masked to rows
    #         < N_KV. Compute the scores s = sm_scale * q @ k^T with tl.dot (in float32). Give every
    #         padded key (j >= N_KV) the score -inf, and, with CAUSAL, every key j > i + (N_KV - N_Q).
    #         (Optional: with CAUSAL, the loop can stop after the last key this block can see.)
    # TODO 4: update the running max. Everything already summed in l_i AND in acc was computed
    #         against the old max: multiply both by alpha = exp(m_old - m_new) before adding this
    #         block's p = exp(s - m_new) to l_i and p @ v to acc (convert p to v's dtype for the
    #         tl.dot, keep acc float32). A row that has seen only masked keys has m_new = -inf:
    #         what is exp(-inf - (-inf))? Make sure such a row gets alpha = p = 0, not NaN.
    # TODO 5: after the loop, out = acc / l_i and lse = m_i + log(l_i) (natural log). A row that saw
    #         no key at all has l_i = 0: store out = 0 and lse = -inf for it. Store out in out's
    #         dtype (out_ptr.dtype.element_ty) and lse, both masked to rows < N_Q.
    pass


# ---------------------------------------------------------------------------
# Host function
# ---------------------------------------------------------------------------


def attention(q, k, v, causal=False, sm_scale=None):
    """Scaled dot-product attention of q (B, H, N_Q, D) over k, v (B, H, N_KV, D), in one kernel launch.

    Returns ``(out, lse)``: out like q (same dtype and shape), lse float32 of shape (B, H, N_Q), the
    natural-log log-sum-exp of each row of scaled (and, with ``causal``, bottom-right masked) scores.
    ``sm_scale`` defaults to 1 / sqrt(D). Only the head dimension needs to be contiguous.
    """
    # TODO: sm_scale defaults to 1 / sqrt(HEAD_DIM). Copy q, k or v with .contiguous() only if its
    #       last stride is not 1. Allocate out = torch.empty_like(q) and a float32 lse of shape
    #       (B, H, N_Q) on q's device. Pick BLOCK_M and BLOCK_N (powers of two, at least 16 so that
    #       tl.dot compiles on a GPU, e.g. 64 capped by next_power_of_2 of the sequence lengths) and
    #       launch attention_kernel ONCE with grid (cdiv(N_Q, BLOCK_M), B * H), passing every stride
    #       from the tensors' .stride(). Do not compute anything with torch.
    raise NotImplementedError("TODO: attention")
