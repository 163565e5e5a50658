"""Grade one submission: a `GradingRun` (grader.operations.grading_run) runs the battery under pytest and
keeps the typed results; this module adds the submission-wide judgements (traps explained away or
inherited, interpreter limits, the GPU compile check, false hints) and returns the `GradeResult`.

pytest-json-report writes the raw record of what ran (pytest-report.json); it is handed back as text for
the output folder and never parsed. A case whose item broke inside the grader (never expected, but
possible) still becomes a failed case with a message, so the result always has every case of the battery.

Before anything runs, the file is read (grader.submission_file): one that is not Python source (an image,
a PDF, NUL bytes, not UTF-8; a notebook that is not a notebook) is not run at all. Its result still has
every case of the battery, each 0 with that one reason, and `rejected` says it. A file whose name is a
renamed copy of the assignment's (`Copy of fused_layers.py`) is graded under its own name, with a note.
A public run (`grader check`) grades the spec's public form (grader.authoring.public), never the full spec.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from grader import trap_ids
from grader.authoring.catalog import trap_catalog, trap_title
from grader.authoring.course_seed import GIVEN, choose_seed
from grader.authoring.spec import Assignment, load_public_assignment
from grader.backends import Backend
from grader.environment import backend_label, versions
from grader.judging.diagnosis import INTERPRETER_LIMIT, explain_away, inherit_kernel_traps, refute_interpreter_limits
from grader.judging.false_hints import as_cpu_grade, false_hint_checks, with_cpu_evidence
from grader.judging.faults import name_from_other_cases
from grader.judging.gpu_performance_traps import judge_profiles, reconcile
from grader.judging.judge import renamed_head
from grader.judging.performance import by_id, errored, not_run, skipped
from grader.judging.performance_traps import diagnose as diagnose_performance
from grader.operations.grading_run import GradingRun
from grader.operations.notebook import NotebookError, is_notebook, materialise, read_notebook
from grader.results import CaseResult, GradeResult, PerformanceResult
from grader.running.aot import NOT_RUN, not_compiled
from grader.running.cases.sanitizer import sanitizer_command
from grader.running.phases import traced
from grader.running.processes.sandbox import Sandbox, start_sandbox
from grader.running.timing.calibration import CalibrationStore
from grader.seeds import run_seeds
from grader.submission_file import defines_nothing, fit, notebook_problem, source_problem

INHERITED_TRAPS = {trap_ids.OOB_WRITE, trap_ids.OOB_READ, trap_ids.UNWRITTEN_OUTPUT}


@dataclass(frozen=True)
class GradeRequest:
    assignment: Assignment
    submission: Path
    backend: Backend
    seed: int | None = None  # None: the course's seed (a public run: the assignment's public seed)
    seed_source: str = ""  # where `seed` came from (grader.authoring.course_seed): set by `grade` when it chooses
    public_only: bool = False
    gpu_compile_check: bool = True
    hidden: tuple[str, ...] = ()  # extra folders the worker must not see (the output folder, say)
    performance: bool = True  # run the spec's [[performance]] cases (timed on CUDA, skipped elsewhere)
    profile: bool = True  # CUDA: each timed case replayed once under Nsight Compute, to name why it is slow
    profile_every_case: bool = True  # off: only the timed cases whose counters could name a trap (a batch's way)
    untimed: str = ""  # CUDA: why the performance cases are listed but not timed (a check's quick loop); "": timed
    sanitize: bool = False  # CUDA: kernel cases once more under compute-sanitizer memcheck
    targets: tuple[str, ...] = ()  # only these targets' cases (and compile checks); empty: every target
    calibration: CalibrationStore | None = None  # where performance bars are cached; None: measured for this grade
    concurrent_grades: int = 1  # grades sharing this GPU (a batch's): each worker's GPU memory budget
    sandbox: Sandbox | None = None  # the submission's sandbox, started ahead (prepare_sandbox); None: at the grade
    more_seeds: tuple[int, ...] = ()  # also grade at these seeds, in the same run (grade_at_seeds)
    compile_memo: Path | None = None  # `grader check` only: compile checks remembered there (compile_memo.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", Backend(self.backend))  # "cuda" from a caller that wrote the name

    @property
    def public_run(self) -> bool:
        """Public cases only: asked for, or the assignment is its public form (`grader check`)."""
        return self.public_only or self.assignment.public


def grade(request: GradeRequest) -> tuple[GradeResult, str]:
    """Grade; return the result and pytest-json-report's record (JSON text, the pytest-report.json artifact).
    A notebook (`.ipynb`) is graded as its code cells (grader.operations.notebook), written under the
    assignment's submission_file name in a temporary folder; the result keeps the notebook's name and notes
    the lines that were dropped. A file that is not Python source (or not a notebook) is not run: see
    `rejected_result`."""
    return grade_at_seeds(replace(request, more_seeds=()))[0]


def grade_at_seeds(request: GradeRequest) -> list[tuple[GradeResult, str]]:
    """`grade` at the request's seed and at each of its `more_seeds`, in one run: one sandbox, one import of the
    submission, one compile, each seed's cases in turn (the selftest's --seeds). Each result is what a grade at
    that seed alone gives a submission that keeps no state between calls; the report record covers them all."""
    if request.public_run and not request.assignment.public:  # the public form, computed in one place
        request = replace(request, assignment=load_public_assignment(request.assignment.spec_path))
    if request.seed is None:  # a grade is a function of the file: the course's seed, never a fresh draw
        choice = choose_seed(request.assignment, None, request.public_run)
        request = replace(request, seed=choice.seed, seed_source=choice.source)
    problem = unreadable(request.submission)
    if problem:
        if request.sandbox is not None:
            request.sandbox.close()
        report = json.dumps({"rejected": problem, "tests": []})
        return [(rejected_result(replace(request, seed=s, seed_source=request.seed_source if s == request.seed
                                         else GIVEN), problem), report) for s in _all_seeds(request)]
    fits = fit(request.submission.name, request.assignment.submission_file)
    renamed = fits.note(request.submission.name) if fits else ""
    if not is_notebook(request.submission):
        graded = _grade_file(request)
        notes: tuple[str, ...] = ()
    else:
        with tempfile.TemporaryDirectory(prefix="grader-notebook-") as tmp:
            path, source = materialise(request.submission, request.assignment.submission_file, Path(tmp))
            graded = _grade_file(replace(request, submission=path))
        note = source.note(request.submission.name)
        notes = (note,) if note else ()
    notes = ((renamed,) if renamed else ()) + notes
    return [(replace(result, submission=request.submission.name,
                     notes=notes + _defines_nothing(result, request.submission) + result.notes), report)
            for result, report in graded]


def _all_seeds(request: GradeRequest) -> tuple[int, ...]:
    return run_seeds(_seed(request), request.more_seeds)


def _defines_nothing(result: GradeResult, submission: Path) -> tuple[str, ...]:
    """A note when every target the grade ran is missing from the file (empty, or another file)."""
    required = list(dict.fromkeys(c.target for c in result.cases))
    missing = {c.target for c in result.cases if trap_ids.MISSING_SYMBOL in c.traps}
    if not required or set(required) != missing:
        return ()
    text = None if is_notebook(submission) else submission.read_text(encoding="utf-8", errors="replace")
    return (defines_nothing(submission.name, text, required),)


def unreadable(submission: Path) -> str:
    """Why the file cannot be graded at all ('' when it can): not Python source, or not a notebook."""
    data = submission.read_bytes()
    if not is_notebook(submission):
        return source_problem(data, submission.name)
    problem = notebook_problem(data, submission.name)
    if problem:
        return problem
    try:
        read_notebook(data.decode("utf-8"), submission.name)
    except NotebookError as exc:
        return str(exc)
    return ""


def rejected_result(request: GradeRequest, problem: str) -> GradeResult:
    """Every case of the battery 0 for the one reason `problem` (nothing ran), and the result says so."""
    assignment = request.assignment
    cases = tuple(
        CaseResult(case_id=case.id, target=case.target, title=f"{case.target}: {case.description or case.id}",
                   visibility=case.visibility, max_score=case.points, score=0.0, passed=False, message=problem,
                   traps=(trap_ids.NOT_PYTHON_SOURCE,))
        for case in assignment.cases_for(request.backend, public_only=request.public_run)
        if not request.targets or case.target in request.targets
    )
    if request.backend is Backend.INTERPRETER and request.gpu_compile_check:  # the same tests as any grade
        cases += tuple(c for c in not_compiled(assignment, problem, (trap_ids.NOT_PYTHON_SOURCE,))
                       if not request.targets or c.target in request.targets)
    wanted = [p for p in assignment.performance if not request.targets or p.target in request.targets]
    performance = tuple((not_run(p, problem) if request.backend.on_gpu else skipped(p))
                        for p in wanted) if request.performance else ()
    return GradeResult(
        assignment=assignment.id, submission=request.submission.name, backend=backend_label(request.backend),
        seed=_seed(request), seed_source=request.seed_source or GIVEN, versions=versions(), cases=cases,
        execution_time_s=0.0, notes=(problem,), public_only=request.public_run, performance=performance,
        rejected=problem,
    )


def _grade_file(request: GradeRequest) -> list[tuple[GradeResult, str]]:
    """The file graded at the request's seed, then at each of its `more_seeds`, in one run."""
    started = time.monotonic()
    request = guard_calibration(request)
    seed = _seed(request)
    run = GradingRun(request.assignment, request.submission, request.backend, seed, more_seeds=request.more_seeds,
                     public_only=request.public_run, hidden=request.hidden, targets=request.targets,
                     performance=request.performance, sanitize=request.sanitize, calibration=request.calibration,
                     concurrent_grades=request.concurrent_grades, sandbox=request.sandbox, profile=request.profile,
                     profile_every_case=request.profile_every_case,
                     untimed=request.untimed, compile_memo=request.compile_memo)
    notes: list[str] = list(sanitizer_notes(request))
    aot_cases: list[CaseResult] = []
    checked = False
    # The interpreter's GPU compile check (the same at every seed: once) imports the file in a worker of its own,
    # so it runs beside the cases; "compile" is what the grade waits for after them.
    beside = ThreadPoolExecutor(max_workers=1) if request.backend is Backend.INTERPRETER and \
        request.gpu_compile_check else None
    try:
        compiling = beside.submit(run.compile_check) if beside is not None else None
        report = run_pytest(run)
        # CUDA: what the interpreter found of the submission's promises, as a CPU grade has it in its cases
        promises = run.cpu_hint_evidence()
        notes.extend(run.cpu_notes())
        notes.extend(run.timing_notes())
        phases = run.phases()
        if compiling is not None:
            waited = time.monotonic()
            aot_cases, aot_notes = run.settle_compile_check(compiling.result())
            checked = True
            phases["compile"] = round(phases.get("compile", 0.0) + time.monotonic() - waited, 4)
            notes.extend(aot_notes)
    finally:
        if beside is not None:
            beside.shutdown(wait=True)
        with traced("grader/close"):
            run.close()
    with traced("grader/judge"):
        graded = []
        measured = judge_profiles(every_performance(run), run.profiles, matmul_targets(request.assignment))
        performance = measured.attach(every_performance(run))
        for at in run.seeds:
            cases, seed_notes = _judge_submission(request, run, at, promises, aot_cases if checked else None)
            # why it may be slow: the interpreter's predictions (its traffic counts), and on CUDA what the profiled
            # replays measured, which wins where the two disagree (informational: no points)
            predicted = diagnose_performance(cases, matmul_targets(request.assignment),
                                             wrapper_targets=tuple(request.assignment.functions))
            why_slow = reconcile(predicted, measured.traps, measured.comparisons)
            graded.append((GradeResult(
                assignment=request.assignment.id,
                submission=request.submission.name,
                backend=backend_label(request.backend),
                seed=at,
                seed_source=(request.seed_source or GIVEN) if at == seed else GIVEN,
                versions=versions(),
                cases=tuple(cases),
                execution_time_s=round(time.monotonic() - started, 3),
                notes=tuple(notes + seed_notes + list(measured.notes) + list(why_slow.notes)),
                public_only=request.public_run,
                performance=performance,
                phases=phases,
                performance_traps=why_slow.traps,
            ), report))
    return graded


def _judge_submission(request: GradeRequest, run: GradingRun, seed: int, promises: dict[str, Any],
                      aot_cases: list[CaseResult] | None) -> tuple[list[CaseResult], list[str]]:
    """The submission-wide judgements over one seed's cases: GPU faults named from the other cases, traps
    explained away or inherited, interpreter limits weighed against the GPU compile check (whose cases are
    appended), and the zero-point false-hint warnings."""
    cases = with_cpu_evidence(every_case(run, seed), promises)
    cases = name_from_other_cases(cases, request.assignment)
    cases = consolidate_traps(cases, request.assignment)
    notes: list[str] = []
    if aot_cases is not None:
        cases, notes = weigh_interpreter_limits(cases, aot_cases, request.assignment)
        cases = cases + [c for c in aot_cases if not request.targets or c.target in request.targets]
    # warnings, zero points each; on CUDA worded from the interpreter's cases, as a CPU grade words them
    hinted = as_cpu_grade(cases, promises, run.hint_cases) if promises else cases
    return cases + false_hint_checks(hinted, request.assignment), notes


def _seed(request: GradeRequest) -> int:
    """The request's seed: `grade` chose it before anything ran."""
    if request.seed is None:
        raise ValueError("a grade request reached grading without a seed (grade() chooses one)")
    return request.seed


def matmul_targets(assignment: Assignment) -> tuple[str, ...]:
    """The kernels and wrappers the contract marks `matmul = true` (no-tensor-cores is judged on them)."""
    return tuple(name for specs in (assignment.kernels, assignment.functions)
                 for name, spec in specs.items() if spec.matmul)


def every_case(run: GradingRun, seed: int | None = None) -> list[CaseResult]:
    """One CaseResult per case of the run (at `seed`, default the run's own), in spec order; a case pytest did not
    get to run (a grader problem, never expected) is a failed case that says so."""
    graded = {c.case_id: c for c in run.seed_cases.get(run.seed if seed is None else seed, [])}
    out = []
    for case in run.correctness_cases():
        found = graded.get(case.id)
        out.append(found if found is not None else CaseResult(
            case_id=case.id, target=case.target, title=f"{case.target}: {case.description or case.id}",
            visibility=case.visibility, max_score=case.points, score=0.0, passed=False,
            message="The grader could not run this case (a grader problem, not yours): its test item did not run.",
            traps=(trap_ids.UNKNOWN,)))
    return out


def every_performance(run: GradingRun) -> tuple[PerformanceResult, ...]:
    """One PerformanceResult per performance case of the run, in spec order; a case pytest did not get to run (a
    grader problem, never expected: the timing itself always leaves a line per case) says so."""
    wanted = run.performance_cases()
    lost = "the grader could not run this case (a grader problem, not yours): its test item did not run"
    found = {p.id: run.performance.get(p.id) or errored(p, lost) for p in wanted}
    return tuple(by_id(found, list(wanted)))


def prepare_sandbox(request: GradeRequest) -> Sandbox:
    """Start the submission's sandbox for this request ahead of the grade (its zygote imports torch and
    triton meanwhile); pass it back as `GradeRequest.sandbox`."""
    request = guard_calibration(request)
    return start_sandbox(request.assignment, request.submission, request.backend, request.hidden,
                         request.concurrent_grades)


def guard_calibration(request: GradeRequest) -> GradeRequest:
    """Student code must not touch the bars that other grades read: the cache folder is made now (an
    absent one could be planted) and hidden from the worker like the output folder. Without a GPU
    nothing is timed, so nothing is made; where the folder cannot be made, the bars are this grade's."""
    store = request.calibration
    if store is None or not request.backend.on_gpu or not request.performance:
        return request
    try:
        store.folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return replace(request, calibration=None)
    return replace(request, hidden=(*request.hidden, str(store.folder.resolve())))


def sanitizer_notes(request: GradeRequest) -> tuple[str, ...]:
    if not request.sanitize:
        return ()
    if not request.backend.on_gpu:
        return ("--sanitize applies to the CUDA backend only; it was ignored on the interpreter.",)
    command = sanitizer_command()
    if command is None:
        return ("--sanitize: compute-sanitizer was not found (PATH, /usr/local/cuda/bin); kernel cases ran once.",)
    return (f"--sanitize: every kernel case also ran under `{' '.join(command)}` with "
            "PYTORCH_NO_CUDA_MEMORY_CACHING=1; its invalid global accesses are reported as oob-read / oob-write.",)


def run_pytest(run: GradingRun) -> str:
    """Run the battery under pytest with `run` as its plugin; pytest-json-report's record as JSON text."""
    with tempfile.TemporaryDirectory(prefix="grader-pytest-") as tmp:
        tmpdir = Path(tmp)
        ini = tmpdir / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        report_path = tmpdir / "report.json"
        args = [
            str(run.assignment.spec_path),
            "-c", str(ini), "--rootdir", str(tmpdir),
            "-p", "no:cacheprovider", *(arg for name in PYTEST_PLUGINS for arg in ("-p", name)),
            "-q", "--tb=short", "-o", "console_output_style=classic",
            "--json-report", f"--json-report-file={report_path}", "--json-report-omit", "collectors", "log",
        ]
        log = io.StringIO()
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), traced("grader/pytest"), \
                _bare_pytest():
            exit_code = pytest.main(args, plugins=[run])
        if not report_path.exists():
            raise RuntimeError(f"pytest did not produce a report (exit code {exit_code}):\n{log.getvalue()[-3000:]}")
        return report_path.read_text(encoding="utf-8")


# The only plugins a grade's pytest loads: whatever else the machine has installed (xdist, randomly, timeout, cov,
# hypothesis: seconds of imports on a GPU image) could reorder, time out or rerun the battery, and is never loaded.
PYTEST_PLUGINS = ("pytest_metadata.plugin", "pytest_jsonreport.plugin")


PYTEST_ENVIRONMENT = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": None, "PYTEST_PLUGINS": None}


@contextlib.contextmanager
def _bare_pytest() -> Iterator[None]:
    """For the length of one pytest run: no plugin autoload, and none of the user's PYTEST_ADDOPTS (`-x`, `-n 4`)
    or PYTEST_PLUGINS; restored after (a notebook's own pytest keeps its settings)."""
    before = {name: os.environ.get(name) for name in PYTEST_ENVIRONMENT}
    try:
        for name, value in PYTEST_ENVIRONMENT.items():
            _set_environment(name, value)
        yield
    finally:
        for name, value in before.items():
            _set_environment(name, value)


def _set_environment(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _problem(case: CaseResult, assignment: Assignment) -> str:
    spec = assignment.kernels.get(case.target) or assignment.functions.get(case.target)
    return spec.problem if spec else case.target


def weigh_interpreter_limits(cases: list[CaseResult], aot_cases: list[CaseResult],
                             assignment: Assignment) -> tuple[list[CaseResult], list[str]]:
    """Cases that hit a limit of Triton's CPU interpreter, against the GPU compile check of their problem's
    kernels: where those compile for sm_90 the case stays `interpreter-unsupported` (no points on the CPU;
    its message and a note say to grade it on a GPU); where one does not, it is a `runtime-error`."""
    compiles: dict[str, bool] = {}
    for check in aot_cases:
        if (check.evidence or {}).get("compile") == NOT_RUN:  # nothing was compiled: it tells nothing
            continue
        problem = _problem(check, assignment)
        compiles[problem] = compiles.get(problem, True) and check.passed
    problems = [_problem(c, assignment) for c in cases]
    kept = refute_interpreter_limits([c.traps for c in cases], problems, compiles)
    out = []
    withheld = []
    for case, traps, problem in zip(cases, kept, problems, strict=True):
        if INTERPRETER_LIMIT in traps and compiles.get(problem):
            withheld.append(case)
            case = replace(case, message=f"Triton's CPU interpreter cannot run this, but the kernel compiles for the "
                                         f"grading GPU: a limit of grading on the CPU, not a bug in your code; grade "
                                         f"it on a GPU backend for these points.\n{case.message}")
        elif traps != case.traps:
            case = replace(case, traps=traps, message=case.message + "\n(The kernel does not compile for the grading "
                                                                       "GPU either: see its compile check.)")
        out.append(case)
    notes = []
    if withheld:
        points = sum(c.max_score for c in withheld)
        notes.append(f"{len(withheld)} case(s), {points:g} point(s), hit a limit of Triton's CPU interpreter in code "
                     f"that compiles for the grading GPU ({INTERPRETER_LIMIT}): they score nothing here; grade this "
                     "submission on a GPU backend (--backend cuda) for them.")
    return out, notes


def consolidate_traps(cases: list[CaseResult], assignment: Assignment) -> list[CaseResult]:
    """Use the submission's other cases (see diagnosis): explain away coinciding formula traps, and let
    vague wrapper failures inherit the structural findings of the kernel they launch."""
    kept = explain_away([c.traps for c in cases], set(assignment.traps))
    problems = []
    for case in cases:
        spec = assignment.kernels.get(case.target) or assignment.functions.get(case.target)
        problems.append((spec.problem if spec else case.target, case.target in assignment.functions))
    kept = inherit_kernel_traps(kept, problems, INHERITED_TRAPS)
    catalog = trap_catalog(assignment)
    out = []
    for case, traps in zip(cases, kept, strict=True):
        if traps != case.traps:
            dropped = [t for t in case.traps if t not in traps]
            added = [t for t in traps if t not in case.traps]
            evidence = dict(case.evidence)
            if dropped and not added:  # explained away: not named anywhere in the case, only in its evidence
                shown = ", ".join(f"{trap_title(catalog, t)} [{t}]" for t in traps if t in assignment.traps)
                note = (f"(On this input another mistake would give the same output; your other cases show "
                        f"{shown or 'the one named above'}, so that is the diagnosis here.)")
                evidence["explained_away"] = dropped
            elif added:
                note = (f"(The kernel this function launches shows {', '.join(added)} in its own cases: that is "
                        "the likely cause here too.)")
            else:
                note = ""
            message = renamed_head(case.message, traps, catalog)
            case = replace(case, traps=traps, message=message + ("\n" + note if note else ""), evidence=evidence)
        out.append(case)
    return out

