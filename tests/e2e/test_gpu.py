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
