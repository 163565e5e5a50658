"""A CUDA grade's companion on the grading machine's CPU: the submission's cases in Triton's interpreter.

Two uses, both so that a GPU verdict says what a CPU grade of the same file says (issue 22):

* False promises. The interpreter checks every tl.multiple_of / tl.max_contiguous promise against the values
  (grader/running/worker/hint_check.py); a GPU only trusts them, and a false one there faults or passes by
  luck. For a submission whose source makes such promises (`makes_promises`), every case a CPU grade with
  the same options would run is run there once (`start_hint_check`), in a thread, while the GPU cases run;
  grader.operations.grade merges what it found into the GPU cases, and `false_hint_checks` then words the
  zero-point warnings exactly as a CPU grade does (grader.judging.false_hints.as_cpu_grade). All cases, not
  only the small public ones: a promise is false at particular shapes (offsets wrapped with `% M` where M is
  not a multiple of the block), usually the odd hidden ones, and the warning names the case and counts
  them. Only submissions that make promises pay, and the GPU cases do not wait for it.
* Faults. A GPU case that ended in an illegal address, which compute-sanitizer could not name, is graded
  again here (`rerun`, grader/judging/faults.py): the guard bands and the fence name the stray access and its
  line. The companion is then started on the first such case.

The companion has a sandbox of its own: Triton is imported for the interpreter or for the GPU, once per
process, so a CUDA sandbox cannot fork an interpreter worker. It is started from the grade's thread (its zygote
dies with the thread that started it), early where the hint check needs it, so its torch import overlaps the
GPU sandbox's. The hint check and the fault reruns each have a battery (and a worker) of their own, made
here, before the thread starts.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grader.authoring.spec import Assignment, Case
from grader.backends import Backend
from grader.judging.false_hints import hint_calls
from grader.results import CaseResult
from grader.running.cases.battery import Battery
from grader.running.processes.client import WorkerFailure
from grader.running.processes.sandbox import Sandbox, SandboxFailure, sandbox_options

STOP_WAIT_S = 30.0  # closing: how long the hint thread may take to notice its worker is gone
BACKEND = Backend.INTERPRETER


def makes_promises(submission: Path) -> bool:
    """Does the submission's source call tl.multiple_of / tl.max_contiguous / tl.max_constancy? (Read, never run.)"""
    try:
        return bool(hint_calls(Path(submission).read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def hint_check_cases(assignment: Assignment, public_only: bool = False,
                     targets: frozenset[str] = frozenset()) -> tuple[Case, ...]:
    """The cases a CPU grade with the same options runs: the interpreter's, not the GPU grade's (a case for the
    GPU only, bf16 say, the interpreter cannot run; one for the interpreter only is checked too, as the CPU
    grade checks it)."""
    cases = assignment.cases_for(BACKEND, public_only=public_only)
    return tuple(c for c in cases if not targets or c.target in targets)


class CpuCompanion:
    """One submission's interpreter sandbox for one CUDA grade, with a battery for the hint check (its thread)
    and one for fault reruns (the grade's thread)."""

    def __init__(self, assignment: Assignment, submission: Path, seed: int, hidden: tuple[str, ...] = ()) -> None:
        self.sandbox = Sandbox(sandbox_options(assignment, submission, BACKEND, hidden))
        self.sandbox.start()  # the zygote imports torch and triton from now on
        self._hints = Battery(assignment, submission, BACKEND, seed, hidden, sandbox=self.sandbox, replayer=False)
        self._reruns = Battery(assignment, submission, BACKEND, seed, hidden, sandbox=self.sandbox, replayer=False)
        self._found: dict[str, Mapping[str, Any]] = {}
        self._checked = 0
        self.problems: list[str] = []  # grader errors of the hint check, for the grade's notes
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ false promises

    def start_hint_check(self, cases: Sequence[Case]) -> None:
        """Run each case once in the interpreter, in a thread, keeping the first false promise of each."""
        if self._thread is not None:
            return
        todo = tuple(cases)
        self._thread = threading.Thread(target=self._check_hints, args=(todo,), name="cpu-hint-check", daemon=True)
        self._thread.start()

    def _check_hints(self, cases: Sequence[Case]) -> None:
        for case in cases:
            if self._stopping.is_set():
                return
            try:
                found = self._hints.observe(case).false_hint
            except (WorkerFailure, SandboxFailure, OSError):
                found = None  # a case the interpreter cannot run shows no promise; the GPU grade judges it
            except Exception as exc:  # a grader problem: the grade goes on without this case's check, and says so
                self.problems.append(f"{case.id}: {type(exc).__name__}: {exc}")
                found = None
            self._checked += 1
            if isinstance(found, Mapping):
                self._found[case.id] = dict(found)

    def hint_evidence(self) -> dict[str, Mapping[str, Any]]:
        """Wait for the hint check; the worker's first false promise per case id (raw: false_hints.evidence
        checks it). Each case is bounded by the assignment's call deadline, as in a CPU grade."""
        if self._thread is not None:
            self._thread.join()
        return dict(self._found)

    @property
    def cases_checked(self) -> int:
        return self._checked

    # ------------------------------------------------------------------ faults

    def rerun(self, case: Case, seed: int | None = None) -> CaseResult | None:
        """The case graded in the interpreter, on the same inputs (the same seed); None where it could not run."""
        try:
            return self._reruns.run_case(case, seed)
        except (WorkerFailure, SandboxFailure, OSError):
            return None

    # ------------------------------------------------------------------ the end

    def close(self) -> None:
        """Stop everything: the sandbox first (its processes die, so a request in flight on the hint thread
        ends at once), then the thread, then the batteries' folders."""
        self._stopping.set()
        self.sandbox.close()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)
        self._hints.close()
        self._reruns.close()
