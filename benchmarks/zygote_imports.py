"""What a worker's start costs on this machine, in fresh processes (each number a median of 3):

1. importing the zygote's preload (grader/running/worker/zygote.py PRELOAD) with and without torch._dynamo, and
   which of a worker's usual steps (a Triton kernel launched, autotuned; a CUDA graph captured and replayed; torch
   ops under a dispatch mode, as the harness records them) import torch._dynamo anyway. On the 2-core CPU machine
   (torch 2.13): 1.45 s with it, 0.81 s without, and a dispatch mode imports it: so the zygote keeps it;
2. a kernel's first launch with an empty Triton cache, with the cache warm, and with a cache that holds only
   Triton's compiled C helpers (its driver utils and launchers, the entries with no kernel binary).

    python benchmarks/zygote_imports.py          # needs a CUDA GPU for part 2 and for the CUDA half of part 1
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

IMPORTS = """
import time, sys
t = time.perf_counter()
import importlib
for name in {names!r}:
    importlib.import_module(name)
print(time.perf_counter() - t)
"""

WORK = """
import sys, torch, triton, triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode

@triton.autotune(configs=[triton.Config({"B": 256}), triton.Config({"B": 1024})], key=["n"])
@triton.jit
def add(x, y, o, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

class Seen(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

seen = {}
x = torch.randn(1 << 20, device="cuda"); y = torch.randn_like(x); o = torch.empty_like(x)
add[lambda m: (triton.cdiv(x.numel(), m["B"]),)](x, y, o, x.numel())
seen["after an autotuned launch"] = "torch._dynamo" in sys.modules
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    add[lambda m: (triton.cdiv(x.numel(), m["B"]),)](x, y, o, x.numel())
    with torch.cuda.graph(g):
        add[lambda m: (triton.cdiv(x.numel(), m["B"]),)](x, y, o, x.numel())
g.replay(); torch.cuda.synchronize()
seen["after a CUDA graph"] = "torch._dynamo" in sys.modules
with Seen():
    (x * 2 + y).sum()
seen["after a dispatch mode (the harness records torch ops so)"] = "torch._dynamo" in sys.modules
print(json.dumps(seen))
"""

FIRST_LAUNCH = """
import time, torch, triton, triton.language as tl
@triton.jit
def scale(x, o, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)
x = torch.randn(4096, device="cuda"); o = torch.empty_like(x); torch.cuda.synchronize()
t = time.perf_counter()
scale[(4,)](x, o, x.numel(), B=1024); torch.cuda.synchronize()
print(time.perf_counter() - t)
"""

PRELOAD = ["torch", "triton", "triton.language", "numpy", "torch._dynamo", "torch.utils._python_dispatch",
           "triton.compiler"]


def run(code: str, env: dict[str, str] | None = None) -> str:
    """The last line `code` prints, run as a file of its own (Triton reads a @jit function's source from its file)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(code)
    try:
        done = subprocess.run([sys.executable, script.name], capture_output=True, text=True, env=env, check=False)
    finally:
        Path(script.name).unlink()
    if done.returncode:
        return "error: " + done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
    return done.stdout.strip().splitlines()[-1]


def median_of(code: str, env: dict[str, str] | None = None, times: int = 3) -> str:
    found = [run(code, env) for _ in range(times)]
    try:
        values = [float(v) for v in found]
    except ValueError:
        return "; ".join(found)
    return f"{statistics.median(values):.2f} s (spread {min(values):.2f}-{max(values):.2f})"


def main() -> None:
    import os

    print("preload, as the zygote imports it:   ", median_of(IMPORTS.format(names=PRELOAD)))
    print("preload without torch._dynamo:        ",
          median_of(IMPORTS.format(names=[n for n in PRELOAD if n != "torch._dynamo"])))
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: the rest needs one")
        return
    print("a worker's usual work imports dynamo: ", run("import json\n" + WORK))
    with tempfile.TemporaryDirectory() as tmp:
        def env_for(cache: Path) -> dict[str, str]:
            return dict(os.environ, TRITON_CACHE_DIR=str(cache))

        firsts = []
        for i in range(3):
            cache = Path(tmp) / f"empty{i}"
            firsts.append(run(FIRST_LAUNCH, env_for(cache)))
        print("first launch, empty cache:            ", firsts)
        warm = Path(tmp) / "empty0"
        print("first launch, warm cache:             ", median_of(FIRST_LAUNCH, env_for(warm)))
        helpers = Path(tmp) / "helpers"
        helpers.mkdir()
        kept = []
        for entry in warm.iterdir():
            names = [p.name for p in entry.iterdir()]
            if not any(n.endswith((".cubin", ".ptx", ".ttir")) for n in names):
                shutil.copytree(entry, helpers / entry.name)
                kept.append(names)
        print("cache entries kept as helpers:        ", json.dumps(kept))
        seeded = []
        for i in range(3):
            cache = Path(tmp) / f"seeded{i}"
            shutil.copytree(helpers, cache)
            seeded.append(run(FIRST_LAUNCH, env_for(cache)))
        print("first launch, helpers only:           ", seeded)


if __name__ == "__main__":
    main()
