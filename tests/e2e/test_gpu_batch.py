"""A class on the GPU as an instructor grades it: `grader batch --backend cuda` with the batch's shared processes
(the child template, the zygote template where sandboxes are isolated, the reference's shared zygote). Two
byte-identical copies of the reference and a file whose kernels skip their work once the output looks done, in
one batch of two workers: the copies get full marks, every performance case timed and the same speedups within
the noise; the stale file's times are never faster than theirs.

Session 10's H100 run found what no CPU test could: a worker forked from the zygote template, as the sandbox's user
`nobody`, had the template's 0700 folder first on sys.path, and every import crashed (0/39 for the reference)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch

from grader.cli import main
from tests.e2e.test_gpu_timing_hostile import NOISE, stale_outputs

pytestmark = [pytest.mark.gpu, pytest.mark.timing_fidelity,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_a_batch_grades_identical_copies_alike_and_times_no_stale_work(tmp_path: Path, repo_root: Path,
                                                                       reference_source: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    files = {"copy_a": reference_source, "copy_b": reference_source, "stale": stale_outputs(reference_source)}
    for name, source in files.items():
        (submissions / f"{name}.py").write_text(source, encoding="utf-8")
    out = tmp_path / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["--assignments", str(repo_root / "assignments"), "batch", str(submissions), "--assignment",
                     "fused_layers", "--out", str(out), "--seed", "3", "--backend", "cuda", "--workers", "2"])
    with capsys.disabled():
        print("\n" + printed.getvalue())
    assert code == 0
    grades = {name: json.loads((out / name / "grade.json").read_text(encoding="utf-8")) for name in files}
    speedups = {name: {p["perf_id"]: (p["status"], p.get("speedup_vs_reference")) for p in grade["performance"]}
                for name, grade in grades.items()}
    with capsys.disabled():
        print(json.dumps(speedups, indent=1))
    for name in ("copy_a", "copy_b"):
        grade = grades[name]
        assert grade["score"] == grade["max_score"], (name, [(c["case_id"], c["message"][:300])
                                                             for c in grade["cases"] if not c["passed"]][:3])
        assert all(status == "timed" for status, _ in speedups[name].values()), speedups[name]
    for perf_id, (_, a) in speedups["copy_a"].items():
        b = speedups["copy_b"][perf_id][1]
        assert a is not None and b is not None and abs(a - b) <= NOISE * max(a, b), (perf_id, a, b)
        status, stale = speedups["stale"][perf_id]
        if status == "timed":
            assert stale is not None and stale <= max(a, b) * (1 + NOISE), (perf_id, stale, a, b)
