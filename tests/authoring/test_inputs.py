"""grader/authoring/inputs.py: InputMaker, seeded, float32 by default; the generic row kinds and their
words (what docs/writing-an-assignment.md lists)."""

from __future__ import annotations

import pytest
import torch

from grader.authoring.inputs import KINDS, ROW_KINDS, InputMaker, describe_kind


def test_the_same_seed_gives_the_same_values() -> None:
    a, b = InputMaker(7), InputMaker(7)
    assert torch.equal(a.normal(3, 5), b.normal(3, 5)) and torch.equal(a.uniform(4), b.uniform(4))
    assert not torch.equal(InputMaker(7).normal(3, 5), InputMaker(8).normal(3, 5))
    assert a.normal(2).dtype == torch.float32 and InputMaker(1, dtype=torch.float16).normal(2).dtype == torch.float16


def test_each_method_draws_what_it_says() -> None:
    maker = InputMaker(3)
    u = maker.uniform(1000, low=2.0, high=3.0)
    assert float(u.min()) >= 2.0 and float(u.max()) < 3.0
    n = maker.normal(20000, mean=5.0, std=0.5)
    assert abs(float(n.double().mean()) - 5.0) < 0.05 and abs(float(n.double().std()) - 0.5) < 0.05
    e = maker.exact(1000, levels=4, scale=0.25)
    assert torch.equal(e * 4, (e * 4).round()) and float(e.abs().max()) <= 1.0


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_every_generic_row_kind(kind: str) -> None:
    rows = InputMaker(5).rows(kind, 3, 7)
    assert rows.shape == (3, 7) and rows.dtype == torch.float32 and bool(torch.isfinite(rows).all())
    spread = rows.double().std(dim=1)
    if kind == "constant":
        assert bool((spread == 0).all())
    if kind in ("near-constant", "tiny-variance"):
        assert float(spread.max()) < 1e-3
    if kind == "large-mean":
        assert float(rows.double().mean()) > 9000
    assert describe_kind(kind, {}) == KINDS[kind]


def test_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="unknown row kind 'rising'"):
        InputMaker(1).rows("rising", 2, 2)
    assert describe_kind("rising", {"rising": "rising logits"}) == "rising logits"
    assert describe_kind("random", {"random": "the assignment's words"}) == "the assignment's words"
    assert describe_kind("rising", {}) is None
