"""Validate an assignment folder as a whole when it loads, the way pluggy checks a plugin when it
registers: a mistake fails at load with its file and key, never deep in a grading run.

`load_assignment` has already checked each table on its own (types, unknown keys, targets, tolerance
profiles named by cases). What needs the whole folder is checked here: the spec against its oracle
module and its mutant corpus, and against the grader's generic traps and input kinds.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from grader.authoring.bindings import binding_problems
from grader.authoring.catalog import generic_traps
from grader.authoring.inputs import describe_kind
from grader.authoring.problem import Problem
from grader.authoring.spec import Assignment, SpecError


class InvalidAssignment(SpecError):
    """Every problem found in one assignment, each naming its file and key."""

    def __init__(self, problems: list[SpecError]) -> None:
        first = problems[0]
        super().__init__(first.path, first.key, first.problem)
        self.problems = problems

    def __str__(self) -> str:
        lines = [str(p) for p in self.problems]
        if len(lines) == 1:
            return lines[0]
        return f"{len(lines)} problems in the assignment:\n" + "\n".join(f"  {line}" for line in lines)


def assignment_problems(assignment: Assignment, problems: Mapping[str, Problem],
                        mutant_traps: Collection[str] | None) -> list[SpecError]:
    """Pure: what is wrong with the assignment as a whole (empty when nothing is).

    `mutant_traps`: every trap some mutant of the corpus must get, or None when the folder has no
    mutant corpus to check against (an assignment under construction)."""
    spec = assignment.spec_path
    oracles = assignment.root / assignment.module
    found: list[SpecError] = []
    generic = generic_traps()
    known = set(generic) | set(assignment.traps)

    for tid in assignment.traps:
        if tid in generic:
            found.append(SpecError(spec, f"traps.{tid}", "redefines one of the grader's generic traps; "
                                                         "choose another id"))
    functions = {tid: name for name, problem in problems.items() for tid in problem.traps}
    for tid, name in sorted(functions.items()):
        if tid not in assignment.traps:
            found.append(SpecError(oracles, f"PROBLEMS[{name!r}].traps[{tid!r}]",
                                   f"has no [traps.{tid}] text in {spec.name}: a student would see a bare id"))
    for tid in assignment.traps:
        if tid not in functions and tid not in generic:
            found.append(SpecError(spec, f"traps.{tid}",
                                   f"no problem in {assignment.module} has a trap function for it: "
                                   "it can never be named"))

    for case in assignment.cases:
        where = f"cases (id={case.id!r})"
        for tid in case.exposes:
            if tid not in known:
                found.append(SpecError(spec, f"{where}.exposes", f"names {tid!r}, which is no trap of this "
                                                                 "assignment nor a generic one"))
        profile = assignment.tolerances[case.tolerance]
        for backend in case.backends:
            if (backend, case.dtype) not in profile.entries:
                found.append(SpecError(spec, f"tolerances.{case.tolerance}.{backend}.{case.dtype}",
                                       f"is missing: case {case.id!r} ({case.dtype}) needs a tolerance on every "
                                       "backend it runs on"))
        if describe_kind(case.kind, assignment.input_kinds) is None:
            found.append(SpecError(spec, f"{where}.kind", f"{case.kind!r} is not described: add it to "
                                                          "[input_kinds] (a report shows it in words)"))
    for perf in assignment.performance:
        where = f"performance (id={perf.id!r})"
        if describe_kind(perf.kind, assignment.input_kinds) is None:
            found.append(SpecError(spec, f"{where}.kind", f"{perf.kind!r} is not described: add it to "
                                                          "[input_kinds]"))

    for key, problem in binding_problems(assignment, problems):
        found.append(SpecError(oracles, key, problem))

    if mutant_traps is not None:
        for tid in assignment.traps:
            if tid not in mutant_traps:
                found.append(SpecError(spec, f"traps.{tid}", "no mutant proves it: add one to the mutant corpus "
                                                             "that must get this trap"))
    return _unique(found)


def _unique(found: list[SpecError]) -> list[SpecError]:
    seen: dict[str, SpecError] = {}
    for problem in found:
        seen.setdefault(str(problem), problem)
    return list(seen.values())


def validate(assignment: Assignment, problems: Mapping[str, Problem],
             mutant_traps: Collection[str] | None) -> None:
    """Raise InvalidAssignment listing every problem, or return."""
    found = assignment_problems(assignment, problems, mutant_traps)
    if found:
        raise InvalidAssignment(found)
