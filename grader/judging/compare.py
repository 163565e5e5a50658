"""The one verbose comparison: student output vs oracle, in float64.

An element matches when both are NaN, both are the same infinity, or |a - e| <= atol + rtol * |e|.
The result says how many elements are wrong, which is worst (index, both values), and how many
NaN/inf disagreements there are, so a failure message never stops at "allclose False".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def close_mask(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """Elementwise match (True = within tolerance) of two same-shape tensors, computed in float64."""
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    both_nan = torch.isnan(a) & torch.isnan(e)
    same_inf = torch.isinf(a) & torch.isinf(e) & (a == e)
    with torch.no_grad():
        diff = (a - e).abs()
        within = diff <= atol + rtol * e.abs()
    return both_nan | same_inf | (within & torch.isfinite(a) & torch.isfinite(e))


@dataclass(frozen=True)
class Comparison:
    name: str
    shape: tuple[int, ...]
    atol: float
    rtol: float
    numel: int
    mismatches: int
    nan_mismatches: int
    inf_mismatches: int
    max_abs_error: float
    worst_index: tuple[int, ...] | None
    worst_actual: float | None
    worst_expected: float | None

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def summary(self) -> str:
        if self.ok:
            return f"{self.name}: all {self.numel} elements match (max |error| {self.max_abs_error:.3g})"
        parts = [f"{self.name}: {self.mismatches} of {self.numel} elements differ "
                 f"(atol={self.atol:g}, rtol={self.rtol:g})"]
        if self.worst_index is not None:
            idx = ", ".join(str(i) for i in self.worst_index)
            parts.append(f"worst at [{idx}]: got {self.worst_actual!r}, expected {self.worst_expected!r}")
        if self.nan_mismatches:
            parts.append(f"{self.nan_mismatches} NaN where a number was expected (or the reverse)")
        if self.inf_mismatches:
            parts.append(f"{self.inf_mismatches} infinite where a finite value was expected (or the reverse)")
        return "; ".join(parts)


def compare(name: str, actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> Comparison:
    """Compare two tensors of the same shape; the caller has already checked shape and type."""
    if tuple(actual.shape) != tuple(expected.shape):
        raise ValueError(f"{name}: shape {tuple(actual.shape)} vs expected {tuple(expected.shape)}")
    a = actual.detach().to(torch.float64).cpu()
    e = expected.detach().to(torch.float64).cpu()
    ok = close_mask(a, e, atol, rtol)
    bad = ~ok
    nan_mismatch = torch.isnan(a) ^ torch.isnan(e)
    inf_mismatch = (torch.isinf(a) | torch.isinf(e)) & bad & ~nan_mismatch
    finite = torch.isfinite(a) & torch.isfinite(e)
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    max_abs = float(err.max()) if err.numel() else 0.0
    worst_index = worst_actual = worst_expected = None
    worst = worst_element(a, e, bad, atol, rtol, nonfinite_first=True)
    if worst is not None:
        worst_index, worst_actual, worst_expected = worst
    return Comparison(
        name=name,
        shape=tuple(a.shape),
        atol=atol,
        rtol=rtol,
        numel=a.numel(),
        mismatches=int(bad.sum()),
        nan_mismatches=int(nan_mismatch.sum()),
        inf_mismatches=int(inf_mismatch.sum()),
        max_abs_error=max_abs,
        worst_index=worst_index,
        worst_actual=worst_actual,
        worst_expected=worst_expected,
    )


def worst_element(actual: torch.Tensor, expected: torch.Tensor, among: torch.Tensor, atol: float, rtol: float,
                  nonfinite_first: bool = True) -> tuple[tuple[int, ...], float, float] | None:
    """(index, actual, expected) of the element of `among` (a boolean mask, e.g. the wrong elements) that is
    furthest beyond the tolerance, or None when `among` is empty. A NaN/inf disagreement counts as furthest
    with `nonfinite_first`; without it, as nearest (an element with a number in it shows the mistake's
    arithmetic; a NaN is shown only where no such element is among them)."""
    a = actual.detach().to(torch.float64).cpu()
    e = expected.detach().to(torch.float64).cpu()
    among = among.cpu() & ~(torch.isnan(a) & torch.isnan(e))  # NaN where NaN is right shows nothing
    if not bool(among.any()):
        return None
    finite = torch.isfinite(a) & torch.isfinite(e)
    excess = (a - e).abs() - (atol + rtol * e.abs())
    nonfinite = torch.full_like(a, float("inf") if nonfinite_first else -1e300)
    score = torch.where(finite, torch.where(finite, excess, torch.zeros_like(a)), nonfinite)
    score = torch.where(among, score, torch.full_like(a, -float("inf")))
    flat = int(torch.argmax(score))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape))
    return index, float(a.reshape(-1)[flat]), float(e.reshape(-1)[flat])
