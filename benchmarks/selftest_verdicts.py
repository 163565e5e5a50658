"""The verdicts of a `grader selftest --out DIR` run, one line per submission, seed and case, for diffing two runs.

    grader selftest --assignment softmax --seeds 5 --out before/softmax
    ... change the grader ...
    grader selftest --assignment softmax --seeds 5 --out after/softmax
    python benchmarks/selftest_verdicts.py before/softmax > before.txt
    python benchmarks/selftest_verdicts.py after/softmax > after.txt && diff before.txt after.txt

A line holds what a user sees of a verdict: the case's score and the traps it named; then, per submission and
seed, the total, the submission-wide notes' count, the performance traps named and why nothing ran (`rejected`).
Timings, paths and messages that quote them are left out: they differ between any two runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def verdict_lines(folder: Path) -> list[str]:
    lines = []
    for grade_file in sorted(folder.glob("*/grade.json")):
        grade = json.loads(grade_file.read_text(encoding="utf-8"))
        who = f"{grade_file.parent.name} seed={grade['seed']}"
        for case in grade["cases"]:
            traps = ",".join(sorted(case["traps"])) or "-"
            lines.append(f"{who} {case['case_id']} {case['score']:g}/{case['max_score']:g} {traps}")
        slow = ",".join(sorted({t["trap"] for t in grade.get("performance_traps", ())})) or "-"
        traps = ",".join(sorted(grade["traps"])) or "-"
        lines.append(f"{who} TOTAL {grade['score']:g}/{grade['max_score']:g} traps={traps} slow={slow}"
                     f" notes={len(grade['notes'])} rejected={grade.get('rejected') or '-'}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: python benchmarks/selftest_verdicts.py SELFTEST_OUT_DIR", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    lines = verdict_lines(folder)
    if not lines:
        print(f"no */grade.json under {folder}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
