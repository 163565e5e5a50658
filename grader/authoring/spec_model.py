"""The assignment spec as frozen dataclasses: an Assignment with its kernels and functions (KernelSpec,
FunctionSpec), its graded cases (Case), its timed cases (PerformanceCase, Threshold), its tolerance
profiles (ToleranceProfile, Tolerance) and its traps' text (TrapText), and the values some fields take.
grader.authoring.spec loads them from assignment.toml, validated once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.backends import BACKENDS

# The dtypes a case's inputs come in (correctness cases default to float32; performance cases name theirs).
DTYPES = ("float32", "float16", "bfloat16")
PERF_DTYPES = DTYPES
# Dtypes whose arithmetic Triton's interpreter gets wrong (it holds bfloat16 as uint16: /work/shared/TRITON_FACTS.md):
# a case in one runs on GPUs only.
GPU_ONLY_DTYPES = ("bfloat16",)
PERF_RELATIVE_TO = ("reference", "torch")
VISIBILITIES = ("public", "hidden")
# How a case places its tensors, with the words a report uses for each.
LAYOUTS = {"contiguous": "contiguous", "row-gap": "padded rows (row stride > row length)",
           "swapped-heads": "heads interleaved in memory ((B, N, H, D) viewed as (B, H, N, D))"}


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
    dtype: str = "float32"  # the inputs' dtype (InputMaker draws in it; the tolerance is looked up by it)

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
    input_sets: int = 3  # 1: one input set timed back to back; more: sets of their own values, enough to miss L2
    repeats: int = 5  # do_bench medians taken; the case reports their median and spread
    timeout_s: float = 120.0  # the cap: a launch also stops when it outlives the bar (running.timing.runner)
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
                    backends=("cuda",), description=self.description, dtype=self.dtype)


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
