"""Probe, on a CUDA machine with nvidia-ml-py, the numbers behind grader/running/processes/gpu_memory.py:

    python benchmarks/gpu_memory_probe.py [--skip-grade]

1. context: what NVML counts for a worker-like process beyond torch's allocator (after the first tensor,
   a Triton kernel, a cuBLAS matmul): the first guard's CUDA_CONTEXT_BYTES.
2. race: a hog taking 1 GiB chunks in a tight loop (torch's allocator, and raw cudaMalloc through cupy)
   under a MemoryWatchdog with an 8 GiB budget at the default 0.05 s interval: how fast it allocates,
   how far past its budget it gets before the kill, and when NVML stops listing it.
3. grade: the fused_layers reference graded on CUDA while every GPU process's NVML usage is sampled
   every 0.05 s: each worker's peak, against the budget floor and the reserve.
Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.running.processes.gpu_memory import GiB, MemoryWatchdog, format_bytes  # noqa: E402
from grader.running.processes.nvml import open_nvml_reader  # noqa: E402

CONTEXT = textwrap.dedent('''
    import sys, torch, triton, triton.language as tl

    def mark(name):
        torch.cuda.synchronize()
        print(name, torch.cuda.memory_reserved(), flush=True)
        sys.stdin.readline()

    x = torch.zeros(1, device="cuda")
    mark("first-tensor")

    @triton.jit
    def add(x_ptr, n, B: tl.constexpr):
        o = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) + 1, mask=o < n)

    y = torch.zeros(1 << 20, device="cuda")
    add[(1024,)](y, y.numel(), B=1024)
    mark("triton-kernel")
    a = torch.randn(4096, 4096, device="cuda")
    (a @ a).sum().item()
    mark("cublas-matmul")
''')

HOG = textwrap.dedent('''
    import sys, time
    if sys.argv[1] == "torch":
        import torch
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        alloc = lambda: torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    else:  # raw cudaMalloc: torch's per-process fraction never sees it
        import cupy
        cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1))
        alloc = lambda: cupy.cuda.runtime.malloc(1 << 30)
    kept = []
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    while True:
        try:
            kept.append(alloc())
        except Exception as exc:
            print("oom", len(kept), f"{time.monotonic() - start:.4f}", type(exc).__name__, flush=True)
            break
        print("took", len(kept), f"{time.monotonic() - start:.4f}", flush=True)
    time.sleep(60)
''')


def probe_context() -> None:
    reader = open_nvml_reader()
    child = subprocess.Popen([sys.executable, "-c", CONTEXT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    for _ in range(3):
        name, reserved = child.stdout.readline().split()
        time.sleep(0.5)
        used = reader.used_by_pid().get(child.pid, 0)
        print(f"context: after {name}: NVML {format_bytes(used)}, torch reserved {format_bytes(int(reserved))}, "
              f"outside torch's allocator {format_bytes(used - int(reserved))}")
        child.stdin.write("\n")
        child.stdin.flush()
    child.wait(timeout=60)
    reader.close()


def probe_race(mode: str, budget: int = 8 * GiB) -> None:
    reader = open_nvml_reader()
    free_before = reader.total_bytes() - sum(reader.used_by_pid().values())
    child = subprocess.Popen([sys.executable, "-c", HOG, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    with MemoryWatchdog(reader) as watchdog:
        watch = watchdog.watch(child.pid, budget, f"hog[{mode}]")
        time.sleep(0.2)  # a few polls first: the context alone is under budget
        go = time.monotonic()
        child.stdin.write("\n")
        child.stdin.flush()
        while not watch.exceeded and time.monotonic() - go < 60:
            time.sleep(0.001)
        noticed = time.monotonic() - go
    child.wait(timeout=30)
    reaped = time.monotonic()
    forgotten = None
    while time.monotonic() - reaped < 10:
        if child.pid not in reader.used_by_pid():
            forgotten = time.monotonic() - reaped
            break
        time.sleep(0.005)
    lines = [line.split() for line in child.stdout.read().splitlines() if line.strip()]
    took = [(int(n), float(t)) for kind, n, t, *_ in lines if kind == "took"]
    oom = [line for line in lines if line[0] == "oom"]
    last_n, last_t = took[-1] if took else (0, 0.0)
    rate = last_n / last_t if last_t else float("nan")
    over = [t for n, t in took if n * GiB > budget]
    print(f"race[{mode}]: free before {format_bytes(free_before)}; allocated {last_n} GiB in {1000 * last_t:.0f} ms "
          f"({rate:.0f} GiB/s){'; hit OOM: ' + ' '.join(oom[0]) if oom else ''}; crossed {format_bytes(budget)} at "
          f"{1000 * over[0] if over else float('nan'):.0f} ms; watchdog saw {format_bytes(watch.peak_bytes)} and "
          f"killed at {1000 * noticed:.0f} ms; {watch.message}; NVML forgot it "
          f"{'never' if forgotten is None else f'{1000 * forgotten:.0f} ms'} after the reap")
    reader.close()


def probe_grade() -> None:
    reader = open_nvml_reader()
    out = Path(tempfile.mkdtemp(prefix="gpu-memory-probe-"))
    command = [sys.executable, "-m", "grader", "--assignments", str(ROOT / "assignments"), "grade",
               str(ROOT / "reference/fused_layers/reference.py"), "--assignment", "fused_layers",
               "--out", str(out), "--seed", "3", "--backend", "cuda"]
    started = time.monotonic()
    log = out / "grade.log"
    with open(log, "wb") as sink:
        grade = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    peaks: dict[int, int] = {}
    names: dict[int, str] = {}
    concurrent = 0
    while grade.poll() is None:
        usage = reader.used_by_pid()
        concurrent = max(concurrent, sum(1 for v in usage.values() if v))
        for pid, used in usage.items():
            peaks[pid] = max(peaks.get(pid, 0), used)
            if pid not in names:
                try:
                    names[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[-90:]
                except OSError:
                    names[pid] = "?"
        time.sleep(0.05)
    print(f"grade: exit {grade.returncode} after {time.monotonic() - started:.0f} s; at most {concurrent} GPU "
          f"processes at once; {len(peaks)} seen")
    for pid, peak in sorted(peaks.items(), key=lambda item: -item[1]):
        print(f"grade: pid {pid} peak {format_bytes(peak)}: {names.get(pid, '?').strip()}")
    if grade.returncode:
        print("grade: output tail", log.read_text(errors="replace")[-2000:])
    reader.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-grade", action="store_true")
    args = parser.parse_args()
    probe_context()
    probe_race("torch")
    probe_race("raw")
    if not args.skip_grade:
        probe_grade()


if __name__ == "__main__":
    main()
