"""Benchmark: wall-clock time to grade one submission (full hidden battery), repeated.

    python benchmarks/grading_time.py [--backend interpreter|cuda] [--repeat 3] [SUBMISSION]

Prints per-run seconds, the median, and the per-phase split reported by the grader.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from grader.authoring.discovery import assignments_root, find_assignment
from grader.operations.environment import detect_backend
from grader.operations.grade import GradeRequest, grade

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("submission", nargs="?", default=str(ROOT / "reference" / "fused_layers.py"))
    parser.add_argument("--assignment", default="fused_layers")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    assignment = find_assignment(args.assignment, assignments_root())
    backend = detect_backend(args.backend)
    times = []
    for i in range(args.repeat):
        started = time.perf_counter()
        result, _ = grade(GradeRequest(assignment, Path(args.submission).resolve(), backend, seed=i))
        elapsed = time.perf_counter() - started
        times.append(elapsed)
        battery = sum(c.elapsed_s for c in result.cases if not c.case_id.startswith("gpu-compile"))
        print(f"run {i}: {elapsed:6.2f} s total, {battery:6.2f} s in cases, "
              f"score {result.score:g}/{result.max_score:g}, {len(result.cases)} cases, backend {result.backend}")
    print(f"median {statistics.median(times):.2f} s over {args.repeat} runs ({backend})")


if __name__ == "__main__":
    main()
