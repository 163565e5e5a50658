"""The assignment spec: frozen dataclasses (grader.authoring.spec_model) loaded once from
`assignments/<id>/assignment.toml`.

Every error names the file and the key so an instructor can fix the spec without reading grader code
(grader.authoring.spec_reader). The spec is declarative data; the per-assignment Python module (named by
`assignment.module`) holds the oracles and trap signatures and is loaded by `grader.authoring.oracle_loader`.

`load_assignment` reads each section (grader.authoring.spec_sections), the traps (grader.authoring.trap_library)
and the course folders around the spec (grader.authoring.course_layout: reference/ and student_template/,
recorded as paths, None where absent). `load_public_assignment` loads the public form instead
(grader.authoring.public): the public cases only, and no reference. The names the rest of the grader takes
from here are imported from where they live.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grader.authoring.course_layout import (
    MOVED,
    REFERENCE_DIR,
    REFERENCE_FILE,
    TEMPLATE_DIR,
    course_folders,
    course_library_path,
    older_reference_key,
    reject_moved,
)
from grader.authoring.public import SHARED_TRAPS, public_spec
from grader.authoring.spec_model import (
    BACKENDS,
    LAYOUTS,
    PERF_DTYPES,
    PERF_RELATIVE_TO,
    VISIBILITIES,
    Assignment,
    Case,
    FunctionSpec,
    KernelSpec,
    PerformanceCase,
    Threshold,
    Tolerance,
    ToleranceProfile,
    TrapText,
)
from grader.authoring.spec_reader import SpecError, SpecReader, read_spec
from grader.authoring.spec_sections import load_cases, load_function, load_kernel, load_performance, load_tolerances
from grader.authoring.trap_library import load_shared_traps, load_trap, load_trap_library, redefines_generic_trap

__all__ = [
    "BACKENDS", "LAYOUTS", "MOVED", "PERF_DTYPES", "PERF_RELATIVE_TO", "REFERENCE_DIR", "REFERENCE_FILE",
    "TEMPLATE_DIR", "VISIBILITIES", "Assignment", "Case", "FunctionSpec", "KernelSpec", "PerformanceCase",
    "SpecError", "Threshold", "Tolerance", "ToleranceProfile", "TrapText", "assignment_from_raw",
    "course_folders", "course_library_path", "load_assignment", "load_public_assignment", "load_trap_library",
    "read_spec", "redefines_generic_trap",
]


def load_assignment(spec_path: Path) -> Assignment:
    """Load and validate `assignment.toml`; raise SpecError naming file and key on any problem."""
    spec_path = Path(spec_path).resolve()
    return assignment_from_raw(read_spec(spec_path), spec_path)


def load_public_assignment(spec_path: Path) -> Assignment:
    """The public form of the spec (grader.authoring.public): its public cases and no reference. What
    `grader check` grades with, and what the wheel and the student bundle ship."""
    spec_path = Path(spec_path).resolve()
    library = course_library_path(spec_path)
    raw_library = read_spec(library) if library.is_file() else None
    return assignment_from_raw(public_spec(read_spec(spec_path), raw_library), spec_path, public=True)


def assignment_from_raw(raw: Mapping[str, Any], spec_path: Path, public: bool = False) -> Assignment:
    """The Assignment of a parsed spec at `spec_path`. It looks at the disk only around the spec: the oracle
    module exists, nothing of an older layout is left beside it, and which course folders exist."""
    top = SpecReader(spec_path, raw, "")
    top.reject_unknown({"assignment", "tolerances", "kernels", "functions", "cases", "traps", "performance",
                        "input_kinds"})
    head = top.sub("assignment")
    head.reject_unknown(
        {"id", "title", "module", "submission_file", "chapter", "call_timeout_s", "import_timeout_s",
         "hidden_visibility", "reference", SHARED_TRAPS}
    )
    tolerances = load_tolerances(top)
    kernels = {name: load_kernel(name, r) for name, r in top.subs("kernels").items()}
    functions = {name: load_function(name, r) for name, r in top.subs("functions").items()}
    traps = {tid: load_trap(tid, r) for tid, r in top.subs("traps").items()}
    shared = load_shared_traps(head, spec_path, traps)
    traps.update(shared)
    kinds = top.get("input_kinds", dict, {})
    for kind, words in kinds.items():
        if not isinstance(words, str) or not words:
            raise SpecError(spec_path, f"input_kinds.{kind}", "must be a non-empty string: the kind in words")
    targets = set(kernels) | set(functions)
    if not targets:
        raise top.fail("kernels", "the assignment names no kernels and no functions")
    cases = load_cases(top, targets, tolerances, kernels)
    performance = load_performance(top, targets, tolerances, kernels, {c.id for c in cases})
    module = head.get("module", str)
    if not (spec_path.parent / module).is_file():
        raise head.fail("module", f"names {module!r}, which is not a file next to the spec")
    reject_moved(spec_path)
    assignment_id = head.get("id", str)
    reference_dir, template_dir = course_folders(spec_path, assignment_id)
    notes = older_reference_key(head, spec_path, assignment_id)
    if public:
        reference_dir = None
    solution = reference_dir / REFERENCE_FILE if reference_dir is not None else None
    return Assignment(
        id=assignment_id,
        title=head.get("title", str),
        root=spec_path.parent,
        spec_path=spec_path,
        module=module,
        submission_file=head.get("submission_file", str),
        kernels=kernels,
        functions=functions,
        cases=cases,
        tolerances=tolerances,
        traps=traps,
        call_timeout_s=float(head.get("call_timeout_s", (int, float), 60.0)),
        import_timeout_s=float(head.get("import_timeout_s", (int, float), 60.0)),
        hidden_visibility=head.choice(
            "hidden_visibility", ("hidden", "after_due_date", "after_published"), "after_due_date"
        ),
        chapter=head.get("chapter", str, ""),
        shared_traps=tuple(shared),
        performance=performance,
        input_kinds=dict(kinds),
        reference_dir=reference_dir,
        template_dir=template_dir,
        reference_solution=solution if solution is not None and solution.is_file() else None,
        public=public,
        load_notes=notes,
    )
