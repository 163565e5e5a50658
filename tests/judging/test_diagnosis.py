"""Trap diagnosis as pure functions: signatures, NaN leaks, precision vs unknown, and locating errors."""

from __future__ import annotations

import pytest
import torch

from grader.authoring.problem import Signature
from grader.authoring.spec import Tolerance
from grader.judging.compare import compare
from grader.judging.diagnosis import (
    PRECISION_FACTOR,
    as_signatures,
    classify_unmatched,
    distinguishable,
    explain_away,
    inherit_kernel_traps,
    locate,
    match_traps,
    nan_leaks,
    signature_matches,
)

NAN = float("nan")
TOL = Tolerance(atol=1e-5, rtol=1e-5, why="test")


def f64(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def f32(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


EXPECTED = {"out": f64(1.0, 2.0, 3.0, 4.0)}


# ------------------------------------------------------------------------------------ signatures


def test_signature_matches_identical_prediction() -> None:
    sig = Signature({"out": f64(1.0, 2.0, 3.5, 4.0)})
    assert signature_matches(sig, {"out": f32(1.0, 2.0, 3.5, 4.0)}, EXPECTED, TOL)


def test_signature_does_not_match_a_different_output() -> None:
    sig = Signature({"out": f64(1.0, 2.0, 3.5, 4.0)})
    assert not signature_matches(sig, {"out": f32(1.0, 2.0, 3.0, 4.0)}, EXPECTED, TOL)


def test_undefined_positions_are_ignored() -> None:
    predicted = f64(1.0, 2.0, 3.5, 4.0)
    undefined = torch.tensor([False, False, False, True])
    sig = Signature({"out": predicted}, undefined={"out": undefined})
    # position 3 is garbage (even NaN): ignored; the defined positions match the prediction
    assert signature_matches(sig, {"out": f32(1.0, 2.0, 3.5, NAN)}, EXPECTED, TOL)
    assert signature_matches(sig, {"out": f32(1.0, 2.0, 3.5, -99.0)}, EXPECTED, TOL)
    # a defined position that differs still rejects it
    assert not signature_matches(sig, {"out": f32(1.0, 2.5, 3.5, 4.0)}, EXPECTED, TOL)


def test_signature_with_everything_undefined_never_matches() -> None:
    sig = Signature({"out": f64(9.0, 9.0, 9.0, 9.0)}, undefined={"out": torch.ones(4, dtype=torch.bool)})
    assert not signature_matches(sig, {"out": f32(1.0, 2.0, 3.0, 4.0)}, EXPECTED, TOL)


def test_unwritten_elements_are_no_evidence_for_a_signature() -> None:
    # A trap predicting NaN at position 3 must not be "confirmed" by poison the kernel never overwrote.
    sig = Signature({"out": f64(1.0, 2.0, 3.0, NAN)})
    outputs = {"out": f32(1.0, 2.0, 3.0, NAN)}
    assert signature_matches(sig, outputs, EXPECTED, TOL)
    unwritten = {"out": torch.tensor([False, False, False, True])}
    assert not signature_matches(sig, outputs, EXPECTED, TOL, unwritten)


def test_unconstrained_positions_are_not_compared() -> None:
    anything = torch.tensor([False, True, False, False])
    sig = Signature({"out": f64(1.0, 2.0, 3.5, 4.0)}, unconstrained={"out": anything})
    assert signature_matches(sig, {"out": f32(1.0, NAN, 3.5, 4.0)}, EXPECTED, TOL)
    assert not signature_matches(sig, {"out": f32(1.0, NAN, 3.0, 4.0)}, EXPECTED, TOL)


def test_signature_needs_the_output_with_the_right_shape() -> None:
    sig = Signature({"out": f64(1.0, 2.0, 3.0, 4.0)})
    assert not signature_matches(sig, {"other": f32(1.0, 2.0, 3.0, 4.0)}, EXPECTED, TOL)
    assert not signature_matches(sig, {"out": f32(1.0, 2.0, 3.0)}, EXPECTED, TOL)


def test_every_predicted_output_must_match() -> None:
    sig = Signature({"mean": f64(1.0), "var": f64(2.0)})
    assert signature_matches(sig, {"mean": f32(1.0), "var": f32(2.0)}, {}, TOL)
    assert not signature_matches(sig, {"mean": f32(1.0), "var": f32(2.5)}, {}, TOL)


def test_slack_widens_the_match_but_needs_a_deviation() -> None:
    predicted = f64(1.0, 2.0, 3.0, 4.0)
    sig = Signature({"out": predicted}, slack={"out": torch.full((4,), 0.5, dtype=torch.float64)},
                    min_deviation=0.25)
    # within the slack band and 0.4 away from the oracle: matches
    assert signature_matches(sig, {"out": f32(1.0, 2.4, 3.0, 4.0)}, EXPECTED, TOL)
    # outside the band
    assert not signature_matches(sig, {"out": f32(1.0, 2.6, 3.0, 4.0)}, EXPECTED, TOL)
    # inside the band but too close to the correct answer to be this trap
    assert not signature_matches(sig, {"out": f32(1.0, 2.1, 3.0, 4.0)}, EXPECTED, TOL)


def test_predicate_signatures() -> None:
    assert signature_matches(Signature({}, predicate=lambda out: bool(out["out"][0] == 1.0)),
                             {"out": f32(1.0)}, EXPECTED, TOL)
    assert not signature_matches(Signature({}, predicate=lambda out: False), {"out": f32(1.0)}, EXPECTED, TOL)
    # a predicate that trips over the outputs is a non-match, not a grader crash
    assert not signature_matches(Signature({}, predicate=lambda out: out["missing"]), {}, EXPECTED, TOL)


def test_as_signatures_normalises_every_return_shape() -> None:
    assert as_signatures(None) == []
    sig = Signature({"out": f64(1.0)})
    assert as_signatures(sig) == [sig]
    (from_dict,) = as_signatures({"out": f64(2.0)})
    assert isinstance(from_dict, Signature) and torch.equal(from_dict.outputs["out"], f64(2.0))
    flat = as_signatures([sig, None, {"out": f64(3.0)}, [{"out": f64(4.0)}, None]])
    assert len(flat) == 3
    assert flat[0] is sig
    assert [float(s.outputs["out"][0]) for s in flat[1:]] == [3.0, 4.0]


def test_match_traps_names_each_matching_trap_once() -> None:
    outputs = {"out": f32(1.0, 2.0, 3.5, 4.0)}
    traps = {
        "right": lambda inputs: [Signature({"out": f64(0.0, 0.0, 0.0, 0.0)}),
                                 {"out": f64(1.0, 2.0, 3.5, 4.0)}, {"out": f64(1.0, 2.0, 3.5, 4.0)}],
        "wrong": lambda inputs: {"out": f64(1.0, 2.0, 3.0, 4.0)},
        "not-applicable": lambda inputs: None,
    }
    matches = match_traps(traps, {}, outputs, EXPECTED, TOL)
    assert [m.trap for m in matches] == ["right"]


# ------------------------------------------------------------------------------------ NaN leaks


def test_nan_leaks_exclude_unwritten_positions() -> None:
    outputs = {"out": f32(NAN, 2.0, NAN, 4.0)}
    unwritten = {"out": torch.tensor([False, False, True, False])}
    leaks = nan_leaks(outputs, EXPECTED, unwritten)
    assert leaks["out"].tolist() == [True, False, False, False]
    # without the unwritten mask both NaNs are leaks
    assert nan_leaks(outputs, EXPECTED, {})["out"].tolist() == [True, False, True, False]


def test_nan_expected_is_not_a_leak() -> None:
    expected = {"out": f64(NAN, 2.0)}
    assert nan_leaks({"out": f32(NAN, 2.0)}, expected, {}) == {}


def test_nan_leaks_skip_outputs_without_an_oracle_or_shape() -> None:
    assert nan_leaks({"extra": f32(NAN)}, EXPECTED, {}) == {}
    assert nan_leaks({"out": f32(NAN, NAN)}, EXPECTED, {}) == {}  # shape differs: judged elsewhere


def test_explain_away_keeps_the_trap_another_case_names_alone() -> None:
    formula = {"unbiased-variance", "eps-missing", "gelu-tanh"}
    cases = [("unbiased-variance",), ("unbiased-variance", "eps-missing"),
             ("oob-read", "eps-missing", "gelu-tanh")]
    kept = explain_away(cases, formula)
    assert kept[0] == ("unbiased-variance",)
    assert kept[1] == ("unbiased-variance",)
    # nothing else confirms eps-missing or gelu-tanh: both stay; structural traps are never removed
    assert kept[2] == ("oob-read", "eps-missing", "gelu-tanh")


def test_explain_away_keeps_the_one_trap_every_failed_case_names() -> None:
    # exp2 without log2 e: every failed case fits it; on all-zero queries the two lse traps fit too, and on
    # another input a third trap coincides with it. No case names it alone, yet it explains them all.
    formula = {"exp2-without-log2e", "lse-without-max", "lse-base-2", "scale-twice"}
    cases = [("exp2-without-log2e", "lse-without-max", "lse-base-2"), (), ("exp2-without-log2e", "scale-twice"),
             ("exp2-without-log2e", "lse-base-2")]
    kept = explain_away(cases, formula)
    assert kept == [("exp2-without-log2e",), (), ("exp2-without-log2e",), ("exp2-without-log2e",)]
    # a failed case that none of them fits (here a structural finding alone): no trap explains every case
    unexplained = [*cases, ("oob-read",)]
    assert explain_away(unexplained, formula) == unexplained
    # two traps that every failed case names both stay
    both = [("lse-without-max", "lse-base-2"), ("lse-without-max", "lse-base-2", "scale-twice")]
    assert explain_away(both, formula) == [("lse-without-max", "lse-base-2")] * 2


def test_a_signature_must_explain_a_failing_element_where_it_constrains() -> None:
    expected = {"out": f64(1.0, 2.0, 3.0)}
    # matches the student's output at position 0, leaves 1 and 2 unconstrained; the failure is at 2
    weak = Signature({"out": f64(1.0, 9.0, 9.0)}, unconstrained={"out": torch.tensor([False, True, True])})
    assert not signature_matches(weak, {"out": f32(1.0, 2.0, 5.0)}, expected, TOL)
    # the same signature explains a failure at a position it constrains
    strong = Signature({"out": f64(1.5, 9.0, 9.0)}, unconstrained={"out": torch.tensor([False, True, True])})
    assert signature_matches(strong, {"out": f32(1.5, 2.0, 5.0)}, expected, TOL)


def test_wrapper_failures_inherit_their_kernels_structural_traps() -> None:
    traps = [("oob-write",), ("unknown",), ("precision",), ("gelu-tanh",), ("unknown",)]
    problems = [("linear", False), ("linear", True), ("linear", True), ("linear", True), ("stats", True)]
    out = inherit_kernel_traps(traps, problems, {"oob-write", "oob-read", "unwritten-output"})
    assert out == [("oob-write",), ("oob-write",), ("oob-write",), ("gelu-tanh",), ("unknown",)]


def test_races_from_out_of_bounds_writes_are_the_out_of_bounds_write() -> None:
    # on a GPU, a store one past the row races with the neighbouring row's program: the wrapper's
    # output (no guards) differs between runs; that is the kernel's oob-write, not a second mistake
    traps = [("oob-write",), ("nondeterministic",), ("oob-write", "nondeterministic"), ("nondeterministic",)]
    problems = [("ln", False), ("ln", True), ("ln", False), ("stats", True)]
    out = inherit_kernel_traps(traps, problems, {"oob-write", "oob-read", "unwritten-output"})
    assert out == [("oob-write",), ("oob-write",), ("oob-write",), ("nondeterministic",)]
    # a wrapper whose kernel only reads out of bounds keeps its own nondeterminism
    out = inherit_kernel_traps([("oob-read",), ("nondeterministic",)], [("ln", False), ("ln", True)],
                               {"oob-write", "oob-read", "unwritten-output"})
    assert out == [("oob-read",), ("nondeterministic",)]


def test_a_passed_wrapper_case_inherits_no_trap_of_its_kernel() -> None:
    # the kernel writes out of bounds and reads unwritten memory; its wrapper passes on some inputs: those
    # cases stay without a trap (nothing failed there for the kernel's trap to explain)
    traps = [("oob-write",), (), ("unknown",), ("unwritten-output",), ()]
    problems = [("attention", False), ("attention", True), ("attention", True), ("stats", False), ("stats", True)]
    out = inherit_kernel_traps(traps, problems, {"oob-write", "oob-read", "unwritten-output"})
    assert out == [("oob-write",), (), ("oob-write",), ("unwritten-output",), ()]


def test_a_signature_equal_to_the_oracle_is_no_evidence() -> None:
    expected = {"out": f64(1.0, 2.0)}
    same = Signature({"out": f64(1.0, 2.0)})
    assert not distinguishable(same, expected, TOL)
    assert not signature_matches(same, {"out": f32(1.0, 2.0)}, expected, TOL)
    different = Signature({"out": f64(1.0, 2.5)})
    assert distinguishable(different, expected, TOL)
    # a band centred on the truth counts only through the deviation it demands
    band = Signature({"out": f64(1.0, 2.0)}, slack={"out": f64(10.0, 10.0)}, min_deviation=0.5)
    assert distinguishable(band, expected, TOL)
    assert signature_matches(band, {"out": f32(1.0, 3.0)}, expected, TOL)
    assert not signature_matches(band, {"out": f32(1.0, 2.1)}, expected, TOL)


# ------------------------------------------------------------------------------------ precision


def comparison(actual: float, expected: float = 1.0, atol: float = 1e-5, rtol: float = 1e-5):
    return compare("out", f64(actual, 2.0), f64(expected, 2.0), atol=atol, rtol=rtol)


def test_slightly_off_is_precision() -> None:
    allowed = 1e-5 + 1e-5 * 1.0
    assert classify_unmatched([comparison(1.0 + 3 * allowed)]) == "precision"
    assert classify_unmatched([comparison(1.0 + 0.9 * PRECISION_FACTOR * allowed)]) == "precision"


def test_far_off_is_unknown() -> None:
    allowed = 1e-5 + 1e-5 * 1.0
    assert classify_unmatched([comparison(1.0 + 1.1 * PRECISION_FACTOR * allowed)]) == "unknown"
    assert classify_unmatched([comparison(5.0)]) == "unknown"


def test_precision_is_only_what_rounding_can_do() -> None:
    # attention normalising by the running sum in every key block was called precision at 99x its tolerance;
    # rounding one format coarser (p in bfloat16 instead of float16) is 8x: the bound lies between
    tol = 2e-3  # attention's float16 profile
    allowed = tol + tol * 1.0
    assert 8 < PRECISION_FACTOR < 99
    assert classify_unmatched([comparison(1.0 + 99 * allowed, atol=tol, rtol=tol)]) == "unknown"
    assert classify_unmatched([comparison(1.0 + 8 * allowed, atol=tol, rtol=tol)]) == "precision"


def test_nan_or_inf_is_unknown() -> None:
    assert classify_unmatched([comparison(NAN)]) == "unknown"
    assert classify_unmatched([comparison(float("inf"))]) == "unknown"


def test_precision_needs_every_failing_output_close() -> None:
    ok = compare("mean", f64(1.0), f64(1.0), atol=1e-5, rtol=1e-5)
    close = comparison(1.0 + 5e-5)
    far = comparison(3.0)
    assert classify_unmatched([ok, close]) == "precision"
    assert classify_unmatched([close, far]) == "unknown"


# ------------------------------------------------------------------------------------ locate


def test_locate_rows_cols_and_tiles() -> None:
    mask = torch.zeros(40, 40, dtype=torch.bool)
    mask[33:40, 5] = True
    mask[2, 20] = True
    where = locate(mask, {"BLOCK_M": 16, "BLOCK_N": 16})
    assert where["wrong"] == 8 and where["total"] == 1600
    assert where["fraction"] == pytest.approx(8 / 1600)
    assert where["rows"] == "2, 33-39 (of 40)"
    assert where["cols"] == "5, 20 (of 40)"
    assert where["tiles"] == [[0, 1], [2, 0]]
    assert where["tile_shape"] == [16, 16]


def test_locate_whole_rows_and_no_blocks() -> None:
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[:, 6] = True  # the last column of every row
    where = locate(mask, {"BLOCK_N": 8})  # row kernels have no BLOCK_M: no tiles
    assert where["rows"] == "all 3"
    assert where["cols"] == "6 (of 7)"
    assert "tiles" not in where


def test_locate_one_dimensional() -> None:
    mask = torch.tensor([False, True, True, False, True])
    where = locate(mask, {})
    assert where["indices"] == "1-2, 4 (of 5)"
    assert "rows" not in where


def test_locate_nothing_wrong() -> None:
    where = locate(torch.zeros(4, 4, dtype=torch.bool), {"BLOCK_M": 2, "BLOCK_N": 2})
    assert where == {"wrong": 0, "total": 16, "fraction": 0.0}


def test_locate_cuts_long_lists() -> None:
    mask = torch.zeros(40, dtype=torch.bool)
    mask[::2] = True  # 20 separate spans
    assert locate(mask, {})["indices"] == "0, 2, 4, 6, 8, 10, 12, 14, ... (of 40)"
