"""Oracles and trap signatures for `softmax` (chapter 19: row-wise softmax, numerical stability, online
softmax).

The oracle is a real `torch.nn.Softmax(dim=-1)` in float64 on the float32 inputs. Each trap function
predicts what one mistake outputs on the same inputs, emulating float32 where the mistake depends on
it (exp overflows to inf past 88.72 and underflows to 0 below -103.9); the grader names the trap when
the student's output matches the prediction and the oracle does not.

Row kinds (a case's `kind`) are this assignment's own: see ROW_KINDS.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from grader.oracles import Baseline, Case, In, InputMaker, Out, Problem, Signature, Stride

F32_MAX = torch.finfo(torch.float32).max
F32_TINY = torch.finfo(torch.float32).tiny  # smallest normal float32; below it GPUs may flush to 0
LOG_F32_MAX = math.log(F32_MAX)  # 88.7228...: exp overflows float32 above this
INF = float("inf")


MAX_BLOCK = 1 << 20  # a launched BLOCK_N beyond this is no block a kernel could hold


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


# --------------------------------------------------------------------------- inputs


def _extreme(maker: InputMaker, m: int, n: int) -> torch.Tensor:
    """Rows alternating between logits ~ +100 (exp overflows float32: inf / inf = NaN) and ~ -1e4 (exp
    underflows to 0: 0 / 0 = NaN), both harmless once the row max is subtracted."""
    high = maker.normal(m, n, mean=100.0, std=4.0)
    low = maker.normal(m, n, mean=-1e4, std=2.0)
    return torch.where((torch.arange(m, device=high.device) % 2 == 0)[:, None], high, low)


def _rising(maker: InputMaker, m: int, n: int) -> torch.Tensor:
    """A trend from -4 to 4 along the row plus small noise: the running max grows in almost every chunk."""
    noise = maker.normal(m, n, std=0.5).double()
    trend = torch.linspace(-4.0, 4.0, n, dtype=torch.float64, device=noise.device)[None, :]
    return (trend + noise).to(torch.float32)


ROW_KINDS: dict[str, Callable[[InputMaker, int, int], torch.Tensor]] = {
    # N(0, 2): the everyday case
    "random": lambda maker, m, n: maker.normal(m, n, std=2.0),
    # every logit in [-8, -1]: a padded lane loaded as 0 becomes the row max and its exp(0) leaks in
    "all-negative": lambda maker, m, n: maker.uniform(m, n, low=-8.0, high=-1.0),
    "rising": _rising,
    "extreme": _extreme,
}


# Row 0 of every case ends in its maximum, this far above the rest of the row.
LAST_MAX_STEP = 0.75


def softmax_inputs(case: Case, maker: InputMaker) -> dict[str, Any]:
    m, n = case.dims["M"], case.dims["N"]
    if case.kind not in ROW_KINDS:
        raise ValueError(f"case {case.id}: unknown kind {case.kind!r} (known: {', '.join(ROW_KINDS)})")
    x = ROW_KINDS[case.kind](maker, m, n)
    if n >= 2:
        # An online kernel's running max then grows in its last chunk whatever chunk width a wrapper chose, so a
        # missing rescale shows in every case at every draw (with the max wherever it fell, a wrapper's online
        # kernel passed softmax-basic at half the seeds: grader margins). 0.75 keeps all-negative rows negative.
        x[0, -1] = x[0, :-1].max() + LAST_MAX_STEP
    return {"x": x}


def softmax_expected(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {"out": torch.nn.Softmax(dim=-1)(inputs["x"].double())}


def softmax_kernel_args(inputs: dict[str, Any]) -> dict[str, Any]:
    m, n = inputs["x"].shape
    # `out` gets its own row gap in row-gap layouts: stride_xm and stride_om differ there.
    return {"x_ptr": In("x"), "out_ptr": Out("out", (m, n)), "M": m, "N": n,
            "stride_xm": Stride("x_ptr", 0), "stride_om": Stride("out_ptr", 0)}


def softmax_call_args(inputs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    return [In("x")], {}


# --------------------------------------------------------------------------- float32 emulation


def _exp32(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """exp(z) (float64 z) as float32 computes it: inf past the largest float32, 0 below half the
    smallest denormal. Also returns where that is uncertain: `edge`, at the overflow threshold
    (rounding decides between the largest float and inf), and `denormal`, results the interpreter
    keeps but a GPU's fast exp flushes to 0."""
    e = torch.exp(z)
    e = torch.where(e > F32_MAX, torch.full_like(e, INF), e)
    e = torch.where(e < 2.0**-150, torch.zeros_like(e), e)
    edge = (z - LOG_F32_MAX).abs() < 1e-3
    denormal = (e > 0) & (e < F32_TINY)
    return e, edge, denormal


def _normalise32(e: torch.Tensor, extra: torch.Tensor | float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """e / (row sum of e + extra) with the sum overflowing to inf as in float32; rows whose sum sits at
    the overflow edge or below the smallest normal float32 are uncertain (returned as a row mask)."""
    total = e.sum(dim=-1) + extra
    edge = ((total - F32_MAX).abs() < 1e-5 * F32_MAX) | ((total > 0) & (total < F32_TINY))
    total = torch.where(total > F32_MAX, torch.full_like(total, INF), total)
    return e / total[:, None], edge


def _signature(out: torch.Tensor, uncertain: torch.Tensor) -> Signature:
    """A prediction whose uncertain positions may hold anything (NaN included)."""
    return Signature({"out": out}, unconstrained={"out": uncertain})


# --------------------------------------------------------------------------- traps


def trap_no_max_subtraction(inputs: dict[str, Any]) -> Signature:
    """exp(x) / sum(exp(x)) in float32: logits past 88.7 give inf (inf / inf = NaN there, finite / inf
    = 0 elsewhere); rows whose every exp underflows give 0 / 0 = NaN. Identical to the correct
    softmax on ordinary logits, so only extreme rows tell it apart."""
    x = inputs["x"].double()
    e, edge, denormal = _exp32(x)
    out, row_edge = _normalise32(e)
    rows = row_edge | edge.any(dim=-1)
    return _signature(out, rows[:, None] | denormal)


def _launched_blocks(inputs: dict[str, Any]) -> list[int] | None:
    """The BLOCK_N the outputs were computed with, from `inputs["_launches"]`: the grader's own launch in a
    kernel case (the case's `meta`), every launch a wrapper made in a wrapper case (its launch record).
    None where no launch says (a wrapper that launched a kernel of its own with other names, or none)."""
    blocks = {launch["meta"]["BLOCK_N"] for launch in inputs.get("_launches", ())
              if type(launch.get("meta", {}).get("BLOCK_N")) is int and 0 < launch["meta"]["BLOCK_N"] <= MAX_BLOCK}
    return sorted(blocks) or None


def _padding_counts(n: int, blocks: list[int] | None) -> list[int]:
    """How many padded lanes a kernel loads past the row's end: up to the next multiple of BLOCK_N (for
    the one-block kernel, BLOCK_N >= N, that is BLOCK_N - N). Where the block is not known, every count
    a power-of-two block up to 2 * next_power_of_2(N) could give."""
    if blocks is None:
        blocks = [1 << k for k in range(0, (2 * _next_pow2(n)).bit_length())]
    return sorted({c for c in (-(-n // b) * b - n for b in blocks) if c > 0})


def trap_padding_zero(inputs: dict[str, Any]) -> list[Signature]:
    """Padded lanes loaded as 0 instead of -inf. Either the 0s take part in the max (the max of an
    all-negative row becomes 0) or the max is masked but exp(0 - max) still joins the sum: both add
    pad * exp(-max) to the denominator, a large leak when every logit is negative."""
    x = inputs["x"].double()
    sigs = []
    for pad in _padding_counts(x.shape[-1], _launched_blocks(inputs)):
        for zero_in_max in (True, False):
            m = x.max(dim=-1).values
            if zero_in_max:
                m = m.clamp(min=0.0)
            e, edge, denormal = _exp32(x - m[:, None])
            leak, leak_edge, _ = _exp32(-m)
            out, row_edge = _normalise32(e, pad * leak)
            rows = row_edge | leak_edge | edge.any(dim=-1)
            sigs.append(_signature(out, rows[:, None] | denormal))
    return sigs


def _chunk_blocks(n: int, blocks: list[int] | None) -> list[int]:
    """The chunk widths an online kernel may have used: the launched BLOCK_N below N (a block of N or more
    is one chunk), or where the block is not known every power of two below N."""
    if blocks is not None:
        return [b for b in blocks if b < n]
    return [1 << k for k in range(0, max(n - 1, 1).bit_length())]


def _no_rescale(x: torch.Tensor, block: int) -> torch.Tensor:
    """Online softmax whose running sum is never rescaled: chunk c adds sum(exp(x - m_c)) with m_c the
    running max after chunk c, and the old terms keep their stale (smaller) maxima. The final max is
    right, so out = exp(x - max) / that too-large sum."""
    m, n = x.shape
    chunks = -(-n // block)
    padded = torch.full((m, chunks * block), -INF, dtype=torch.float64)
    padded[:, :n] = x
    blocks = padded.view(m, chunks, block)
    running = blocks.max(dim=-1).values.cummax(dim=-1).values  # (m, chunks)
    total = torch.exp(blocks - running[..., None]).sum(dim=(-1, -2))
    return torch.exp(x - running[:, -1:]) / total[:, None]


def trap_online_rescale_missing(inputs: dict[str, Any]) -> list[Signature]:
    """The running sum not rescaled when a chunk raises the max; one prediction per possible chunk."""
    x = inputs["x"].double()
    return [Signature({"out": _no_rescale(x, b)}) for b in _chunk_blocks(x.shape[-1], _launched_blocks(inputs))]


def trap_wrong_axis(inputs: dict[str, Any]) -> list[Signature]:
    """Rows and columns swapped, so that the output is normalised down its columns. Two ways:

    * the input normalised down its columns (dim=0): a kernel that takes its program id as a column and its
      lanes as rows computes this; launched with the contract's grid (M,) it covers only columns 0..M-1, so
      when M < N the remaining columns are not compared;
    * each row's softmax stored down a column (`out + col * stride_om + row`, loads right): on square
      inputs that is the transpose of the right answer (on others the stores leave the output: oob-write).
    """
    x = inputs["x"].double()
    m, n = x.shape
    if m == 1:
        return []  # a single row: every column softmax is 1, nothing to tell apart
    beyond = torch.zeros(m, n, dtype=torch.bool)
    beyond[:, m:] = True
    sigs = [Signature({"out": torch.softmax(x, dim=0)}, undefined={"out": beyond})]
    if m == n:
        sigs.append(Signature({"out": torch.softmax(x, dim=-1).T.contiguous()}))
    return sigs


# --------------------------------------------------------------------------- performance baseline

SOFTMAX_BASELINE = Baseline(
    label="torch.softmax(x, dim=-1)",
    run=lambda i: torch.softmax(i["x"], dim=-1),
    bytes_moved=lambda d: 4 * 2 * d["M"] * d["N"],  # float32: read x once, write out once
)

# --------------------------------------------------------------------------- registration

# One problem for all three targets: the trap functions read the launched BLOCK_N from
# `inputs["_launches"]` (the case's `meta` for a kernel case, the wrapper's launch record for a wrapper
# case), so the one-block kernel, the online kernel and the wrapper share their signatures, and the
# grader relates wrapper cases to the kernels' cases.
PROBLEMS = {
    "softmax": Problem(
        name="softmax",
        make_inputs=softmax_inputs,
        expected=softmax_expected,
        kernel_args=softmax_kernel_args,
        call_args=softmax_call_args,
        traps={
            "no-max-subtraction": trap_no_max_subtraction,
            "padding-zero-not-neg-inf": trap_padding_zero,
            "online-rescale-missing": trap_online_rescale_missing,
            "wrong-axis": trap_wrong_axis,
        },
        baseline=SOFTMAX_BASELINE,
    ),
}
