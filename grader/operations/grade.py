"""Grade one submission: run the battery under pytest (+ pytest-json-report), build a GradeResult.

The report pytest-json-report writes is the record of what ran; results are rebuilt from it. A case
whose item broke inside the grader (never expected, but possible) still becomes a failed case with a
message, so the result always has every case of the battery.

Before anything runs, the file is read (grader.submission_file): one that is not Python source (an image,
a PDF, NUL bytes, not UTF-8; a notebook that is not a notebook) is not run at all. Its result still has
every case of the battery, each 0 with that one reason, and `rejected` says it. A file whose name is a
renamed copy of the assignment's (`Copy of fused_layers.py`) is graded under its own name, with a note.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from grader import trap_ids
from grader.authoring.catalog import trap_catalog, trap_title
from grader.authoring.spec import Assignment
from grader.judging.diagnosis import INTERPRETER_LIMIT, explain_away, inherit_kernel_traps, refute_interpreter_limits
from grader.judging.false_hints import false_hint_checks
from grader.judging.judge import renamed_head
from grader.judging.performance import by_id, not_run, skipped
from grader.operations.environment import backend_label, versions
from grader.operations.notebook import NotebookError, is_notebook, materialise, read_notebook
from grader.publishing.results import CaseResult, GradeResult, PerfResult
from grader.running.aot import aot_check
from grader.running.sanitizer import sanitizer_command
from grader.seeds import fresh_seed
from grader.submission_file import fit, notebook_problem, source_problem

INHERITED_TRAPS = {trap_ids.OOB_WRITE, trap_ids.OOB_READ, trap_ids.UNWRITTEN_OUTPUT}


@dataclass(frozen=True)
class GradeRequest:
    assignment: Assignment
    submission: Path
    backend: str  # "interpreter" or "cuda"
    seed: int | None = None
    public_only: bool = False
    gpu_compile_check: bool = True
    hidden: tuple[str, ...] = ()  # extra folders the worker must not see (the output folder, say)
    performance: bool = True  # run the spec's [[performance]] cases (timed on CUDA, skipped elsewhere)
    sanitize: bool = False  # CUDA: kernel cases once more under compute-sanitizer memcheck
    targets: tuple[str, ...] = ()  # only these targets' cases (and compile checks); empty: every target

    @property
    def public_run(self) -> bool:
        """Public cases only: asked for, or the assignment is its public form (`grader check`)."""
        return self.public_only or self.assignment.public


def grade(request: GradeRequest) -> tuple[GradeResult, dict[str, Any]]:
    """Grade; return the result and the raw pytest-json-report document. A notebook (`.ipynb`) is graded
    as its code cells (grader.operations.notebook), written under the assignment's submission_file name
    in a temporary folder; the result keeps the notebook's name and notes the lines that were dropped.
    A file that is not Python source (or not a notebook) is not run: see `rejected_result`."""
    problem = unreadable(request.submission)
    if problem:
        return rejected_result(request, problem), {"grader": {"rejected": problem}, "tests": []}
    fits = fit(request.submission.name, request.assignment.submission_file)
    renamed = fits.note(request.submission.name) if fits else ""
    if not is_notebook(request.submission):
        result, report = _grade_file(request)
        notes: tuple[str, ...] = ()
    else:
        with tempfile.TemporaryDirectory(prefix="grader-notebook-") as tmp:
            path, source = materialise(request.submission, request.assignment.submission_file, Path(tmp))
            result, report = _grade_file(replace(request, submission=path))
        note = source.note(request.submission.name)
        notes = (note,) if note else ()
    notes = ((renamed,) if renamed else ()) + notes
    return replace(result, submission=request.submission.name, notes=notes + result.notes), report


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
    wanted = [p for p in assignment.performance if not request.targets or p.target in request.targets]
    performance = tuple((not_run(p, problem) if request.backend == "cuda" else skipped(p))
                        for p in wanted) if request.performance else ()
    return GradeResult(
        assignment=assignment.id, submission=request.submission.name, backend=backend_label(request.backend),
        seed=request.seed if request.seed is not None else fresh_seed(), versions=versions(), cases=cases,
        execution_time_s=0.0, notes=(problem,), public_only=request.public_run, performance=performance,
        rejected=problem,
    )


def _grade_file(request: GradeRequest) -> tuple[GradeResult, dict[str, Any]]:
    started = time.monotonic()
    seed = request.seed if request.seed is not None else fresh_seed()
    report = run_pytest(request, seed)
    cases = consolidate_traps(cases_from_report(report, request), request.assignment)
    notes: list[str] = list(sanitizer_notes(request))
    phases = dict(report.get("grader", {}).get("phases") or {})
    if request.backend == "interpreter" and request.gpu_compile_check:
        compiling = time.monotonic()
        aot_cases, aot_notes = aot_check(request.assignment, request.submission, request.hidden)
        phases["compile"] = round(phases.get("compile", 0.0) + time.monotonic() - compiling, 4)
        cases, limit_notes = weigh_interpreter_limits(cases, aot_cases, request.assignment)
        cases = cases + [c for c in aot_cases if not request.targets or c.target in request.targets]
        notes.extend(aot_notes + limit_notes)
    cases = cases + false_hint_checks(cases, request.assignment)  # warnings: zero points each
    result = GradeResult(
        assignment=request.assignment.id,
        submission=request.submission.name,
        backend=backend_label(request.backend),
        seed=seed,
        versions=versions(),
        cases=tuple(cases),
        execution_time_s=round(time.monotonic() - started, 3),
        notes=tuple(notes),
        public_only=request.public_run,
        performance=performance_from_report(report, request) if request.performance else (),
        phases=phases,
    )
    return result, report


def performance_from_report(report: dict[str, Any], request: GradeRequest) -> tuple[PerfResult, ...]:
    """One PerfResult per performance case of the spec, in spec order, from the report's metadata."""
    found: dict[str, PerfResult] = {}
    for test in report.get("tests", []):
        data = test.get("metadata", {}).get("performance")
        if data is not None:
            found[str(data["perf_id"])] = PerfResult.from_dict(data)
    wanted = [p for p in request.assignment.performance if not request.targets or p.target in request.targets]
    return tuple(by_id(found, wanted))


def sanitizer_notes(request: GradeRequest) -> tuple[str, ...]:
    if not request.sanitize:
        return ()
    if request.backend != "cuda":
        return ("--sanitize applies to the CUDA backend only; it was ignored on the interpreter.",)
    command = sanitizer_command()
    if command is None:
        return ("--sanitize: compute-sanitizer was not found (PATH, /usr/local/cuda/bin); kernel cases ran once.",)
    return (f"--sanitize: every kernel case also ran under `{' '.join(command)}` with "
            "PYTORCH_NO_CUDA_MEMORY_CACHING=1; its invalid global accesses are reported as oob-read / oob-write.",)


def run_pytest(request: GradeRequest, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="grader-pytest-") as tmp:
        tmpdir = Path(tmp)
        ini = tmpdir / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        report_path = tmpdir / "report.json"
        args = [
            str(request.assignment.spec_path),
            "-c", str(ini), "--rootdir", str(tmpdir),
            "-p", "grader.operations.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:randomly",
            "-q", "--tb=short", "-o", "console_output_style=classic",
            "--json-report", f"--json-report-file={report_path}", "--json-report-omit", "collectors", "log",
            f"--grader-submission={request.submission}",
            f"--grader-backend={request.backend}",
            f"--grader-seed={seed}",
        ]
        if request.public_run:
            args.append("--grader-public-only")
        if request.sanitize:
            args.append("--grader-sanitize")
        args.extend(f"--grader-hide={path}" for path in request.hidden)
        if not request.performance:
            args.append("--grader-no-performance")
        args.extend(f"--grader-target={target}" for target in request.targets)
        log = io.StringIO()
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            exit_code = pytest.main(args)
        if not report_path.exists():
            raise RuntimeError(f"pytest did not produce a report (exit code {exit_code}):\n{log.getvalue()[-3000:]}")
        report = json.loads(report_path.read_text(encoding="utf-8"))
    report["grader_pytest_exit_code"] = int(exit_code)
    return report


def cases_from_report(report: dict[str, Any], request: GradeRequest) -> list[CaseResult]:
    """One CaseResult per case of the battery, in spec order, from the report's test metadata."""
    by_case: dict[str, dict[str, Any]] = {}
    for test in report.get("tests", []):
        case_id = test["nodeid"].rsplit("::", 1)[-1]
        by_case[case_id] = test
    cases = []
    for case in request.assignment.cases_for(request.backend, public_only=request.public_run):
        if request.targets and case.target not in request.targets:
            continue
        test = by_case.get(case.id)
        grade_data = (test or {}).get("metadata", {}).get("grade")
        if grade_data is not None:
            cases.append(CaseResult.from_dict(grade_data))
            continue
        detail = _longrepr(test) if test else "the case was not run"
        cases.append(
            CaseResult(
                case_id=case.id, target=case.target, title=f"{case.target}: {case.description or case.id}",
                visibility=case.visibility, max_score=case.points, score=0.0, passed=False,
                message=f"The grader could not run this case (a grader problem, not yours): {detail}",
                traps=(trap_ids.UNKNOWN,),
            )
        )
    return cases


def _longrepr(test: dict[str, Any]) -> str:
    for stage in ("setup", "call", "teardown"):
        text = (test.get(stage) or {}).get("longrepr")
        if text:
            return str(text)[-1500:]
    return f"outcome {test.get('outcome')}"


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
    public = [c for c in withheld if c.visibility == "public"]  # notes reach students: they count public cases
    if public:  # (each hidden case's own message says the same)
        points = sum(c.max_score for c in public)
        notes.append(f"{len(public)} case(s), {points:g} point(s), hit a limit of Triton's CPU interpreter in code "
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

