"""Benchmark: how long a student waits, per scenario, with the grader's per-phase split.

    python benchmarks/grading_time.py [--backend interpreter|cuda|auto] [--repeat 2] [--seed 3] [--check]
                                      [--profile] [--json FILE] [SUBMISSION ...]

Every run is a fresh process (imports, workers, compiles), as a student's grade is. Per submission (default:
the reference of fused_layers), in this order:

- `grade, nothing cached`: a fresh cache folder (no calibration, no kept reference profile) and a fresh Triton
  cache: the course's very first grade;
- `grade, course cached` (--repeat times): the same folders, now holding the course's reference timings and
  compiled kernels, as every later grade in a course finds them;
- `check, nothing cached` and `check, warm` (--repeat times): `grader check --warm` (public cases), the same way:
  the first leaves a check process ready (grader.operations.warm_check), which the later ones use, as a student's
  checks of one file do, WARM_START_S apart (a student reads the report meanwhile; the server readies its next held
  check); a warm check's CPU seconds are the client's alone. The servers are stopped at the end (every warm check
  server of this user: a benchmark's machine).

Per run: wall seconds, CPU seconds (getrusage of the reaped children, a lower bound; with --profile the whole
process tree's, sampled from /proc), the GPU's busy share
while it ran (NVML, where nvidia-ml-py and a GPU are here), the score, and the phases the grade recorded
(grade.json). Then a table: per scenario the median wall time and each phase's median. With --check, the bars
of "a grade while the student waits" are checked and the exit status says whether all held: on cuda, a grade
<= 10 s course cached and <= 20 s with nothing cached, `grader check` <= 5 s warm and <= 10 s cold; on the
interpreter, a grade <= 9 s course cached (the 2-core machine's 7-9 s).

With --profile, every run also says where its time went: the grade traces its phases ($GRADER_PHASE_TRACE,
grader.running.phases) while this script samples, every 100 ms, the CPU seconds of the grade's whole process
tree (/proc: the grader, its sandboxes and workers) and the GPU's utilisation (NVML); each sample is laid on
the innermost phase open at the time, giving per phase its wall seconds, CPU seconds (and so the cores it
kept busy) and the GPU's busy share. "(no phase)" is the rest: imports, pytest, reports.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from class_phases import children_of, process_table, tree_cpu  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("start-up", "compile", "correctness", "replay", "timing")

# scenario -> (bar on cuda, bar on the interpreter), seconds of wall time (median over its runs); None: no bar
WARM_START_S = 15.0  # after a check: the warm server's next held check imports torch and starts its sandbox
BARS: dict[str, tuple[float | None, float | None]] = {
    "grade, nothing cached": (20.0, None),
    "grade, course cached": (10.0, 9.0),
    "check, nothing cached": (10.0, None),
    "check, warm": (5.0, None),
}


@dataclass(frozen=True)
class Run:
    scenario: str
    wall_s: float
    cpu_s: float
    gpu_busy_pct: float | None
    score: str
    backend: str
    phases: dict[str, float] = field(default_factory=dict)
    profile: dict[str, dict[str, float]] = field(default_factory=dict)  # --profile: where_it_went
    # a cuda grade's performance cases: how many, timed, with the reference measured, profiled on each side (a fast
    # grade that timed less is no win)
    timing: dict[str, int] = field(default_factory=dict)


def timing_counts(performance: Sequence[dict]) -> dict[str, int]:
    """Pure: how many performance cases there were, were timed, had the reference measured, were profiled."""
    timed = [p for p in performance if p.get("status") == "timed"]
    return {"cases": len(performance), "timed": len(timed),
            "reference": sum(1 for p in timed if p.get("reference")),
            **{f"profiled {side}": sum(1 for p in timed if (p.get("counters") or {}).get(side))
               for side in ("student", "reference")}}


def timing_summary(timing: dict[str, int]) -> str:
    if not timing:
        return ""
    timed = timing["timed"]
    return (f"{timed}/{timing['cases']} timed, reference measured {timing['reference']}/{timed}, profiled student "
            f"{timing['profiled student']}/{timed}, reference {timing['profiled reference']}/{timed}")


def timing_complete(timing: dict[str, int]) -> bool:
    """Every performance case timed with the reference measured beside it (true where there were none)."""
    return not timing or timing["cases"] == timing["timed"] == timing["reference"]


def _nvml_handle() -> object | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]))
    except Exception:  # noqa: BLE001 - no NVML, no GPU: the share is unknown
        return None


def _gpu_utilisation(handle: object | None) -> float | None:
    if handle is None:
        return None
    import pynvml

    return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of `root` and every live descendant, with the children each has reaped."""
    parents, cpu = process_table()
    return tree_cpu(root, children_of(parents), cpu)


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    cpu_s: float  # the tree's CPU seconds so far
    gpu_pct: float | None


def sample_tree(process: subprocess.Popen[str], handle: object | None, every_s: float = 0.1) -> list[Sample]:
    """Samples of the process tree's CPU and the GPU's utilisation until `process` exits."""
    samples = []
    while True:
        samples.append(Sample(time.monotonic(), tree_cpu_s(process.pid), _gpu_utilisation(handle)))
        if process.poll() is not None:
            return samples
        time.sleep(every_s)


def where_it_went(samples: Sequence[Sample], trace: Sequence[dict], pid: int) -> dict[str, dict[str, float]]:
    """Per phase (the innermost open at each sample's midpoint; "(no phase)" outside them): wall s, CPU s and
    the GPU's mean busy %."""
    spans = sorted((t for t in trace if t["pid"] == pid), key=lambda t: t["start"])
    out: dict[str, dict[str, float]] = {}
    gpu: dict[str, list[tuple[float, float]]] = {}
    for before, after in zip(samples, samples[1:], strict=False):
        middle = (before.at + after.at) / 2
        open_now = [t for t in spans if t["start"] <= middle < t["end"]]
        if open_now:
            phase = max(open_now, key=lambda t: t["start"])["phase"]
        elif spans and middle < spans[0]["start"]:
            phase = "(python, cli)"  # the interpreter's start, the grader's cheap imports, the spec, the early sandbox
        elif spans and middle >= max(t["end"] for t in spans):
            phase = "(exit)"  # after the last span: the process's exit (atexit, CUDA's teardown)
        else:
            phase = "(no phase)"
        row = out.setdefault(phase, {"wall_s": 0.0, "cpu_s": 0.0})
        row["wall_s"] += after.at - before.at
        row["cpu_s"] += max(after.cpu_s - before.cpu_s, 0.0)
        if after.gpu_pct is not None:
            gpu.setdefault(phase, []).append((after.at - before.at, after.gpu_pct))
    for phase, weighted in gpu.items():
        seconds = sum(w for w, _ in weighted)
        out[phase]["gpu_busy_pct"] = sum(w * p for w, p in weighted) / seconds if seconds else 0.0
    return out


def profile_lines(profile: dict[str, dict[str, float]]) -> list[str]:
    lines = [f"      {'phase':22} {'wall s':>7} {'CPU s':>7} {'cores':>6} {'GPU busy':>9}"]
    for phase, row in sorted(profile.items(), key=lambda item: -item[1]["wall_s"]):
        busy = f"{row['gpu_busy_pct']:.0f}%" if "gpu_busy_pct" in row else "n/a"
        cores = row["cpu_s"] / row["wall_s"] if row["wall_s"] else 0.0
        lines.append(f"      {phase:22} {row['wall_s']:7.2f} {row['cpu_s']:7.2f} {cores:6.1f} {busy:>9}")
    return lines


@contextmanager
def gpu_busy() -> Iterator[Callable[[], float | None]]:
    """The GPU's mean utilisation (NVML's % of time a kernel ran) while the block runs, sampled every 50 ms;
    None where NVML or a GPU is missing."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]))
    except Exception:  # noqa: BLE001 - no NVML, no GPU: the share is unknown, said as None
        yield lambda: None
        return
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: statistics.fmean(samples) if samples else None
    finally:
        stop.set()
        thread.join()


def run_once(scenario: str, command: Sequence[str], env: dict[str, str], out: Path, profile: bool = False) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [sys.executable, "-m", "grader", *command, "--out", str(out)]
    trace = out.parent / f"{out.name}.trace.jsonl"
    samples: list[Sample] = []
    started = time.perf_counter()
    with gpu_busy() as busy:
        if profile:
            process = subprocess.Popen(argv, env=dict(env, GRADER_PHASE_TRACE=str(trace)), stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True)
            samples = sample_tree(process, _nvml_handle())
            stderr = process.stderr.read() if process.stderr else ""
            returncode, pid = process.wait(), process.pid
        else:
            done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  check=False)
            stderr, returncode, pid = done.stderr, done.returncode, 0
        wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    grade_file = out / "grade.json"
    if not grade_file.is_file():
        sys.exit(f"{scenario}: `grader {' '.join(command)}` wrote no grade.json (exit {returncode}):\n"
                 f"{stderr[-2000:]}")
    grade = json.loads(grade_file.read_text(encoding="utf-8"))
    went: dict[str, dict[str, float]] = {}
    if samples:  # the process tree's own count (getrusage misses workers their sandbox reaps)
        cpu = max(sample.cpu_s for sample in samples)
    if profile:
        lines = trace.read_text(encoding="utf-8").splitlines() if trace.is_file() else []
        went = where_it_went(samples, [json.loads(line) for line in lines], pid)
    return Run(scenario, round(wall, 3), round(cpu, 3), busy(), f"{grade['score']:g}/{grade['max_score']:g}",
               grade["backend"], {k: float(v) for k, v in grade.get("phases", {}).items()}, went,
               timing_counts(grade.get("performance", [])) if grade["backend"].startswith("cuda") else {})


def describe(run: Run) -> str:
    busy = f"{run.gpu_busy_pct:.0f}%" if run.gpu_busy_pct is not None else "n/a"
    phases = "  ".join(f"{p} {s:.2f}" for p, s in run.phases.items())
    text = (f"  {run.scenario:22} {run.wall_s:6.2f} s wall  {run.cpu_s:6.1f} s CPU  GPU busy {busy:>4}  "
            f"{run.score:>7}  {run.backend}\n      phases (s): {phases}")
    if run.timing:
        text += f"\n      performance: {timing_summary(run.timing)}"
    return "\n".join([text, *profile_lines(run.profile)]) if run.profile else text


def table(runs: Sequence[Run]) -> list[str]:
    """Per scenario, the median wall and CPU time and each phase's median (a phase a run lacks counts 0)."""
    scenarios = list(dict.fromkeys(r.scenario for r in runs))
    phases = list(dict.fromkeys(p for r in runs for p in r.phases))
    head = ["scenario", "runs", "wall s", "CPU s", *phases]
    rows = [head, ["---"] * len(head)]
    for scenario in scenarios:
        mine = [r for r in runs if r.scenario == scenario]
        rows.append([scenario, str(len(mine)), f"{statistics.median(r.wall_s for r in mine):.2f}",
                     f"{statistics.median(r.cpu_s for r in mine):.1f}",
                     *(f"{statistics.median(r.phases.get(p, 0.0) for r in mine):.2f}" for p in phases)])
    return ["| " + " | ".join(row) + " |" for row in rows]


def verdicts(runs: Sequence[Run], on_gpu: bool) -> list[tuple[str, float, float, bool]]:
    """(scenario, median wall, bar, held) for every scenario with a bar on this backend."""
    out = []
    for scenario, (cuda_bar, cpu_bar) in BARS.items():
        bar = cuda_bar if on_gpu else cpu_bar
        mine = [r.wall_s for r in runs if r.scenario == scenario]
        if bar is not None and mine:
            median = statistics.median(mine)
            out.append((scenario, median, bar, median <= bar))
    return out


def scenarios_for(submission: Path, args: argparse.Namespace, tmp: Path) -> list[Run]:
    base = ["--assignment", args.assignment, "--backend", args.backend, "--seed", str(args.seed)]
    runs: list[Run] = []
    for verb, label in (("grade", "grade"), ("check", "check")):
        caches = Path(tempfile.mkdtemp(prefix=f"{verb}-caches-", dir=tmp))
        env = dict(os.environ, GRADER_CACHE_DIR=str(caches / "grader"), TRITON_CACHE_DIR=str(caches / "triton"),
                   PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        warm = "course cached" if verb == "grade" else "warm"
        plan = [f"{label}, nothing cached"] + [f"{label}, {warm}"] * args.repeat
        flags = ["--warm"] if verb == "check" else []
        try:
            for n, scenario in enumerate(plan):
                # a warm check serves one command line: the same --out every time (its last grade.json removed)
                out = tmp / f"{submission.stem}-{verb}" if flags else tmp / f"{submission.stem}-{verb}-{n}"
                (out / "grade.json").unlink(missing_ok=True)
                run = run_once(scenario, [verb, str(submission), *base, *flags], env, out, profile=args.profile)
                print(describe(run), flush=True)
                runs.append(run)
                if flags:  # a student reads the report; meanwhile the server readies its next held check
                    time.sleep(WARM_START_S)
        finally:
            if flags:
                subprocess.run(["pkill", "-TERM", "-f", "grader.operations.warm_check --socket"], check=False)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", nargs="*", default=[str(ROOT / "reference" / "fused_layers" / "reference.py")])
    parser.add_argument("--assignment", default="fused_layers")
    parser.add_argument("--backend", default="auto", choices=("auto", "interpreter", "cuda"))
    parser.add_argument("--repeat", type=int, default=2, help="warm runs per verb (default 2)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="check the bars; exit 1 when one does not hold")
    parser.add_argument("--profile", action="store_true",
                        help="per phase: wall and CPU seconds of the process tree, the GPU's busy share")
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args()
    failed = False
    everything: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="grading-time-") as folder:
        for submission in args.submissions:
            path = Path(submission).resolve()
            print(f"{path.name} ({args.assignment}, backend {args.backend}, seed {args.seed}):", flush=True)
            runs = scenarios_for(path, args, Path(folder))
            everything += runs
            print("\n".join(table(runs)))
            if args.check:
                on_gpu = any(r.backend.startswith("cuda") for r in runs)
                for scenario, median, bar, held in verdicts(runs, on_gpu):
                    print(f"  {'ok  ' if held else 'OVER'} {scenario}: {median:.2f} s (bar {bar:g} s)")
                    failed |= not held
                for run in runs:
                    # a grade made faster by timing less holds no bar (a check times nothing unless --timed)
                    if run.scenario.startswith("grade") and not timing_complete(run.timing):
                        print(f"  LESS {run.scenario}: {timing_summary(run.timing)}")
                        failed = True
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in everything], indent=1), encoding="utf-8")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
