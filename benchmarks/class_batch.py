"""Benchmark: grade a class through `grader batch` and check it is fast, fair and one verdict per seed.

    python benchmarks/class_batch.py [--assignment fused_layers] [--backend cuda] [--workers 6] [--seed 3]
                                     [--copies 2] [--identical 3] [--out DIR] [--no-profile] [--profile-every-case]
                                     [--no-template] [--no-shared-zygote] [--no-sandbox-template] [--phases]
                                     [--limit-s S]

`--workers 1,4,8` grades the same class once per worker count, one batch after the other. `--phases` also says
where each batch's CPU-seconds and GPU-slot seconds went, phase by phase over all its grades
(benchmarks/class_phases.py: the issue-48 table).

The class: every mutant and variant of the assignment's corpus written out as its own student,
`--copies` times (byte-identical files under different names), plus `--identical` copies of the
reference, and with `--hostile` (fused_layers) a student whose LayerNorm spins forever on the device at
the timed size and one that takes all GPU memory there (HOSTILE, edits of the reference). Prints the
batch's wall time and CPU-seconds (every process the batch waited for), the grading time per student
(median, max), whether every
copy of a file got the same score and traps (one verdict per seed, across concurrent grades), and for
the identical references their speedups over the reference on every timed case with the largest
difference between them (the fairness bar: within +-3%).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from class_phases import (  # noqa: E402
    ClassSampler,
    class_table,
    long_spans,
    read_trace,
    seat_line,
    seat_use,
    slot_line,
    slot_use,
    table_lines,
)

ROOT = Path(__file__).resolve().parent.parent
REPLAY_LONG_S = 5.0  # a replay this long beside others is listed with what they were doing (the 5 s run window)


# Two hostile students of fused_layers, as edits of the reference: correct at every correctness size, and at
# the timed size one spins forever on the device, the other takes every byte of GPU memory and keeps it.
HOSTILE = {
    "spins_at_timed_size": ("    mask = cols < N\n    x = tl.load(x_ptr + row * stride_m + cols, mask=mask, other=0.0)",
                            "    mask = cols < N\n"
                            "    if N >= 8192:  # the timed size only: spin forever on the device\n"
                            "        probe = tl.load(x_ptr)\n"
                            "        while probe == probe:\n"
                            "            probe = tl.load(x_ptr, volatile=True)\n"
                            "    x = tl.load(x_ptr + row * stride_m + cols, mask=mask, other=0.0)"),
    "hogs_gpu_memory": ("    block_n, num_warps = _row_launch_config(N)\n    layernorm_forward_kernel[(M,)](",
                        "    if x.numel() >= 8192 * 8192 and not _HOARD:  # the timed size only: take all GPU memory\n"
                        "        torch.cuda.set_per_process_memory_fraction(1.0)\n"
                        "        while True:\n"
                        "            try:\n"
                        "                _HOARD.append(torch.empty(1 << 28, dtype=torch.float32, device=x.device))\n"
                        "            except torch.OutOfMemoryError:\n"
                        "                break\n"
                        "    block_n, num_warps = _row_launch_config(N)\n    layernorm_forward_kernel[(M,)]("),
}


def hostile_source(reference: str, student: str) -> str:
    before, after = HOSTILE[student]
    if before not in reference:
        raise SystemExit(f"{student}: the reference changed; update HOSTILE in {__file__}")
    text = reference.replace(before, after, 1)
    return text + "\n\n_HOARD = []\n" if student == "hogs_gpu_memory" else text


def write_class(assignment: str, folder: Path, copies: int, identical: int, hostile: bool) -> dict[str, str]:
    """folder/<student>.py for the whole class; returns student -> the file it is a copy of."""
    corpus = folder.parent / "corpus"
    subprocess.run([sys.executable, "-m", "grader", "mutant", "--all", "--assignment", assignment,
                    "--write", str(corpus)], check=True, stdout=subprocess.DEVNULL)
    folder.mkdir(parents=True)
    origin = {}
    for path in sorted(corpus.glob("*.py")):
        for copy in range(copies):
            student = f"{path.stem}__{copy + 1}"
            shutil.copyfile(path, folder / f"{student}.py")
            origin[student] = path.stem
    reference = ROOT / "reference" / assignment / "reference.py"
    for copy in range(identical):
        student = f"reference__{copy + 1}"
        shutil.copyfile(reference, folder / f"{student}.py")
        origin[student] = "reference"
    for student in HOSTILE if hostile else ():
        (folder / f"{student}.py").write_text(hostile_source(reference.read_text(encoding="utf-8"), student),
                                             encoding="utf-8")
        origin[student] = student
    return origin


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--assignment", default="fused_layers")
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--workers", default="6", help="a worker count, or several (1,4,8): one batch each")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--identical", type=int, default=3)
    parser.add_argument("--executor", default="local")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="grade without the profiled replays (Nsight Compute), to weigh what they cost a class")
    parser.add_argument("--profile-every-case", action="store_true",
                        help="profile every timed case (the batch's default: only those whose counters could name a "
                             "trap), to weigh what the rest cost a class")
    parser.add_argument("--no-template", dest="template", action="store_false",
                        help="every child of the batch started afresh ($GRADER_CHILD_TEMPLATE=0), to weigh what the "
                             "child template saves a class")
    parser.add_argument("--no-shared-zygote", dest="shared_zygote", action="store_false",
                        help="every grade's reference worker started afresh ($GRADER_REFERENCE_ZYGOTE=0), to weigh "
                             "what the batch's shared zygote saves a class")
    parser.add_argument("--no-sandbox-template", dest="sandbox_template", action="store_false",
                        help="every grade's sandbox zygote started afresh ($GRADER_SANDBOX_TEMPLATE=0), to weigh what "
                             "the batch's zygote template saves a class")
    parser.add_argument("--hostile", action="store_true",
                        help="fused_layers: add a student that spins at the timed size and one that hogs GPU memory")
    parser.add_argument("--phases", action="store_true",
                        help="per phase, over every grade: wall grade-seconds, CPU-seconds, the GPU slot's seconds")
    parser.add_argument("--limit-s", type=float, default=0.0,
                        help="stop each batch (SIGTERM: it ends its grades and writes what finished) after this many "
                             "seconds and report on the students graded by then (a device call's limit)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="class-batch-"))
    origin = write_class(args.assignment, work / "class", args.copies, args.identical, args.hostile)
    status = 0
    for workers in [int(w) for w in str(args.workers).split(",")]:
        out = (args.out or work / "out") / f"workers-{workers}"
        status = max(status, grade_class(args, work, origin, workers, out))
    return status


def _await_batch(batch: subprocess.Popen[str], out: Path, students: int, started: float,
                 limit_s: float) -> tuple[str, str]:
    """The batch's output, with a line every 15 s on how many students are graded (flushed: a device call cut short
    still shows the pace); past `limit_s` (0: none) the batch is sent SIGTERM and finishes what it can."""
    said = stopped = 0.0
    while True:
        try:
            return batch.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic() - started
        if now - said >= 15.0:
            said = now
            graded = sum(1 for _ in out.glob("*/grade.json")) if out.is_dir() else 0
            print(f"  {now:5.0f} s: {graded} of {students} graded", flush=True)
        if limit_s and now > limit_s and not stopped:
            stopped = now
            print(f"  {now:5.0f} s: past --limit-s {limit_s:g}: the batch is stopped", flush=True)
            batch.terminate()


def machine_busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (/proc/stat: all but idle and iowait)."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def grade_class(args: argparse.Namespace, work: Path, origin: dict[str, str], workers: int, out: Path) -> int:
    """One `grader batch` of the class with `workers` workers, and what it showed."""
    trace = work / f"phases-{workers}.jsonl"
    env = dict(os.environ, **({"GRADER_PHASE_TRACE": str(trace)} if args.phases else {}),
               **({} if args.template else {"GRADER_CHILD_TEMPLATE": "0"}),
               **({} if args.shared_zygote else {"GRADER_REFERENCE_ZYGOTE": "0"}),
               **({} if args.sandbox_template else {"GRADER_SANDBOX_TEMPLATE": "0"}))
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine_before = machine_busy_s()
    batch = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(work / "class"), "--assignment",
                              args.assignment, "--out", str(out), "--backend", args.backend, "--workers",
                              str(workers), "--seed", str(args.seed), "--executor", args.executor,
                              *([] if args.profile else ["--no-profile"]),
                              *(["--profile-every-case"] if args.profile_every_case else [])],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    sampler = ClassSampler(batch.pid).start() if args.phases else None
    stdout, stderr = _await_batch(batch, out, len(origin), started, args.limit_s)
    if sampler is not None:
        sampler.stop()
    done = subprocess.CompletedProcess(batch.args, batch.returncode, stdout, stderr)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # every process of the batch the batch waited for
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    machine_s = machine_busy_s() - machine_before
    print(done.stdout[-3000:], done.stderr[-2000:], sep="\n")
    grades = {s: json.loads((out / s / "grade.json").read_text()) for s in origin if (out / s / "grade.json").is_file()}
    print(f"CPU-seconds of the batch: {cpu_s:.0f} ({cpu_s / max(len(grades), 1):.1f} per student graded, "
          f"{cpu_s / wall:.1f} cores busy on average over {wall:.0f} s; {os.cpu_count()} cores here)")
    per_grade = machine_s / max(len(grades), 1)
    print(f"CPU-seconds the whole machine was busy meanwhile: {machine_s:.0f} ({per_grade:.1f} per student graded; "
          "every process, those the batch never waited for too: a template's forks)")
    seconds = [g["execution_time_s"] for g in grades.values()]
    timing = f"median {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s" if seconds else "none"
    print(f"class of {len(origin)} ({args.copies} copies of each corpus file, {args.identical} identical references): "
          f"{len(grades)} graded in {wall:.1f} s wall with {workers} workers ({args.executor}"
          f"{'' if args.profile else ', --no-profile'}{', --profile-every-case' if args.profile_every_case else ''}"
          f"{'' if args.template else ', --no-template'}"
          f"{'' if args.shared_zygote else ', --no-shared-zygote'}"
          f"{'' if args.sandbox_template else ', --no-sandbox-template'}); "
          f"grading time per student {timing}")
    phases = sorted({p for g in grades.values() for p in g.get("phases", {})})
    print("phases, seconds per grade (median / max / sum over the class): " + "; ".join(
        f"{p} {statistics.median(g.get('phases', {}).get(p, 0.0) for g in grades.values()):.1f} / "
        f"{max(g.get('phases', {}).get(p, 0.0) for g in grades.values()):.1f} / "
        f"{sum(g.get('phases', {}).get(p, 0.0) for g in grades.values()):.0f}" for p in phases))
    if sampler is not None:
        spans = read_trace(trace)
        table = class_table(sampler.samples, spans)
        sampled = sum(row["cpu_s"] for row in table.values())
        print(f"where the batch's CPU went, {workers} workers: {sampled:.0f} CPU-seconds inside the grades' process "
              f"trees, read every 0.25 s (getrusage's {cpu_s:.0f} misses workers their sandboxes reaped; the batch's "
              f"own process and a grade's last 0.25 s are not in the table)")
        print("\n".join(table_lines(table, len(grades))))
        print(slot_line(slot_use(spans)))
        print(seat_line(seat_use(spans)))
        when, least = sampler.least_available
        if least >= 0:
            print(f"    the machine's memory: least available {least / 2**30:.1f} GiB, {when - started:.0f} s in")
        slow = long_spans(spans, "replay", REPLAY_LONG_S)
        print(f"replays of {REPLAY_LONG_S:.0f} s or more: {len(slow)}" + "".join(f"\n{line}" for line in slow))
    by_origin = defaultdict(list)
    for student, grade in grades.items():
        by_origin[origin[student]].append((student, grade["score"], tuple(sorted(grade["traps"]))))
    differing = {o: rows for o, rows in by_origin.items() if len({(s, t) for _, s, t in rows}) > 1}
    print(f"copies with different verdicts: {len(differing)} of {len(by_origin)}" +
          "".join(f"\n  {o}: {rows}" for o, rows in differing.items()))
    references = sorted(s for s in grades if origin[s] == "reference")
    worst = 0.0
    for perf_id in [p["perf_id"] for p in grades[references[0]]["performance"]] if references else []:
        speedups = []
        for student in references:
            (case,) = [p for p in grades[student]["performance"] if p["perf_id"] == perf_id]
            speedups.append(case.get("speedup_vs_reference"))
        shown = "  ".join(f"{s:.3f}" if s else "not timed" for s in speedups)
        known = [s for s in speedups if s]
        spread = 100 * (max(known) - min(known)) / 2 / statistics.median(known) if len(known) > 1 else 0.0
        worst = max(worst, spread)
        calibrations = {next(p for p in grades[s]["performance"] if p["perf_id"] == perf_id).get("calibration", "")
                        for s in references}
        print(f"  {perf_id:22} speedup vs reference: {shown}   +-{spread:.2f}%   calibrations: {len(calibrations)}")
    print(f"identical references: largest difference +-{worst:.2f}%")
    for student in sorted(s for s in grades if origin[s] in HOSTILE):
        cases = "; ".join(f"{p['perf_id']}: {p['status']}{' ' + p['trap'] if p.get('trap') else ''}"
                          f" ({(p.get('reason') or '')[:100]})" for p in grades[student]["performance"])
        print(f"  {student}: {grades[student]['score']:g}/{grades[student]['max_score']:g} in "
              f"{grades[student]['execution_time_s']:.1f} s; {cases}")
    untimed = [s for s, g in grades.items() if origin[s] not in HOSTILE and g["score"] == g["max_score"]
               and any(p["status"] != "timed" for p in g["performance"])]
    print(f"correct students with a performance case not timed: {len(untimed)} {sorted(untimed)}" + "".join(
        f"\n  {s} {p['perf_id']}: {p['status']}{' ' + p['trap'] if p.get('trap') else ''}: "
        f"{' '.join((p.get('reason') or '').split())[:400]}"
        for s in sorted(untimed) for p in grades[s]["performance"] if p["status"] != "timed"))
    timed = [p for g in grades.values() for p in g["performance"] if p["status"] == "timed"]
    counted = sum(1 for p in timed if (p.get("counters") or {}).get("student"))
    skipped = sum(1 for g in grades.values() for n in g.get("notes", []) if n.startswith("GPU counters: not read for"))
    print(f"timed cases: {len(timed)}, with Nsight Compute's counters {counted}; grades whose fast cases were not "
          f"profiled: {skipped}")
    for trap, said in (("timeout", "timed out"), ("crash", "crashed")):  # the messages: what a class run must explain
        found = [(s, c["case_id"], c.get("message", "")) for s, g in sorted(grades.items()) for c in g["cases"]
                 if trap in (c.get("traps") or [])]
        print(f"cases that {said}: {len(found)}" + "".join(
            f"\n  {s} ({origin[s]}) {case}: {' '.join(message.split())[:600]}" for s, case, message in found))
    return 0 if done.returncode == 0 and not differing else 1


if __name__ == "__main__":
    sys.exit(main())
