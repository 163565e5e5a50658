"""On a CUDA machine with compute-sanitizer: `--sanitize` names a wild read, and the buffer it missed.

The row statistics kernel below reads row 0 from 100,000 elements past its input: far beyond the
grader's guard bands, so on the GPU alone the case only shows wrong values. Under memcheck (caching allocator
off) a read outside every allocation is reported with the kernel's source line and the nearest allocation (one
of the case's buffers); a read that lands inside another allocation memcheck cannot see, and the same case on
the CPU (Triton's interpreter, whose fence stops it) names it instead. Every kernel case reads `oob-read`, as a
CPU grade of the file says. Skipped without a GPU or without compute-sanitizer.
"""

from __future__ import annotations

import json
import time

import pytest
import torch

from grader.cli import main
from grader.running.cases.sanitizer import sanitizer_command

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(sanitizer_command() is None, reason="needs compute-sanitizer"),
]

LOAD = "x = tl.load(x_ptr + row * stride_m + cols, mask=mask, other=0.0).to(tl.float32)"
WILD_LOAD = (
    "x = tl.load(x_ptr + row * stride_m + cols + (row == 0) * 100_000, mask=mask, other=0.0).to(tl.float32)"
)


def test_sanitize_names_a_wild_read(tmp_path, repo_root, planted, capsys) -> None:
    submission = tmp_path / "fused_layers.py"
    submission.write_text(
        planted(LOAD, WILD_LOAD, count=-1), encoding="utf-8"
    )  # the first: row_mean_var_kernel
    out = tmp_path / "out"
    started = time.monotonic()
    code = main(
        [
            "--assignments",
            str(repo_root / "assignments"),
            "grade",
            str(submission),
            "--sanitize",
            "--assignment",
            "fused_layers",
            "--out",
            str(out),
            "--seed",
            "3",
            "--backend",
            "cuda",
        ]
    )
    elapsed = time.monotonic() - started
    capsys.readouterr()
    assert code == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    kernel_cases = [t for t in results["tests"] if t["extra_data"]["target"] == "row_mean_var_kernel"]
    assert kernel_cases
    # The GPU verdict is the CPU verdict: the same file graded in Triton's interpreter, case by case. A read that
    # lands inside another of the case's tensors is invisible to memcheck and to the interpreter's fence alike
    # (`unknown` on both); where memcheck or the GPU's guard probe sees it, the GPU names it, a better verdict.
    cpu_out = tmp_path / "cpu"
    assert main(["--assignments", str(repo_root / "assignments"), "grade", str(submission), "--assignment",
                 "fused_layers", "--out", str(cpu_out), "--seed", "3", "--backend", "interpreter"]) == 0
    capsys.readouterr()
    cpu = {t["extra_data"]["case_id"]: t for t in json.loads((cpu_out / "results.json").read_text())["tests"]}
    for test in kernel_cases:
        assert test["score"] == 0, (test["name"], test["tags"], test["output"])
        by_memcheck = "compute-sanitizer memcheck" in test["output"]
        on_cpu = cpu[test["extra_data"]["case_id"]]
        # the GPU may name more: memcheck outside every allocation, or the probe run's finite guard bands (a read
        # that lands in another tensor's guard on the GPU and in its poison on the CPU, as seen on the H200)
        better = "oob-read" in test["tags"] and set(on_cpu["tags"]) <= {"unknown", "oob-read"}
        assert sorted(test["tags"]) == sorted(on_cpu["tags"]) or better, (
            test["name"], test["tags"], on_cpu["tags"], test["output"])
        if by_memcheck:
            assert "row_mean_var_kernel (fused_layers.py, line" in test["output"], test["output"]
    named = [t["tags"] for t in kernel_cases]
    assert any("compute-sanitizer memcheck" in t["output"] for t in kernel_cases), named
    clean = [
        t
        for t in results["tests"]
        if t["extra_data"]["target"] in ("fused_linear_gelu_kernel", "layernorm_forward_kernel")
    ]
    assert clean and all(t["status"] == "passed" for t in clean), [(t["name"], t["output"]) for t in clean]
    print(f"\n--sanitize grading took {elapsed:.1f} s; first finding: {kernel_cases[0]['output'][:400]}")
