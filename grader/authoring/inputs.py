"""Generic input generators. Seeded; every value is float32-representable unless asked otherwise.

These are the input *kinds* cases name in the spec (random, near-constant rows, ...); assignments
combine them. Nothing here knows about any assignment.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from grader.authoring.spec_model import Case

# The generic input kinds, in the words a report uses for them. An assignment may define kinds of its
# own (its oracles build them); it describes them in its spec's [input_kinds] table.
KINDS = {
    "random": "random values",
    "exact": "exactly representable values (multiples of 1/8)",
    "constant": "constant rows",
    "near-constant": "near-constant rows (5.0 + 1e-6 noise)",
    "tiny-variance": "tiny-variance rows (0.125 + 1e-4 noise)",
    "large-mean": "large-mean rows (1e4 + N(0, 2^2) noise)",
}
ROW_KINDS = tuple(KINDS)


def describe_kind(kind: str, own: Mapping[str, str]) -> str | None:
    """An input kind in words: the assignment's own description first, then the generic library's."""
    return own.get(kind) or KINDS.get(kind)


def case_maker(case: Case, seed: int, device: str = "cpu") -> InputMaker:
    """The maker of one case's inputs: seeded with `seed` (grader.seeds.case_seed), drawing in the case's dtype."""
    return InputMaker(seed, dtype=getattr(torch, case.dtype), device=device)


class InputMaker:
    """Draws tensors from one seeded generator (seed: grader.seeds.case_seed): on the CPU for
    correctness cases (the same values on every machine), on the GPU for the large inputs of
    performance cases (`device="cuda"`: seconds faster per grade; the same values on every GPU of
    one kind)."""

    def __init__(self, seed: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> None:
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.dtype = dtype
        self.device = device

    def normal(self, *shape: int, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
        t = torch.randn(shape, generator=self.generator, dtype=torch.float64, device=self.device) * std + mean
        return t.to(self.dtype)

    def uniform(self, *shape: int, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
        t = torch.rand(shape, generator=self.generator, dtype=torch.float64, device=self.device) * (high - low) + low
        return t.to(self.dtype)

    def exact(self, *shape: int, levels: int = 8, scale: float = 0.125) -> torch.Tensor:
        """Small dyadic values (multiples of `scale` in [-levels, levels]*scale): products and sums of
        these are exact in tf32/fp32 for modest K, so a GPU matmul is bit-exact and any difference
        in the epilogue (e.g. the GELU flavour) is measurable."""
        ints = torch.randint(-levels, levels + 1, shape, generator=self.generator, device=self.device)
        return (ints.to(torch.float64) * scale).to(self.dtype)

    def rows(self, kind: str, m: int, n: int) -> torch.Tensor:
        """An (m, n) matrix whose rows are of the given kind."""
        if kind == "random":
            return self.normal(m, n)
        if kind == "exact":
            return self.exact(m, n)
        if kind == "constant":
            values = self.exact(m, 1, levels=16, scale=0.5)
            return values.expand(m, n).contiguous()
        if kind == "near-constant":
            # 5.0 + 1e-6 noise: the variance (~1e-12) is far below LayerNorm's eps.
            return self.normal(m, n, mean=0.0, std=1e-6).to(torch.float64).add(5.0).to(self.dtype)
        if kind == "tiny-variance":
            # 0.125 + 1e-4 noise: variance ~1e-8, far below eps, yet well resolved in float32. The offset is small
            # enough that the one-pass E[x^2] - E[x]^2 (ulps of 0.0156) stays far below eps at every draw: these
            # rows decide the eps mistakes and leave cancellation to large-mean rows (at 0.5 it sat at the
            # tolerance, and one draw in five passed a one-pass kernel: grader margins).
            return self.normal(m, n, mean=0.125, std=1e-4)
        if kind == "large-mean":
            # 1e4 + N(0, 4) noise: E[x^2] - E[x]^2 cancels catastrophically in float32. Variance 4, not 1: N/(N-1)
            # of it then lies far outside the large-mean tolerance at every draw (at 1 it was 1.6x the tolerance).
            return self.normal(m, n, mean=1e4, std=2.0)
        raise ValueError(f"unknown row kind {kind!r} (known: {', '.join(ROW_KINDS)})")
