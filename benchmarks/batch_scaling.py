"""Benchmark: batch-grade an assignment's reference + mutant corpus with several worker counts.

    python benchmarks/batch_scaling.py [--workers 1 2] [--backend auto] [--seed 0] [--skip hang] [--keep DIR]

Writes the corpus into a temporary folder (one student per mutant, named by its id), runs `grader batch` once per worker
count into a fresh output folder, prints the wall-clock time of each run and the ratio to the first,
and fails unless every run's gradebook is identical to the first one's (run details aside: grading
times, timestamps, GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from grader.authoring.discovery import assignments_root, find_assignment
from grader.authoring.mutants import write_mutant
from grader.cli import main as grader_main
from grader.operations.selftest import corpus, reference_path
from grader.publishing.gradebook import RUN_DETAIL_FIELDS

MIN_SUBMISSIONS = 20


def comparable(book: dict[str, Any]) -> dict[str, Any]:
    rows = [{k: v for k, v in row.items() if k not in RUN_DETAIL_FIELDS} for row in book["rows"]]
    return {**{k: v for k, v in book.items() if k != "generated_at"}, "rows": rows}


def run(submissions: Path, out: Path, assignment: str, backend: str, seed: int,
        workers: int) -> tuple[float, dict[str, Any]]:
    argv = ["batch", str(submissions), "--assignment", assignment, "--out", str(out), "--seed", str(seed),
            "--backend", backend, "--workers", str(workers)]
    printed = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        code = grader_main(argv)
    elapsed = time.perf_counter() - started
    if code != 0:
        sys.exit(f"grader batch failed (exit {code}):\n{printed.getvalue()}")
    return elapsed, json.loads((out / "gradebook.json").read_text(encoding="utf-8"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="fused_layers")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", nargs="*", default=[], help="corpus ids to leave out (e.g. hang)")
    parser.add_argument("--keep", type=Path, help="keep the batch output folders here")
    args = parser.parse_args()

    assignment = find_assignment(args.assignment, assignments_root())
    mutants = [m for m in corpus(assignment) if m.id not in args.skip]
    if len(mutants) < MIN_SUBMISSIONS:
        sys.exit(f"only {len(mutants)} submissions in the corpus; the benchmark wants {MIN_SUBMISSIONS}")
    reference = reference_path(assignment).read_text(encoding="utf-8")
    work = Path(tempfile.mkdtemp(prefix="batch-scaling-"))
    try:
        submissions = work / "submissions"
        submissions.mkdir()
        for mutant in mutants:
            write_mutant(mutant, reference, submissions, f"{mutant.id}.py")
        results = []
        for workers in args.workers:
            out = (args.keep or work) / f"out-{workers}-workers"
            elapsed, book = run(submissions, out, assignment.id, args.backend, args.seed, workers)
            results.append((workers, elapsed, book))
            grading = sum(r["grading_time_s"] or 0 for r in book["rows"])
            devices = Counter(r["device"] or "cpu" for r in book["rows"])
            print(f"{workers} worker(s): {elapsed:7.1f} s wall clock, {grading:7.1f} s of grading "
                  f"({len(book['rows'])} submissions, backend {book['backend']}, devices {dict(devices)})",
                  flush=True)
        first_workers, first_time, first_book = results[0]
        for workers, elapsed, _ in results[1:]:
            print(f"{first_workers} -> {workers} workers: {first_time / elapsed:.2f}x faster "
                  f"(wall-clock ratio {elapsed / first_time:.2f})")
        for workers, _, book in results[1:]:
            if comparable(book) != comparable(first_book):
                print(f"gradebook with {workers} workers DIFFERS from the one with {first_workers}")
                return 1
        summary = first_book["summary"]
        print(f"gradebooks identical across {', '.join(str(w) for w, _, _ in results)} workers: "
              f"{summary['students']} students, {summary['graded']} graded, mean {summary['mean']}, "
              f"seed {first_book['seed']}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
