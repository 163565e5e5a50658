"""On a CUDA machine: submissions that try to forge their timings change no leaderboard entry.

Timed runs execute none of the submission's Python (a timer worker loads only its kernels and replays
the launches its wrapper made), so patching the clocks at import, working on a side stream, leaving
work running after the call or serving cached outputs cannot make a kernel look faster than it is.
Each hostile file is the reference plus its attack; its speedups over the reference must stay within
the noise of an honest copy's, or the case is refused (never faster), and no grade may take more than
twice as long as the honest one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from grader.cli import main

pytestmark = [pytest.mark.gpu, pytest.mark.timing_fidelity,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

NOISE = 0.05  # speedups of the same kernels agree within 5% (the fairness bar is +-3% per timing)

PATCH_CLOCKS = '''
import time as _time
import torch as _torch
import triton.testing as _testing
_testing.do_bench = lambda *args, **kwargs: 1e-6
_testing.do_bench_cudagraph = lambda *args, **kwargs: 1e-6
_torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
_torch.cuda.synchronize = lambda *args, **kwargs: None
_time.perf_counter = lambda: 0.0
'''

SIDE_STREAM = ("    layernorm_forward_kernel[(M,)](\n        x, weight, bias, out, M, N, x.stride(0), eps, "
               "BLOCK_N=block_n, num_warps=num_warps,\n    )",
               "    _side = torch.cuda.Stream()\n    with torch.cuda.stream(_side):\n"
               "        layernorm_forward_kernel[(M,)](\n            x, weight, bias, out, M, N, x.stride(0), eps, "
               "BLOCK_N=block_n, num_warps=num_warps,\n        )")

LEAVE_RUNNING = '''
import threading as _threading
_busy = []


def _keep_the_gpu_busy():
    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(2000):
        _busy.append(x @ x)
        _busy.clear()


_threading.Thread(target=_keep_the_gpu_busy, daemon=True).start()
'''

CACHE_OUTPUTS = '''
_CACHE = {}
_honest_layernorm = layernorm


def layernorm(x, weight, bias, eps=1e-5):
    key = (x.data_ptr(), tuple(x.shape))
    if key not in _CACHE:
        _CACHE[key] = _honest_layernorm(x, weight, bias, eps)
    return _CACHE[key]
'''


def _grade(tmp_path: Path, name: str, source: str, repo_root: Path) -> tuple[dict, float]:
    folder = tmp_path / name
    folder.mkdir()
    submission = folder / "fused_layers.py"
    submission.write_text(source, encoding="utf-8")
    started = time.monotonic()
    code = main(["--assignments", str(repo_root / "assignments"), "grade", str(submission), "--assignment",
                 "fused_layers", "--out", str(folder / "out"), "--seed", "3", "--backend", "cuda"])
    assert code == 0
    return json.loads((folder / "out" / "grade.json").read_text(encoding="utf-8")), time.monotonic() - started


def _speedups(grade: dict) -> dict[str, float | None]:
    return {p["perf_id"]: p.get("speedup_vs_reference") for p in grade["performance"]}


def test_forged_timings_change_no_leaderboard_entry(tmp_path: Path, repo_root: Path, reference_source: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    honest, honest_s = _grade(tmp_path, "honest", reference_source, repo_root)
    assert all(p["status"] == "timed" for p in honest["performance"]), honest["performance"]
    attacks = {
        "patches-clocks": reference_source.replace("import torch\n", "import torch\n" + PATCH_CLOCKS, 1),
        "side-stream": reference_source.replace(*SIDE_STREAM),
        "leaves-work-running": reference_source + LEAVE_RUNNING,
        "caches-outputs": reference_source + CACHE_OUTPUTS,
    }
    rows = [f"honest: {_speedups(honest)} in {honest_s:.1f} s"]
    for name, source in attacks.items():
        assert source != reference_source, name
        grade, seconds = _grade(tmp_path, name, source, repo_root)
        rows.append(f"{name}: {_speedups(grade)} in {seconds:.1f} s")
        assert seconds <= 2 * honest_s + 5, (name, seconds, honest_s)
        for perf in grade["performance"]:
            mine = perf.get("speedup_vs_reference")
            fair = _speedups(honest)[perf["perf_id"]]
            if perf["status"] == "timed":
                assert mine is not None and fair is not None
                assert abs(mine - fair) <= NOISE * fair, (name, perf["perf_id"], mine, fair)
            else:  # refused: no entry at all, never a faster one
                assert not any(e["name"].startswith(perf["perf_id"]) for e in _leaderboard(tmp_path / name))
    with capsys.disabled():
        print("\n" + "\n".join(rows))


def _leaderboard(folder: Path) -> list[dict]:
    return json.loads((folder / "out" / "results.json").read_text(encoding="utf-8")).get("leaderboard", [])
