"""The assignment spec: frozen dataclasses loaded once from `assignments/<id>/assignment.toml`.

Every error names the file and the key so an instructor can fix the spec without reading grader code.
The spec is declarative data; the per-assignment Python module (named by `assignment.module`) holds
the oracles and trap signatures and is loaded by `grader.authoring.oracle_loader`.

A course folder (the checkout is one) holds three folders, split by who may see them:

    assignments/<id>/       the contract the grader needs: assignment.toml and its oracle module
    reference/<id>/         course staff only: reference.py, mutants.toml, mutants/, variants/
    student_template/<id>/  what students start from: the starting file and README.md

`load_assignment` derives the other two from where the spec sits (the course root is the assignments
folder's parent) and records them as paths (None where a folder is absent). `load_public_assignment`
loads the public form instead (grader.authoring.public): the public cases only, and no reference.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import trap_ids
from grader.authoring.public import COURSE_TRAPS, SHARED_TRAPS, public_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

BACKENDS = ("interpreter", "cuda")
PERF_DTYPES = ("float32", "float16", "bfloat16")
PERF_RELATIVE_TO = ("reference", "torch")
VISIBILITIES = ("public", "hidden")
# How a case places its tensors, with the words a report uses for each.
LAYOUTS = {"contiguous": "contiguous", "row-gap": "padded rows (row stride > row length)"}

# The three folders of a course (module docstring). Nothing under REFERENCE_DIR ships anywhere (wheel,
# student bundle, Gradescope bundle, Classroom) and workers cannot see it.
REFERENCE_DIR = "reference"
TEMPLATE_DIR = "student_template"
REFERENCE_FILE = "reference.py"  # the reference solution, in reference/<id>/: what mutants patch
# What older layouts kept inside assignments/<id>/, and where it belongs now (a spec that still has it
# fails to load, so nothing secret is left beside the contract).
MOVED = {"reference.py": REFERENCE_DIR, "mutants.toml": REFERENCE_DIR, "mutants": REFERENCE_DIR,
         "variants": REFERENCE_DIR, "template": TEMPLATE_DIR}


class SpecError(Exception):
    """A problem in an assignment spec, located by file and key."""

    def __init__(self, path: Path, key: str, problem: str) -> None:
        super().__init__(f"{path}: [{key}] {problem}" if key else f"{path}: {problem}")
        self.path = path
        self.key = key
        self.problem = problem


def redefines_generic_trap(spec_path: Path, trap_id: str) -> SpecError:
    """An assignment's [traps.<id>] may not take a generic trap's id (grader/trap_ids.py)."""
    return SpecError(spec_path, f"traps.{trap_id}", f"{trap_id!r} is a generic trap of the grader "
                     "(grader/authoring/generic_traps.toml), which an assignment may not redefine; "
                     "give this trap an id of its own")


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    why: str


@dataclass(frozen=True)
class ToleranceProfile:
    """Named tolerances per (backend, dtype); cases refer to a profile by name."""

    name: str
    entries: Mapping[tuple[str, str], Tolerance]

    def lookup(self, backend: str, dtype: str) -> Tolerance:
        try:
            return self.entries[(backend, dtype)]
        except KeyError:
            raise KeyError(f"tolerance profile {self.name!r} has no entry for {backend}.{dtype}") from None


@dataclass(frozen=True)
class KernelSpec:
    """A `@triton.jit` kernel the student must write; the grader launches it itself."""

    name: str
    params: tuple[str, ...]
    constexprs: tuple[str, ...]
    grid: tuple[str, ...]
    problem: str
    description: str = ""
    float_params: tuple[str, ...] = ()  # scalar parameters passed as floats (the rest are integers)
    matmul: bool = False  # its tiles are matrix products, meant for tl.dot (performance trap no-tensor-cores)


@dataclass(frozen=True)
class FunctionSpec:
    """A host wrapper the student must write; the grader calls it with tensors on the device."""

    name: str
    params: tuple[str, ...]
    returns: tuple[str, ...]
    problem: str
    max_launches: int
    description: str = ""
    matmul: bool = False  # launches matrix products, meant for tl.dot (performance trap no-tensor-cores)


@dataclass(frozen=True)
class Case:
    """One graded check: a target (kernel or function) run on one generated input."""

    id: str
    target: str
    dims: Mapping[str, int]
    kind: str
    points: float
    visibility: str
    tolerance: str
    layout: str = "contiguous"
    meta: Mapping[str, int] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    backends: tuple[str, ...] = BACKENDS
    exposes: tuple[str, ...] = ()
    description: str = ""

    @property
    def is_public(self) -> bool:
        return self.visibility == "public"

    def runs_on(self, backend: str) -> bool:
        return backend in self.backends


@dataclass(frozen=True)
class Threshold:
    """Reaching `speedup` (the student's speed over the bar's: >1 is faster) earns `points`."""

    speedup: float
    points: float


@dataclass(frozen=True)
class PerformanceCase:
    """One timed run of a target on one (large) input, on CUDA only, after its correctness cases pass.

    Points: those of the highest threshold reached, relative to the reference kernel (or to torch
    eager, `relative_to = "torch"`); none without thresholds (an informational, leaderboard case).
    """

    id: str
    target: str
    dims: Mapping[str, int]
    tolerance: str  # profile the output at this size is checked against before timing counts
    dtype: str = "float32"
    kind: str = "random"
    meta: Mapping[str, int] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    thresholds: tuple[Threshold, ...] = ()
    relative_to: str = "reference"
    input_sets: int = 3  # inputs rotated among this many copies, so no repetition hits a warm cache
    repeats: int = 5  # do_bench medians taken; the case reports their median and spread
    timeout_s: float = 120.0  # the cap: a launch also stops when it outlives the bar (running.timing.performance)
    description: str = ""

    @property
    def max_score(self) -> float:
        return max((t.points for t in self.thresholds), default=0.0)

    @property
    def shape(self) -> str:
        return "x".join(str(v) for v in self.dims.values())

    def as_case(self) -> Case:
        """The correctness-case view of this input (what `Problem.make_inputs` takes)."""
        return Case(id=self.id, target=self.target, dims=self.dims, kind=self.kind, points=0.0,
                    visibility="public", tolerance=self.tolerance, meta=self.meta, options=self.options,
                    backends=("cuda",), description=self.description)


@dataclass(frozen=True)
class TrapText:
    """The human side of a trap: what a student reads in the report."""

    id: str
    title: str
    explanation: str
    exposed_by: str
    fix: str
    section: str = ""
    # The fix as `grader check` words it, where `fix` sends the student elsewhere ("reproduce it with grader
    # check"); generic traps only (grader/authoring/generic_traps.toml); "" when `fix` fits everywhere.
    fix_when_checking: str = ""


@dataclass(frozen=True)
class Assignment:
    id: str
    title: str
    root: Path
    spec_path: Path
    module: str
    submission_file: str
    kernels: Mapping[str, KernelSpec]
    functions: Mapping[str, FunctionSpec]
    cases: tuple[Case, ...]
    tolerances: Mapping[str, ToleranceProfile]
    traps: Mapping[str, TrapText]
    call_timeout_s: float
    import_timeout_s: float
    hidden_visibility: str
    chapter: str = ""
    shared_traps: tuple[str, ...] = ()  # ids of `traps` taken from the course's trap library (traps.toml)
    performance: tuple[PerformanceCase, ...] = ()  # timed cases ([[performance]]), CUDA only
    input_kinds: Mapping[str, str] = field(default_factory=dict)  # the assignment's own input kinds, in words
    reference_dir: Path | None = None  # reference/<id>/ of the course; None when absent or public
    template_dir: Path | None = None  # student_template/<id>/ of the course; None when absent
    reference_solution: Path | None = None  # reference/<id>/reference.py; None when absent or public
    public: bool = False  # loaded from the public form: public cases only, no reference
    # One line per key an older spec carries whose meaning is unchanged (accepted; the line says what to change).
    # The command line prints them once (grader.cli); grading ignores them.
    load_notes: tuple[str, ...] = ()

    @property
    def course_root(self) -> Path:
        """The folder holding assignments/, reference/ and student_template/: the assignments folder's parent."""
        return self.root.parent.parent

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.kernels) + tuple(self.functions)

    @property
    def required_symbols(self) -> tuple[str, ...]:
        return self.targets

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.cases)

    def cases_for(self, backend: str, public_only: bool = False) -> tuple[Case, ...]:
        return tuple(
            c for c in self.cases if c.runs_on(backend) and (c.is_public or not public_only)
        )

    def case(self, case_id: str) -> Case:
        for c in self.cases:
            if c.id == case_id:
                return c
        raise KeyError(case_id)


# --------------------------------------------------------------------------- loading


class _Reader:
    """Typed access to a TOML table that reports the file and dotted key on every error."""

    def __init__(self, path: Path, table: Mapping[str, Any], key: str) -> None:
        self.path = path
        self.table = table
        self.key = key

    def _where(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def fail(self, name: str, problem: str) -> SpecError:
        return SpecError(self.path, self._where(name), problem)

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if name not in self.table:
            if default is ...:
                raise self.fail(name, "is required")
            return default
        value = self.table[name]
        if isinstance(value, bool) and kind in (int, float, (int, float)):
            raise self.fail(name, f"must be {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise self.fail(name, f"must be {_kind_name(kind)}, got {type(value).__name__} {value!r}")
        return value

    def strings(self, name: str, default: Any = ...) -> tuple[str, ...]:
        if name not in self.table and default is not ...:
            return tuple(default)
        value = self.get(name, list)
        if not all(isinstance(v, str) for v in value):
            raise self.fail(name, "must be a list of strings")
        return tuple(value)

    def choice(self, name: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(name, str, default)
        if value not in choices:
            raise self.fail(name, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def sub(self, name: str) -> _Reader:
        return _Reader(self.path, self.get(name, dict), self._where(name))

    def subs(self, name: str) -> dict[str, _Reader]:
        table = self.get(name, dict, {})
        out = {}
        for child, value in table.items():
            if not isinstance(value, dict):
                raise self.fail(f"{name}.{child}", "must be a table")
            out[child] = _Reader(self.path, value, self._where(f"{name}.{child}"))
        return out

    def reject_unknown(self, allowed: set[str]) -> None:
        for name in self.table:
            if name not in allowed:
                raise self.fail(name, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def read_spec(spec_path: Path) -> dict[str, Any]:
    """The parsed `assignment.toml` (SpecError when it is missing or not TOML)."""
    try:
        return tomllib.loads(Path(spec_path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(spec_path, "", "file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(spec_path, "", f"not valid TOML: {exc}") from None


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


def course_library_path(spec_path: Path) -> Path:
    """The course's trap library: traps.toml in the course folder (beside assignments/)."""
    return Path(spec_path).parent.parent.parent / COURSE_TRAPS


def load_trap_library(path: Path) -> dict[str, TrapText]:
    """A trap library (the course's traps.toml): one [<trap-id>] table
    each, with the keys of an assignment's [traps.<id>]; errors name the file and the trap."""
    top = _Reader(Path(path), read_spec(path), "")
    library = {}
    for tid, value in top.table.items():
        if not isinstance(value, dict):
            raise top.fail(tid, "must be a table: [<trap-id>] with title, explanation, exposed_by, fix")
        library[tid] = _load_trap(tid, _Reader(top.path, value, tid))
    return library


def _shared_traps(head: _Reader, spec_path: Path, own: Mapping[str, TrapText]) -> dict[str, TrapText]:
    """The course library's traps this assignment names in `shared_traps`, checked against the library."""
    names = head.strings(SHARED_TRAPS, ())
    if not names:
        return {}
    path = course_library_path(spec_path)
    if not path.is_file():
        raise head.fail(SHARED_TRAPS, f"names course traps, but the course has no trap library ({path})")
    library = load_trap_library(path)
    shared = {}
    for tid in names:
        if tid not in library:
            raise head.fail(SHARED_TRAPS, f"{tid!r} is not in the course's trap library {path} "
                            f"(it has: {', '.join(sorted(library)) or 'none'})")
        if tid in own:
            raise SpecError(spec_path, f"traps.{tid}", f"is also in the course's trap library {path}, which "
                            f"[assignment] {SHARED_TRAPS} takes it from: keep one")
        shared[tid] = library[tid]
    return shared


def course_folders(spec_path: Path, assignment_id: str) -> tuple[Path | None, Path | None]:
    """(reference/<id>/, student_template/<id>/) of the course the spec belongs to, each None if absent."""
    course = Path(spec_path).parent.parent.parent
    reference, template = course / REFERENCE_DIR / assignment_id, course / TEMPLATE_DIR / assignment_id
    return (reference if reference.is_dir() else None), (template if template.is_dir() else None)


def _reject_moved(spec_path: Path) -> None:
    """Older layouts kept the reference, mutants and template beside the spec: say where they belong."""
    for name, home in MOVED.items():
        if (spec_path.parent / name).exists():
            raise SpecError(spec_path.parent / name, "", f"does not belong beside the spec (assignments/ holds "
                            f"only the contract: the spec and its oracle module); move it to {home}/"
                            f"{spec_path.parent.name}/ of the course (docs/writing-an-assignment.md)")


def assignment_from_raw(raw: Mapping[str, Any], spec_path: Path, public: bool = False) -> Assignment:
    """The Assignment of a parsed spec at `spec_path`. It looks at the disk only around the spec: the oracle
    module exists, nothing of an older layout is left beside it, and which course folders exist."""
    top = _Reader(spec_path, raw, "")
    top.reject_unknown({"assignment", "tolerances", "kernels", "functions", "cases", "traps", "performance",
                        "input_kinds"})
    head = top.sub("assignment")
    head.reject_unknown(
        {"id", "title", "module", "submission_file", "chapter", "call_timeout_s", "import_timeout_s",
         "hidden_visibility", "reference", SHARED_TRAPS}
    )
    tolerances = _load_tolerances(top)
    kernels = {name: _load_kernel(name, r) for name, r in top.subs("kernels").items()}
    functions = {name: _load_function(name, r) for name, r in top.subs("functions").items()}
    traps = {tid: _load_trap(tid, r) for tid, r in top.subs("traps").items()}
    shared = _shared_traps(head, spec_path, traps)
    traps.update(shared)
    kinds = top.get("input_kinds", dict, {})
    for kind, words in kinds.items():
        if not isinstance(words, str) or not words:
            raise SpecError(spec_path, f"input_kinds.{kind}", "must be a non-empty string: the kind in words")
    targets = set(kernels) | set(functions)
    if not targets:
        raise top.fail("kernels", "the assignment names no kernels and no functions")
    cases = _load_cases(top, targets, tolerances, kernels)
    performance = _load_performance(top, targets, tolerances, kernels, {c.id for c in cases})
    module = head.get("module", str)
    if not (spec_path.parent / module).is_file():
        raise head.fail("module", f"names {module!r}, which is not a file next to the spec")
    _reject_moved(spec_path)
    assignment_id = head.get("id", str)
    reference_dir, template_dir = course_folders(spec_path, assignment_id)
    notes = _older_reference_key(head, spec_path, assignment_id)
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


def _older_reference_key(head: _Reader, spec_path: Path, assignment_id: str) -> tuple[str, ...]:
    """`[assignment] reference`, which specs written from older docs carry: the reference solution's file. The
    course layout fixes that file at reference/<id>/reference.py, so a key naming it (`"reference.py"`, or a
    path to reference/<id>/reference.py from the spec's folder or the course's) says what the layout says: it
    loads, with a one-line note to remove it. A key naming any other file contradicts the layout: an error
    (the grader would silently grade mutants of a file the author did not mean). `""` (how student bundles
    before the layout said "none") loads without a note."""
    value = head.get("reference", str, "")
    if value == "":
        return ()
    course = spec_path.parent.parent.parent
    layout = (course / REFERENCE_DIR / assignment_id / REFERENCE_FILE).resolve()
    named = Path(value)
    same = named == Path(REFERENCE_FILE) or any(
        (base / named).resolve() == layout for base in (spec_path.parent, course))
    where = f"{REFERENCE_DIR}/{assignment_id}/{REFERENCE_FILE}"
    if not same:
        raise head.fail("reference", f"names {value!r}, but the reference solution is {where} of the course "
                        f"(beside assignments/) whatever this key says: put the reference there and remove the key")
    return (f"{spec_path}: [assignment] reference = {value!r} is no longer needed (the reference solution is always "
            f"{where}, which it names): remove the key",)


def _load_tolerances(top: _Reader) -> dict[str, ToleranceProfile]:
    profiles = {}
    for name, profile in top.subs("tolerances").items():
        entries = {}
        for backend, per_dtype in _backend_tables(profile):
            for dtype, entry in per_dtype.items():
                entry.reject_unknown({"atol", "rtol", "why"})
                tol = Tolerance(
                    atol=float(entry.get("atol", (int, float))),
                    rtol=float(entry.get("rtol", (int, float))),
                    why=entry.get("why", str),
                )
                if tol.atol < 0 or tol.rtol < 0:
                    raise entry.fail("atol", "tolerances must be non-negative")
                entries[(backend, dtype)] = tol
        profiles[name] = ToleranceProfile(name=name, entries=entries)
    if not profiles:
        raise top.fail("tolerances", "at least one tolerance profile is required")
    return profiles


def _backend_tables(profile: _Reader) -> list[tuple[str, dict[str, _Reader]]]:
    out = []
    for backend in profile.table:
        if backend not in BACKENDS:
            raise profile.fail(backend, f"unknown backend (known: {', '.join(BACKENDS)})")
        out.append((backend, profile.subs(backend)))
    return out


def _load_kernel(name: str, r: _Reader) -> KernelSpec:
    r.reject_unknown({"params", "constexprs", "grid", "problem", "description", "float_params", "matmul"})
    params = r.strings("params")
    constexprs = r.strings("constexprs", ())
    for c in constexprs:
        if c not in params:
            raise r.fail("constexprs", f"{c!r} is not one of params")
    grid = r.strings("grid")
    if not 1 <= len(grid) <= 3:
        raise r.fail("grid", "must have 1 to 3 expressions")
    for expr in grid:
        try:
            compile(expr, "<grid>", "eval")
        except SyntaxError as exc:
            raise r.fail("grid", f"{expr!r} is not a Python expression: {exc.msg}") from None
    float_params = r.strings("float_params", ())
    for f in float_params:
        if f not in params:
            raise r.fail("float_params", f"{f!r} is not one of params")
    return KernelSpec(name, params, constexprs, grid, r.get("problem", str), r.get("description", str, ""),
                      float_params, r.get("matmul", bool, False))


def _load_function(name: str, r: _Reader) -> FunctionSpec:
    r.reject_unknown({"params", "returns", "problem", "max_launches", "description", "matmul"})
    max_launches = r.get("max_launches", int, 1)
    if max_launches < 0:
        raise r.fail("max_launches", "must be >= 0")
    return FunctionSpec(
        name=name,
        params=r.strings("params"),
        returns=r.strings("returns"),
        problem=r.get("problem", str),
        max_launches=max_launches,
        description=r.get("description", str, ""),
        matmul=r.get("matmul", bool, False),
    )


def _load_trap(trap_id: str, r: _Reader) -> TrapText:
    if trap_id in trap_ids.GENERIC:
        raise redefines_generic_trap(r.path, trap_id)
    r.reject_unknown({"title", "explanation", "exposed_by", "fix", "section"})
    return TrapText(
        id=trap_id,
        title=r.get("title", str),
        explanation=r.get("explanation", str),
        exposed_by=r.get("exposed_by", str),
        fix=r.get("fix", str),
        section=r.get("section", str, ""),
    )


def _entry(top: _Reader, table: Any, section: str, index: int, keys: set[str], seen: set[str],
           clash: str) -> tuple[_Reader, str]:
    """One [[section]] table: a reader that names it by index and id, and its id (unique in `seen`)."""
    if not isinstance(table, dict):
        raise top.fail(f"{section}[{index}]", f"must be a table ([[{section}]])")
    r = _Reader(top.path, table, f"{section}[{index}]")
    r.reject_unknown(keys)
    entry_id = r.get("id", str)
    r = _Reader(top.path, table, f"{section}[{index}] (id={entry_id!r})")
    if entry_id in seen:
        raise r.fail("id", clash)
    seen.add(entry_id)
    return r, entry_id


def _target_and_tolerance(r: _Reader, targets: set[str], tolerances: Mapping[str, ToleranceProfile]) -> tuple[str, str]:
    target = r.get("target", str)
    if target not in targets:
        raise r.fail("target", f"{target!r} is not a kernel or function of this assignment")
    tolerance = r.get("tolerance", str)
    if tolerance not in tolerances:
        raise r.fail("tolerance", f"{tolerance!r} is not a profile under [tolerances]")
    return target, tolerance


_CASE_KEYS = {
    "id", "target", "dims", "kind", "points", "visibility", "tolerance", "layout", "meta", "options",
    "backends", "exposes", "description",
}


def _load_cases(
    top: _Reader,
    targets: set[str],
    tolerances: Mapping[str, ToleranceProfile],
    kernels: Mapping[str, KernelSpec],
) -> tuple[Case, ...]:
    raw_cases = top.get("cases", list)
    seen: set[str] = set()
    cases = []
    for index, table in enumerate(raw_cases):
        r, case_id = _entry(top, table, "cases", index, _CASE_KEYS, seen,
                            "is used by an earlier case; case ids must be unique")
        target, tolerance = _target_and_tolerance(r, targets, tolerances)
        points = float(r.get("points", (int, float)))
        if points < 0:
            raise r.fail("points", "must be >= 0")
        dims = _int_table(r, "dims", required=True)
        meta = _int_table(r, "meta", required=False)
        if target in kernels:
            missing = [c for c in kernels[target].constexprs if c not in meta]
            if missing:
                raise r.fail("meta", f"kernel cases must give every constexpr; missing {', '.join(missing)}")
        backends = r.strings("backends", BACKENDS)
        for b in backends:
            if b not in BACKENDS:
                raise r.fail("backends", f"unknown backend {b!r} (known: {', '.join(BACKENDS)})")
        cases.append(
            Case(
                id=case_id,
                target=target,
                dims=dims,
                kind=r.get("kind", str, "random"),
                points=points,
                visibility=r.choice("visibility", VISIBILITIES),
                tolerance=tolerance,
                layout=r.choice("layout", tuple(LAYOUTS), "contiguous"),
                meta=meta,
                options=dict(r.get("options", dict, {})),
                backends=backends,
                exposes=r.strings("exposes", ()),
                description=r.get("description", str, ""),
            )
        )
    if not cases:
        raise top.fail("cases", "the assignment has no cases")
    return tuple(cases)


def _int_table(r: _Reader, name: str, required: bool) -> dict[str, int]:
    table = r.get(name, dict) if required else r.get(name, dict, {})
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise r.fail(f"{name}.{key}", f"must be a non-negative integer, got {value!r}")
    return dict(table)


_PERF_KEYS = {
    "id", "target", "dims", "dtype", "tolerance", "kind", "meta", "options", "thresholds", "relative_to",
    "input_sets", "repeats", "timeout_s", "description",
}


def _load_performance(
    top: _Reader,
    targets: set[str],
    tolerances: Mapping[str, ToleranceProfile],
    kernels: Mapping[str, KernelSpec],
    case_ids: set[str],
) -> tuple[PerformanceCase, ...]:
    raw = top.get("performance", list, [])
    seen = set(case_ids)
    out = []
    for index, table in enumerate(raw):
        r, perf_id = _entry(top, table, "performance", index, _PERF_KEYS, seen,
                            "is used by an earlier case or performance case; ids must be unique")
        target, tolerance = _target_and_tolerance(r, targets, tolerances)
        dtype = r.choice("dtype", PERF_DTYPES, "float32")
        if ("cuda", dtype) not in tolerances[tolerance].entries:
            raise r.fail("tolerance", f"profile {tolerance!r} has no cuda.{dtype} entry")
        meta = _int_table(r, "meta", required=False)
        if target in kernels:
            missing = [c for c in kernels[target].constexprs if c not in meta]
            if missing:
                raise r.fail("meta", "kernel targets must give every constexpr; missing "
                             + ", ".join(missing))
        timeout_s = float(r.get("timeout_s", (int, float), 120.0))
        if timeout_s <= 0:
            raise r.fail("timeout_s", "must be > 0")
        out.append(PerformanceCase(
            id=perf_id, target=target, dims=_int_table(r, "dims", required=True), tolerance=tolerance,
            dtype=dtype, kind=r.get("kind", str, "random"), meta=meta,
            options=dict(r.get("options", dict, {})), thresholds=_thresholds(r),
            relative_to=r.choice("relative_to", PERF_RELATIVE_TO, "reference"),
            input_sets=_positive_int(r, "input_sets", 3), repeats=_positive_int(r, "repeats", 5),
            timeout_s=timeout_s, description=r.get("description", str, ""),
        ))
    return tuple(out)


def _positive_int(r: _Reader, name: str, default: int) -> int:
    value = r.get(name, int, default)
    if value < 1:
        raise r.fail(name, f"must be >= 1, got {value}")
    return value


def _thresholds(r: _Reader) -> tuple[Threshold, ...]:
    """`thresholds = [[speedup, points], ...]`: speedups strictly increasing, points non-decreasing."""
    raw = r.get("thresholds", list, [])
    out: list[Threshold] = []
    for i, pair in enumerate(raw):
        ok = (isinstance(pair, list) and len(pair) == 2
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair))
        if not ok:
            raise r.fail(f"thresholds[{i}]", f"must be [speedup, points] (two numbers), got {pair!r}")
        speedup, points = float(pair[0]), float(pair[1])
        if speedup <= 0 or points < 0:
            raise r.fail(f"thresholds[{i}]", "speedup must be > 0 and points >= 0")
        if out and (speedup <= out[-1].speedup or points < out[-1].points):
            raise r.fail(f"thresholds[{i}]", "speedups must increase and points must not decrease")
        out.append(Threshold(speedup, points))
    return tuple(out)
