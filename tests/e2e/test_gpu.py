"""On a CUDA machine: the reference graded on the GPU backend gets full marks (skipped without a GPU)."""

from __future__ import annotations

import json

import pytest
import torch

from grader.cli import main
from tests.conftest import all_traps

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_reference_full_marks_on_cuda(tmp_path, repo_root, reference_source, capsys) -> None:
    submission = tmp_path / "fused_layers.py"
    submission.write_text(reference_source, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["--assignments", str(repo_root / "assignments"), "grade", str(submission),
                 "--assignment", "fused_layers", "--out", str(out), "--seed", "3", "--backend", "cuda"])
    capsys.readouterr()
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert code == 0
    failed = [(t["name"], t["output"]) for t in results["tests"] if t["status"] != "passed"]
    assert not failed, failed
    assert results["score"] == results["extra_data"]["max_score"]
    assert results["extra_data"]["backend"].startswith("cuda:")
    assert all_traps(results) == []


def _grade_attention(tmp_path, repo_root, source: str, name: str) -> tuple[int, dict]:
    submission = tmp_path / name / "attention.py"
    submission.parent.mkdir()
    submission.write_text(source, encoding="utf-8")
    out = tmp_path / name / "out"
    code = main(["--assignments", str(repo_root / "assignments"), "grade", str(submission),
                 "--assignment", "attention", "--out", str(out), "--seed", "3", "--backend", "cuda"])
    return code, json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_attention_reference_full_marks_on_cuda_bfloat16_included(tmp_path, repo_root, capsys) -> None:
    source = (repo_root / "reference" / "attention" / "reference.py").read_text(encoding="utf-8")
    code, results = _grade_attention(tmp_path, repo_root, source, "reference")
    capsys.readouterr()
    assert code == 0
    failed = [(t["name"], t["output"]) for t in results["tests"] if t["status"] != "passed"]
    assert not failed, failed
    ran = {t["extra_data"]["case_id"] for t in results["tests"]}
    assert {"kernel-bf16", "attention-bf16"} <= ran  # the GPU-only cases ran here
    assert results["score"] == results["extra_data"]["max_score"] and all_traps(results) == []


@pytest.mark.parametrize(("mutant", "trap"), [("causal_excludes_diagonal", "causal-off-by-one"),
                                              ("fp16_accumulation", "fp16-accumulation"),
                                              ("masked_row_nan", "masked-row-nan")])
def test_attention_traps_are_named_on_cuda(tmp_path, repo_root, capsys, mutant: str, trap: str) -> None:
    from tests.conftest import corpus_mutant

    _, source = corpus_mutant(mutant, "attention")
    _, results = _grade_attention(tmp_path, repo_root, source, mutant)
    capsys.readouterr()
    assert set(all_traps(results)) == {trap}, [(t["name"], t["extra_data"]["traps"]) for t in results["tests"]]
    assert results["score"] < results["extra_data"]["max_score"]
