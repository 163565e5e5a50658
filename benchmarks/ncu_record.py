"""Record what Nsight Compute says about the project's own submissions: the reference, every correct variant,
every slow-but-correct mutant (mutants.toml's `performance_traps`) and the GPU-only candidates of
benchmarks/ncu_candidates.toml, on every performance case of their assignment. Needs a CUDA GPU and ncu
(as root, or with NVreg_RestrictProfilingToAdminUsers=0).

    python benchmarks/ncu_record.py --out DIR [--assignment softmax] [--only NAME ...] [--jobs 6] [--seed 3]

`--only NAME` (repeatable) records the reference and the named submissions alone.

Each (submission, case) is one process run under
`ncu --profile-from-start off --clock-control none --csv --print-units base --metrics <the grader's set>`
(grader.running.profiling.ncu): it calls the target once to compile it, then once more between
cudaProfilerStart and cudaProfilerStop, and prints the compiled kernels' static facts on one line starting
`GRADER_RECORD `. Then every submission is timed alone, in turn (do_bench medians, three rounds). What ncu
printed is kept as DIR/<assignment>/<submission>/<case>.csv (the CSV the grader parses, the program's own
lines before it),
and DIR/summary.json holds, per run, the parsed counters, the time and the static facts. The GPU's clocks
and settings are left as they are (`--clock-control none`; nothing is locked or reset).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MARK = "GRADER_RECORD "


def submissions(assignment_id: str, folder: Path) -> list[tuple[str, Path, str]]:
    """(name, file, why) of every submission recorded for the assignment, written into `folder`."""
    from grader.authoring.discovery import load_spec
    from grader.authoring.mutants import Edit, Mutant, load_mutants

    assignment = load_spec(assignment_id, ROOT / "assignments")
    reference = Path(assignment.reference_solution)
    text = reference.read_text(encoding="utf-8")
    out = [("reference", reference, "reference")]
    for mutant in load_mutants(assignment.reference_dir):
        slow = mutant.performance_traps or mutant.performance_measured
        if mutant.kind == "variant" or (slow and not mutant.expected("cuda")):
            why = "variant" if mutant.kind == "variant" else (
                "cpu:" + ",".join(mutant.performance_traps) + " cuda:" + ",".join(mutant.measured("cuda")))
            path = folder / f"{mutant.id}.py"
            path.write_text(mutant.source(text), encoding="utf-8")
            out.append((mutant.id, path, why))
    candidates = tomllib.loads((ROOT / "benchmarks" / "ncu_candidates.toml").read_text(encoding="utf-8"))
    for raw in candidates.get("mutant", []):
        if raw["assignment"] != assignment_id:
            continue
        edits = tuple(Edit(e["find"], e["replace"], e.get("count", 1)) for e in raw["edits"])
        mutant = Mutant(raw["id"], "patch", (), raw["mistake"], ROOT / "benchmarks" / "ncu_candidates.toml", edits)
        path = folder / f"{mutant.id}.py"
        path.write_text(mutant.source(text), encoding="utf-8")
        out.append((mutant.id, path, "expect:" + raw["expect"]))
    return out


# ------------------------------------------------------------------------------------------ one profiled run


def _static_facts(module: object) -> list[dict[str, object]]:
    """The compiled kernels' facts, as the grader's worker reads them (planned_launches.compiled_facts)."""
    import triton

    from grader.running.worker.measuring.planned_launches import compiled_facts

    jitted = [v for v in vars(module).values() if isinstance(getattr(v, "fn", v), triton.runtime.JITFunction)
              or isinstance(v, triton.runtime.JITFunction)]
    return [{"kernel": name, **facts} for name, facts in compiled_facts(jitted).items()]


def drive(file: Path, assignment_id: str, case_id: str, seed: int) -> None:
    """Inside the profiled process: compile, profile one call, time, print the facts."""
    import importlib.util

    import torch

    from grader.authoring.discovery import load_spec

    target_name, args, kwargs = _call_of(load_spec(assignment_id, ROOT / "assignments"), case_id, seed)
    spec = importlib.util.spec_from_file_location("submission", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    target = getattr(module, target_name)
    target(*args, **kwargs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    target(*args, **kwargs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(MARK + json.dumps({"case": case_id, "target": target_name, "static": _static_facts(module)}), flush=True)


def _call_of(assignment: object, case_id: str, seed: int) -> tuple[str, list[object], dict[str, object]]:
    import torch

    from grader.authoring.inputs import InputMaker
    from grader.authoring.oracle_loader import load_problems
    from grader.authoring.problem import In
    from grader.seeds import case_seed

    perf = next(p for p in assignment.performance if p.id == case_id)  # type: ignore[attr-defined]
    problem = load_problems(assignment)[assignment.functions[perf.target].problem]  # type: ignore[attr-defined]
    inputs = problem.make_inputs(perf.as_case(), InputMaker(case_seed(seed, perf.id), getattr(torch, perf.dtype),
                                                             "cuda"))
    assert problem.call_args is not None
    args, kwargs = problem.call_args(inputs)

    def value(v: object) -> object:
        if isinstance(v, In):
            t = inputs[v.name]
            return (t.T if v.transpose else t).to("cuda")
        return v

    torch.backends.cuda.matmul.allow_tf32 = bool(problem.baseline and problem.baseline.tf32)
    return perf.target, [value(a) for a in args], {k: value(v) for k, v in kwargs.items()}


def time_all(files: dict[str, Path], assignment_id: str, seed: int, rounds: int = 3) -> dict[str, dict[str, list]]:
    """Every submission on every case, alone on the GPU, in turn (round after round): do_bench medians (ms)."""
    import importlib.util

    import triton.testing

    from grader.authoring.discovery import load_spec

    assignment = load_spec(assignment_id, ROOT / "assignments")
    modules = {}
    for name, file in files.items():
        spec = importlib.util.spec_from_file_location(f"submission_{name}", file)
        assert spec is not None and spec.loader is not None
        modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[name])
    times: dict[str, dict[str, list]] = {}
    for perf in assignment.performance:
        target, args, kwargs = _call_of(assignment, perf.id, seed)
        for _ in range(rounds):
            for name, module in modules.items():
                fn = getattr(module, target)
                call = functools.partial(fn, *args, **kwargs)
                ms = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median")
                times.setdefault(name, {}).setdefault(perf.id, []).append(ms)
    return times


# ------------------------------------------------------------------------------------------ the recording


def record_one(ncu: str, name: str, file: Path, why: str, assignment_id: str, case_id: str, seed: int,
               out: Path) -> dict[str, object]:
    from grader.evidence.kernel_profiles import METRICS
    from grader.running.profiling.ncu import PROFILER_ARGS, classify_failure, parse_ncu_csv

    command = [ncu, "--profile-from-start", "off", *PROFILER_ARGS, "--metrics", ",".join(METRICS),
               sys.executable, str(Path(__file__).resolve()), "--drive", str(file), "--assignment", assignment_id,
               "--case", case_id, "--seed", str(seed)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    folder = out / assignment_id / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{case_id}.csv").write_text(done.stdout, encoding="utf-8")
    if done.stderr.strip():
        (folder / f"{case_id}.stderr").write_text(done.stderr[-20000:], encoding="utf-8")
    profiles = parse_ncu_csv(done.stdout)
    facts = next((json.loads(line[len(MARK):]) for line in done.stdout.splitlines() if line.startswith(MARK)), {})
    return {"assignment": assignment_id, "submission": name, "why": why, "case": case_id,
            "returncode": done.returncode, "failure": classify_failure(done.returncode, done.stdout + done.stderr,
                                                                        len(profiles)),
            "static": facts.get("static"),
            "launches": [{"kernel": p.kernel, "grid": p.grid, "block": p.block, "metrics": dict(p.metrics)}
                         for p in profiles]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--assignment", action="append")
    parser.add_argument("--only", action="append", default=[], help="the reference and these submissions alone")
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--drive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive(args.drive, args.assignment[0], args.case, args.seed)
        return 0
    from grader.authoring.discovery import load_spec
    from grader.running.profiling.ncu import find_ncu

    ncu = find_ncu()
    if ncu is None or args.out is None:
        print("needs ncu and --out", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip()
    jobs = []
    with tempfile.TemporaryDirectory(prefix="ncu-record-") as tmp:
        for assignment_id in args.assignment or ["softmax", "fused_layers"]:
            folder = Path(tmp) / assignment_id
            folder.mkdir()
            cases = [p.id for p in load_spec(assignment_id, ROOT / "assignments").performance]
            for name, file, why in submissions(assignment_id, folder):
                if args.only and name != "reference" and name not in args.only:
                    continue
                jobs.extend((name, file, why, assignment_id, case) for case in cases)
        print(f"{len(jobs)} profiled runs, {args.jobs} at a time; {version}", flush=True)
        results: list[dict[str, object]] = []
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(record_one, ncu, *job, args.seed, args.out) for job in jobs]
            for future in futures:
                try:
                    result = future.result()
                except Exception as exc:
                    result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                results.append(result)
                print(json.dumps({k: result.get(k) for k in ("assignment", "submission", "case", "failure")}),
                      flush=True)
        # Then the times, alone on the GPU (no profiled process beside them), every submission in turn.
        times = {}
        for assignment_id in args.assignment or ["softmax", "fused_layers"]:
            files = {name: file for name, file, _why, a, _case in jobs if a == assignment_id}
            times[assignment_id] = time_all(files, assignment_id, args.seed)
            print(json.dumps({assignment_id: times[assignment_id]}), flush=True)
        for result in results:
            if "submission" in result:
                result["ms"] = times[str(result["assignment"])][str(result["submission"])][str(result["case"])]
    (args.out / "summary.json").write_text(json.dumps({"ncu": version, "gpu": os.environ.get("GPU", ""),
                                                       "runs": results}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
