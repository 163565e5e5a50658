"""The `attention` assignment: its spec, oracle module and corpus are consistent (fast); the oracle is SDPA with the
bottom-right causal mask and the spec's rule for queries that see no key, checked against a loop over the
formula (fast); each trap's prediction, realised in float16, fails the oracle and is named on the cases that expose
it while the correct float16 result passes every case (fast); and each trap is named on its mutant as the
selftest's corpus graded it (slow)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from grader.authoring.inputs import case_maker
from grader.authoring.mutants import load_mutants
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import load_assignment
from grader.judging.compare import compare
from grader.judging.diagnosis import explain_away, match_traps
from grader.seeds import case_seed
from tests.conftest import all_traps, corpus_mutant
from tests.corpus import corpus_results

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2)

# Each trap's mutant (reference/attention/mutants.toml).
TRAP_MUTANTS = {
    "no_rescale": "no-rescale",
    "no_rescale_autotuned": "no-rescale",
    "scale_after_softmax": "scale-after-softmax",
    "scale_twice": "scale-twice",
    "causal_excludes_diagonal": "causal-off-by-one",
    "causal_includes_next_key": "causal-off-by-one",
    "causal_top_left": "causal-top-left",
    "causal_loop_bound_top_left": "causal-top-left",
    "kv_padding_unmasked": "kv-padding-unmasked",
    "masked_row_nan": "masked-row-nan",
    "fp16_accumulation": "fp16-accumulation",
    "exp2_without_log2e": "exp2-without-log2e",
    "exp2_log2_without_log2e": "exp2-without-log2e",
    "lse_without_max": "lse-without-max",
    "lse_base_2": "lse-base-2",
    "causal_mask_minus_1e6": "masked-row-nan",
}
# Generic traps the swapped-heads layout proves (the batch stride ignored: right for contiguous heads only).
GENERIC_MUTANTS = {"batch_heads_flattened": {"unwritten-output", "oob-write"}}


@pytest.fixture(scope="module")
def spec():
    return load_assignment(ROOT / "assignments" / "attention" / "assignment.toml")


@pytest.fixture(scope="module")
def problem(spec):
    (only,) = load_problems(spec).values()
    return only


def wrapper_block(n: int) -> int:
    """The reference wrapper's key block: next_power_of_2(N_KV) between 16 and 64."""
    return max(16, min(64, 1 << max(n - 1, 0).bit_length()))


def inputs_for(case, problem, seed: int) -> dict[str, Any]:
    """A case's inputs as trap functions see them: the grader's own launch for a kernel case, the reference
    wrapper's block for a wrapper case (what its launch record would say)."""
    inputs = problem.make_inputs(case, case_maker(case, case_seed(seed, case.id)))
    meta = dict(case.meta) if case.meta else {"BLOCK_N": wrapper_block(case.dims["NKV"])}
    return {**inputs, "_launches": ({"kernel": case.target, "grid": None, "meta": meta},), "_row_strides": {}}


def interpreter_cases(spec):
    return [c for c in spec.cases if c.runs_on("interpreter")]


# ------------------------------------------------------------------------------------ the spec


def test_the_spec_covers_the_contract(spec) -> None:
    assert set(spec.kernels) == {"attention_kernel"} and set(spec.functions) == {"attention"}
    dims = [c.dims for c in spec.cases]
    assert any(d["NQ"] == 1 and d["NKV"] == 1 for d in dims)  # sequences of one
    assert any(d["NQ"] > d["NKV"] for d in dims) and any(d["NQ"] < d["NKV"] for d in dims)
    assert {d["D"] for d in dims} >= {16, 32, 64, 128}
    assert any(d["NKV"] % 16 for d in dims)  # not a multiple of the blocks
    assert {c.dtype for c in spec.cases} == {"float16", "bfloat16"}
    assert all(c.backends == ("cuda",) for c in spec.cases if c.dtype == "bfloat16")
    assert {c.layout for c in spec.cases} == {"contiguous", "row-gap", "swapped-heads"}
    assert {c.target for c in spec.cases if c.meta.get("CAUSAL")} and {
        c.target for c in spec.cases if c.options.get("causal")}


def test_every_trap_is_exposed_and_proven_by_a_mutant(spec, problem) -> None:
    exposed = {t for c in spec.cases for t in c.exposes}
    assert set(spec.traps) <= exposed
    assert set(problem.traps) == set(spec.traps)
    proven = {t for m in load_mutants(spec.reference_dir) for t in m.expected("interpreter")}
    assert set(spec.traps) <= proven and {"oob-read", "oob-write", "not-fused"} <= proven
    assert set(TRAP_MUTANTS.values()) == set(spec.traps)
    by_id = {m.id: m for m in load_mutants(spec.reference_dir)}
    assert all(set(by_id[m].expected("interpreter")) == traps for m, traps in GENERIC_MUTANTS.items())


def test_the_compile_check_and_the_template_agree_with_the_contract(spec) -> None:
    template = (ROOT / "student_template" / "attention" / "attention.py").read_text(encoding="utf-8")
    kernel = spec.kernels["attention_kernel"]
    for param in kernel.params:
        assert param in template, param
    assert "def attention(q, k, v, causal=False, sm_scale=None)" in template


# ------------------------------------------------------------------------------------ the oracle


def formula(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float):
    """The spec's definition, one query at a time in float64."""
    b, h, nq, _ = q.shape
    nkv = k.shape[2]
    out = torch.zeros(b, h, nq, v.shape[-1], dtype=torch.float64)
    lse = torch.full((b, h, nq), -math.inf, dtype=torch.float64)
    for i in range(nq):
        last = i + nkv - nq if causal else nkv - 1
        if last < 0:
            continue  # a query that sees no key: out 0, lse -inf
        s = scale * torch.einsum("bhd,bhjd->bhj", q[:, :, i].double(), k[:, :, : last + 1].double())
        lse[:, :, i] = torch.logsumexp(s, dim=-1)
        out[:, :, i] = torch.einsum("bhj,bhjd->bhd", torch.softmax(s, dim=-1), v[:, :, : last + 1].double())
    return out, lse


@pytest.mark.parametrize("seed", SEEDS)
def test_the_oracle_is_the_formula_with_the_bottom_right_mask(spec, problem, seed: int) -> None:
    for case in spec.cases:
        inputs = inputs_for(case, problem, seed)
        assert inputs["q"].dtype == getattr(torch, case.dtype)
        expected = problem.expected(inputs)
        out, lse = formula(inputs["q"], inputs["k"], inputs["v"], inputs["causal"], inputs["sm_scale"])
        assert torch.allclose(expected["out"], out, rtol=1e-10, atol=1e-10), case.id
        assert torch.equal(torch.isinf(expected["lse"]), torch.isinf(lse)), case.id
        finite = torch.isfinite(lse)
        assert torch.allclose(expected["lse"][finite], lse[finite], rtol=1e-10, atol=1e-10), case.id


def test_queries_that_see_no_key_are_zero_with_lse_minus_infinity(spec, problem) -> None:
    case = spec.case("attention-more-queries")
    expected = problem.expected(inputs_for(case, problem, 0))
    empty = case.dims["NQ"] - case.dims["NKV"]
    assert bool((expected["out"][:, :, :empty] == 0).all()) and bool((expected["lse"][:, :, :empty] == -math.inf).all())
    assert bool(torch.isfinite(expected["lse"][:, :, empty:]).all())


def test_the_bottom_right_mask_is_torchs_causal_lower_right(spec, problem) -> None:
    from torch.nn.attention.bias import causal_lower_right

    case = spec.case("kernel-head-dim-128")  # 5 queries, 40 keys: the two alignments differ
    inputs = inputs_for(case, problem, 0)
    q, k, v = (inputs[n].double() for n in ("q", "k", "v"))
    bias = causal_lower_right(q.shape[2], k.shape[2])
    torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=inputs["sm_scale"])
    assert torch.allclose(problem.expected(inputs)["out"], torch_out, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------ traps against the oracle


def realise(outputs: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """What a kernel would store: out in the inputs' dtype, lse in float32."""
    return {"out": outputs["out"].to(dtype), "lse": outputs["lse"].to(torch.float32)}


@pytest.mark.parametrize("seed", SEEDS)
def test_the_correct_float16_result_passes_every_case(spec, problem, seed: int) -> None:
    for case in interpreter_cases(spec):
        inputs = inputs_for(case, problem, seed)
        tol = spec.tolerances[case.tolerance].lookup("interpreter", case.dtype)
        expected = problem.expected(inputs)
        got = realise(expected, inputs["q"].dtype)
        for name in ("out", "lse"):
            assert compare(name, got[name], expected[name], tol.atol, tol.rtol).ok, (case.id, name)
        assert match_traps(problem.traps, inputs, got, expected, tol) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_each_trap_prediction_fails_the_oracle_and_is_named_where_exposed(spec, problem, seed: int) -> None:
    pairs = [(c, t) for c in interpreter_cases(spec) for t in c.exposes if t in spec.traps]
    assert {t for _, t in pairs} == set(spec.traps)
    for case, trap in pairs:
        inputs = inputs_for(case, problem, seed)
        tol = spec.tolerances[case.tolerance].lookup("interpreter", case.dtype)
        expected = problem.expected(inputs)
        prediction = problem.traps[trap](inputs)
        first = prediction[0] if isinstance(prediction, list) else prediction
        assert first is not None, (case.id, trap)
        got = realise(dict(first.outputs), inputs["q"].dtype)
        failed = [n for n in ("out", "lse") if not compare(n, got[n], expected[n], tol.atol, tol.rtol).ok]
        assert failed, (case.id, trap, seed, "the oracle accepts the mistake here")
        named = [m.trap for m in match_traps(problem.traps, inputs, got, expected, tol)]
        assert trap in named, (case.id, trap, seed, named)


def base_2_throughout(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """exp2 for exp and log2 for log, log2(e) nowhere: a softmax of the scores times ln 2, lse = log2(sum 2^s)."""
    q, k, v = (inputs[n].double() for n in ("q", "k", "v"))
    s = inputs["sm_scale"] * (q @ k.transpose(-1, -2))  # the cases used here are not causal
    weights = torch.softmax(s * math.log(2.0), dim=-1)
    return {"out": weights @ v, "lse": torch.logsumexp(s * math.log(2.0), dim=-1) / math.log(2.0)}


@pytest.mark.parametrize("seed", SEEDS)
def test_exp2_in_base_2_throughout_is_one_mistake_on_all_zero_queries_too(spec, problem, seed: int) -> None:
    """On all-zero queries every score is 0: the output is right and lse is log2(N_KV), which both lse traps
    predict as well; exp2-without-log2e predicts it too, and it alone explains every case."""
    named = []
    for case_id in ("kernel-basic", "kernel-large-values", "attention-large-values", "attention-basic"):
        case = spec.case(case_id)
        inputs = inputs_for(case, problem, seed)
        tol = spec.tolerances[case.tolerance].lookup("interpreter", case.dtype)
        got = realise(base_2_throughout(inputs), inputs["q"].dtype)
        named.append(tuple(m.trap for m in match_traps(problem.traps, inputs, got, problem.expected(inputs), tol)))
        assert "exp2-without-log2e" in named[-1], (case_id, named[-1])
    assert set(named[1]) == {"exp2-without-log2e", "lse-without-max", "lse-base-2"}
    assert explain_away(named, set(spec.traps)) == [("exp2-without-log2e",)] * 4


def test_float16_accumulation_is_invisible_without_overflow(spec, problem) -> None:
    """On unit-scale inputs a float16 accumulator is rounding the tolerance hides: the trap predicts nothing."""
    inputs = inputs_for(spec.case("attention-basic"), problem, 0)
    assert problem.traps["fp16-accumulation"](inputs) is None
    large = inputs_for(spec.case("attention-large-values"), problem, 0)
    assert problem.traps["fp16-accumulation"](large) is not None


# ------------------------------------------------------------------------------------ end to end (the corpus)


@pytest.mark.slow
@pytest.mark.xdist_group("selftest-attention")  # the corpus's worker: its grades are read, not repeated
@pytest.mark.parametrize("mutant", sorted(TRAP_MUTANTS))
def test_each_trap_is_named_on_its_mutant(spec, mutant: str) -> None:
    """Each mutant as the selftest's corpus graded it: its trap named on the cases that expose it and lost points
    there, and nothing else named."""
    trap = TRAP_MUTANTS[mutant]
    corpus_entry, _ = corpus_mutant(mutant, "attention")
    results = corpus_results("attention", mutant)
    assert set(all_traps(results)) == set(corpus_entry.expected("interpreter")) == {trap}
    assert results["score"] < results["extra_data"]["max_score"]
    by_id = {t["extra_data"]["case_id"]: t for t in results["tests"]}
    exposing = [c.id for c in interpreter_cases(spec) if trap in c.exposes]
    assert exposing
    named_somewhere = False
    for case_id in exposing:
        test = by_id[case_id]
        if trap in test["tags"]:
            named_somewhere = True
            assert test["status"] == "failed" and test["score"] == 0, case_id
    assert named_somewhere, (mutant, {i: by_id[i]["tags"] for i in exposing})


@pytest.mark.slow
@pytest.mark.xdist_group("selftest-attention")
@pytest.mark.parametrize("mutant", ["store_mask_off", "batch_heads_flattened"])
def test_a_passed_wrapper_case_carries_no_trap_of_its_kernel(mutant: str) -> None:
    """The kernel writes out of bounds; wrapper cases whose own outputs pass are not tagged with its traps."""
    results = corpus_results("attention", mutant)
    passed = [t for t in results["tests"] if t["status"] == "passed" and t["extra_data"]["case_id"].startswith(
        "attention-")]
    assert passed
    assert [(t["extra_data"]["case_id"], t["tags"]) for t in passed if t["extra_data"]["traps"] or t["tags"]] == []


# ------------------------------------------------------------------------------------ the tolerances


def online_attention(inputs: dict[str, Any], block: int) -> torch.Tensor:
    """A correct kernel's arithmetic in torch: float32 scores, running max and sum, p rounded to the inputs' dtype
    for the second product (float32 accumulation), out rounded to the inputs' dtype once."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    nq, nkv = q.shape[2], k.shape[2]
    s_all = (q.float() @ k.float().transpose(-1, -2)) * inputs["sm_scale"]
    if inputs["causal"]:
        s_all = s_all.masked_fill(torch.arange(nkv)[None, :] > torch.arange(nq)[:, None] + nkv - nq, -math.inf)
    m = torch.full(q.shape[:3], -math.inf)
    total = torch.zeros(q.shape[:3])
    acc = torch.zeros(q.shape[:3] + (v.shape[-1],))
    for start in range(0, nkv, block):
        s = s_all[..., start:start + block]
        m_new = torch.maximum(m, s.max(dim=-1).values)
        m_safe = m_new.masked_fill(torch.isinf(m_new), 0.0)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        total = total * alpha + p.sum(dim=-1)
        acc = acc * alpha[..., None] + p.to(v.dtype).float() @ v[..., start:start + block, :].float()
        m = m_new
    return (acc / total.masked_fill(total == 0, 1.0)[..., None]).to(q.dtype)


@pytest.mark.parametrize("backend", ["interpreter", "cuda"])
def test_a_correct_kernels_rounding_stays_well_inside_the_tolerance(spec, problem, backend: str) -> None:
    """Every case, float16 and bfloat16 (which the interpreter cannot run: this is its evidence on the CPU), at
    several seeds and key blocks: the error of a correct kernel's float arithmetic is under half the allowance."""
    for case in (c for c in spec.cases if c.runs_on(backend)):
        tol = spec.tolerances[case.tolerance].lookup(backend, case.dtype)
        for seed in SEEDS:
            inputs = inputs_for(case, problem, seed)
            expected = problem.expected(inputs)["out"]
            for block in (16, 64):
                got = online_attention(inputs, block).double()
                ratio = float(((got - expected).abs() / (tol.atol + tol.rtol * expected.abs())).max())
                assert ratio < 0.5, (case.id, case.dtype, seed, block, ratio)
