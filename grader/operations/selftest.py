"""Selftest: grade an assignment's reference and mutant corpus; every trap must be named exactly.

Each corpus file starts with `# expect: trap-id[, trap-id...]` (or `# expect: none` for correct
submissions, which must also get full marks). A row passes when the diagnosed traps equal the
expected ones.
"""

from __future__ import annotations

import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.authoring.spec import Assignment
from grader.operations.grade import GradeRequest, grade
from grader.publishing.files import write_outputs

_EXPECT = re.compile(r"^#\s*expect(?:-(\w+))?:\s*(.+)$")


@dataclass(frozen=True)
class SelftestRow:
    submission: str
    expected: tuple[str, ...]
    diagnosed: tuple[str, ...]
    score: float
    max_score: float
    seconds: float

    @property
    def ok(self) -> bool:
        if set(self.expected) != set(self.diagnosed):
            return False
        return bool(self.expected) or self.score == self.max_score


def expected_traps(path: Path, backend: str = "interpreter") -> tuple[str, ...] | None:
    """From the file's leading comment lines: `# expect: ...`, overridden by `# expect-<backend>: ...`
    where a backend diagnoses differently (e.g. the GPU itself rejects what the interpreter runs)."""
    general = specific = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            match = _EXPECT.match(line.strip())
            if not match:
                if line.strip() and not line.startswith("#"):
                    break
                continue
            value = match.group(2).strip()
            traps = () if value == "none" else tuple(t.strip() for t in value.split(",") if t.strip())
            if match.group(1) is None:
                general = traps
            elif match.group(1) == backend:
                specific = traps
    return specific if specific is not None else general


def corpus(assignment: Assignment) -> list[Path]:
    files = []
    if assignment.reference:
        files.append(assignment.root / assignment.reference)
    if assignment.mutants:
        files.extend(sorted((assignment.root / assignment.mutants).glob("*.py")))
    return [f.resolve() for f in files]


def grade_one(args: tuple[Assignment, Path, str, int, Path | None]) -> SelftestRow:
    assignment, path, backend, seed, out = args
    expected = expected_traps(path, backend)
    # Diagnosis only: the mutants' speed is beside the point (and would cost GPU time per submission).
    result, report = grade(GradeRequest(assignment, path, backend, seed=seed, performance=False))
    if out is not None:
        write_outputs(out / path.stem, result, assignment, report)
    return SelftestRow(
        submission=path.name,
        expected=expected if expected is not None else (),
        diagnosed=result.traps,
        score=result.score,
        max_score=result.max_score,
        seconds=result.execution_time_s,
    )


def run_selftest(assignment: Assignment, backend: str, seed: int, jobs: int = 1,
                 out: Path | None = None) -> list[SelftestRow]:
    """Grade the corpus; with `out`, also write each submission's results under out/<file stem>/."""
    work = [(assignment, path, backend, seed, out) for path in corpus(assignment)]
    if jobs <= 1:
        return [grade_one(w) for w in work]
    # spawn, not fork: forking a process that already runs torch's thread pools can deadlock the child
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(grade_one, work))


def format_table(rows: list[SelftestRow]) -> str:
    header = f"{'submission':32} {'expected':36} {'diagnosed':36} {'score':>9} {'time':>6}  ok"
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.submission:32} {', '.join(row.expected) or 'none':36} {', '.join(row.diagnosed) or 'none':36} "
            f"{row.score:>4g}/{row.max_score:<4g} {row.seconds:5.1f}s  {'ok' if row.ok else 'MISS'}"
        )
    misses = sum(not r.ok for r in rows)
    lines.append(f"{len(rows) - misses} of {len(rows)} as expected" + (f", {misses} MISS" if misses else ""))
    return "\n".join(lines)
