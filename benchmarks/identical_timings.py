"""Identical files in one CUDA batch must be timed alike: every timed case's speedup within +-3%.

    python benchmarks/identical_timings.py [--copies 3] [--workers 6] [FILE ...]

Writes COPIES byte-identical copies of each FILE (default: the fused_layers reference and its correct_welford
variant, a kernel that runs far below the reference's speed) into one class folder, grades it with `grader batch
--backend cuda` (the grades run side by side, as a class does), and prints, per file and timed case, each copy's
speedup against the reference and their spread (half the range over the median). Exit 1 when a spread exceeds
the limit. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILES = (ROOT / "reference" / "fused_layers" / "reference.py",
                 ROOT / "reference" / "fused_layers" / "variants" / "correct_welford.py")
LIMIT_PCT = 3.0


def spread_pct(values: list[float]) -> float:
    mid = statistics.median(values)
    return 100.0 * (max(values) - min(values)) / 2.0 / mid if mid else 0.0


def pair_ratios(perf: dict) -> str:
    """Each round's reference/student ratio (the student goes first in even rounds): an order bias shows as even
    rounds reading apart from odd ones."""
    mine, theirs = (perf.get(side) or {} for side in ("student", "reference"))
    pairs = zip(theirs.get("medians_ms") or (), mine.get("medians_ms") or (), strict=False)
    return " ".join(f"{bar / ms:.3f}" for bar, ms in pairs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*", type=Path, default=list(DEFAULT_FILES))
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--assignment", default="fused_layers")
    parser.add_argument("--out", type=Path, help="keep the batch folder here (default: a temporary one)")
    parser.add_argument("--grader", type=Path, default=ROOT,
                        help="the checkout whose grader grades (default: this one; benchmarks/reference_then_now.sh "
                             "passes an older one, so both runs are read by this script)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="identical-"))
    class_dir, out = work / "class", args.out or work / "out"
    class_dir.mkdir()
    for path in args.files:
        for copy in range(1, args.copies + 1):
            shutil.copy(path, class_dir / f"{path.stem}__{copy}.py")
    started = time.monotonic()
    command = [sys.executable, "-m", "grader", "batch", str(class_dir), "--assignment", args.assignment,
               "--backend", "cuda", "--out", str(out), "--workers", str(args.workers)]
    finished = subprocess.run(command, cwd=args.grader, capture_output=True, text=True)
    print(finished.stdout[-2000:], finished.stderr[-2000:], sep="\n")
    print(f"batch of {len(args.files) * args.copies} took {time.monotonic() - started:.0f} s")
    worst = 0.0 if finished.returncode == 0 else float("inf")
    times: dict[str, list[float]] = {}  # "perf-id student|reference" -> medians (ms) across every grade
    for path in args.files:
        by_case: dict[str, list[float]] = {}
        for copy in range(1, args.copies + 1):
            grade = json.loads((out / f"{path.stem}__{copy}" / "grade.json").read_text(encoding="utf-8"))
            for perf in grade["performance"]:
                for side in ("student", "reference"):
                    if perf.get(side) and path == args.files[0]:
                        times.setdefault(f"{perf['perf_id']} {side}", []).append(float(perf[side]["median_ms"]))
                if perf.get("status") == "timed" and perf.get("speedup_vs_reference"):
                    by_case.setdefault(perf["perf_id"], []).append(float(perf["speedup_vs_reference"]))
                    print(f"{path.stem}__{copy} {perf['perf_id']}: round by round {pair_ratios(perf)}")
                else:  # a case not timed against the reference is a failure of this check, never a 0% spread
                    print(f"{path.stem}__{copy} {perf['perf_id']}: {perf.get('status')} {perf.get('reason', '')[:200]}")
                    worst = float("inf")
                if perf.get("status") == "timed" and "timed in turn" not in perf.get("reason", ""):
                    print(f"{path.stem}__{copy} {perf['perf_id']}: the reference was not timed in turn")
                    worst = float("inf")
        for perf_id, speedups in sorted(by_case.items()):
            spread = spread_pct(speedups)
            worst = max(worst, spread)
            print(f"{path.stem:24} {perf_id:22} speedups {' '.join(f'{s:.3f}' for s in speedups)}  ±{spread:.2f}%")
    for label, medians in sorted(times.items()):  # the first file's own and its reference's times, every copy
        print(f"time {args.files[0].stem} {label:36} median {statistics.median(medians):.5f} ms "
              f"over {len(medians)} grades ±{spread_pct(medians):.2f}%")
    print(f"worst spread ±{worst:.2f}% (limit ±{LIMIT_PCT:g}%)")
    return 0 if worst <= LIMIT_PCT and finished.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
