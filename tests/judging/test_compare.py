"""The comparison helper every case's verdict rests on: if it is wrong, every other test is vacuous."""

from __future__ import annotations

import math

import pytest
import torch

from grader.judging.compare import close_mask, compare, worst_element

NAN = float("nan")
INF = float("inf")


def grid(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A 3x4 tensor of distinct, exactly representable values 0..11."""
    return torch.arange(12, dtype=dtype).reshape(3, 4)


def test_identical_tensors_match() -> None:
    expected = grid()
    c = compare("out", expected.clone(), expected, atol=0.0, rtol=0.0)
    assert c.ok
    assert (c.mismatches, c.nan_mismatches, c.inf_mismatches) == (0, 0, 0)
    assert c.numel == 12 and c.shape == (3, 4)
    assert c.max_abs_error == 0.0
    assert c.worst_index is None and c.worst_actual is None and c.worst_expected is None
    assert "all 12 elements match" in c.summary()


def test_one_element_off_is_located() -> None:
    expected = grid()
    actual = expected.clone()
    actual[1, 2] += 0.5  # 6.0 -> 6.5
    c = compare("out", actual, expected, atol=1e-3, rtol=0.0)
    assert not c.ok
    assert c.mismatches == 1
    assert c.worst_index == (1, 2)
    assert c.worst_actual == 6.5 and c.worst_expected == 6.0
    assert c.max_abs_error == pytest.approx(0.5)
    assert (c.nan_mismatches, c.inf_mismatches) == (0, 0)


def test_worst_is_the_largest_excess_over_tolerance() -> None:
    expected = grid()
    actual = expected.clone()
    actual[0, 1] += 0.25
    actual[2, 3] -= 2.0  # 11 -> 9: the worst
    actual[2, 0] += 1e-6  # within tolerance: not a mismatch
    c = compare("out", actual, expected, atol=1e-3, rtol=0.0)
    assert c.mismatches == 2
    assert c.worst_index == (2, 3)
    assert (c.worst_actual, c.worst_expected) == (9.0, 11.0)


def test_worst_index_in_one_dimension() -> None:
    expected = torch.zeros(7)
    actual = expected.clone()
    actual[5] = 3.0
    c = compare("mean", actual, expected, atol=1e-5, rtol=1e-5)
    assert c.worst_index == (5,)


def test_nan_where_finite_expected_is_a_nan_mismatch() -> None:
    expected = grid()
    actual = expected.clone()
    actual[0, 3] = NAN
    actual[2, 2] += 100.0  # a huge finite error: the NaN still counts as the worst
    c = compare("out", actual, expected, atol=1e-5, rtol=1e-5)
    assert c.mismatches == 2
    assert c.nan_mismatches == 1
    assert c.inf_mismatches == 0
    assert c.worst_index == (0, 3)
    assert math.isnan(c.worst_actual) and c.worst_expected == 3.0
    # NaN does not poison the finite error statistics
    assert c.max_abs_error == pytest.approx(100.0)


def test_finite_where_nan_expected_is_a_nan_mismatch() -> None:
    expected = torch.tensor([1.0, NAN, 3.0])
    actual = torch.tensor([1.0, 2.0, 3.0])
    c = compare("out", actual, expected, atol=1.0, rtol=1.0)
    assert (c.mismatches, c.nan_mismatches) == (1, 1)
    assert c.worst_index == (1,)


def test_nan_matches_nan() -> None:
    expected = torch.tensor([1.0, NAN, 3.0])
    c = compare("out", expected.clone(), expected, atol=0.0, rtol=0.0)
    assert c.ok and c.nan_mismatches == 0
    assert close_mask(expected, expected, 0.0, 0.0).all()


def test_same_infinity_matches() -> None:
    expected = torch.tensor([INF, -INF, 0.0])
    c = compare("out", expected.clone(), expected, atol=0.0, rtol=0.0)
    assert c.ok
    assert c.max_abs_error == 0.0  # inf - inf is not NaN-ed into the error


def test_opposite_infinities_do_not_match() -> None:
    expected = torch.tensor([1.0, INF])
    actual = torch.tensor([1.0, -INF])
    c = compare("out", actual, expected, atol=1e30, rtol=1e30)  # no tolerance rescues an infinity
    assert (c.mismatches, c.inf_mismatches, c.nan_mismatches) == (1, 1, 0)
    assert c.worst_index == (1,)
    assert (c.worst_actual, c.worst_expected) == (-INF, INF)


def test_infinity_where_finite_expected_is_an_inf_mismatch() -> None:
    expected = torch.tensor([2.0, 3.0])
    actual = torch.tensor([2.0, INF])
    c = compare("out", actual, expected, atol=1e30, rtol=0.0)
    assert (c.mismatches, c.inf_mismatches, c.nan_mismatches) == (1, 1, 0)


# Boundaries: an element matches when |a - e| <= atol + rtol * |e|. Powers of two keep every number
# below exact in float32 and float64, so "on the boundary" is really on it.
@pytest.mark.parametrize(
    ("expected", "actual", "atol", "rtol", "ok"),
    [
        (1.0, 1.0 + 2**-10, 2**-10, 0.0, True),  # exactly atol away
        (1.0, 1.0 + 2**-9, 2**-10, 0.0, False),  # twice atol away
        (1.0, 1.0 - 2**-10, 2**-10, 0.0, True),  # symmetric below
        (4.0, 4.25, 0.0, 2**-4, True),  # exactly rtol * |e| = 0.25
        (4.0, 4.5, 0.0, 2**-4, False),
        (-4.0, -4.25, 0.0, 2**-4, True),  # |e|, not e: negative expected values get the same band
        (2.0, 2.5, 0.25, 0.125, True),  # atol + rtol * |e| = 0.25 + 0.25
        (2.0, 2.5 + 2**-6, 0.25, 0.125, False),
        (1.0, 10.0, 0.0, 1.0, False),  # rtol scales |expected| (1), not |actual| (10)
        (0.0, 2**-20, 0.0, 0.5, False),  # rtol alone never covers an expected zero
    ],
)
def test_tolerance_boundaries(expected: float, actual: float, atol: float, rtol: float, ok: bool) -> None:
    e = torch.tensor([expected], dtype=torch.float32)
    a = torch.tensor([actual], dtype=torch.float32)
    c = compare("out", a, e, atol=atol, rtol=rtol)
    assert c.ok is ok
    assert bool(close_mask(a, e, atol, rtol)[0]) is ok


def test_comparison_is_done_in_float64() -> None:
    # float32(0.1) differs from float64 0.1 by ~1.5e-9: a float32 comparison would call them equal.
    expected = torch.tensor([0.1], dtype=torch.float64)
    actual = torch.tensor([0.1], dtype=torch.float32)
    assert not compare("out", actual, expected, atol=1e-12, rtol=0.0).ok
    assert compare("out", actual, expected, atol=1e-8, rtol=0.0).ok


def test_close_mask_is_elementwise() -> None:
    expected = torch.tensor([[1.0, 2.0], [NAN, INF]])
    actual = torch.tensor([[1.0, 2.5], [NAN, -INF]])
    mask = close_mask(actual, expected, atol=0.1, rtol=0.0)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[True, False], [True, False]]


def test_shape_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(4, 3\)"):
        compare("out", grid(), grid().T.contiguous(), atol=0.0, rtol=0.0)


def test_summary_names_index_and_values() -> None:
    expected = grid()
    actual = expected.clone()
    actual[2, 1] = 42.0  # expected 9.0
    text = compare("out", actual, expected, atol=1e-5, rtol=1e-6).summary()
    assert text.startswith("out: 1 of 12 elements differ")
    assert "atol=1e-05" in text and "rtol=1e-06" in text
    assert "[2, 1]" in text
    assert "got 42.0" in text and "expected 9.0" in text
    assert "NaN" not in text and "infinite" not in text


def test_summary_mentions_nan_and_inf_mismatches() -> None:
    expected = torch.tensor([1.0, 2.0, 3.0])
    actual = torch.tensor([NAN, INF, 3.0])
    c = compare("var", actual, expected, atol=1e-5, rtol=1e-5)
    assert (c.nan_mismatches, c.inf_mismatches) == (1, 1)
    text = c.summary()
    assert text.startswith("var: 2 of 3 elements differ")
    assert "1 NaN where a number was expected" in text
    assert "1 infinite where a finite value was expected" in text


# ------------------------------------------------------------------------------ the element a report shows


def test_worst_element_prefers_a_number_that_shows_the_arithmetic() -> None:
    expected = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    actual = torch.tensor([1.0, float("nan"), 3.5, 4.1])
    wrong = ~close_mask(actual, expected, 1e-5, 1e-5)
    index, got, want = worst_element(actual, expected, wrong, 1e-5, 1e-5, nonfinite_first=False)
    assert (index, got, want) == ((2,), 3.5, 3.0)  # furthest beyond tolerance among the numbers
    assert worst_element(actual, expected, wrong, 1e-5, 1e-5, nonfinite_first=True)[0] == (1,)  # compare's rule
    only_nan = torch.tensor([False, True, False, False])
    assert worst_element(actual, expected, only_nan, 1e-5, 1e-5, nonfinite_first=False)[0] == (1,)


def test_worst_element_never_shows_nan_against_nan_nor_an_empty_mask() -> None:
    expected = torch.tensor([float("nan"), 2.0], dtype=torch.float64)
    actual = torch.tensor([float("nan"), 2.0])
    everything = torch.ones(2, dtype=torch.bool)
    assert worst_element(actual, expected, everything, 1e-5, 1e-5)[0] == (1,)  # the NaN pair is never it
    assert worst_element(actual, expected, torch.tensor([True, False]), 1e-5, 1e-5) is None
    assert worst_element(actual, expected, torch.zeros(2, dtype=torch.bool), 1e-5, 1e-5) is None


def test_compare_worst_is_worst_element_of_the_wrong_ones() -> None:
    expected = torch.randn(6, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    actual = expected.to(torch.float32).clone()
    actual[2, 3] += 1.0
    actual[4, 1] = float("nan")
    c = compare("out", actual, expected, 1e-5, 1e-5)
    wrong = ~close_mask(actual, expected, 1e-5, 1e-5)
    assert c.worst_index == worst_element(actual, expected, wrong, 1e-5, 1e-5)[0] == (4, 1)
