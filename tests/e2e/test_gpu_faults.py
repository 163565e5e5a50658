"""On a CUDA machine: the GPU verdict is the CPU verdict (issue 22). Skipped without a GPU.

* A softmax whose online kernel stores each row down a column of `out` (the corpus's
  `wrong_axis_store_walk`, and a held-out twin written differently) faults on the 3 x 5000 wrapper case:
  `CUDA error: an illegal memory access was encountered`. That case must read `oob-write`, named by
  compute-sanitizer memcheck where it is installed (the buffer and the line), else by the same case on the
  CPU, else by the submission's other cases; the GPU's own words stay in the details, CUDA's
  CUDA_LAUNCH_BLOCKING advice does not; the same seed gives the same verdict twice.
* Each of those three namings, forced (no tool, no CPU rerun), and a kernel case (not a wrapper) that
  faults, named by memcheck.
* The fused_layers `false_hint` mutant (the Triton tutorial's `% M` offsets promised contiguous and
  aligned): its zero-point false-hint warning has the same words on the GPU as on the CPU.

Every test prints what it saw (`-s`), so one run shows the lead each point.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from grader import trap_ids
from grader.authoring.spec import load_assignment
from grader.judging import faults
from grader.operations.grade import GradeRequest
from grader.operations.grade import grade as grade_submission
from grader.results import CaseResult, GradeResult
from grader.running.cases.battery import Battery
from grader.running.cases.cpu_companion import CpuCompanion
from grader.running.cases.sanitizer import sanitizer_command
from tests.conftest import corpus_mutant

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "assignments" / "softmax" / "assignment.toml"
REFERENCE = ROOT / "reference" / "softmax" / "reference.py"
SEED = 1
FAULTED = "softmax-long-rows"  # 3 x 5000: the wrapper launches the online kernel, whose stores walk 25M elements
# the held-out twin (tests/e2e/test_memory_safety.py): `out_row = out_ptr + row`, stores at `out_row + offs * stride`
STORE_WALKS_A_COLUMN = [
    ("out_row = out_ptr + row * stride_om", "out_row = out_ptr + row", 1),
    ("tl.store(out_row + offs,", "tl.store(out_row + offs * stride_om,", 1),
]
# softmax_kernel stores rows 1.. a million rows further on: every case of it faults
FAR_STORE = [("tl.store(out_ptr + row * stride_om + cols,", "tl.store(out_ptr + row * stride_om * 1000000 + cols,", 1)]


def plant(source: str, edits: list[tuple[str, str, int]]) -> str:
    for old, new, count in edits:
        assert source.count(old) == count, (old, source.count(old))
        source = source.replace(old, new)
    return source


def grade(text: str, folder: Path, backend: str = "cuda", assignment: str = "softmax", seed: int = SEED) -> GradeResult:
    """Grade `text` as a student's file (performance cases off: they are beside the point here)."""
    folder.mkdir(parents=True)
    spec = load_assignment(ROOT / "assignments" / assignment / "assignment.toml")
    submission = folder / spec.submission_file
    submission.write_text(text, encoding="utf-8")
    result, _ = grade_submission(GradeRequest(spec, submission, backend, seed=seed, performance=False))
    return result


def verdicts(result: GradeResult) -> dict[str, tuple[float, tuple[str, ...]]]:
    return {c.case_id: (c.score, c.traps) for c in result.cases}


def assert_named_oob_write(result: GradeResult) -> CaseResult:
    """The faulted case reads oob-write with the GPU's words and without CUDA's advice; nothing is a runtime error."""
    (case,) = [c for c in result.cases if c.case_id == FAULTED]
    named_by = case.evidence.get("gpu_fault", {}).get("named_by")
    print(f"\n{FAULTED}: traps {case.traps}, named by {named_by}:\n{case.message[:1500]}")
    assert case.traps == (trap_ids.OOB_WRITE,), case.message
    assert "illegal memory access" in case.message, "the case did not fault on this GPU"
    assert "CUDA_LAUNCH_BLOCKING" not in case.message
    assert named_by in (faults.SANITIZER, faults.CPU_RERUN, faults.OTHER_CASES)
    if sanitizer_command() is not None:
        assert named_by == faults.SANITIZER
        assert "compute-sanitizer memcheck" in case.message and "invalid write(s)" in case.message
        assert "online_softmax_kernel (softmax.py, line" in case.message
    for case_id, (_, traps) in verdicts(result).items():
        assert not {trap_ids.RUNTIME_ERROR, trap_ids.CRASH, trap_ids.MEMORY_FAULT} & set(traps), (case_id, traps)
    return case


@pytest.fixture(scope="module")
def store_walk(tmp_path_factory: pytest.TempPathFactory) -> list[GradeResult]:
    _, text = corpus_mutant("wrong_axis_store_walk", "softmax")
    return [grade(text, tmp_path_factory.mktemp("store-walk") / str(run)) for run in (1, 2)]


def test_the_store_walk_mutant_faults_and_reads_oob_write_twice(store_walk) -> None:
    first, second = store_walk
    assert_named_oob_write(first)
    assert verdicts(first) == verdicts(second) and first.score == second.score
    mutant, _ = corpus_mutant("wrong_axis_store_walk", "softmax")
    assert set(first.traps) == set(mutant.expected("cuda"))  # the selftest's row


def test_the_held_out_twin_reads_oob_write(tmp_path: Path) -> None:
    result = grade(plant(REFERENCE.read_text(encoding="utf-8"), STORE_WALKS_A_COLUMN), tmp_path / "twin")
    assert_named_oob_write(result)
    assert set(result.traps) == {"oob-write", "unwritten-output", "wrong-axis"}


def battery_for(text: str, tmp_path: Path, **options: Any) -> tuple[Battery, Any]:
    assignment = load_assignment(SOFTMAX)
    submission = tmp_path / "softmax.py"
    submission.write_text(text, encoding="utf-8")
    return Battery(assignment, submission, "cuda", SEED, **options), assignment


def test_without_the_tool_the_same_case_on_the_cpu_names_it(tmp_path: Path) -> None:
    _, text = corpus_mutant("wrong_axis_store_walk", "softmax")
    battery, assignment = battery_for(text, tmp_path)
    companion = CpuCompanion(assignment, battery.submission, SEED)
    battery.faults = dataclasses.replace(battery.faults, cpu_rerun=companion.rerun)
    try:
        graded = battery.run_case(assignment.case(FAULTED))
    finally:
        battery.close()
        companion.close()
    print(f"\nno compute-sanitizer, CPU rerun: {graded.traps}\n{graded.message[:1200]}")
    assert graded.traps == (trap_ids.OOB_WRITE,), graded.message
    assert graded.evidence["gpu_fault"]["named_by"] == faults.CPU_RERUN
    assert "illegal memory access" in graded.message and "tl.store(out_ptr + offs * stride_om + row" in graded.message


def test_without_tool_or_rerun_the_other_cases_name_it(tmp_path: Path) -> None:
    _, text = corpus_mutant("wrong_axis_store_walk", "softmax")
    battery, assignment = battery_for(text, tmp_path)
    try:
        cases = [battery.run_case(assignment.case(c)) for c in ("online-basic", FAULTED)]
    finally:
        battery.close()
    assert cases[1].traps == (trap_ids.MEMORY_FAULT,) and "CUDA_LAUNCH_BLOCKING" not in cases[1].message
    named = faults.name_from_other_cases(cases, assignment)
    print(f"\nneither: {cases[1].traps} -> {named[1].traps}\n{named[1].message[:800]}")
    assert named[1].traps == (trap_ids.OOB_WRITE,) and "online-basic shows oob-write" in named[1].message


@pytest.mark.skipif(sanitizer_command() is None, reason="needs compute-sanitizer")
def test_a_kernel_case_that_faults_is_named_by_memcheck(tmp_path: Path) -> None:
    battery, assignment = battery_for(plant(REFERENCE.read_text(encoding="utf-8"), FAR_STORE), tmp_path,
                                      fault_tool=sanitizer_command())
    try:
        graded = battery.run_case(assignment.case("kernel-basic"))
    finally:
        battery.close()
    print(f"\nkernel case under memcheck: {graded.traps}\n{graded.message[:1200]}")
    assert graded.traps == (trap_ids.OOB_WRITE,), graded.message
    assert "compute-sanitizer memcheck" in graded.message and "softmax_kernel (softmax.py, line" in graded.message
    assert "illegal memory access" in graded.message and "CUDA_LAUNCH_BLOCKING" not in graded.message


def test_a_false_promise_has_the_same_words_on_the_gpu_and_on_the_cpu(tmp_path: Path) -> None:
    _, text = corpus_mutant("false_hint")
    warnings = {}
    for backend in ("cuda", "interpreter"):
        result = grade(text, tmp_path / backend, backend=backend, assignment="fused_layers", seed=3)
        (warning,) = [c for c in result.cases if trap_ids.FALSE_HINT in c.traps and c.max_score == 0]
        warnings[backend] = warning
        print(f"\n{backend}: traps {result.traps}, score {result.score}/{result.max_score}; notes {result.notes}\n"
              f"{warning.message[:600]}")
    assert warnings["cuda"].message == warnings["interpreter"].message
    assert warnings["cuda"].case_id == "false-hint-fused_linear_gelu_kernel"
    assert warnings["cuda"].visibility == warnings["interpreter"].visibility


def test_a_store_one_past_each_row_is_oob_write_at_every_seed_never_not_fused(tmp_path: Path) -> None:
    """The online kernel's write loop stores with `offs <= N` (the corpus's online_store_off_by_one): in the
    wrapper's own output the stray store lands on the next row's first element and races with that row's program,
    so replaying the launches can give other values. That is the out-of-bounds store the guards see, as on the
    CPU, never `not-fused`; the same at three seeds."""
    mutant, text = corpus_mutant("online_store_off_by_one", "softmax")
    results = [grade(text, tmp_path / f"seed{seed}", seed=seed) for seed in (1, 2, 3)]
    for result in results:
        print(f"\nseed {result.seed}: {result.score}/{result.max_score} {result.traps}")
        assert set(result.traps) == set(mutant.expected("cuda")) == {trap_ids.OOB_WRITE}
        assert not any(trap_ids.NOT_FUSED in c.traps for c in result.cases)
    assert len({r.score for r in results}) == 1
