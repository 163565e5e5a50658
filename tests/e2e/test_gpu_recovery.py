"""On a CUDA machine: a wild pointer (illegal address) costs only the cases that run it.

The layernorm kernel below stores a trillion elements past its output on row 0: an illegal memory
access that poisons the worker's CUDA context. The grader must replace the worker, so every other
target keeps full marks; and the faulted cases are named for what they are, an out-of-bounds store
(by compute-sanitizer, the same case on the CPU, or the other cases: grader/judging/faults.py), as a CPU
grade names them, never a crash or a runtime error. Skipped without a GPU.
"""

from __future__ import annotations

import json

import pytest
import torch

from grader.cli import main

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CORRECT_STORE = "tl.store(out_ptr + row * stride_m + cols, y, mask=mask)"
WILD_STORE = "tl.store(out_ptr + row * stride_m + cols + (row == 0) * 1_000_000_000_000, y, mask=mask)"


def test_illegal_address_costs_only_its_cases(tmp_path, repo_root, planted, capsys) -> None:
    source = planted(CORRECT_STORE, WILD_STORE)
    submission = tmp_path / "fused_layers.py"
    submission.write_text(source, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["--assignments", str(repo_root / "assignments"), "grade", str(submission),
                 "--assignment", "fused_layers", "--out", str(out), "--seed", "3", "--backend", "cuda"])
    capsys.readouterr()
    assert code == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    by_target: dict[str, list[dict]] = {}
    for test in results["tests"]:
        by_target.setdefault(test["extra_data"]["target"], []).append(test)
    broken = by_target.pop("layernorm_forward_kernel") + by_target.pop("layernorm")
    assert all(t["score"] == 0 for t in broken)
    assert all("oob-write" in t["tags"] for t in broken), [t["tags"] for t in broken]
    assert not any({"crash", "runtime-error", "memory-fault"} & set(t["tags"]) for t in broken)
    for target, tests in by_target.items():
        for t in tests:
            assert t["status"] == "passed", (target, t["name"], t["output"])
