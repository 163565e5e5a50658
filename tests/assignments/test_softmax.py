"""The `softmax` assignment: its spec and oracle module are consistent (fast), each trap signature
matches a float32 realisation of its mistake on the cases that expose it and the correct float32
softmax matches none (fast), and, end to end through `grader.cli.main`, the reference gets full marks
and every trap is named on its mutant (slow).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.authoring.catalog import trap_catalog
from grader.authoring.inputs import InputMaker
from grader.authoring.mutants import load_mutants
from grader.authoring.oracle_loader import load_module, load_problems
from grader.authoring.spec import BACKENDS, load_assignment
from grader.cli import main
from grader.judging.compare import compare
from grader.judging.diagnosis import match_traps
from grader.seeds import case_seed
from tests.conftest import all_traps, corpus_mutant
from tests.corpus import corpus_results

ROOT = Path(__file__).resolve().parents[2]
SEED = 3
SEEDS = (0, 1, 2, 3)
NEG_INF = float("-inf")

# Each assignment trap's mutant, and the targets whose code carries the mistake.
TRAP_MUTANTS = {
    "no_max_subtraction": ("no-max-subtraction", {"softmax_kernel", "online_softmax_kernel", "softmax"}),
    "padding_zero": ("padding-zero-not-neg-inf", {"softmax_kernel", "online_softmax_kernel", "softmax"}),
    "padding_zero_masked_max": ("padding-zero-not-neg-inf", {"softmax_kernel", "softmax"}),
    # the wrapper launches BLOCK_N = 256 whatever N: named through the launch record's block size
    "fixed_block_padding_zero": ("padding-zero-not-neg-inf", {"online_softmax_kernel", "softmax"}),
    "online_rescale_missing": ("online-rescale-missing", {"online_softmax_kernel"}),
    "wrong_axis": ("wrong-axis", {"softmax_kernel", "online_softmax_kernel", "softmax"}),
    # loads right, each row's result stored down a column of out: the transpose on the square case
    "wrong_axis_store_walk": ("wrong-axis", {"online_softmax_kernel"}),
}


@pytest.fixture(scope="module")
def spec():
    return load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")


@pytest.fixture(scope="module")
def oracles(spec):
    return load_module(spec)


@pytest.fixture(scope="module")
def problem(spec):
    (only,) = load_problems(spec).values()
    return only


def inputs_for(case, problem, seed: int) -> dict[str, Any]:
    """A case's inputs as trap functions see them: a kernel case with the grader's own launch in
    `_launches` (grader/judging/judge.py trap_inputs); a wrapper case without a launch record."""
    inputs = problem.make_inputs(case, InputMaker(case_seed(seed, case.id)))
    launches = ({"kernel": case.target, "grid": None, "meta": dict(case.meta)},) if case.meta else ()
    return {**inputs, "_launches": launches}


# ------------------------------------------------------------------------------------ the spec


def test_softmax_loads(spec) -> None:
    assert spec.id == "softmax" and spec.submission_file == "softmax.py"
    assert set(spec.kernels) == {"softmax_kernel", "online_softmax_kernel"}
    assert set(spec.functions) == {"softmax"}
    for kernel in spec.kernels.values():
        assert kernel.params == ("x_ptr", "out_ptr", "M", "N", "stride_xm", "stride_om", "BLOCK_N")
        assert kernel.constexprs == ("BLOCK_N",) and kernel.grid == ("M",)
    assert spec.functions["softmax"].max_launches == 1
    assert {c.target for c in spec.cases} == set(spec.targets)
    assert {c.target for c in spec.cases if c.is_public} == set(spec.targets)  # a public case per target
    assert any(not c.is_public for c in spec.cases)
    assert spec.max_score == 27


def test_case_shapes_cover_the_contract(spec) -> None:
    kernel_cases = [c for c in spec.cases if c.target in spec.kernels]
    one_block = [c for c in kernel_cases if c.target == "softmax_kernel"]
    online = [c for c in kernel_cases if c.target == "online_softmax_kernel"]
    # the one-block kernel is launched as the contract says: BLOCK_N = next_power_of_2(N)
    for c in one_block:
        assert c.meta["BLOCK_N"] == max(1, 1 << (c.dims["N"] - 1).bit_length()), c.id
    # the online kernel gets chunks smaller than the row, and once one larger
    assert any(c.meta["BLOCK_N"] < c.dims["N"] for c in online)
    assert any(c.meta["BLOCK_N"] > c.dims["N"] for c in online)
    dims = [(c.dims["M"], c.dims["N"]) for c in spec.cases]
    assert any(n == 1 for _, n in dims) and any(m == n for m, n in dims)
    assert any(n in (37, 101) for _, n in dims)  # prime N
    assert {c.layout for c in spec.cases} == {"contiguous", "row-gap"}
    assert {"all-negative", "extreme", "rising"} <= {c.kind for c in spec.cases}


def test_every_case_kind_is_defined_by_the_oracle_module(spec, oracles) -> None:
    for case in spec.cases:
        assert case.kind in oracles.ROW_KINDS, case.id


def test_every_case_has_a_justified_tolerance_for_both_backends(spec) -> None:
    for case in spec.cases:
        for backend in BACKENDS:
            tol = spec.tolerances[case.tolerance].lookup(backend, "float32")
            assert tol.why.strip() and tol.rtol <= 1e-5, (case.id, backend)


def test_every_trap_is_documented_exposed_and_has_a_mutant(spec, problem) -> None:
    catalog = trap_catalog(spec)
    assert set(problem.traps) == set(spec.traps)
    for case in spec.cases:
        for trap in case.exposes:
            assert trap in catalog, (case.id, trap)
    mutants = load_mutants(spec.reference_dir)
    expected = {t for m in mutants for backend in BACKENDS for t in m.expected(backend)}
    for trap in spec.traps:
        assert any(trap in c.exposes for c in spec.cases), trap
        assert trap in expected, f"no mutant expects {trap}"
    assert expected <= set(catalog)
    assert set(TRAP_MUTANTS) <= {m.id for m in mutants}


def test_list_shows_both_assignments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--assignments", str(ROOT / "assignments"), "list"]) == 0
    out = capsys.readouterr().out
    assert "fused_layers: " in out
    assert "softmax: Row-wise softmax" in out and "(27 points, " in out
    for line in ("kernel   softmax_kernel", "kernel   online_softmax_kernel", "function softmax"):
        assert line in out


# ------------------------------------------------------------------------------------ the oracle


@pytest.mark.parametrize("seed", SEEDS)
def test_oracle_is_torch_softmax_and_inputs_are_float32(spec, problem, seed: int) -> None:
    for case in spec.cases:
        inputs = inputs_for(case, problem, seed)
        x = inputs["x"]
        assert x.dtype == torch.float32 and tuple(x.shape) == (case.dims["M"], case.dims["N"])
        assert bool(torch.isfinite(x).all()), case.id
        out = problem.expected(inputs)["out"]
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, torch.softmax(x.double(), dim=-1), rtol=0, atol=0)


def test_extreme_rows_really_are_extreme(spec, problem) -> None:
    case = next(c for c in spec.cases if c.kind == "extreme")
    x = inputs_for(case, problem, SEED)["x"]
    assert bool((x[0::2] > 88.8).all()), "even rows must overflow exp in float32"
    assert bool((x[1::2] < -104).all()), "odd rows must underflow exp in float32"


# ------------------------------------------------------------------------------------ signatures
# Each mistake realised in float32 torch (not Triton): the trap's signature must recognise it on every
# case that claims to expose it, the oracle must reject it there, and the correct float32 softmax
# must pass every case.


def _padded(x: torch.Tensor, pad: int, value: float) -> torch.Tensor:
    return torch.cat([x, torch.full((x.shape[0], pad), value, dtype=x.dtype)], dim=1)


def _block(case) -> int:
    """The block the grader (kernel cases) or the reference wrapper launches this case with."""
    if "BLOCK_N" in case.meta:
        return case.meta["BLOCK_N"]
    n = case.dims["N"]
    block = max(1, 1 << (n - 1).bit_length())
    return block if block <= 4096 else 1024


def _pad_count(case) -> int:
    n, b = case.dims["N"], _block(case)
    return -(-n // b) * b - n


def realise(mistake: str, x: torch.Tensor, case) -> torch.Tensor:
    """The float32 output of one mistake (or of the correct softmax) on x."""
    if mistake == "correct":
        return torch.softmax(x, dim=-1)
    if mistake == "no-max-subtraction":
        e = torch.exp(x)
        return e / e.sum(dim=-1, keepdim=True)
    if mistake == "padding-zero-not-neg-inf":
        z = _padded(x, _pad_count(case), 0.0)
        e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
        return (e / e.sum(dim=-1, keepdim=True))[:, : x.shape[1]]
    if mistake == "online-rescale-missing":
        block = _block(case)
        m = torch.full((x.shape[0], 1), NEG_INF)
        d = torch.zeros(x.shape[0], 1)
        for start in range(0, x.shape[1], block):
            chunk = x[:, start : start + block]
            m = torch.maximum(m, chunk.max(dim=-1, keepdim=True).values)
            d = d + torch.exp(chunk - m).sum(dim=-1, keepdim=True)
        return torch.exp(x - m) / d
    if mistake == "wrong-axis":
        return torch.softmax(x, dim=0)
    raise AssertionError(mistake)


def _exposing_pairs(spec) -> list[tuple[str, str]]:
    return [(c.id, t) for c in spec.cases for t in c.exposes if t in spec.traps]


def test_there_are_exposing_cases(spec) -> None:
    assert {t for _, t in _exposing_pairs(spec)} == set(spec.traps)


@pytest.mark.parametrize("seed", SEEDS)
def test_each_signature_recognises_its_mistake_where_exposed(spec, problem, seed: int) -> None:
    for case_id, trap in _exposing_pairs(spec):
        case = spec.case(case_id)
        if trap == "online-rescale-missing" and _block(case) >= case.dims["N"]:
            continue  # the wrapper's one-block path has no chunks to rescale
        inputs = inputs_for(case, problem, seed)
        tol = spec.tolerances[case.tolerance].lookup("interpreter", "float32")
        expected = problem.expected(inputs)
        got = {"out": realise(trap, inputs["x"], case)}
        exposed = not compare("out", got["out"], expected["out"], tol.atol, tol.rtol).ok
        assert exposed, (case_id, trap, seed, "the oracle accepts the mistake here")
        matches = match_traps(problem.traps, {**inputs, "_row_strides": {}}, got, expected, tol)
        named = [m.trap for m in matches]
        assert trap in named, (case_id, trap, seed, named)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_correct_float32_softmax_passes_every_case(spec, problem, seed: int) -> None:
    for case in spec.cases:
        inputs = inputs_for(case, problem, seed)
        tol = spec.tolerances[case.tolerance].lookup("interpreter", "float32")
        got = realise("correct", inputs["x"], case)
        comparison = compare("out", got, problem.expected(inputs)["out"], tol.atol, tol.rtol)
        assert comparison.ok, (case.id, comparison.summary())


@pytest.mark.parametrize("seed", SEEDS)
def test_a_row_softmax_stored_down_the_columns_is_wrong_axis_on_square_inputs(spec, problem, seed: int) -> None:
    """`out + col * stride_om + row` with the loads right: out is the transpose of the answer, each column
    of out summing to 1 (wrong_axis_store_walk). Named wrong-axis, and only that, where M = N."""
    square = [c for c in spec.cases if c.dims["M"] == c.dims["N"]]
    assert square
    for case in square:
        inputs = inputs_for(case, problem, seed)
        tol = spec.tolerances[case.tolerance].lookup("interpreter", "float32")
        got = {"out": torch.softmax(inputs["x"], dim=-1).T.contiguous()}
        named = [m.trap for m in match_traps(problem.traps, {**inputs, "_row_strides": {}}, got,
                                             problem.expected(inputs), tol)]
        assert named == ["wrong-axis"], (case.id, seed, named)


def test_no_max_subtraction_predicts_nan_exactly_where_float32_gives_it(spec, problem) -> None:
    case = next(c for c in spec.cases if c.kind == "extreme")
    inputs = inputs_for(case, problem, SEED)
    sig = problem.traps["no-max-subtraction"](inputs)
    predicted = sig.outputs["out"]
    realised = realise("no-max-subtraction", inputs["x"], case).double()
    assert bool(torch.isnan(realised).any())
    assert torch.equal(torch.isnan(predicted), torch.isnan(realised))
    assert not bool(sig.unconstrained["out"].any())  # logits ~100 and ~-1e4 are far from every edge


def test_wrapper_signatures_cover_the_blocks_a_student_may_choose(spec, problem) -> None:
    case = next(c for c in spec.cases if c.target == "softmax" and c.kind == "all-negative")
    inputs = inputs_for(case, problem, SEED)
    tol = spec.tolerances[case.tolerance].lookup("interpreter", "float32")
    expected = problem.expected(inputs)
    n = case.dims["N"]
    for block in (32, 64, 16):  # next_power_of_2(21) = 32, a generous 64, and a chunked 16
        x = _padded(inputs["x"], -(-n // block) * block - n, 0.0)
        e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
        got = {"out": (e / e.sum(dim=-1, keepdim=True))[:, :n]}
        named = [m.trap for m in match_traps(problem.traps, inputs, got, expected, tol)]
        assert named == ["padding-zero-not-neg-inf"], (block, named)


# ------------------------------------------------------------------------------------ end to end


def _reject_constant(name: str) -> None:
    raise ValueError(f"results.json contains {name}, which is not JSON")


def grade_copy(text: str, tmp_path: Path) -> tuple[int, dict[str, Any], str]:
    """Write `text` to tmp_path/softmax.py, grade it through `grader.cli.main`, return (exit code,
    parsed results.json, what the CLI printed)."""
    submission = tmp_path / "softmax.py"
    submission.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["--assignments", str(ROOT / "assignments"), "grade", str(submission), "--assignment", "softmax",
            "--out", str(out), "--seed", str(SEED), "--backend", "interpreter"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(argv)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"), parse_constant=_reject_constant)
    return code, results, printed.getvalue()


@pytest.mark.slow
def test_reference_gets_full_marks(spec, tmp_path: Path) -> None:
    reference = (ROOT / "reference" / "softmax" / "reference.py").read_text(encoding="utf-8")
    code, results, printed = grade_copy(reference, tmp_path)
    assert code == 0
    assert results["score"] == results["extra_data"]["max_score"] == spec.max_score == 27
    assert all_traps(results) == []
    assert results["extra_data"]["assignment"] == "softmax" and results["extra_data"]["seed"] == SEED
    case_ids = [t["extra_data"]["case_id"] for t in results["tests"]]
    assert case_ids[: len(spec.cases)] == [c.id for c in spec.cases]
    for test in results["tests"]:
        assert test["status"] == "passed" and test["tags"] == [], (test["name"], test["output"])
        assert test["score"] == test["max_score"]
    assert "softmax.py: 27 / 27  traps: none" in printed


@pytest.mark.slow
@pytest.mark.xdist_group("selftest-softmax")  # the corpus's worker: its grades are read, not repeated
@pytest.mark.parametrize("mutant", sorted(TRAP_MUTANTS))
def test_each_trap_is_named_on_its_mutant(spec, mutant: str) -> None:
    """Each mutant as the selftest's corpus graded it (tests/operations/test_selftest.py): its trap named
    on every case that exposes it, on the targets the mistake is in, and only where points were lost."""
    trap, targets = TRAP_MUTANTS[mutant]
    corpus_entry, _ = corpus_mutant(mutant, "softmax")
    results = corpus_results("softmax", mutant)
    assert trap in all_traps(results)
    assert set(all_traps(results)) == set(corpus_entry.expected("interpreter"))
    assert results["score"] < results["extra_data"]["max_score"]
    by_id = {t["extra_data"]["case_id"]: t for t in results["tests"]}
    exposing = [c.id for c in spec.cases if trap in c.exposes and c.target in targets]
    assert exposing, "no case exposes the trap: the test would be vacuous"
    for case_id in exposing:
        test = by_id[case_id]
        assert test["status"] == "failed" and test["score"] == 0, case_id
        assert trap in test["tags"] and trap in test["extra_data"]["traps"], (case_id, test["tags"])
    for test in results["tests"]:  # the mistake is only ever blamed where the score was lost
        if trap in test["tags"]:
            assert test["status"] == "failed", test["name"]
