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
import uuid
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


# ------------------------------------------------------------------ issue 47: the timer's own kernels and samples

# Each kernel returns at once when its output no longer holds the poison it was handed: a timer that poisons once
# and replays many times times one real run and many empty ones.
STALE_ROW = ("    row = tl.program_id(0)\n    cols = tl.arange(0, BLOCK_N)\n    mask = cols < N\n",
             "    row = tl.program_id(0)\n    cols = tl.arange(0, BLOCK_N)\n    mask = cols < N\n"
             "    _seen = tl.load(STALE_PTR + row * STALE_STEP)\n    mask = mask & (_seen != _seen)\n")
STALE_MATMUL = ("    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    for k0 in range(0, K, BLOCK_K):\n",
                "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
                "    _seen = tl.load(c_ptr + (pid_m * BLOCK_M) * stride_cm + (pid_n * BLOCK_N) * stride_cn)\n"
                "    _k_end = tl.where(_seen != _seen, K, 0)\n"
                "    for k0 in range(0, _k_end, BLOCK_K):\n")


def stale_outputs(source: str, guard: str = "") -> str:
    """Every kernel skips its work where its output already holds a number (`guard`: only when that constexpr is
    true)."""
    head, rest = source.split("@triton.jit\ndef row_mean_var_kernel(")
    stats_kernel, tail = rest.split("def _row_launch_config(N):")
    ln_head, ln_rest = tail.split("@triton.jit\ndef layernorm_forward_kernel(")
    ln_kernel, ln_tail = ln_rest.split("def layernorm(x, weight, bias, eps=1e-5):")

    def skip(kernel: str, pointer: str, step: str) -> str:
        check = STALE_ROW[1].replace("STALE_PTR", pointer).replace("STALE_STEP", step)
        if guard:
            check = check.replace("    _seen = ", f"    if {guard}:\n        _seen = ").replace(
                "    mask = mask & (_seen", "        mask = mask & (_seen")
        return kernel.replace(STALE_ROW[0], check)

    matmul = head.replace(*STALE_MATMUL) if not guard else head
    return (matmul + "@triton.jit\ndef row_mean_var_kernel(" + skip(stats_kernel, "mean_ptr", "1")
            + "def _row_launch_config(N):" + ln_head + "@triton.jit\ndef layernorm_forward_kernel("
            + skip(ln_kernel, "out_ptr", "stride_m") + "def layernorm(x, weight, bias, eps=1e-5):" + ln_tail)


# A module-level "constant" that calls into something under `triton.`: through it any Python runs wherever the
# file's constants are evaluated. In a copy of the file the grader made for its timer (b8d9887 kept such constants in
# a kernels-only copy under /tmp/grader-timer-*), it divides every CUDA event interval by 5 and leaves a mark on disk.
CODE_IN_TIMER = (
    "\n_CLOCK = triton.runtime.jit.inspect.builtins.exec(\n"
    "    'if \"grader-timer\" in globals().get(\"__file__\", \"\"):\\n'\n"
    "    '    import torch as _t\\n'\n"
    "    '    _o = _t.cuda.Event.elapsed_time\\n'\n"
    "    '    _t.cuda.Event.elapsed_time = lambda s, e: _o(s, e) / 5\\n'\n"
    "    '    open(\"__MARK__\", \"w\").write(\"ran\")\\n')\n")

# The constant the kernels test is 1 where only the file's constants run, 0 where the whole module ran: the timer of
# a kernels-only copy compiles a kernel the battery never graded (it skips work whose output looks done).
DIFFERENT_KERNEL = ("\nSKIP_DONE = tl.constexpr(1)\n", "\n\ndef _configure():\n    return 0\n\n\n"
                    "SKIP_DONE = tl.constexpr(_configure())\n")

# While the student's worker still runs, a thread rewrites every copy of the file the grader leaves where the
# sandbox can write (a kernels-only copy for the timer, say) with a clock patch at its end.
SWAP_COPY = r"""

import glob as _glob
import threading as _threading
import time as _time

_PATCH = ("\nimport torch as _t\n_o = _t.cuda.Event.elapsed_time\n"
          "_t.cuda.Event.elapsed_time = lambda s, e: _o(s, e) / 5\n")


def _swap_copies():
    done = set()
    until = _time.monotonic() + 120
    while _time.monotonic() < until:
        for path in _glob.glob("/tmp/*/*.py") + _glob.glob("/tmp/*/*/*.py"):
            if path in done or path == __file__:
                continue
            try:
                with open(path, "a") as copy:
                    copy.write(_PATCH)
                done.add(path)
            except OSError:
                pass
        _time.sleep(0.01)


_threading.Thread(target=_swap_copies, daemon=True).start()
"""


def test_forged_work_and_kernels_change_no_leaderboard_entry(tmp_path: Path, repo_root: Path, reference_source: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 47's timing attacks: stale outputs, code in the timer's constants, a timed kernel that differs from the
    graded one, a swapped copy. Each file's kernels are correct (full marks); its times must be the honest file's
    within the noise, or the case refused (no leaderboard entry); no code of the file runs where it is timed."""
    mark = Path(f"/tmp/grader-mark-{uuid.uuid4().hex}")  # where any process, the sandbox's user too, can write
    honest, honest_s = _grade(tmp_path, "honest", reference_source, repo_root)
    assert all(p["status"] == "timed" for p in honest["performance"]), honest["performance"]
    different = stale_outputs(reference_source, guard="SKIP_DONE").replace(
        "import triton.language as tl\n", "import triton.language as tl\n" + DIFFERENT_KERNEL[0], 1)
    different += DIFFERENT_KERNEL[1]
    attacks = {
        "stale-outputs": stale_outputs(reference_source),
        "code-in-timer": reference_source.replace("import triton.language as tl\n", "import triton.language as tl\n"
                                                  + CODE_IN_TIMER.replace("__MARK__", str(mark)), 1),
        "different-kernel": different,
        "swapped-copy": reference_source + SWAP_COPY,
    }
    rows = [f"honest: {_speedups(honest)} in {honest_s:.1f} s"]
    problems = []
    for name, source in attacks.items():
        assert source != reference_source, name
        grade, seconds = _grade(tmp_path, name, source, repo_root)
        rows.append(f"{name}: {grade['score']}/{grade['max_score']} {_speedups(grade)} "
                    f"{[p.get('reason', '')[:160] for p in grade['performance'] if p['status'] != 'timed']}")
        if grade["score"] != honest["score"]:  # correct kernels: full marks
            problems.append((name, "score", grade["score"]))
        for perf in grade["performance"]:
            mine = perf.get("speedup_vs_reference")
            fair = _speedups(honest)[perf["perf_id"]]
            if perf["status"] == "timed":
                if mine is None or fair is None or mine > fair * (1 + NOISE):
                    problems.append((name, perf["perf_id"], mine, fair))
            elif any(e["name"].startswith(perf["perf_id"]) for e in _leaderboard(tmp_path / name)):
                problems.append((name, perf["perf_id"], "refused but on the leaderboard"))
    with capsys.disabled():
        print("\n" + "\n".join(rows))
    assert not problems, problems
    assert not mark.exists(), "a module-level constant ran code in a measuring process"
