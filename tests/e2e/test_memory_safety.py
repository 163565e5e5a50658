"""Stray writes stay inside the grader's guard bands, the worker's fence or a fresh worker; verdicts of
code that writes out of bounds are the same on every run.

Fast part: the guard sizing (`guards.reach`), guard bands around a wrapper's own allocations, the
interpreter fence (in a subprocess: the interpreter is chosen when @triton.jit runs), replay failures
named for what happened, and when a worker is replaced. Slow part: three realistic held-out mistakes
made from the softmax reference by string replacement, each graded twice with the same seed through
`grader.cli.main`.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.cli import main
from grader.evidence import guard_bits
from grader.evidence.observation import Finding, Observation
from grader.evidence.worker_error import WorkerError
from grader.judging.errors import classify_error
from grader.running import guards
from grader.running.cases.observe import needs_fresh_worker
from tests.conftest import all_traps

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "reference" / "softmax" / "reference.py"
SEED = 1  # the seed the measurements used

# ------------------------------------------------------------------------------------ guard sizing


def test_reach_covers_a_kernel_walking_the_wrong_axis() -> None:
    # softmax_kernel, one program per row: `x + row + j * stride` instead of `x + row * stride + j`
    for m, n, block, stride in ((6, 37, 64, 37), (4, 100, 32, 107), (3, 5000, 8192, 5000), (9, 9, 4, 9)):
        farthest = (m - 1) + (n - 1) * stride
        assert guards.reach((m, n), (stride, 1), grid=(m,), blocks=(block,)) >= farthest
        assert guards.reach((m, n), (stride, 1)) >= farthest  # a wrapper's launch: grid and blocks unknown
    # a 1-D tutorial index under a per-row grid, times a stride: (pid * BLOCK + lane) * stride
    assert guards.reach((6, 37), (40,), grid=(6,), blocks=(64,)) >= (6 * 64 + 63) * 40
    # a matmul indexing A's K axis with the row stride: offs_k * stride_am + offs_m, grid (cdiv(M,16), cdiv(N,16))
    assert guards.reach((37, 19, 23), (23, 19, 20), grid=(3, 2), blocks=(16, 16, 16)) >= 47 * 23 + 47


def test_guard_width_is_the_reach_between_the_floor_and_the_cap() -> None:
    assert guards.guard_elements(0) == guards.GUARD_MIN
    assert guards.guard_elements(10, body=900) == 900  # never narrower than the tensor itself
    assert guards.guard_elements(12_345) == 12_345
    assert guards.guard_elements(10**12) == guards.GUARD_CAP
    plan = guards.plan_buffer("x", "input", (6, 37), gap=0)
    assert plan.guard == guards.GUARD_MIN  # without a reach: the original width


def test_a_wrong_axis_write_lands_in_a_band_sized_by_reach() -> None:
    m, n, block = 6, 37, 64
    plan = guards.plan_buffer("out", "output", (m, n), gap=1,
                              reach_elements=guards.reach((m, n), (n + 1,), grid=(m,), blocks=(block,)))
    storage = guards.build_storage(plan, torch.float32, None)
    after = storage.clone()
    for row in range(m):  # every store of `out + row + j * stride_om`
        for j in range(n):
            after[plan.offset + row + j * plan.row_stride] = 0.5
    assert plan.offset + (m - 1) + (n - 1) * plan.row_stride < plan.storage_size
    kinds = {f.trap: f for f in guards.check_storage(plan, storage, after)}
    assert "oob-write" in kinds and "past the end of out's storage" in kinds["oob-write"].first


# ------------------------------------------------------------------------------------ a wrapper's own buffers


# ------------------------------------------------------------------------------------ the fence


# ------------------------------------------------------------------------------------ naming and restarts


def test_classify_error_names_the_fences_traps_only_by_their_own_classes() -> None:
    assert classify_error(WorkerError(chain=("grader.running.worker.fence.StrayRead",))) == "oob-read"
    assert classify_error(WorkerError(chain=("submission.StrayWrite",))) == "runtime-error"


def test_the_worker_is_replaced_after_cases_that_wrote_out_of_bounds_raised_or_crashed() -> None:
    for failure in ("crash", "timeout", "runtime-error", "compile-error", "oob-write", "oob-read", "memory-fault"):
        assert needs_fresh_worker(Observation(trap=failure))
    wrote = guard_bits.GuardFinding("oob-write", "out", 1, "1 element(s) past the end of out's storage")
    unwritten = guard_bits.GuardFinding("unwritten-output", "out", 1, "out[0]")
    assert needs_fresh_worker(Observation(guard_findings=(wrote,)))
    assert needs_fresh_worker(Observation(sanitizer_findings=(Finding("oob-write", "memcheck"),)))
    assert not needs_fresh_worker(Observation(guard_findings=(unwritten,)))
    assert not needs_fresh_worker(Observation())  # a clean case keeps its worker
    for blocked in ("missing-symbol", "wrong-signature", "import-fails", "bad-output"):
        assert not needs_fresh_worker(Observation(trap=blocked))


# ------------------------------------------------------------------------------------ end to end


def plant(source: str, edits: list[tuple[str, str, int]]) -> str:
    for old, new, count in edits:
        assert source.count(old) == count, (old, source.count(old))
        source = source.replace(old, new)
    return source


# Both kernels address `row + j * stride` instead of `row * stride + j`: on every non-square shape
# they reach N * stride elements past each tensor's start (25 million on the 3 x 5000 wrapper case).
WRONG_AXIS = [
    ("x_ptr + row * stride_xm + cols", "x_ptr + row + cols * stride_xm", 1),
    ("out_ptr + row * stride_om + cols", "out_ptr + row + cols * stride_om", 1),
    ("x_row = x_ptr + row * stride_xm", "x_row = x_ptr + row", 1),
    ("out_row = out_ptr + row * stride_om", "out_row = out_ptr + row", 1),
    ("tl.load(x_row + offs,", "tl.load(x_row + offs * stride_xm,", 2),
    ("tl.store(out_row + offs,", "tl.store(out_row + offs * stride_om,", 1),
]
# The online kernel reads each row right but writes it down a column: `out_ptr + row + col * stride_om`
# (the held-out softmax walked a row along the wrong axis). On the 3 x 5000 wrapper case the stores
# land 25 million elements past the output (on a GPU the kernel faults); everywhere else inside the bands.
STORE_WALKS_A_COLUMN = [
    ("out_row = out_ptr + row * stride_om", "out_row = out_ptr + row", 1),
    ("tl.store(out_row + offs,", "tl.store(out_row + offs * stride_om,", 1),
]
# softmax_kernel stores column N too: the next row's program overwrites it, except on the last row,
# where the wrapper's own `torch.empty` output ends: one element past it.
STORE_ONE_PAST = [("numerator / denominator, mask=mask)", "numerator / denominator, mask=cols <= N)", 1)]


def grade(text: str, folder: Path) -> dict[str, Any]:
    folder.mkdir(parents=True)
    submission = folder / "softmax.py"
    submission.write_text(text, encoding="utf-8")
    argv = ["--assignments", str(ROOT / "assignments"), "grade", str(submission), "--assignment", "softmax",
            "--out", str(folder / "out"), "--seed", str(SEED), "--backend", "interpreter"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    return json.loads((folder / "out" / "results.json").read_text(encoding="utf-8"))


def verdicts(results: dict[str, Any]) -> dict[str, tuple[float, tuple[str, ...]]]:
    return {t["extra_data"]["case_id"]: (t["score"], tuple(t["extra_data"]["traps"])) for t in results["tests"]}


@pytest.fixture(scope="module")
def wrong_axis(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    text = plant(REFERENCE.read_text(encoding="utf-8"), WRONG_AXIS)
    return [grade(text, tmp_path_factory.mktemp("wrong-axis") / str(run)) for run in (1, 2)]


@pytest.fixture(scope="module")
def store_walks_a_column(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    text = plant(REFERENCE.read_text(encoding="utf-8"), STORE_WALKS_A_COLUMN)
    return [grade(text, tmp_path_factory.mktemp("store-walks-a-column") / str(run)) for run in (1, 2)]


@pytest.fixture(scope="module")
def store_one_past(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    text = plant(REFERENCE.read_text(encoding="utf-8"), STORE_ONE_PAST)
    return [grade(text, tmp_path_factory.mktemp("store-one-past") / str(run)) for run in (1, 2)]


@pytest.mark.slow
def test_a_kernel_walking_the_wrong_axis_gets_the_same_verdict_twice(wrong_axis) -> None:
    first, second = (verdicts(r) for r in wrong_axis)
    assert first == second
    assert wrong_axis[0]["score"] == wrong_axis[1]["score"]
    for case_id, (_, traps) in first.items():  # no case pays for another case's stray writes
        assert not {"crash", "runtime-error", "unknown", "tampering"} & set(traps), (case_id, traps)
    for case_id in ("kernel-square", "online-square", "softmax-square"):
        assert "wrong-axis" in first[case_id][1]
    for case_id in ("kernel-prime", "online-prime", "kernel-extreme", "softmax-basic", "softmax-wide"):
        assert "oob-write" in first[case_id][1], (case_id, first[case_id])
    assert first["softmax-long-rows"][1] == ("oob-read",)  # stopped by the fence, 25 million elements out


@pytest.mark.slow
def test_stores_walking_a_column_are_oob_write_where_they_leave_every_band(store_walks_a_column) -> None:
    """The held-out twin of the corpus's wrong_axis_store_walk (tests/e2e/test_gpu_faults.py grades both on a GPU,
    where the 3 x 5000 case faults): the same verdict twice, oob-write where the stores leave every guard
    band (the fence stops them), wrong-axis on the square case, never a runtime error."""
    first, second = (verdicts(r) for r in store_walks_a_column)
    assert first == second
    assert first["softmax-long-rows"] == (0.0, ("oob-write",))
    by_id = {t["extra_data"]["case_id"]: t for t in store_walks_a_column[0]["tests"]}
    assert "stopped at an out-of-bounds store" in by_id["softmax-long-rows"]["output"]
    assert first["online-square"][1] == ("wrong-axis",)
    for case_id in ("online-basic", "online-prime", "online-row-gap"):
        assert first[case_id][1] == ("oob-write", "unwritten-output"), (case_id, first[case_id])
    for case_id, (_, traps) in first.items():
        assert not {"crash", "runtime-error", "unknown", "memory-fault"} & set(traps), (case_id, traps)
    # every case's traps, hidden ones included (the top level of results.json names what public cases show)
    assert set(all_traps(store_walks_a_column[0])) == {"oob-write", "unwritten-output", "wrong-axis"}


@pytest.mark.slow
def test_a_store_past_the_wrappers_own_output_is_oob_write_not_tampering(store_one_past) -> None:
    first, second = (verdicts(r) for r in store_one_past)
    assert first == second
    assert all("tampering" not in traps and "crash" not in traps for _, traps in first.values())
    by_id = {t["extra_data"]["case_id"]: t for t in store_one_past[0]["tests"]}
    for case_id in ("softmax-basic", "softmax-wide", "softmax-all-negative", "softmax-extreme", "softmax-row-gap"):
        test = by_id[case_id]
        assert test["score"] == 0 and test["extra_data"]["traps"] == ["oob-write"], (case_id, test["output"])
        assert "in out; first at 1 element(s) past the end of out's storage" in test["output"]
    assert first["softmax-square"][0] == 1.0  # N = 8 = BLOCK_N: no lane reaches column N
    assert first["online-basic"] == (1.0, ())  # the online kernel is correct
