"""Oracles and trap signatures for `attention` (the capstone: a FlashAttention-style fused forward with an
online softmax, a bottom-right causal mask and the row-wise log-sum-exp).

The oracle is `torch.nn.functional.scaled_dot_product_attention` in float64 on the float16 (or bfloat16)
inputs as placed, with the causal mask aligned bottom-right (query i sees key j iff j <= i + N_KV - N_Q,
FlashAttention-2's convention and torch's `causal_lower_right`), and the log-sum-exp from
`torch.logsumexp` of the same scaled, masked scores. A query that sees no key at all (causal, N_Q > N_KV)
has out = 0 and lse = -inf: the spec's rule, which SDPA leaves undefined (NaN), so the oracle sets it.

Each trap function predicts what one mistake outputs on the same inputs, in float64, block by block where
the mistake depends on the key block a kernel walks (read from `inputs["_launches"]`, the launch's
BLOCK_N). Input kinds are this assignment's own: see KINDS.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from grader.oracles import Baseline, Case, In, InputMaker, Out, Problem, Signature, Stride

INF = float("inf")
LN2 = math.log(2.0)
F16_OVERFLOW = 65520.0  # float16 rounds |x| >= 65520 to inf (its largest finite value is 65504)
MAX_BLOCK = 1 << 12  # a launched BLOCK_N beyond this is no block a kernel could hold
LARGE_V_MEAN = 300.0  # the values of `uniform-large-v`: a float16 running sum of 256 of them overflows
RISE = 8.0  # `rising` scores go from about -RISE to +RISE along the keys
# The spec's tolerance per inputs' dtype (atol = rtol: assignment.toml's [tolerances.attention]), for predicates.
BAND = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-3}
LAST_KEY_STEP = 1.5  # the last key scores this much above every other key for the last query (`random`)

# --------------------------------------------------------------------------- inputs


def _random(maker: InputMaker, b: int, h: int, nq: int, nkv: int, d: int) -> dict[str, torch.Tensor]:
    return {"q": maker.normal(b, h, nq, d), "k": maker.normal(b, h, nkv, d), "v": maker.normal(b, h, nkv, d)}


def _rising(maker: InputMaker, b: int, h: int, nq: int, nkv: int, d: int) -> dict[str, torch.Tensor]:
    """Queries with a positive mean and keys along a ramp in that direction: every query's score rises by about
    2 * RISE from the first key to the last, so the running max grows in every key block an online kernel walks
    (and the last keys' scores are so high that a few padded keys scoring 0 are lost in the rounding)."""
    q = (maker.normal(b, h, nq, d).double() + 1.0)
    ramp = torch.linspace(-1.0, 1.0, nkv, dtype=torch.float64)[:, None] * (RISE / math.sqrt(d))
    k = maker.normal(b, h, nkv, d).double() * 0.5 + ramp
    v = maker.normal(b, h, nkv, d)
    return {"q": q.to(v.dtype), "k": k.to(v.dtype), "v": v}


def _uniform_large_v(maker: InputMaker, b: int, h: int, nq: int, nkv: int, d: int) -> dict[str, torch.Tensor]:
    """Zero queries (every score 0: each key weighs exactly 1 before normalising) and values near 300: the
    output is the mean value, ~300, while the unnormalised running sum reaches 300 * N_KV, past float16's
    65504 for N_KV >= 219. A float32 accumulator holds it; a float16 one overflows to inf."""
    k = maker.normal(b, h, nkv, d)
    v = maker.normal(b, h, nkv, d, mean=LARGE_V_MEAN, std=4.0)
    return {"q": torch.zeros(b, h, nq, d, dtype=v.dtype), "k": k, "v": v}


KINDS: dict[str, Callable[[InputMaker, int, int, int, int, int], dict[str, torch.Tensor]]] = {
    "random": _random,
    "rising": _rising,
    "uniform-large-v": _uniform_large_v,
}


def attention_inputs(case: Case, maker: InputMaker) -> dict[str, Any]:
    d = case.dims
    if case.kind not in KINDS:
        raise ValueError(f"case {case.id}: unknown kind {case.kind!r} (known: {', '.join(KINDS)})")
    tensors = KINDS[case.kind](maker, d["B"], d["H"], d["NQ"], d["NKV"], d["D"])
    causal = bool(case.meta.get("CAUSAL", case.options.get("causal", False)))
    given = case.options.get("sm_scale")
    scale = float(given) if given is not None else 1.0 / math.sqrt(d["D"])
    if case.kind == "random" and d["NKV"] >= 2:
        tensors["k"] = _last_key_wins(tensors["q"], tensors["k"], scale)
    return {**tensors, "causal": causal, "sm_scale": scale, "scale_given": given is not None}


def _last_key_wins(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """k with its last key along the last query, scoring LAST_KEY_STEP above that query's best other key. The
    last query sees every key (causal or not), so its running max grows in the last key block whatever block
    width a kernel walks: a missing rescale shows at every draw (with the max wherever it fell, it showed at
    6 of 8 seeds: grader margins)."""
    q64, k64 = q.double(), k.double()
    last_q = q64[:, :, -1, :]
    others = scale * (k64[:, :, :-1, :] @ last_q[..., None]).squeeze(-1)
    target = others.max(dim=-1).values + LAST_KEY_STEP
    k64[:, :, -1, :] = last_q * (target / (scale * (last_q * last_q).sum(dim=-1)))[..., None]
    return k64.to(k.dtype)


def attention_kernel_args(inputs: dict[str, Any]) -> dict[str, Any]:
    q, k = inputs["q"], inputs["k"]
    b, h, nq, _ = q.shape
    # `out` shares q's layout (and dtype); lse is float32 with a row gap of its own.
    return {
        "q_ptr": In("q"), "k_ptr": In("k"), "v_ptr": In("v"),
        "out_ptr": Out("out", tuple(q.shape), like="q_ptr", dtype=q.dtype), "lse_ptr": Out("lse", (b, h, nq)),
        "sm_scale": inputs["sm_scale"],
        **{f"stride_{t}{axis}": Stride(param, dim)
           for t, param in (("q", "q_ptr"), ("k", "k_ptr"), ("v", "v_ptr"), ("o", "out_ptr"))
           for dim, axis in enumerate(("b", "h", "m" if t in "qo" else "n"))},
        "stride_lb": Stride("lse_ptr", 0), "stride_lh": Stride("lse_ptr", 1),
        "B": b, "H": h, "N_Q": nq, "N_KV": k.shape[2],
    }


def attention_call_args(inputs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    kwargs: dict[str, Any] = {"causal": inputs["causal"]}
    if inputs["scale_given"]:
        kwargs["sm_scale"] = inputs["sm_scale"]
    return [In("q"), In("k"), In("v")], kwargs


def attention_output_dtypes(inputs: dict[str, Any]) -> dict[str, torch.dtype]:
    return {"out": inputs["q"].dtype, "lse": torch.float32}


# --------------------------------------------------------------------------- the oracle


def visible(nq: int, nkv: int, causal: bool, shift: int = 0) -> torch.Tensor:
    """(NQ, NKV) True where query i sees key j: every key, or with `causal` j <= i + (NKV - NQ) + shift."""
    if not causal:
        return torch.ones(nq, nkv, dtype=torch.bool)
    i = torch.arange(nq)[:, None]
    j = torch.arange(nkv)[None, :]
    return j <= i + (nkv - nq) + shift


def scores(inputs: dict[str, Any], scale: float, shift: int = 0) -> torch.Tensor:
    """scale * q k^T in float64, masked to -inf where the key is not seen."""
    q, k = inputs["q"].double(), inputs["k"].double()
    s = scale * (q @ k.transpose(-1, -2))
    return s.masked_fill(~visible(q.shape[2], k.shape[2], inputs["causal"], shift), -INF)


def attention_expected(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    q, k, v = (inputs[n].double() for n in ("q", "k", "v"))
    seen = visible(q.shape[2], k.shape[2], inputs["causal"])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=seen, scale=inputs["sm_scale"])
    s = scores(inputs, inputs["sm_scale"])
    lse = torch.logsumexp(s, dim=-1)
    empty = ~seen.any(dim=-1)  # rows that see no key: out 0, lse -inf (the spec's rule)
    out = out.masked_fill(empty[:, None], 0.0)
    return {"out": out, "lse": lse.masked_fill(empty, -INF)}


def _softmax(s: torch.Tensor, v: torch.Tensor, base: float = math.e) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of masked scores `s` with the spec's rule for empty rows, exponentials in `base` (e: right;
    2: exp2 without log2 e) and lse = m + ln(sum base^(s - m))."""
    m = s.max(dim=-1).values
    empty = torch.isinf(m) & (m < 0)
    m0 = m.masked_fill(empty, 0.0)
    p = torch.pow(base, s - m0[..., None])
    total = p.sum(dim=-1)
    out = (p @ v) / total.masked_fill(empty, 1.0)[..., None]
    lse = (m0 + torch.log(total)).masked_fill(empty, -INF)
    return out.masked_fill(empty[..., None], 0.0), lse


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A row mask ((NQ,) or (B, H, NQ)) as a mask of output `like`: lse (B, H, NQ) or out (B, H, NQ, D)."""
    return (mask[..., None] if like.dim() == 4 else mask).expand(like.shape)


# --------------------------------------------------------------------------- the launch's key block


def launched_blocks(inputs: dict[str, Any]) -> list[int] | None:
    """The BLOCK_N the outputs were computed with (the case's meta for a kernel case, each launch a wrapper
    made), or None where no launch says (a kernel of the student's own with other names)."""
    blocks = {launch["meta"]["BLOCK_N"] for launch in inputs.get("_launches", ())
              if type(launch.get("meta", {}).get("BLOCK_N")) is int and 0 < launch["meta"]["BLOCK_N"] <= MAX_BLOCK}
    return sorted(blocks) or None


def launched_tiles(inputs: dict[str, Any]) -> list[tuple[int, int]]:
    """(BLOCK_M, BLOCK_N) of each launch that says both (none where no launch does)."""
    tiles = set()
    for launch in inputs.get("_launches", ()):
        meta = launch.get("meta", {})
        bm, bn = meta.get("BLOCK_M"), meta.get("BLOCK_N")
        if type(bm) is int and type(bn) is int and 0 < bm <= MAX_BLOCK and 0 < bn <= MAX_BLOCK:
            tiles.add((bm, bn))
    return sorted(tiles)


def _candidate_blocks(nkv: int, blocks: list[int] | None) -> list[int]:
    """The key blocks a kernel may have walked: the launched BLOCK_N, or every power of two up to twice N_KV."""
    if blocks is not None:
        return blocks
    top = 1 << max(nkv - 1, 1).bit_length()
    return [1 << e for e in range(0, (2 * top).bit_length())]


def _running_max(s: torch.Tensor, block: int) -> torch.Tensor:
    """(..., NQ, C) the running max after each key block of width `block`, padded blocks at -inf."""
    nkv = s.shape[-1]
    chunks = -(-nkv // block)
    padded = F.pad(s, (0, chunks * block - nkv), value=-INF)
    per_block = padded.unflatten(-1, (chunks, block)).max(dim=-1).values
    return per_block.cummax(dim=-1).values


# --------------------------------------------------------------------------- traps


def trap_no_rescale(inputs: dict[str, Any]) -> list[Signature]:
    """The running output is not multiplied by alpha = exp(m_old - m_new) when a key block raises the max (the
    running sum is): block c adds exp(s - m_c) v with m_c the max after block c, and those terms are never
    brought down to the final max, so out = sum_c exp(s_c - m_c) v_c / l. Right with one key block."""
    s = scores(inputs, inputs["sm_scale"])
    v = inputs["v"].double()
    nkv = s.shape[-1]
    right = attention_expected(inputs)
    sigs = []
    for block in _candidate_blocks(nkv, launched_blocks(inputs)):
        if block >= nkv:
            continue
        running = _running_max(s, block)  # (B, H, NQ, C)
        per_key = running.repeat_interleave(block, dim=-1)[..., :nkv]
        m0 = per_key.masked_fill(torch.isinf(per_key), 0.0)
        acc = torch.exp(s - m0) @ v
        final = running[..., -1]
        empty = torch.isinf(final) & (final < 0)
        total = torch.exp(s - final.masked_fill(empty, 0.0)[..., None]).sum(dim=-1).masked_fill(empty, 1.0)
        out = (acc / total[..., None]).masked_fill(empty[..., None], 0.0)
        sigs.append(Signature({"out": out, "lse": right["lse"]}))
    return sigs


def trap_scale_twice(inputs: dict[str, Any]) -> Signature:
    """Scores scaled by sm_scale twice (q and the product both scaled, or the scale folded in and applied
    again): a softmax of sm_scale^2 q.k, too flat by a factor 1/sqrt(d) more."""
    out, lse = _softmax(scores(inputs, inputs["sm_scale"] ** 2), inputs["v"].double())
    return Signature({"out": out, "lse": lse})


def trap_scale_after_softmax(inputs: dict[str, Any]) -> list[Signature]:
    """softmax(q.k) without the scale, then the output multiplied by sm_scale: the weights are too sharp and
    the output too small by the scale factor. The lse of the unscaled scores, or anything."""
    out, lse = _softmax(scores(inputs, 1.0), inputs["v"].double())
    out = out * inputs["sm_scale"]
    everywhere = torch.ones_like(lse, dtype=torch.bool)
    return [Signature({"out": out, "lse": lse}), Signature({"out": out, "lse": lse}, unconstrained={"lse": everywhere})]


def trap_causal_off_by_one(inputs: dict[str, Any]) -> list[Signature]:
    """The causal mask one key off: the diagonal excluded (j < i + off) or the next key included
    (j <= i + off + 1). A query left with no key gives anything (0, NaN): not compared there. For the next key
    included, also the form where the rows whose extra key opens a new key block (of the launched BLOCK_N) are
    not compared: a loop that stops at the query block's last needed key block never loads it."""
    if not inputs["causal"]:
        return []
    v = inputs["v"].double()
    nq, nkv = inputs["q"].shape[2], v.shape[2]
    sigs = []
    for shift in (-1, 1):
        out, lse = _softmax(scores(inputs, inputs["sm_scale"], shift), v)
        empty = ~visible(nq, nkv, True, shift).any(dim=-1)
        if bool(visible(nq, nkv, True, shift).equal(visible(nq, nkv, True))):
            continue
        sigs.append(Signature({"out": out, "lse": lse},
                              unconstrained={"out": _rows(empty, out), "lse": _rows(empty, lse)}))
        if shift == 1:
            # A kernel whose causal loop stops at the last key block its query block needs never reaches the
            # extra key where that key opens a new block: those rows may come out right.
            for block in launched_blocks(inputs) or []:
                opens = (torch.arange(nq) + (nkv - nq) + 1) % block == 0
                sigs.append(Signature({"out": out, "lse": lse}, unconstrained={
                    "out": _rows(empty | opens, out), "lse": _rows(empty | opens, lse)}))
    return sigs


def trap_causal_top_left(inputs: dict[str, Any]) -> list[Signature]:
    """The causal mask aligned top-left (j <= i) instead of bottom-right (j <= i + N_KV - N_Q): the same mask
    when N_Q = N_KV; otherwise the queries see the keys of other positions. No query is left without a key.
    Or the mask right but the key loop stopped where a top-left mask would end it ((start_m + 1) * BLOCK_M, with
    fewer queries than keys): the keys past the last block walked are never seen (per launched block sizes)."""
    nq, nkv = inputs["q"].shape[2], inputs["k"].shape[2]
    if not inputs["causal"] or nq == nkv:
        return []
    v = inputs["v"].double()
    out, lse = _softmax(scores(inputs, inputs["sm_scale"], shift=nq - nkv), v)
    sigs = [Signature({"out": out, "lse": lse})]
    if nq < nkv:
        for block_m, block_n in launched_tiles(inputs):
            starts = torch.arange(nq) // block_m * block_m  # each query's block's first row
            walked = -(-torch.clamp(starts + block_m, max=nkv) // block_n) * block_n  # keys the loop reaches
            cut = torch.arange(nkv)[None, :] >= walked[:, None]
            if not bool((cut & visible(nq, nkv, True)).any()):
                continue
            s = scores(inputs, inputs["sm_scale"]).masked_fill(cut, -INF)
            out, lse = _softmax(s, v)
            sigs.append(Signature({"out": out, "lse": lse}))
    return sigs


def trap_kv_padding_unmasked(inputs: dict[str, Any]) -> list[Signature]:
    """Keys past N_KV in the last block not masked to -inf: loaded as 0 (other=0.0), each padded key scores
    q.0 = 0 and joins the softmax with a zero value, so the denominator grows by exp(0 - m) per padded key.
    Under a causal mask the padding is masked anyway (it lies past every query's diagonal)."""
    if inputs["causal"]:
        return []
    s = scores(inputs, inputs["sm_scale"])
    v = inputs["v"].double()
    nkv = s.shape[-1]
    sigs = []
    for block in _candidate_blocks(nkv, launched_blocks(inputs)):
        pad = -(-nkv // block) * block - nkv
        if pad == 0:
            continue
        out, lse = _softmax(F.pad(s, (0, pad), value=0.0), F.pad(v, (0, 0, 0, pad), value=0.0))
        sigs.append(Signature({"out": out, "lse": lse}))
    return sigs


def trap_masked_row_nan(inputs: dict[str, Any]) -> list[Signature]:
    """A query that sees no key (causal, N_Q > N_KV: the first N_Q - N_KV rows) left to the online
    arithmetic: m = -inf, exp(-inf - (-inf)) = NaN, l = 0, so out = 0/0 and lse = NaN instead of the spec's
    0 and -inf: NaN in either output on exactly those rows, the rest right. Or, masked with a finite -1e6, an
    average of whichever masked keys the loop visited: recognised as every other row right and those rows not
    0 / -inf."""
    q, k = inputs["q"], inputs["k"]
    empty = ~visible(q.shape[2], k.shape[2], inputs["causal"]).any(dim=-1)
    if not inputs["causal"] or not bool(empty.any()):
        return []
    right = attention_expected(inputs)
    nan_out = right["out"].masked_fill(_rows(empty, right["out"]), float("nan"))
    nan_lse = right["lse"].masked_fill(_rows(empty, right["lse"]), float("nan"))
    tolerance = BAND[q.dtype]

    def only_empty_rows_wrong(outputs: Mapping[str, torch.Tensor]) -> bool:
        out, lse = outputs["out"].double(), outputs["lse"].double()
        seen_right = (_close(out, right["out"], tolerance)[:, :, ~empty].all()
                      and _close(lse, right["lse"], tolerance)[:, :, ~empty].all())
        rule = (out[:, :, empty] == 0).all(dim=-1) & (lse[:, :, empty] == -INF)
        return bool(seen_right) and bool((~rule).any())

    return [
        Signature({"out": nan_out, "lse": right["lse"]}, unconstrained={"lse": _rows(empty, right["lse"])}),
        Signature({"out": right["out"], "lse": nan_lse}, unconstrained={"out": _rows(empty, right["out"])}),
        Signature({}, predicate=only_empty_rows_wrong),
    ]


def _close(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> torch.Tensor:
    """Within the spec's tolerance (atol = rtol), the same infinity counting as equal."""
    same_inf = torch.isinf(actual) & (actual == expected)
    return same_inf | ((actual - expected).abs() <= tolerance * (1 + expected.abs()))


def trap_fp16_accumulation(inputs: dict[str, Any]) -> list[Signature] | None:
    """The output accumulator kept in float16: the unnormalised running sum sum_j p_j v_j (p up to 1 per key)
    grows to about N_KV times the values and overflows float16 past 65504, so the output is inf there (and
    rounding elsewhere: a band of one float16 ulp per block). Only inputs whose running sum crosses 65520 show
    it; elsewhere the mistake is rounding the tolerance may hide (None)."""
    s = scores(inputs, inputs["sm_scale"])
    v = inputs["v"].double()
    nkv = s.shape[-1]
    right = attention_expected(inputs)
    sigs = []
    for block in _candidate_blocks(nkv, launched_blocks(inputs)):
        chunks = -(-nkv // block)
        running = _running_max(s, block)
        acc = torch.zeros_like(right["out"])
        overflow = torch.zeros_like(right["out"], dtype=torch.bool)
        near = torch.zeros_like(overflow)
        sign = torch.zeros_like(acc)
        for c in range(chunks):
            m_new = running[..., c]
            m_old = running[..., c - 1] if c else torch.full_like(m_new, -INF)
            alpha = torch.exp(m_old - m_new.masked_fill(torch.isinf(m_new), 0.0)).nan_to_num(0.0)
            cols = slice(c * block, min(nkv, (c + 1) * block))
            p = torch.exp(s[..., cols] - m_new.masked_fill(torch.isinf(m_new), 0.0)[..., None])
            acc = acc * alpha[..., None] + p @ v[..., cols, :]
            fresh = (acc.abs() >= F16_OVERFLOW) & ~overflow
            sign = torch.where(fresh, torch.sign(acc), sign)
            overflow |= acc.abs() >= F16_OVERFLOW
            near |= (acc.abs() - F16_OVERFLOW).abs() < 0.01 * F16_OVERFLOW
        if not bool(overflow.any()):
            continue
        out = torch.where(overflow, sign * INF, right["out"])
        slack = right["out"].abs() * (chunks + 1) * 2.0**-11
        sigs.append(Signature({"out": out, "lse": right["lse"]}, unconstrained={"out": near & ~overflow},
                              slack={"out": slack.masked_fill(overflow, 0.0)}))
    return sigs or None


def trap_exp2_without_log2e(inputs: dict[str, Any]) -> list[Signature]:
    """tl.exp2 in place of tl.exp without folding log2(e) into the scale: the weights are 2^(s - m) =
    e^((s - m) ln 2), a softmax of the scores times ln 2 = 0.69, too flat. lse as m + ln(sum), as m + log2(sum)
    (base 2 throughout, tl.log2 for tl.log: on all-zero queries the output is right and lse is log2(N_KV)), or
    anything."""
    s = scores(inputs, inputs["sm_scale"])
    out, lse = _softmax(s, inputs["v"].double(), base=2.0)
    m = s.max(dim=-1).values
    empty = torch.isinf(m) & (m < 0)
    m0 = m.masked_fill(empty, 0.0)
    log2_sum = (m0 + (lse - m0) / LN2).masked_fill(empty, -INF)  # m + log2(sum 2^(s - m))
    everywhere = torch.ones_like(lse, dtype=torch.bool)
    return [Signature({"out": out, "lse": lse}), Signature({"out": out, "lse": log2_sum}),
            Signature({"out": out, "lse": lse}, unconstrained={"lse": everywhere})]


def trap_lse_base_2(inputs: dict[str, Any]) -> Signature:
    """lse in base-2 units, (m + ln l) * log2(e), the output right (an exp2 kernel's internal form stored as is)."""
    right = attention_expected(inputs)
    return Signature({"out": right["out"], "lse": right["lse"] / LN2})


def trap_lse_without_max(inputs: dict[str, Any]) -> list[Signature]:
    """The log-sum-exp stored as log(l) without adding the running max m back (or its base-2 form, log2(l)):
    the output is right, lse is off by the row's max score."""
    right = attention_expected(inputs)
    s = scores(inputs, inputs["sm_scale"])
    m = s.max(dim=-1).values
    empty = torch.isinf(m) & (m < 0)
    natural = (right["lse"] - m.masked_fill(empty, 0.0)).masked_fill(empty, -INF)
    return [Signature({"out": right["out"], "lse": natural}, unconstrained={"lse": empty}),
            Signature({"out": right["out"], "lse": natural / LN2}, unconstrained={"lse": empty})]


# --------------------------------------------------------------------------- performance baseline


def _sdpa(inputs: dict[str, Any]) -> torch.Tensor:
    # Performance cases have N_Q = N_KV, where SDPA's is_causal (top-left) is the spec's bottom-right mask.
    return F.scaled_dot_product_attention(inputs["q"], inputs["k"], inputs["v"], is_causal=inputs["causal"],
                                          scale=inputs["sm_scale"])


def _flops(d: Mapping[str, int]) -> int:
    return 4 * d["B"] * d["H"] * d["NQ"] * d["NKV"] * d["D"]  # two matmuls, 2 flops per multiply-add


# The flops of the dense product: a causal timed case does about half of them (its "% of roof" reads low).
ATTENTION_BASELINE = Baseline(label="torch.nn.functional.scaled_dot_product_attention", run=_sdpa,
                              outputs=("out",), flops=_flops)

# --------------------------------------------------------------------------- registration

TRAPS = {
    "no-rescale": trap_no_rescale,
    "scale-twice": trap_scale_twice,
    "scale-after-softmax": trap_scale_after_softmax,
    "causal-off-by-one": trap_causal_off_by_one,
    "causal-top-left": trap_causal_top_left,
    "kv-padding-unmasked": trap_kv_padding_unmasked,
    "masked-row-nan": trap_masked_row_nan,
    "fp16-accumulation": trap_fp16_accumulation,
    "exp2-without-log2e": trap_exp2_without_log2e,
    "lse-without-max": trap_lse_without_max,
    "lse-base-2": trap_lse_base_2,
}


def _problem(name: str, baseline: Baseline) -> Problem:
    return Problem(name=name, make_inputs=attention_inputs, expected=attention_expected,
                   kernel_args=attention_kernel_args, call_args=attention_call_args, traps=TRAPS,
                   baseline=baseline, output_dtypes=attention_output_dtypes)


# One problem for the kernel and the wrapper: the trap functions read the launched BLOCK_N from
# `inputs["_launches"]` (the case's meta, or the wrapper's launch record).
PROBLEMS = {"attention": _problem("attention", ATTENTION_BASELINE)}
