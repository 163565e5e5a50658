"""Selftest: grade an assignment's reference and mutant corpus; every trap must be named exactly.

The corpus is the reference plus what `grader.authoring.mutants.load_mutants` finds in the assignment's
reference folder (reference/<id>/ of the course): patch mutants (mutants.toml), whole-file mutants
(mutants/) and variants (variants/). Each is
written as a real submission file into a temporary folder and graded like a student's. A row passes
when the diagnosed traps equal the expected ones, and the performance traps named (informational, where the
backend predicts them: the interpreter) the expected ones; a correct submission must also get full marks. Graded at
several seeds (`--seeds N`), a row also fails when its score or its traps change with the seed: a mutant
that only some inputs expose proves its trap by luck. A MISS is explained below the table, naming the
cases behind it (their scores and the traps they named).
"""

from __future__ import annotations

import multiprocessing
import tempfile
from collections.abc import Collection
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.authoring.mutants import RESERVED_ID, Mutant, load_mutants, parse_header, write_mutant
from grader.authoring.spec import REFERENCE_DIR, REFERENCE_FILE, Assignment, SpecError
from grader.backends import Backend
from grader.judging.performance_traps import PREDICTING_BACKENDS
from grader.operations.grade import GradeRequest, grade_at_seeds
from grader.publishing.files import write_outputs
from grader.running.processes import cpu_threads


@dataclass(frozen=True)
class CaseVerdict:
    """One case of one graded submission that lost points or named a trap: what a MISS is made of."""

    case_id: str
    score: float
    max_score: float
    traps: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.case_id} {self.score:g}/{self.max_score:g} [{', '.join(self.traps) or 'no trap'}]"


@dataclass(frozen=True)
class SeedVerdict:
    """One submission graded at one seed: its score and the traps named."""

    seed: int
    score: float
    diagnosed: tuple[str, ...]
    performance: tuple[str, ...] = ()  # performance traps named (informational)

    def describe(self) -> str:
        slow = f" [performance: {', '.join(self.performance)}]" if self.performance else ""
        return f"seed {self.seed}: {self.score:g} [{', '.join(self.diagnosed) or 'none'}]{slow}"


@dataclass(frozen=True)
class TimedVerdict:
    """One performance case of a timed selftest grade: its status, and the points its speed earned (not part of
    the row's score: a correct kernel slower than a threshold earns fewer, and that is no MISS; one not timed is)."""

    perf_id: str
    status: str
    score: float
    max_score: float
    speedup: float | None = None  # against what its thresholds compare with
    reason: str = ""

    def describe(self) -> str:
        if self.status != "timed":
            return f"{self.perf_id} {self.status}" + (f" ({self.reason})" if self.reason else "")
        speed = "" if self.speedup is None else f" {self.speedup:.2f}x"
        return f"{self.perf_id}{speed}" + (f" {self.score:g}/{self.max_score:g}" if self.max_score else "")


@dataclass(frozen=True)
class SelftestRow:
    submission: str
    expected: tuple[str, ...]
    diagnosed: tuple[str, ...]
    score: float
    max_score: float
    seconds: float
    cases: tuple[CaseVerdict, ...] = ()  # the cases (at the first seed) that lost points or named a trap
    seeds: tuple[SeedVerdict, ...] = ()  # every seed graded (the first is the row's own); one with --seeds 1
    # performance traps (informational) expected where the backend predicts them, and those named
    expected_performance: tuple[str, ...] = ()
    performance: tuple[str, ...] = ()
    timed: tuple[TimedVerdict, ...] = ()  # a timed grade's performance cases (the first seed's)

    @property
    def untimed(self) -> tuple[TimedVerdict, ...]:
        """Performance cases a correct submission should have had timed and did not (a defect: issue 49)."""
        if self.expected or self.score != self.max_score:
            return ()
        return tuple(t for t in self.timed if t.status not in ("timed", "skipped"))

    @property
    def seed_dependent(self) -> bool:
        """The score or the traps named changed with the seed: a mutant only some inputs expose."""
        return len({(s.score, frozenset(s.diagnosed), frozenset(s.performance)) for s in self.seeds}) > 1

    @property
    def ok(self) -> bool:
        if set(self.expected) != set(self.diagnosed) or self.seed_dependent:
            return False
        if set(self.expected_performance) != set(self.performance):
            return False
        return bool(self.expected) or (self.score == self.max_score and not self.untimed)

    def explain(self) -> list[str]:
        """Why a row is a MISS, naming the cases behind it (empty for a row that is ok)."""
        if self.ok:
            return []
        lines = []
        missing = [t for t in self.expected if t not in self.diagnosed]
        extra = [t for t in self.diagnosed if t not in self.expected]
        if missing:
            lines.append(f"not named: {', '.join(missing)}")
        if extra:
            named_by = {t: [c.case_id for c in self.cases if t in c.traps] for t in extra}
            lines.append("named but not expected: " + "; ".join(
                f"{t} (by {', '.join(cases) or 'the submission as a whole'})" for t, cases in named_by.items()))
        slow_missing = [t for t in self.expected_performance if t not in self.performance]
        slow_extra = [t for t in self.performance if t not in self.expected_performance]
        if slow_missing:
            lines.append(f"performance trap not named: {', '.join(slow_missing)}")
        if slow_extra:
            lines.append(f"performance trap named but not expected: {', '.join(slow_extra)}")
        if not self.expected and self.score != self.max_score:
            lines.append(f"a correct submission lost points: {self.score:g}/{self.max_score:g}")
        if self.untimed:
            lines.append("a correct submission's performance case not timed: "
                         + "; ".join(t.describe() for t in self.untimed))
        if self.seed_dependent:
            lines.append("depends on the seed: " + "; ".join(s.describe() for s in self.seeds))
        if self.cases:
            lines.append("cases: " + "; ".join(c.describe() for c in self.cases))
        return lines


def expected_traps(path: Path, backend: str = "interpreter") -> tuple[str, ...] | None:
    """From a whole file's leading comment lines: `# expect: ...`, overridden by `# expect-<backend>: ...`
    where a backend diagnoses differently (e.g. the GPU itself rejects what the interpreter runs)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_header(f).expected(backend)


def reference_path(assignment: Assignment) -> Path:
    """The reference solution, reference/<id>/reference.py of the course: what every patch mutant is applied to."""
    if assignment.reference_solution is None:
        expected = assignment.course_root / REFERENCE_DIR / assignment.id / REFERENCE_FILE
        why = " (a public form of the assignment has none)" if assignment.public else ""
        raise SpecError(expected, "", f"no reference solution here{why}; the selftest and the mutants need it")
    return assignment.reference_solution.resolve()


def corpus(assignment: Assignment) -> tuple[Mutant, ...]:
    """The reference (a patch with no edits), then every mutant and variant of the assignment."""
    path = reference_path(assignment)
    reference = Mutant(RESERVED_ID, "reference", (), "the reference solution", path)
    return (reference, *load_mutants(assignment.reference_dir))


def write_corpus(assignment: Assignment, folder: Path) -> list[tuple[Mutant, Path]]:
    """Write every submission of the corpus as folder/<id>/<submission_file>. Every patch is applied
    before anything is graded, so a patch the reference no longer matches fails at once (MutantError)."""
    path = reference_path(assignment)
    text = path.read_text(encoding="utf-8")
    return [(m, write_mutant(m, text, folder / m.id, assignment.submission_file, reference_name=str(path)))
            for m in corpus(assignment)]


# ..., seeds, where to write results, timed (the performance cases timed and profiled: a GPU's measured traps)
GradeJob = tuple[Assignment, Mutant, Path, Backend, tuple[int, ...], Path | None, bool]
Graded = tuple[SeedVerdict, tuple[CaseVerdict, ...], float, float, tuple[TimedVerdict, ...]]


def grade_one(args: GradeJob) -> list[Graded]:
    """Grade one submission of the corpus at each seed, in one run (grader.operations.grade.grade_at_seeds: one
    sandbox, import and compile; each seed's cases in turn): per seed its verdict, the cases behind it, max score,
    seconds. With `out`, each seed's results go to out/<id>/ (the first seed) or out/<id>-seed<S>/."""
    assignment, mutant, path, backend, seeds, out, timed = args
    first, *more = seeds
    # Diagnosis only, unless `timed`: the mutants' speed costs GPU time per submission, and only a timed, profiled
    # grade measures why a correct kernel is slow.
    graded = grade_at_seeds(GradeRequest(assignment, path, backend, seed=first, more_seeds=tuple(more),
                                         performance=timed and backend.on_gpu))
    rows = []
    for result, report in graded:
        if out is not None:
            write_outputs(out / (mutant.id if result.seed == first else f"{mutant.id}-seed{result.seed}"), result,
                          assignment, report)
        cases = tuple(CaseVerdict(c.case_id, c.score, c.max_score, c.traps) for c in result.cases
                      if c.traps or c.score < c.max_score)
        # the correctness cases' points: a performance case's points are its speed's, shown beside (TimedVerdict)
        verdict = SeedVerdict(result.seed, sum(c.score for c in result.cases), result.traps,
                              result.performance_trap_ids)
        timed_cases = tuple(TimedVerdict(p.perf_id, p.status, p.score, p.max_score, p.speedup_vs_reference
                                         if p.relative_to == "reference" else p.speedup_vs_torch, p.reason[:160])
                            for p in result.performance if p.status != "skipped")
        rows.append((verdict, cases, sum(c.max_score for c in result.cases), result.execution_time_s, timed_cases))
    return rows


def expected_performance(mutant: Mutant, backend: Backend, timed: bool = False) -> tuple[str, ...]:
    """The performance traps a submission must get on `backend`: its predictions where the backend predicts them;
    where it times and profiles (`timed`, on a GPU), what it must measure."""
    if backend in PREDICTING_BACKENDS:
        return mutant.performance_traps
    return mutant.measured(backend) if timed else ()


def selftest_seeds(seed: int, seeds: int) -> tuple[int, ...]:
    """The seeds a selftest grades each submission at: `seed` and the `seeds - 1` after it."""
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    return tuple(seed + i for i in range(seeds))


def run_selftest(assignment: Assignment, backend: Backend, seed: int, jobs: int = 1, out: Path | None = None,
                 seeds: int = 1, only: Collection[str] | None = None, timed: bool = False) -> list[SelftestRow]:
    """Grade the corpus (or the submissions named in `only`) at `seeds` seeds from `seed`, each submission in one
    run at all of them; a row whose score or traps change with the seed is a MISS. With `out`, also write each
    submission's results under out/<id>/ (out/<id>-seed<S>/ for the seeds after the first). `timed` (a GPU): the
    performance cases are timed and profiled too, and each submission must get the traps it must measure
    (mutants.toml's `performance_traps_cuda`; none for the rest)."""
    order = selftest_seeds(seed, seeds)
    backend = Backend(backend)  # a name is taken too
    with tempfile.TemporaryDirectory(prefix=f"selftest-{assignment.id}-") as tmp:
        written = write_corpus(assignment, Path(tmp))
        if only is not None:
            unknown = sorted(set(only) - {m.id for m, _ in written})
            if unknown:
                raise SpecError(assignment.spec_path, "", f"no submission {unknown[0]!r} in the selftest corpus")
            written = [(m, p) for m, p in written if m.id in only]
        work: list[GradeJob] = [(assignment, m, path, backend, order, out, timed) for m, path in written]
        if jobs <= 1:
            graded = [grade_one(w) for w in work]
        else:
            # spawn, not fork: forking a process that already runs torch's thread pools can deadlock the child
            # each grade's processes get their share of the CPUs' thread pools (running.processes.cpu_threads)
            with cpu_threads.exported(jobs), \
                    ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                graded = list(pool.map(grade_one, work))
    rows = []
    for (mutant, _), runs in zip(written, graded, strict=True):
        first, cases, max_score, seconds, timed_cases = runs[0]
        rows.append(SelftestRow(
            submission=mutant.id, expected=mutant.expected(backend), diagnosed=first.diagnosed, score=first.score,
            max_score=max_score, seconds=seconds, cases=cases, seeds=tuple(r[0] for r in runs),
            expected_performance=expected_performance(mutant, backend, timed), performance=first.performance,
            timed=timed_cases,
        ))
    return rows


def format_table(rows: list[SelftestRow]) -> str:
    """The selftest's table, one row per submission, then why each MISS is one (the cases behind it)."""
    header = f"{'submission':32} {'expected':36} {'diagnosed':36} {'score':>9} {'time':>6}  ok"
    lines = [header, "-" * len(header)]
    for row in rows:
        expected = ", ".join(row.expected) or "none"
        diagnosed = ", ".join(row.diagnosed) or "none"
        if row.expected_performance or row.performance:  # performance traps, after the correctness ones
            expected += f" +slow: {', '.join(row.expected_performance) or 'none'}"
            diagnosed += f" +slow: {', '.join(row.performance) or 'none'}"
        lines.append(
            f"{row.submission:32} {expected:36} {diagnosed:36} "
            f"{row.score:>4g}/{row.max_score:<4g} {row.seconds:5.1f}s  {'ok' if row.ok else 'MISS'}"
            + (f"  {'; '.join(t.describe() for t in row.timed)}" if row.timed else "")
        )
    misses = [r for r in rows if not r.ok]
    lines.append(f"{len(rows) - len(misses)} of {len(rows)} as expected"
                 + (f", {len(misses)} MISS" if misses else ""))
    for row in misses:
        lines.append(f"MISS {row.submission}:")
        lines.extend(f"  {line}" for line in row.explain())
    return "\n".join(lines)
