"""Benchmark: two checkouts of the grader side by side, each grade a fresh `grader grade` process (cold: imports,
workers, compiles), taken in turn A, B, A, B, ... so both see the same machine, clocks and caches.

    python benchmarks/grading_time_ab.py BASELINE_CHECKOUT NEW_CHECKOUT [--backend cuda] [--repeat 3]
        [--assignment fused_layers] [--seed 3] [--submission reference/fused_layers/reference.py]

Each checkout grades its own copy of the submission (a path relative to the checkout) with `python -m grader`
run from the checkout's folder, so each imports its own grader. Prints every run's wall seconds and phases, then
per checkout the median and the spread (half the range, % of the median); the calibration cache is shared, as a
course's is (the first grade of each measures the bars it misses).
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

PHASES = ("start-up", "compile", "correctness", "replay", "timing")


def grade_once(checkout: Path, submission: Path, args: argparse.Namespace, out: Path,
               cache: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", "grade", str(submission), "--assignment", args.assignment,
                    "--backend", args.backend, "--seed", str(args.seed), "--out", str(out),
                    "--calibration-dir", str(cache)], check=True, cwd=checkout, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started, json.loads((out / "grade.json").read_text(encoding="utf-8"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs=2, type=Path, metavar="CHECKOUT")
    parser.add_argument("--assignment", default="fused_layers")
    parser.add_argument("--submission", default="reference/fused_layers/reference.py")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    walls: dict[Path, list[float]] = {c: [] for c in args.checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "calibration"
        for run in range(args.repeat):
            for checkout in args.checkouts:
                out = Path(tmp) / f"{checkout.name}-{run}"
                wall, grade = grade_once(checkout.resolve(), (checkout / args.submission).resolve(), args, out, cache)
                walls[checkout].append(wall)
                phases = grade.get("phases", {})
                print(f"{checkout.name} run {run}: {wall:6.2f} s wall, score {grade['score']:g}/{grade['max_score']:g}"
                      f", {grade['backend']}; " + "  ".join(f"{p} {phases.get(p, 0.0):.2f}s" for p in PHASES),
                      flush=True)
    for checkout, times in walls.items():
        median = statistics.median(times)
        spread = 100 * (max(times) - min(times)) / 2 / median
        print(f"{checkout.name}: median {median:.2f} s +-{spread:.1f}% over {len(times)} cold grades "
              f"({', '.join(f'{t:.2f}' for t in times)})")


if __name__ == "__main__":
    main()
