"""Selftest: grade an assignment's reference and mutant corpus; every trap must be named exactly.

The corpus is the reference plus what `grader.authoring.mutants.load_mutants` finds in the assignment's
reference folder (reference/<id>/ of the course): patch mutants (mutants.toml), whole-file mutants
(mutants/) and variants (variants/). Each is
written as a real submission file into a temporary folder and graded like a student's. A row passes
when the diagnosed traps equal the expected ones; a correct submission must also get full marks.
"""

from __future__ import annotations

import multiprocessing
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.authoring.mutants import RESERVED_ID, Mutant, load_mutants, parse_header, write_mutant
from grader.authoring.spec import REFERENCE_DIR, REFERENCE_FILE, Assignment, SpecError
from grader.operations.grade import GradeRequest, grade
from grader.publishing.files import write_outputs


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


def grade_one(args: tuple[Assignment, Mutant, Path, str, int, Path | None]) -> SelftestRow:
    assignment, mutant, path, backend, seed, out = args
    # Diagnosis only: the mutants' speed is beside the point (and would cost GPU time per submission).
    result, report = grade(GradeRequest(assignment, path, backend, seed=seed, performance=False))
    if out is not None:
        write_outputs(out / mutant.id, result, assignment, report)
    return SelftestRow(
        submission=mutant.id,
        expected=mutant.expected(backend),
        diagnosed=result.traps,
        score=result.score,
        max_score=result.max_score,
        seconds=result.execution_time_s,
    )


def run_selftest(assignment: Assignment, backend: str, seed: int, jobs: int = 1,
                 out: Path | None = None) -> list[SelftestRow]:
    """Grade the corpus; with `out`, also write each submission's results under out/<id>/."""
    with tempfile.TemporaryDirectory(prefix=f"selftest-{assignment.id}-") as tmp:
        work = [(assignment, m, path, backend, seed, out) for m, path in write_corpus(assignment, Path(tmp))]
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
