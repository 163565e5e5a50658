"""Benchmark: wall-clock time to grade submissions (full hidden battery, performance cases included),
with the grader's per-phase split and each performance case's timing.

    python benchmarks/grading_time.py [--backend interpreter|cuda] [--repeat 2] [--seed 3] [SUBMISSION ...]

Each run is a fresh `grader grade` process (cold: imports, workers, compiles), as a student's grade is.
Prints, per run: wall seconds, the phases from grade.json (start-up, compile, correctness, replay,
timing), the score, and for every timed case its median with the spread over its samples and its
speedups; then the median wall time per submission.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("start-up", "compile", "correctness", "replay", "timing")


def grade_once(submission: Path, assignment: str, backend: str, seed: int, out: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", "grade", str(submission), "--assignment", assignment,
                    "--backend", backend, "--seed", str(seed), "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    return wall, json.loads((out / "grade.json").read_text(encoding="utf-8"))


def describe(grade: dict) -> list[str]:
    phases = grade.get("phases", {})
    lines = ["  phases: " + "  ".join(f"{p} {phases.get(p, 0.0):.2f}s" for p in PHASES)
             + "".join(f"  {p} {s:.2f}s" for p, s in phases.items() if p not in PHASES)]
    for perf in grade.get("performance", []):
        student = perf.get("student")
        if perf["status"] != "timed" or not student:
            lines.append(f"  {perf['perf_id']:22} {perf['status']}: {perf.get('reason', '')[:90]}")
            continue
        vs_ref = perf.get("speedup_vs_reference")
        vs_torch = perf.get("speedup_vs_torch")
        lines.append(f"  {perf['perf_id']:22} {student['median_ms']:.4f} ms +-{student['spread_pct']:.1f}%  "
                     f"{vs_torch or 0:.2f}x torch  {vs_ref or 0:.2f}x reference  "
                     f"(reference +-{(perf.get('reference') or {}).get('spread_pct', 0):.1f}%, "
                     f"torch +-{(perf.get('torch') or {}).get('spread_pct', 0):.1f}%)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("submissions", nargs="*", default=[str(ROOT / "reference" / "fused_layers" / "reference.py")])
    parser.add_argument("--assignment", default="fused_layers")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="also time `grader check` (public cases) once")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for submission in args.submissions:
            times = []
            for run in range(args.repeat):
                wall, grade = grade_once(Path(submission).resolve(), args.assignment, args.backend, args.seed,
                                         Path(tmp) / f"{Path(submission).stem}-{run}")
                times.append(wall)
                print(f"{Path(submission).name} run {run}: {wall:6.2f} s wall, score {grade['score']:g}/"
                      f"{grade['max_score']:g}, backend {grade['backend']}")
                print("\n".join(describe(grade)))
            print(f"{Path(submission).name}: median {statistics.median(times):.2f} s over {args.repeat} runs")
            if args.check:
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "grader", "check", str(Path(submission).resolve()),
                                "--assignment", args.assignment, "--backend", args.backend, "--seed", str(args.seed)],
                               check=False, stdout=subprocess.DEVNULL)
                print(f"{Path(submission).name}: grader check {time.perf_counter() - started:.2f} s wall")


if __name__ == "__main__":
    main()
