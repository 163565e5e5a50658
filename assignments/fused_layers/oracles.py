"""Oracles and trap signatures for `fused_layers` (Chapter 20: fused Linear+bias+GELU, row mean/var,
fused LayerNorm).

Oracles run real `torch.nn.Linear` / `torch.nn.LayerNorm` modules (their own .weight, .bias, .eps)
in float64 on the float32 inputs. Each trap function predicts the output under one mistake from the
same inputs; the grader names the trap when the student's output matches it and the oracle does not.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from grader.oracles import Baseline, Case, In, InputMaker, Out, Problem, Signature, Stride

F32_EPS = 2.0**-24  # unit roundoff of float32


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _gelu_erf(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="none")


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


# --------------------------------------------------------------------------- Linear + bias + GELU


def linear_inputs(case: Case, maker: InputMaker) -> dict[str, Any]:
    m, n, k = case.dims["M"], case.dims["N"], case.dims["K"]
    layer = torch.nn.Linear(k, n)
    if case.kind == "exact":
        # Dyadic values: every product and partial sum is exact in tf32/fp32, so the GPU's tf32 matmul
        # is bit-exact and the epilogue (bias axis, GELU flavour) is measured on its own.
        x = maker.exact(m, k, levels=8, scale=0.125)
        weight = maker.exact(n, k, levels=4, scale=0.125)
        bias = maker.exact(n, levels=16, scale=0.125)
    else:
        bound = 1.0 / math.sqrt(k)
        x = maker.normal(m, k)
        weight = maker.uniform(n, k, low=-bound, high=bound)
        bias = maker.uniform(n, low=-1.0, high=1.0)  # larger than nn.Linear's init: bias mistakes show
        bias[0] = _decisive_bias(x[0], weight[0], maker)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return {"x": x, "weight": layer.weight.detach(), "bias": layer.bias.detach(), "layer": layer}


# Pre-activations where the GELU flavours differ by 4x the interpreter's tolerance or more (tanh and erf agree
# to 1e-5 near 0 and cross at 1.88), negative so that gelu(z) + b is far from gelu(z + b) too.
DECISIVE_BANDS = ((-1.5, -1.0), (-3.25, -2.25))


def _decisive_bias(x_row: torch.Tensor, w_row: torch.Tensor, maker: InputMaker) -> float:
    """bias[0] chosen so that output [0, 0] lands in a DECISIVE_BAND, at least 0.5 from the bias-free value: a case
    with one output (1x1x1) or one column decides gelu-tanh and gelu-before-bias by the bug, not by the draw (with
    a bias drawn like the others, a 1x1x1 case exposed gelu-tanh at 21 of 40 seeds: grader margins)."""
    xw = float(x_row.double() @ w_row.double())
    pick = float(maker.uniform(1, low=0.0, high=1.0))
    for low, high in DECISIVE_BANDS:
        target = low + pick * (high - low)
        if abs(target - xw) >= 0.5:
            return target - xw
    low, high = DECISIVE_BANDS[-1]
    return (low if abs(low - xw) > abs(high - xw) else high) - xw


def linear_expected(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    layer64 = torch.nn.Linear(inputs["x"].shape[1], inputs["bias"].shape[0]).double()
    with torch.no_grad():
        layer64.weight.copy_(inputs["layer"].weight.double())
        layer64.bias.copy_(inputs["layer"].bias.double())
        return {"out": _gelu_erf(layer64(inputs["x"].double()))}


def linear_kernel_args(inputs: dict[str, Any]) -> dict[str, Any]:
    m, k = inputs["x"].shape
    n = inputs["weight"].shape[0]
    return {
        "a_ptr": In("x"), "b_ptr": In("weight", transpose=True), "bias_ptr": In("bias"),
        "c_ptr": Out("out", (m, n)),
        "M": m, "N": n, "K": k,
        "stride_am": Stride("a_ptr", 0), "stride_ak": Stride("a_ptr", 1),
        "stride_bk": Stride("b_ptr", 0), "stride_bn": Stride("b_ptr", 1),
        "stride_cm": Stride("c_ptr", 0), "stride_cn": Stride("c_ptr", 1),
    }


def linear_call_args(inputs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    return [In("x"), In("weight"), In("bias")], {}


def _xw(inputs: dict[str, Any]) -> torch.Tensor:
    return inputs["x"].double() @ inputs["weight"].double().T


def trap_bias_wrong_axis(inputs: dict[str, Any]) -> Signature | None:
    """bias[row] added down the rows; rows >= N read past the end of bias (undefined)."""
    xw = _xw(inputs)
    m, n = xw.shape
    if m == n:
        return None
    bias = inputs["bias"].double()
    rows = torch.arange(m)
    row_bias = torch.where(rows < n, bias[rows.clamp(max=n - 1)], torch.zeros(m, dtype=torch.float64))
    out = _gelu_erf(xw + row_bias[:, None])
    undefined = (rows >= n)[:, None].expand(m, n)
    return Signature({"out": out}, undefined={"out": undefined})


def trap_gelu_tanh(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {"out": _gelu_tanh(_xw(inputs) + inputs["bias"].double())}


def trap_gelu_before_bias(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {"out": _gelu_erf(_xw(inputs)) + inputs["bias"].double()}


def trap_weight_not_transposed(inputs: dict[str, Any]) -> Signature | None:
    """The wrapper passed weight [N, K] with its own strides as B [K, N]: B[k, n] = w_flat[k*s0 + n]."""
    weight = inputs["weight"]
    n, k = weight.shape
    if n == k:
        return None
    s0 = inputs.get("_row_strides", {}).get("weight", k)
    flat = torch.full((n * s0,), float("nan"), dtype=torch.float64)
    flat.view(n, s0)[:, :k] = weight.double()
    index = torch.arange(k)[:, None] * s0 + torch.arange(n)[None, :]
    valid = index < flat.numel()
    b = torch.where(valid, flat[index.clamp(max=flat.numel() - 1)], torch.zeros((), dtype=torch.float64))
    gap_read = torch.isnan(b)
    b = torch.where(gap_read, torch.zeros_like(b), b)
    out = _gelu_erf(inputs["x"].double() @ b + inputs["bias"].double())
    # any output column that used an out-of-range or gap element of B is undefined
    bad_cols = (~valid | gap_read).any(dim=0)
    undefined = bad_cols[None, :].expand(out.shape)
    return Signature({"out": out}, undefined={"out": undefined})


# --------------------------------------------------------------------------- row statistics


def _rows(case: Case, maker: InputMaker) -> torch.Tensor:
    return maker.rows(case.kind, case.dims["M"], case.dims["N"])


def row_stats_inputs(case: Case, maker: InputMaker) -> dict[str, Any]:
    return {"x": _rows(case, maker)}


def row_stats_expected(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    x = inputs["x"].double()
    var, mean = torch.var_mean(x, dim=-1, unbiased=False)
    return {"mean": mean, "var": var}


def row_stats_kernel_args(inputs: dict[str, Any]) -> dict[str, Any]:
    m, n = inputs["x"].shape
    return {"x_ptr": In("x"), "mean_ptr": Out("mean", (m,)), "var_ptr": Out("var", (m,)),
            "M": m, "N": n, "stride_m": Stride("x_ptr", 0)}


def row_stats_call_args(inputs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    return [In("x")], {}


def _unbiased(x: torch.Tensor) -> torch.Tensor:
    """Divide by N - 1: with N = 1 that is 0/0, NaN (as a float32 kernel computes it)."""
    n = x.shape[-1]
    if n < 2:
        return torch.full(x.shape[:-1], float("nan"), dtype=torch.float64)
    return x.var(dim=-1, unbiased=True)


MAX_BLOCK = 1 << 20  # a launched BLOCK_N beyond this is no block a row kernel could hold


def _padded_widths(inputs: dict[str, Any], n: int) -> list[int]:
    """The lanes a row kernel loaded per row: N rounded up to a multiple of the BLOCK_N it was launched
    with (`inputs["_launches"]`: the case's `meta`, or the wrapper's launch record); next_power_of_2(N),
    the reference's choice, where no launch says."""
    blocks = {launch["meta"]["BLOCK_N"] for launch in inputs.get("_launches", ())
              if type(launch.get("meta", {}).get("BLOCK_N")) is int and 0 < launch["meta"]["BLOCK_N"] <= MAX_BLOCK}
    return sorted({-(-n // b) * b for b in blocks} if blocks else {_next_pow2(n)})


def _padding_variants(x: torch.Tensor, widths: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(mean, var) when the padded lanes of a row `width` wide are counted: divided by the width
    (BLOCK_N), or unmasked centred zeros."""
    n = x.shape[-1]
    variants = []
    for block in widths:
        if block <= n:
            continue
        total = x.sum(dim=-1)
        mean_b = total / block
        var_b = ((x - mean_b[:, None]) ** 2).sum(dim=-1) / block
        mean = total / n
        var_unmasked = (((x - mean[:, None]) ** 2).sum(dim=-1) + (block - n) * mean**2) / n
        var_both = (((x - mean_b[:, None]) ** 2).sum(dim=-1) + (block - n) * mean_b**2) / block
        variants.extend([(mean_b, var_b), (mean, var_unmasked), (mean_b, var_both)])
    return variants


def _strided_rows(inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Rows as read with row * N instead of row * stride: (rows read, defined mask per row)."""
    x = inputs["x"].double()
    m, n = x.shape
    stride = inputs.get("_row_strides", {}).get("x", n)
    if stride == n:
        return None
    storage = torch.full((m * stride,), float("nan"), dtype=torch.float64)
    storage.view(m, stride)[:, :n] = x
    starts = torch.arange(m) * n
    index = starts[:, None] + torch.arange(n)[None, :]
    read = storage[index]
    defined = ~torch.isnan(read).any(dim=1)
    if not bool(defined[1:].any()):
        return None
    return read, defined


def _cancellation_band(x: torch.Tensor, eps: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, float]:
    """E[x^2] - E[x]^2 in float32 can only be bounded, by a few ulps of E[x^2]. Returns the true
    variance, that band, and how far the result must stray to be told from other small mistakes
    (on large-mean rows the band is wide enough to swallow N/(N-1), so demand a large error there)."""
    mean = x.mean(dim=-1)
    var = x.var(dim=-1, unbiased=False)
    ex2 = (x**2).mean(dim=-1)
    n = x.shape[-1]
    band = F32_EPS * ex2 * (4 * math.sqrt(n) + 16)
    # Only where the variance itself matters (var well above LayerNorm's eps) can N/(N-1) show.
    large_mean = bool(((mean.abs() > 100 * var.sqrt().clamp(min=1e-30)) & (var > 10 * eps)).all())
    return var, band, (0.25 if large_mean else 1e-9)


def trap_unbiased_stats(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    x = inputs["x"].double()
    return {"mean": x.mean(dim=-1), "var": _unbiased(x)}


def trap_padding_stats(inputs: dict[str, Any]) -> list[Signature]:
    x = inputs["x"].double()
    return [Signature({"mean": m, "var": v}) for m, v in _padding_variants(x, _padded_widths(inputs, x.shape[-1]))]


def trap_ignores_stride_stats(inputs: dict[str, Any]) -> Signature | None:
    found = _strided_rows(inputs)
    if found is None:
        return None
    read, defined = found
    var, mean = torch.var_mean(torch.nan_to_num(read), dim=-1, unbiased=False)
    return Signature({"mean": mean, "var": var}, undefined={"mean": ~defined, "var": ~defined})


def trap_cancellation_stats(inputs: dict[str, Any]) -> Signature:
    x = inputs["x"].double()
    var, band, min_deviation = _cancellation_band(x)
    return Signature({"mean": x.mean(dim=-1), "var": var}, slack={"var": band}, min_deviation=min_deviation)


# --------------------------------------------------------------------------- LayerNorm


# Random LayerNorm rows are N(0, 0.1^2): eps is then 1e-3 of the variance, and leaving it out or putting it outside
# the sqrt moves the output by ~4x the rowwise tolerance or more at every draw. With N(0, 1) rows both mistakes sat
# at the tolerance (eps-missing failed ln-kernel-basic at 7 of 40 seeds): grader margins.
LAYERNORM_RANDOM_STD = 0.1


def layernorm_inputs(case: Case, maker: InputMaker) -> dict[str, Any]:
    n = case.dims["N"]
    eps = float(case.options.get("eps", 1e-5))
    layer = torch.nn.LayerNorm(n, eps=eps)
    with torch.no_grad():  # random affine parameters: gamma/beta mistakes must show
        layer.weight.copy_(maker.uniform(n, low=0.5, high=1.5) * torch.where(
            maker.uniform(n) > -0.5, 1.0, -1.0))
        layer.bias.copy_(maker.uniform(n, low=-1.0, high=1.0))
    x = _rows(case, maker)
    if case.kind == "random":
        x = x * LAYERNORM_RANDOM_STD
    return {"x": x, "weight": layer.weight.detach(), "bias": layer.bias.detach(), "eps": layer.eps, "layer": layer}


def layernorm_expected(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    layer = inputs["layer"]
    layer64 = torch.nn.LayerNorm(layer.normalized_shape, eps=layer.eps).double()
    with torch.no_grad():
        layer64.weight.copy_(layer.weight.double())
        layer64.bias.copy_(layer.bias.double())
        return {"out": layer64(inputs["x"].double())}


def layernorm_kernel_args(inputs: dict[str, Any]) -> dict[str, Any]:
    m, n = inputs["x"].shape
    return {"x_ptr": In("x"), "gamma_ptr": In("weight"), "beta_ptr": In("bias"),
            "out_ptr": Out("out", (m, n), like="x_ptr"),
            "M": m, "N": n, "stride_m": Stride("x_ptr", 0), "eps": inputs["eps"]}


def layernorm_call_args(inputs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    return [In("x"), In("weight"), In("bias"), inputs["eps"]], {}


def _normalise(x: torch.Tensor, mean: torch.Tensor, denom: torch.Tensor, g: torch.Tensor, b: torch.Tensor):
    return (x - mean[:, None]) / denom[:, None] * g + b


def _ln_parts(inputs: dict[str, Any]):
    x = inputs["x"].double()
    var, mean = torch.var_mean(x, dim=-1, unbiased=False)
    return x, mean, var, inputs["weight"].double(), inputs["bias"].double(), float(inputs["eps"])


def _quantisation_slack(inputs: dict[str, Any], denom: torch.Tensor) -> torch.Tensor:
    """How far a float32 kernel's output may stray through rounding of the row mean (about two ulps
    of |mean|, amplified by 1/denominator): matters on near-constant rows with a large mean."""
    _, mean, _, g, _, _ = _ln_parts(inputs)
    mean_error = 4 * F32_EPS * mean.abs()
    return (mean_error / denom)[:, None] * g.abs()[None, :]


def trap_unbiased_ln(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    x, mean, _, g, b, eps = _ln_parts(inputs)
    return {"out": _normalise(x, mean, torch.sqrt(_unbiased(x) + eps), g, b)}


def trap_eps_outside_sqrt(inputs: dict[str, Any]) -> list[Signature]:
    x, mean, var, g, b, eps = _ln_parts(inputs)
    denom = torch.sqrt(var) + eps
    signatures = [Signature({"out": _normalise(x, mean, denom, g, b)},
                            slack={"out": _quantisation_slack(inputs, denom)})]
    if bool((var == 0).all()):
        # Exactly constant rows whose float32 mean is a few ulps off (seen on the H200): every element of a
        # row is off by the same delta, normalised to delta / (|delta| + eps) instead of the correct
        # delta / sqrt(eps): the row is a constant z with sqrt(eps) << |z| <= 8 ulp(|x|) / eps.
        ulp = F32_EPS * 2 * mean.abs()

        def constant_rows_scaled_by_eps(outputs: Any) -> bool:
            z = (outputs["out"].double() - b) / g
            row_constant = (z - z[:, :1]).abs().max(dim=-1).values <= 1e-3 * z[:, :1].abs().squeeze(-1) + 1e-9
            bounded = z[:, 0].abs() <= 8 * ulp / eps
            scaled = z[:, 0].abs() > 4 * ulp / math.sqrt(eps)  # beyond what sqrt(var + eps) would give
            return bool((row_constant & bounded).all() and scaled.any())

        signatures.append(Signature({}, predicate=constant_rows_scaled_by_eps))
    return signatures


def trap_eps_missing(inputs: dict[str, Any]) -> list[Signature]:
    x, mean, var, g, b, eps = _ln_parts(inputs)
    with torch.no_grad():
        out = _normalise(x, mean, torch.sqrt(var), g, b)
    constant = var == 0
    out[constant] = float("nan")  # 0/0 on exactly constant rows
    signatures = [Signature({"out": out})]
    constant_rows = var == 0
    tiny_rows = (var > 0) & (var < eps / 10)
    if bool((constant_rows | tiny_rows).all()):
        # Rows whose variance is far below eps (quantised 5.0 + 1e-6 rows can even be exactly constant
        # in float32): the values cannot be predicted, but the mistake is recognisable row by row.
        # Exactly constant: a float32 mean equal to the value gives 0/0 = NaN, one an ulp off gives
        # (x - mean) / |x - mean| = +-1 on the whole row. Near-constant: every row is scaled to unit
        # variance (var(z) = var / var_kernel <= 1, shrunk by the float32 mean's rounding), where the
        # correct kernel leaves it ~var/eps << 1, and z follows x.
        def no_eps_rows(outputs: Any) -> bool:
            z = (outputs["out"].double() - b) / g
            nan_or_unit = torch.isnan(z).all(dim=-1) | ((z.abs() - 1).abs() < 1e-3).all(dim=-1)
            row_var = z.var(dim=-1, unbiased=False)
            centred = x - x.mean(dim=-1, keepdim=True)
            zc = z - z.mean(dim=-1, keepdim=True)
            corr = (zc * centred).sum(dim=-1) / (zc.norm(dim=-1) * centred.norm(dim=-1))
            unit = (row_var > 0.25) & (row_var < 1.1) & (corr > 0.95)
            ok = torch.where(constant_rows, nan_or_unit, unit | nan_or_unit)
            return bool(ok.all())

        signatures.append(Signature({}, predicate=no_eps_rows))
    return signatures


def trap_affine_ignored(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    x, mean, var, g, b, eps = _ln_parts(inputs)
    return {"out": _normalise(x, mean, torch.sqrt(var + eps), torch.ones_like(g), torch.zeros_like(b))}


def trap_affine_swapped(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    x, mean, var, g, b, eps = _ln_parts(inputs)
    return {"out": _normalise(x, mean, torch.sqrt(var + eps), b, g)}


def trap_padding_ln(inputs: dict[str, Any]) -> list[Signature]:
    x, _, _, g, b, eps = _ln_parts(inputs)
    sigs = []
    for mean, var in _padding_variants(x, _padded_widths(inputs, x.shape[-1])):
        diff = x - mean[:, None]
        sigs.append(Signature({"out": diff / torch.sqrt(var + eps)[:, None] * g + b}))
    return sigs


def trap_cancellation_ln(inputs: dict[str, Any]) -> Signature:
    x, mean, _, g, b, eps = _ln_parts(inputs)
    var, band, min_deviation = _cancellation_band(x, eps)
    low = var - band
    # Where the bad variance can reach <= -eps the output can be anything (NaN from sqrt of a negative).
    undefined_rows = low + eps <= 0
    hi = torch.sqrt(var + band + eps)
    lo = torch.sqrt(torch.clamp(low + eps, min=1e-30))
    centre = _normalise(x, mean, torch.sqrt(var + eps), g, b)
    diff = (x - mean[:, None]).abs() * g.abs()
    slack = diff * (1 / lo - 1 / hi)[:, None]
    anything = undefined_rows[:, None].expand(centre.shape)
    return Signature({"out": centre}, unconstrained={"out": anything}, slack={"out": slack},
                     min_deviation=min_deviation / 5)


# --------------------------------------------------------------------------- performance baselines
# Torch eager on the same inputs (tensors on the GPU), and the least work one run must do: bytes a
# row kernel reads and writes (its bandwidth is reported as a share of the measured copy bandwidth),
# floating-point operations of the matmul (TFLOP/s). float32 throughout: 4 bytes an element.

LINEAR_BASELINE = Baseline(
    label="F.gelu(F.linear(x, weight, bias))",
    run=lambda i: F.gelu(F.linear(i["x"], i["weight"], i["bias"])),
    flops=lambda d: 2 * d["M"] * d["N"] * d["K"],  # one multiply-add per (m, n, k); bias and GELU are O(MN)
    tf32=True,  # tl.dot on float32 uses tf32 on the GPU: the same for torch
)
ROW_STATS_BASELINE = Baseline(
    label="torch.var_mean(x, dim=1, unbiased=False)",
    run=lambda i: torch.var_mean(i["x"], dim=1, unbiased=False),
    outputs=("var", "mean"),
    bytes_moved=lambda d: 4 * (d["M"] * d["N"] + 2 * d["M"]),  # read x, write mean and var
)
LAYERNORM_BASELINE = Baseline(
    label="F.layer_norm",
    run=lambda i: F.layer_norm(i["x"], (i["x"].shape[-1],), i["weight"], i["bias"], i["eps"]),
    bytes_moved=lambda d: 4 * (2 * d["M"] * d["N"] + 2 * d["N"]),  # read x, write out, read gamma and beta
)

# --------------------------------------------------------------------------- registration

PROBLEMS = {
    "linear_gelu": Problem(
        name="linear_gelu",
        make_inputs=linear_inputs,
        expected=linear_expected,
        kernel_args=linear_kernel_args,
        call_args=linear_call_args,
        traps={
            "bias-wrong-axis": trap_bias_wrong_axis,
            "gelu-tanh": trap_gelu_tanh,
            "gelu-before-bias": trap_gelu_before_bias,
            "weight-not-transposed": trap_weight_not_transposed,
        },
        baseline=LINEAR_BASELINE,
    ),
    "row_stats": Problem(
        name="row_stats",
        make_inputs=row_stats_inputs,
        expected=row_stats_expected,
        kernel_args=row_stats_kernel_args,
        call_args=row_stats_call_args,
        traps={
            "unbiased-variance": trap_unbiased_stats,
            "padding-in-reduction": trap_padding_stats,
            "ignores-stride": trap_ignores_stride_stats,
            "variance-cancellation": trap_cancellation_stats,
        },
        baseline=ROW_STATS_BASELINE,
    ),
    "layernorm": Problem(
        name="layernorm",
        make_inputs=layernorm_inputs,
        expected=layernorm_expected,
        kernel_args=layernorm_kernel_args,
        call_args=layernorm_call_args,
        traps={
            "unbiased-variance": trap_unbiased_ln,
            "eps-outside-sqrt": trap_eps_outside_sqrt,
            "eps-missing": trap_eps_missing,
            "affine-ignored": trap_affine_ignored,
            "affine-swapped": trap_affine_swapped,
            "padding-in-reduction": trap_padding_ln,
            "variance-cancellation": trap_cancellation_ln,
        },
        baseline=LAYERNORM_BASELINE,
    ),
}
