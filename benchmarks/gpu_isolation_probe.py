"""Probe, on a CUDA machine, what supervising untrusted GPU workers can rely on:

    python benchmarks/gpu_isolation_probe.py [--skip-spin] [--skip-hog] [--skip-fork]

1. spin: a Triton kernel that spins forever on the device, in a child process group. A neighbour times
   a small kernel before, during and after; the child's group is SIGKILLed and we time how long until
   the process is gone, until NVML no longer lists it, and until the neighbour's latency is back.
2. hog: a child that takes GPU memory in 1 GiB chunks (torch allocator, and raw cudaMalloc through
   ctypes, which torch's per-process fraction does not see); NVML's per-process memory is polled and
   the time from crossing a budget to the kill is printed. Also whether NVML lists a process started
   inside `unshare --pid` under a PID the parent knows.
3. fork: a parent with torch, triton and the grader's harness imported (CUDA not initialised) forks a
   child that initialises CUDA and compiles and runs a kernel; against a cold `python -c` start.
Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import textwrap
import time

SPINNER = textwrap.dedent('''
    import sys, torch, triton, triton.language as tl

    @triton.jit
    def spin(flag_ptr, out_ptr):
        x = tl.load(flag_ptr)
        i = 0
        while x == 0:
            x = tl.load(flag_ptr, volatile=True)
            i += 1
        tl.store(out_ptr, i)

    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    spin[(132,)](flag, out)
    print("launched", flush=True)
    torch.cuda.synchronize()
    print("never", flush=True)
''')

NEIGHBOUR = textwrap.dedent('''
    import sys, time, torch
    x = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        t = time.monotonic()
        y = x @ x
        torch.cuda.synchronize()
        print(f"{time.monotonic():.3f} {1000 * (time.monotonic() - t):.2f}", flush=True)
        time.sleep(0.05)
''')

HOG = textwrap.dedent('''
    import sys, time, torch
    torch.cuda.init()
    mode = sys.argv[1]
    kept = []
    if mode == "torch":
        for i in range(200):
            try:
                kept.append(torch.empty(1 << 28, dtype=torch.float32, device="cuda"))
            except torch.OutOfMemoryError as exc:
                print("torch oom after", i, "GiB", flush=True)
                break
            print("took", i + 1, "GiB", flush=True)
            time.sleep(0.02)
    else:  # raw cudaMalloc (cupy's runtime binding): torch's per-process fraction never sees it
        import cupy
        for i in range(200):
            try:
                kept.append(cupy.cuda.runtime.malloc(1 << 30))
            except Exception as exc:
                print("raw oom after", i, "GiB:", type(exc).__name__, flush=True)
                break
            print("took", i + 1, "GiB", flush=True)
            time.sleep(0.02)
    time.sleep(600)
''')


def nvml_processes() -> dict[int, int]:
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return {p.pid: (p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}


def script(text: str) -> str:
    """A file for `text`: Triton reads a kernel's source from its file (`python -c` has none)."""
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".py", prefix="probe-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def probe_spin() -> None:
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "40"], stdout=subprocess.PIPE, text=True)
    time.sleep(8)
    spinner = subprocess.Popen([sys.executable, script(SPINNER)], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    line = spinner.stdout.readline().strip()
    launched = time.monotonic()
    print(f"spin: child says {line!r}; pid {spinner.pid}")
    time.sleep(8)
    print(f"spin: NVML lists {sorted(nvml_processes())} (spinner {spinner.pid})")
    killed = time.monotonic()
    os.killpg(spinner.pid, signal.SIGKILL)
    spinner.wait()
    reaped = time.monotonic()
    gone = None
    for _ in range(400):
        if spinner.pid not in nvml_processes():
            gone = time.monotonic()
            break
        time.sleep(0.01)
    print(f"spin: ran {killed - launched:.1f} s; SIGKILL->reaped {1000 * (reaped - killed):.0f} ms; "
          f"SIGKILL->NVML forgets it {1000 * ((gone or reaped) - killed):.0f} ms"
          + ("" if gone else " (never seen gone)"))
    out, _ = neighbour.communicate()
    samples = [tuple(float(v) for v in row.split()) for row in out.split("\n") if row.strip()]
    for label, lo, hi in (("before", launched - 6, launched), ("during", launched + 1, killed),
                          ("after", reaped + 0.5, reaped + 6)):
        ms = sorted(s[1] for s in samples if lo <= s[0] <= hi)
        if ms:
            print(f"spin: neighbour 4096^2 matmul {label}: median {ms[len(ms) // 2]:.2f} ms over {len(ms)} "
                  f"(min {ms[0]:.2f}, max {ms[-1]:.2f})")
        else:
            print(f"spin: neighbour {label}: no samples")
    first_after = [s for s in samples if s[0] > killed]
    if first_after:
        print(f"spin: neighbour's first sample after the kill finished {1000 * (first_after[0][0] - killed):.0f} ms "
              f"after SIGKILL, taking {first_after[0][1]:.2f} ms")


def probe_hog(mode: str, budget_gib: float = 8.0, namespaced: bool = False) -> None:
    command = [sys.executable, "-c", HOG, mode]
    if namespaced:
        command = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--", *command]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    crossed = None
    group = set()
    deadline = time.monotonic() + 60
    seen_pids: set[int] = set()
    while time.monotonic() < deadline:
        group = {int(p) for p in subprocess.run(["pgrep", "-g", str(child.pid)], capture_output=True,
                                                text=True).stdout.split()}
        found = nvml_processes()
        seen_pids |= set(found)
        used = sum(v for p, v in found.items() if p in group)
        if used > budget_gib * (1 << 30):
            crossed = time.monotonic()
            os.killpg(child.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    child.wait()
    back = None
    for _ in range(500):
        if not (set(nvml_processes()) & group):
            back = time.monotonic()
            break
        time.sleep(0.01)
    out = child.stdout.read().strip().splitlines()
    print(f"hog[{mode}{', unshare --pid' if namespaced else ''}]: group {sorted(group)}, NVML pids seen "
          f"{sorted(seen_pids)}; crossed {budget_gib} GiB: {crossed is not None}; last child line "
          f"{out[-1] if out else ''!r}; kill->NVML free "
          f"{1000 * ((back or 0) - (crossed or 0)):.0f} ms" if crossed else f"hog[{mode}]: never crossed; "
          f"pids seen {sorted(seen_pids)}; group {sorted(group)}; output tail {out[-3:]}")


def probe_fork() -> None:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, triton, grader.running.worker.harness"], check=True)
    cold = time.monotonic() - started
    code = textwrap.dedent('''
        import os, sys, time
        t0 = time.monotonic()
        import torch, triton, triton.language as tl
        import grader.running.worker.harness
        imported = time.monotonic() - t0
        assert not torch.cuda.is_initialized()
        for attempt in range(3):
            t = time.monotonic()
            pid = os.fork()
            if pid == 0:
                forked = time.monotonic() - t
                torch.cuda.init()
                x = torch.ones(1 << 20, device="cuda")
                torch.cuda.synchronize()
                cuda = time.monotonic() - t
                @triton.jit
                def add(x_ptr, n, B: tl.constexpr):
                    o = tl.program_id(0) * B + tl.arange(0, B)
                    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) + 1, mask=o < n)
                add[(1024,)](x, x.numel(), B=1024)
                torch.cuda.synchronize()
                print(f"fork: attempt {attempt}: fork {1000*forked:.0f} ms, +CUDA init and first tensor "
                      f"{1000*cuda:.0f} ms, +compile and run a kernel {1000*(time.monotonic()-t):.0f} ms", flush=True)
                os._exit(0)
            os.waitpid(pid, 0)
        print(f"fork: parent import of torch, triton, harness {imported:.2f} s", flush=True)
    ''')
    subprocess.run([sys.executable, script(code)], check=True)
    print(f"fork: cold `python -c 'import torch, triton, harness'` {cold:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-spin", action="store_true")
    parser.add_argument("--skip-hog", action="store_true")
    parser.add_argument("--skip-fork", action="store_true")
    args = parser.parse_args()
    import pynvml

    pynvml.nvmlInit()
    if not args.skip_fork:
        probe_fork()
    if not args.skip_hog:
        probe_hog("torch")
        probe_hog("torch", namespaced=True)
        probe_hog("raw")
    if not args.skip_spin:
        probe_spin()


if __name__ == "__main__":
    main()
