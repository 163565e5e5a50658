"""What ending a timing in turn once it settles costs and saves, on recorded round-by-round ratios (no GPU needed).

    python benchmarks/settled_rounds.py docs/gpu-runs-2026-12-06.txt [MORE FILES]

Reads every "<file> <case>: round by round r1 r2 ..." line that `benchmarks/identical_timings.py` printed (each round's
reference/student ratio, ten rounds or more) and replays `grader.judging.performance.settled` on it, block by block:
per timing, the rounds it would have taken and its speedup then against all the rounds'. Prints the rounds saved and
the largest change of a speedup.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from grader.judging.performance import SETTLED_BLOCKS, SETTLED_RANGE, paired_speedup, settled

MARK = "round by round"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--min-rounds", type=int, default=10, help="only timings of at least this many rounds")
    args = parser.parse_args()
    taken: dict[str, list[int]] = {}
    rounds_all = rounds_taken = 0
    worst = 0.0
    for path in args.files:
        for line in path.read_text(encoding="utf-8").splitlines():
            if MARK not in line:
                continue
            name, _, values = line.partition(MARK)
            ratios = [float(v) for v in values.split()]
            if len(ratios) < args.min_rounds:
                continue
            ones = [1.0] * len(ratios)
            stop = next((n for n in range(2, len(ratios) + 1, 2) if settled(ratios[:n], ones[:n])), len(ratios))
            full, early = paired_speedup(ratios, ones), paired_speedup(ratios[:stop], ones[:stop])
            worst = max(worst, abs(early / full - 1) * 100)
            rounds_all, rounds_taken = rounds_all + len(ratios), rounds_taken + stop
            taken.setdefault(name.strip().rstrip(":").split()[-1], []).append(stop)
    if not rounds_all:
        print("no round-by-round lines found")
        return 1
    print(f"settled: {SETTLED_BLOCKS} blocks of two rounds within {100 * SETTLED_RANGE:g}% of their median")
    for case, stops in sorted(taken.items()):
        print(f"  {case:24s} {len(stops):3d} timings, rounds taken: mean {statistics.mean(stops):.1f}, "
              f"min {min(stops)}, max {max(stops)}")
    saved = 100 * (1 - rounds_taken / rounds_all)
    print(f"{rounds_taken} of {rounds_all} rounds taken ({saved:.0f}% saved); the largest change of a speedup: "
          f"{worst:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
