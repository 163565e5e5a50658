"""What the grader's judge says of a `benchmarks/ncu_record.py` recording: every submission's profiled case against the
reference's, at the times the recording measured, through grader.judging.gpu_performance_traps (the same pure
functions a cuda grade calls). Prints one markdown table row per (submission, case): the slowdown, the counters
that separate the slow styles (yours, then the reference's), the static facts, the traps named and what the
submission was recorded for. Runs on any machine (no GPU: it reads the recording).

    python benchmarks/ncu_verdicts.py DIR [--assignment softmax] [--all]

`--all` lists every case; by default a submission's cases within 10% of the reference's time and naming nothing are
left out (a mutant of one target leaves the others as fast as the reference's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.evidence.kernel_profiles import SideProfile, StaticFacts  # noqa: E402
from grader.judging.gpu_performance_traps import DEFAULT_THRESHOLDS, Side, compare, diagnose, summarise  # noqa: E402
from grader.running.profiling.ncu import parse_ncu_csv  # noqa: E402

MATMUL_TARGETS = {"fused_linear_gelu"}


def kernel_facts(recorded: Iterable[dict]) -> dict[str, StaticFacts]:
    """The recording's facts of each compiled specialisation (entries without registers are ones it could not
    read)."""
    return {f"{f['kernel']}#{n}": StaticFacts(bool(f["tensor_cores"]), bool(f["vector_loads"]), int(f["registers"]),
                                             int(f["spills"])) for n, f in enumerate(recorded) if "registers" in f}


def side(folder: Path, run: dict) -> Side:
    text = (folder / run["assignment"] / run["submission"] / f"{run['case']}.csv").read_text(encoding="utf-8")
    static = SideProfile((), kernel_facts(run.get("static") or ())).static  # the kernels together, as a grade has it
    ms = statistics.median(run["ms"]) if run.get("ms") else None
    return Side(parse_ncu_csv(text), static, ms * 1e-3 if ms else None)


def pair(mine: dict[str, float], theirs: dict[str, float], key: str, scale: float) -> str:
    """"yours (the reference's)" of one counter."""
    a, b = mine.get(key), theirs.get(key)
    shown = [f"{v / scale:,.0f}" if v is not None else "–" for v in (a, b)]
    return f"{shown[0]} ({shown[1]})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--assignment", action="append")
    parser.add_argument("--all", action="store_true")
    args = parser.parse_args()
    runs = json.loads((args.folder / "summary.json").read_text(encoding="utf-8"))["runs"]
    runs = [r for r in runs if "submission" in r and (not args.assignment or r["assignment"] in args.assignment)]
    reference = {(r["assignment"], r["case"]): r for r in runs if r["submission"] == "reference"}
    print("| assignment | submission | case | slowdown | DRAM MB | sectors/load | occupancy % | tensor pipe % | "
          "programs x threads | regs / spills | named | recorded for |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        ref = reference.get((run["assignment"], run["case"]))
        if ref is None or run.get("failure"):
            if run.get("failure"):
                print(f"| {run['assignment']} | {run['submission']} | {run['case']} | | | | | | | | "
                      f"profile failed: {run['failure']} | {run['why']} |")
            continue
        target = run["case"].removeprefix("perf-").replace("-", "_")
        comparison = compare(target, side(args.folder, run), side(args.folder, ref), case_id=run["case"],
                             matmul=run["case"] == "perf-linear-gelu")
        traps = diagnose(comparison, DEFAULT_THRESHOLDS)
        if not args.all and not traps and comparison.time_ratio < DEFAULT_THRESHOLDS.slower and \
                run["submission"] != "reference":
            continue
        mine, theirs = summarise(comparison.student), summarise(comparison.reference)

        shape = f"{mine.get('programs', 0):,.0f} x {mine.get('threads', 0):.0f}"
        regs = f"{mine.get('registers', 0):.0f} / {mine.get('spills', 0):.0f}"
        named = ", ".join(t.trap for t in traps) or "none"
        cells = " | ".join(pair(mine, theirs, key, scale) for key, scale in (
            ("dram_bytes", 1e6), ("sectors_per_load", 1.0), ("occupancy_pct", 1.0), ("tensor_pipe_pct", 1.0)))
        print(f"| {run['assignment']} | {run['submission']} | {run['case']} | {comparison.time_ratio:.2f}x | "
              f"{cells} | {shape} | {regs} | {named} | {run['why']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
