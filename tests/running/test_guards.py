"""Guarded buffers: out-of-bounds writes, gap writes, unwritten outputs and modified inputs are found.

The first part simulates kernels by writing into the storages with torch (no Triton). The second part
grades a copy of the reference with planted mask bugs end to end and checks the traps reach
results.json on exactly the cases whose shapes expose them.
"""

from __future__ import annotations

import pytest
import torch

from grader.authoring.spec import load_assignment
from grader.running import guards
from grader.running.guards import build_storage, check_storage, plan_buffer, unwritten_mask, view_of
from tests.conftest import all_traps

VALUES_2D = torch.arange(15, dtype=torch.float32).reshape(3, 5) + 1.0


def output_1d(n: int = 10) -> tuple[guards.BufferPlan, torch.Tensor]:
    plan = plan_buffer("out", "output", (n,), gap=0)
    return plan, build_storage(plan, torch.float32, None)


def output_2d(gap: int = 2) -> tuple[guards.BufferPlan, torch.Tensor]:
    plan = plan_buffer("out", "output", (3, 5), gap=gap)
    return plan, build_storage(plan, torch.float32, None)


def input_2d(gap: int = 2) -> tuple[guards.BufferPlan, torch.Tensor]:
    plan = plan_buffer("x", "input", (3, 5), gap=gap)
    return plan, build_storage(plan, torch.float32, VALUES_2D)


def write_all(plan: guards.BufferPlan, storage: torch.Tensor) -> torch.Tensor:
    """A correct kernel: every element of the view written, nothing else touched."""
    after = storage.clone()
    view = view_of(after, plan)
    view.copy_(torch.arange(view.numel(), dtype=after.dtype).reshape(view.shape))
    return after


# ------------------------------------------------------------------------------------ layout


def test_plan_layout_with_row_gap() -> None:
    plan = plan_buffer("x", "input", (3, 5), gap=2)
    assert (plan.rows, plan.cols, plan.row_stride) == (3, 5, 7)
    assert plan.guard >= 256
    assert plan.storage_size == 2 * plan.guard + 3 * 7
    assert plan.view_shape == (3, 5) and plan.view_stride == (7, 1)
    assert int(plan.interior_mask().sum()) == 15


def test_one_dimensional_plan_ignores_gap() -> None:
    plan = plan_buffer("bias", "input", (5,), gap=3)
    assert plan.row_stride == 5 and plan.view_shape == (5,) and plan.view_stride == (1,)


def test_transposed_tensors_of_three_dimensions_are_refused() -> None:
    with pytest.raises(ValueError, match="transposed: two"):
        plan_buffer("x", "input", (2, 3, 4), gap=0, transpose=True)


def test_input_view_holds_the_values() -> None:
    plan, storage = input_2d()
    assert torch.equal(view_of(storage, plan), VALUES_2D)


def test_transposed_input_view_holds_the_values() -> None:
    weight = torch.arange(12, dtype=torch.float32).reshape(3, 4)  # stored [N, K]; the view is [K, N]
    plan = plan_buffer("w", "input", (4, 3), gap=1, transpose=True)
    storage = build_storage(plan, torch.float32, weight.T)
    view = view_of(storage, plan)
    assert view.shape == (4, 3) and view.stride() == (1, 5)
    assert torch.equal(view, weight.T)


def test_input_guards_and_gaps_are_nan() -> None:
    plan, storage = input_2d(gap=2)
    interior = plan.interior_mask()
    assert torch.isnan(storage[~interior]).all()
    assert not torch.isnan(storage[interior]).any()
    # So a read one past the end, or one past a row's end (into the gap), leaks NaN:
    end = plan.offset + plan.rows * plan.row_stride
    assert torch.isnan(storage[end])
    assert torch.isnan(storage[plan.offset + plan.cols])  # row 0, column N: the gap, not row 1
    assert torch.isnan(storage[plan.offset - 1])


def test_contiguous_input_read_past_the_end_leaks_nan() -> None:
    plan = plan_buffer("x", "input", (4,), gap=0)
    storage = build_storage(plan, torch.float32, torch.ones(4))
    assert torch.isnan(storage[plan.offset + 4])


def test_fresh_output_is_all_poison() -> None:
    plan, storage = output_2d()
    assert unwritten_mask(plan, storage).all()
    assert torch.isnan(view_of(storage, plan)).all()
    findings = check_storage(plan, storage, storage.clone())
    assert [f.trap for f in findings] == ["unwritten-output"]
    assert findings[0].count == 15


# ------------------------------------------------------------------------------------ findings


def test_clean_full_write_has_no_findings() -> None:
    for plan, storage in (output_1d(), output_2d(gap=0), output_2d(gap=3)):
        after = write_all(plan, storage)
        assert check_storage(plan, storage, after) == []
        assert not unwritten_mask(plan, after).any()
    plan, storage = input_2d()
    assert check_storage(plan, storage, storage.clone()) == []


def test_write_one_past_the_end_of_1d_output() -> None:
    plan, storage = output_1d(10)
    after = write_all(plan, storage)
    after[plan.offset + 10] = 0.0
    (finding,) = check_storage(plan, storage, after)
    assert finding.trap == "oob-write"
    assert finding.buffer == "out"
    assert finding.count == 1
    assert finding.first == "1 element(s) past the end of out's storage"
    assert "out" in finding.message() and "out-of-bounds write" in finding.message()


def test_write_past_the_last_row_of_2d_output() -> None:
    plan, storage = output_2d(gap=0)
    after = write_all(plan, storage)
    after[plan.offset + 15 : plan.offset + 17] = 1.0
    (finding,) = check_storage(plan, storage, after)
    assert (finding.trap, finding.buffer, finding.count) == ("oob-write", "out", 2)
    assert "past the end of out" in finding.first


def test_write_before_the_start() -> None:
    plan, storage = output_1d()
    after = write_all(plan, storage)
    after[plan.offset - 3] = 1.0
    (finding,) = check_storage(plan, storage, after)
    assert finding.trap == "oob-write"
    assert finding.first == "3 element(s) before the start of out"


def test_write_into_the_gap_between_rows() -> None:
    plan, storage = output_2d(gap=2)
    after = write_all(plan, storage)
    after[plan.offset + 1 * plan.row_stride + 5] = 0.0  # row 1, column 5 = N: in the gap
    (finding,) = check_storage(plan, storage, after)
    assert (finding.trap, finding.buffer, finding.count) == ("oob-write", "out", 1)
    assert "gap" in finding.first
    assert finding.first == "in the gap after row 1 of out (column 5, row length 5)"


def test_nan_written_over_a_nan_guard_is_seen() -> None:
    plan, storage = output_1d()
    after = write_all(plan, storage)
    after[plan.offset + plan.cols] = float("nan")  # a plain NaN: different bits from the guard's NaN
    assert [f.trap for f in check_storage(plan, storage, after)] == ["oob-write"]


def test_last_element_left_unwritten() -> None:
    plan, storage = output_2d(gap=2)
    after = storage.clone()
    view = view_of(after, plan)
    view[:2] = 1.0
    view[2, :4] = 1.0  # everything but out[2, 4]
    (finding,) = check_storage(plan, storage, after)
    assert finding.trap == "unwritten-output"
    assert (finding.buffer, finding.count) == ("out", 1)
    assert finding.first == "out[2, 4]"
    assert unwritten_mask(plan, after).nonzero().tolist() == [[2, 4]]


def test_last_element_of_1d_output_left_unwritten() -> None:
    plan, storage = output_1d(10)
    after = storage.clone()
    view_of(after, plan)[:9] = 1.0
    (finding,) = check_storage(plan, storage, after)
    assert (finding.trap, finding.count, finding.first) == ("unwritten-output", 1, "out[9]")


def test_nan_written_into_output_counts_as_written() -> None:
    plan, storage = output_1d(4)
    after = storage.clone()
    view_of(after, plan).fill_(float("nan"))
    assert check_storage(plan, storage, after) == []


def test_modified_input_element() -> None:
    plan, storage = input_2d(gap=2)
    after = storage.clone()
    view_of(after, plan)[1, 3] = -1.0
    (finding,) = check_storage(plan, storage, after)
    assert finding.trap == "input-modified"
    assert (finding.buffer, finding.count) == ("x", 1)
    assert finding.first == "x[1, 3]"


def test_modified_transposed_input_is_named_by_logical_index() -> None:
    weight = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    plan = plan_buffer("w", "input", (4, 3), gap=1, transpose=True)
    storage = build_storage(plan, torch.float32, weight.T)
    after = storage.clone()
    view_of(after, plan)[2, 1] = 100.0
    (finding,) = check_storage(plan, storage, after)
    assert (finding.trap, finding.first) == ("input-modified", "w[2, 1]")


def test_input_written_out_of_bounds_and_in_place() -> None:
    plan, storage = input_2d(gap=2)
    after = storage.clone()
    view_of(after, plan)[0, 0] = 0.0
    after[plan.offset + plan.cols] = 0.0  # the gap after row 0
    kinds = {f.trap: f for f in check_storage(plan, storage, after)}
    assert set(kinds) == {"oob-write", "input-modified"}
    assert "gap after row 0 of x" in kinds["oob-write"].first
    assert kinds["input-modified"].first == "x[0, 0]"


# ------------------------------------------------------------------------------------ real kernels
# One planted copy of the reference carries three mask bugs, one per kernel, so one grading run (the
# expensive part) covers all three guards; each kernel's cases are judged independently, and the
# assertions below also check that each trap stays on its own kernel's cases.

ROW_LOAD = "x = tl.load(x_ptr + row * stride_m + cols, mask=mask, other=0.0)"  # 1st: row_mean_var_kernel
LN_STORE = "tl.store(out_ptr + row * stride_m + cols, y, mask=mask)"
LINEAR_STORE = "tl.store(c_ptrs, result, mask=row_ok[:, None] & col_ok[None, :])"


@pytest.fixture(scope="module")
def spec(repo_root):
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


@pytest.fixture(scope="module")
def mask_bugs(reference_source, planted, grade_text):
    assert reference_source.count(ROW_LOAD) == 2
    assert reference_source.index(ROW_LOAD) < reference_source.index("def layernorm_forward_kernel")
    # row_mean_var_kernel loads column N too: one past each row's end
    text = planted(ROW_LOAD, ROW_LOAD.replace("mask=mask", "mask=cols <= N"), count=-1)
    # layernorm_forward_kernel stores column N too
    text = planted(LN_STORE, LN_STORE.replace("mask=mask", "mask=cols <= N"), into=text)
    # fused_linear_gelu_kernel never stores the last column
    text = planted(LINEAR_STORE, LINEAR_STORE.replace("col_ok[None, :]", "(cols[None, :] < N - 1)"),
                   into=text)
    return grade_text(text)


def kernel_cases(spec, target: str, padded: bool | None = None) -> list:
    """The spec's cases of kernel `target`; with `padded`, only those whose BLOCK_N exceeds N (or not)."""
    cases = [c for c in spec.cases if c.target == target]
    if padded is not None:
        cases = [c for c in cases if (c.meta["BLOCK_N"] > c.dims["N"]) is padded]
    return cases


def assert_fails_with(graded, case_ids: list[str], trap: str) -> None:
    assert case_ids, "no case exposes the trap: the test would be vacuous"
    for case_id in case_ids:
        test = graded.test(case_id)
        assert test["score"] == 0, case_id
        assert test["status"] == "failed", case_id
        assert trap in test["tags"], (case_id, test["tags"])
        assert trap in test["extra_data"]["traps"], case_id
        assert test["output"].startswith("Failed:"), case_id


def assert_full_marks(graded, case_ids: list[str]) -> None:
    assert case_ids, "no case to get full marks on: the test would be vacuous"
    for case_id in case_ids:
        test = graded.test(case_id)
        assert (test["score"], test["status"], test["tags"]) == (test["max_score"], "passed", []), case_id


@pytest.mark.slow
def test_grading_a_kernel_with_mask_bugs_completes(mask_bugs, reference_graded) -> None:
    assert mask_bugs.exit_code == 0
    traps = all_traps(mask_bugs.results)
    assert {"oob-read", "oob-write", "unwritten-output"} <= set(traps)
    assert len(mask_bugs.results["tests"]) == len(reference_graded.results["tests"])
    assert 0 < mask_bugs.results["score"] < reference_graded.results["score"]


@pytest.mark.slow
def test_read_past_row_end_is_oob_read(mask_bugs, spec) -> None:
    exposed = [c.id for c in kernel_cases(spec, "row_mean_var_kernel", padded=True)]
    assert_fails_with(mask_bugs, exposed, "oob-read")
    for case_id in exposed:
        assert "NaN where the oracle is finite" in mask_bugs.test(case_id)["output"]
        assert mask_bugs.test(case_id)["tags"] == ["oob-read"]  # not also "unknown"
    # When BLOCK_N == N the mask `cols <= N` still excludes every lane past the row: no penalty.
    assert_full_marks(mask_bugs, [c.id for c in kernel_cases(spec, "row_mean_var_kernel", padded=False)])


@pytest.mark.slow
def test_write_past_row_end_is_oob_write(mask_bugs, spec) -> None:
    exposed = kernel_cases(spec, "layernorm_forward_kernel", padded=True)
    assert_fails_with(mask_bugs, [c.id for c in exposed], "oob-write")
    for case in exposed:
        output = mask_bugs.test(case.id)["output"]
        assert "out-of-bounds write(s) in out" in output
        if case.layout == "row-gap":
            assert "in the gap after row 0 of out" in output
        else:  # contiguous rows: only the last row's extra store leaves the tensor
            assert ("1 out-of-bounds write(s) in out; "
                    "first at 1 element(s) past the end of out's storage") in output
    assert_full_marks(mask_bugs, [c.id for c in kernel_cases(spec, "layernorm_forward_kernel", padded=False)])


@pytest.mark.slow
def test_unwritten_last_column_is_unwritten_output(mask_bugs, spec) -> None:
    cases = [c for c in spec.cases if c.target == "fused_linear_gelu_kernel"]
    assert_fails_with(mask_bugs, [c.id for c in cases], "unwritten-output")
    for case in cases:
        test = mask_bugs.test(case.id)
        m, n = case.dims["M"], case.dims["N"]
        assert f"{m} output element(s) never written in out; first at out[0, {n - 1}]" in test["output"]
        assert "oob-read" not in test["tags"]  # the poison NaN is not mistaken for a leaked guard NaN


@pytest.mark.slow
def test_traps_stay_on_their_kernel(mask_bugs) -> None:
    owners = {"oob-read": "row_mean_var_kernel", "oob-write": "layernorm_forward_kernel",
              "unwritten-output": "fused_linear_gelu_kernel"}
    seen = {target: 0 for target in owners.values()}
    for test in mask_bugs.results["tests"]:
        target = test["extra_data"]["target"]
        if target in seen:
            seen[target] += 1
            assert set(test["tags"]) <= {t for t, owner in owners.items() if owner == target}, test["name"]
    assert all(seen.values()), seen  # every owning kernel has cases, so the loop checked each


# --------------------------------------------------------------------------- tensors of more than two dimensions


def test_a_4d_tensor_is_rows_of_its_last_dimension_each_followed_by_the_gap() -> None:
    values = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4)
    plan = plan_buffer("q", "input", (2, 3, 5, 4), gap=3)
    assert plan.view_shape == (2, 3, 5, 4)
    assert plan.view_stride == (3 * 5 * 7, 5 * 7, 7, 1)
    storage = build_storage(plan, torch.float16, values)
    assert storage.dtype == torch.float16
    assert torch.equal(view_of(storage, plan).float(), values)
    # the gap after q[1, 2, 4, :] and an element inside are named by their 4-D index
    last_row = plan.guard + (plan.rows - 1) * plan.row_stride
    assert plan.describe_index(last_row + 3) == "q[1, 2, 4, 3]"
    assert plan.describe_index(last_row + 5) == "in the gap after row q[1, 2, 4, :] (column 5, row length 4)"


def test_guard_checks_find_writes_into_the_gaps_of_a_float16_4d_output() -> None:
    plan = plan_buffer("out", "output", (2, 2, 3, 4), gap=1)
    before = build_storage(plan, torch.float16, None)
    after = write_all(plan, before)
    assert check_storage(plan, before, after) == []
    after[plan.guard + 10 * plan.row_stride + 4] = 1.0  # the gap after row 10 = out[1, 1, 1, :]
    findings = check_storage(plan, before, after)
    assert [f.trap for f in findings] == ["oob-write"]
    assert findings[0].first == "in the gap after row out[1, 1, 1, :] (column 4, row length 4)"
    untouched = build_storage(plan, torch.float16, None)
    assert bool(unwritten_mask(plan, untouched).all()) and unwritten_mask(plan, untouched).shape == (2, 2, 3, 4)


def test_a_swapped_plan_stores_heads_interleaved_and_names_elements_by_the_view() -> None:
    values = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4)  # (B, H, N, D)
    plan = plan_buffer("q", "input", (2, 3, 5, 4), gap=0, swapped=True)
    assert plan.stored_shape == (2, 5, 3, 4) and plan.view_shape == (2, 3, 5, 4)
    assert plan.view_stride == (5 * 3 * 4, 4, 3 * 4, 1)  # stride_h = D, stride_n = H * D
    storage = build_storage(plan, torch.float16, values)
    assert torch.equal(view_of(storage, plan).float(), values)
    # storage element (b=0, n=4, h=2, d=1) is q[0, 2, 4, 1] of the view
    assert plan.describe_index(plan.guard + 4 * 12 + 2 * 4 + 1) == "q[0, 2, 4, 1]"
    # a 3-D tensor (B, H, N) swaps B and H: its last dimension stays contiguous
    lse = plan_buffer("lse", "output", (2, 3, 5), gap=1, swapped=True)
    assert lse.view_shape == (2, 3, 5) and lse.view_stride == (6, 12, 1)
