"""Benchmark (no GPU needed): how long Triton takes to compile one kernel of a file for a CUDA GPU, with the ptxas
Triton ships, for the specialisation a case asks for.

    python benchmarks/compile_time.py FILE --assignment attention --kernel attention_kernel \
        --meta CAUSAL=1,HEAD_DIM=128,BLOCK_M=64,BLOCK_N=64 [--dtype fp16] [--arch 90]

The kernel's parameters come from the assignment's spec: pointers (`*_ptr`) get `--dtype` (an output `lse_ptr` and
the like stay as given by `--pointer NAME=fp32`), `float_params` fp32, the constexprs `--meta`, the rest i32. Prints
the seconds and the PTX's size. A correct kernel whose specialisation compiles for longer than a call's limit lost
cases to `timeout` before compiling was no longer charged to the call (grader.running.processes.client,
COMPILE_CREDIT_S); this is how docs/gpu-runs-2026-12-06.txt measured attention's broadcast-and-sum variant.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", type=Path)
    parser.add_argument("--assignment", required=True)
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--meta", required=True, help="NAME=VALUE,... for every constexpr")
    parser.add_argument("--dtype", default="fp32", help="the pointers' element type (fp32, fp16, bf16)")
    parser.add_argument("--pointer", action="append", default=[], help="NAME=TYPE for a pointer of another type")
    parser.add_argument("--arch", type=int, default=90)
    args = parser.parse_args()

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from grader.authoring.spec import load_assignment

    spec = load_assignment(ROOT / "assignments" / args.assignment / "assignment.toml").kernels[args.kernel]
    loaded = importlib.util.spec_from_file_location("compiled_file", args.file)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    kernel = getattr(module, args.kernel)
    meta = {k: int(v) for k, v in (item.split("=") for item in args.meta.split(","))}
    pointers = dict(item.split("=") for item in args.pointer)
    signature = {}
    for name in kernel.arg_names:
        if name in meta:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = "*" + pointers.get(name, args.dtype)
        elif name in spec.float_params:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(kernel.arg_names.index(k),): v for k, v in meta.items()})
    started = time.monotonic()
    compiled = triton.compile(source, target=GPUTarget("cuda", args.arch, 32))
    seconds = time.monotonic() - started
    print(f"{args.file.name} {args.kernel} {args.meta} {args.dtype} sm_{args.arch}: {seconds:.1f} s, "
          f"{len(compiled.asm['ptx'].splitlines())} PTX lines, {compiled.metadata.shared} bytes of shared memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
