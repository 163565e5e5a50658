"""Generic input generators. Seeded; every value is float32-representable unless asked otherwise.

These are the input *kinds* cases name in the spec (random, near-constant rows, ...); assignments
combine them. Nothing here knows about any assignment.
"""

from __future__ import annotations

import torch

ROW_KINDS = ("random", "near-constant", "tiny-variance", "constant", "large-mean", "exact")


class InputMaker:
    """Draws tensors from one seeded CPU generator (seed: grader.seeds.case_seed)."""

    def __init__(self, seed: int, dtype: torch.dtype = torch.float32) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.dtype = dtype

    def normal(self, *shape: int, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
        t = torch.randn(shape, generator=self.generator, dtype=torch.float64) * std + mean
        return t.to(self.dtype)

    def uniform(self, *shape: int, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
        t = torch.rand(shape, generator=self.generator, dtype=torch.float64) * (high - low) + low
        return t.to(self.dtype)

    def exact(self, *shape: int, levels: int = 8, scale: float = 0.125) -> torch.Tensor:
        """Small dyadic values (multiples of `scale` in [-levels, levels]*scale): products and sums of
        these are exact in tf32/fp32 for modest K, so a GPU matmul is bit-exact and any difference
        in the epilogue (e.g. the GELU flavour) is measurable."""
        ints = torch.randint(-levels, levels + 1, shape, generator=self.generator)
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
            # 0.5 + 1e-4 noise: variance ~1e-8, far below eps, yet well resolved in float32.
            return self.normal(m, n, mean=0.5, std=1e-4)
        if kind == "large-mean":
            # 1e4 + unit noise: E[x^2] - E[x]^2 cancels catastrophically in float32.
            return self.normal(m, n, mean=1e4, std=1.0)
        raise ValueError(f"unknown row kind {kind!r} (known: {', '.join(ROW_KINDS)})")
