"""The spec loader (grader/authoring/spec.py): a minimal spec loads, its [assignment] and top-level errors name
the file and the key (each section's own errors: test_spec_sections.py), and the real specs are consistent.
VALID, TRAP and PERF, the spec texts the other spec tests edit, are here."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.catalog import trap_catalog
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import BACKENDS, SpecError, load_assignment
from grader.cli import main

# A minimal valid spec: one kernel, one wrapper, one tolerance profile, two cases. Each broken variant
# below is this text with one edit, so the edit alone is what the loader must complain about.
VALID = """\
[assignment]
id = "tiny"
title = "Tiny assignment"
module = "oracles.py"
submission_file = "tiny.py"

[tolerances.exact.interpreter.float32]
atol = 0.0
rtol = 0.0
why = "exact"
[tolerances.exact.cuda.float32]
atol = 0.0
rtol = 0.0
why = "exact"

[kernels.copy_kernel]
params = ["x_ptr", "out_ptr", "N", "BLOCK"]
constexprs = ["BLOCK"]
grid = ["cdiv(N, BLOCK)"]
problem = "copy"

[functions.copy]
params = ["x"]
returns = ["out"]
problem = "copy"

[[cases]]
id = "kernel-basic"
target = "copy_kernel"
dims = { N = 10 }
meta = { BLOCK = 16 }
tolerance = "exact"
points = 1
visibility = "public"

[[cases]]
id = "wrapper-basic"
target = "copy"
dims = { N = 10 }
tolerance = "exact"
points = 2
visibility = "hidden"
"""

FIRST_CASE = 'id = "kernel-basic"\ntarget = "copy_kernel"\n'

TRAP = """
[traps.{id}]
title = "t"
explanation = "e"
exposed_by = "x"
fix = "f"
"""


def write_spec(folder: Path, text: str) -> Path:
    (folder / "oracles.py").write_text("PROBLEMS = {}\n", encoding="utf-8")
    path = folder / "assignment.toml"
    path.write_text(text, encoding="utf-8")
    return path


def edited(old: str, new: str) -> str:
    assert VALID.count(old) == 1, old
    return VALID.replace(old, new)


def spec_error(tmp_path: Path, text: str) -> SpecError:
    path = write_spec(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_assignment(path)
    err = info.value
    assert err.path == path.resolve()
    assert str(path.resolve()) in str(err)
    assert f"[{err.key}]" in str(err) if err.key else "[]" not in str(err)  # a whole-file problem names no key
    return err


def test_minimal_spec_loads(tmp_path: Path) -> None:
    a = load_assignment(write_spec(tmp_path, VALID))
    assert a.id == "tiny"
    assert a.targets == ("copy_kernel", "copy")
    assert [c.id for c in a.cases] == ["kernel-basic", "wrapper-basic"]
    assert a.max_score == 3
    assert a.cases[0].meta == {"BLOCK": 16}
    assert a.tolerances["exact"].lookup("cuda", "float32").why == "exact"


# (edit: old text -> new text, the key the error must name, words the problem must contain)
BROKEN = {
    "missing assignment id": (('id = "tiny"\n', ""), "assignment.id", "is required"),
    "module that is not a file": (('module = "oracles.py"', 'module = "nowhere.py"'), "assignment.module",
                                  "'nowhere.py'"),
    "unknown top-level table": (
        ('[[cases]]\nid = "wrapper-basic"', '[extras]\nx = 1\n\n[[cases]]\nid = "wrapper-basic"'),
        "extras", "unknown key"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_spec_error_names_file_and_key(tmp_path: Path, name: str) -> None:
    (old, new), key, problem = BROKEN[name]
    err = spec_error(tmp_path, edited(old, new))
    assert err.key == key
    assert problem in err.problem
    assert str(err) == f"{tmp_path.resolve() / 'assignment.toml'}: [{key}] {err.problem}"


def test_cli_reports_spec_errors_with_file_and_key(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    write_spec(folder, edited("points = 2", "points = -2"))
    assert main(["--assignments", str(tmp_path), "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grader: error: ")
    assert str(folder.resolve() / "assignment.toml") in err
    assert "[cases[1] (id='wrapper-basic').points]" in err


# ------------------------------------------------------------------------------------ the real spec


@pytest.fixture(scope="module")
def fused_layers(repo_root: Path):
    return load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")


def test_fused_layers_loads(fused_layers) -> None:
    a = fused_layers
    assert a.id == "fused_layers"
    assert len(a.targets) == 6
    assert set(a.kernels) == {"fused_linear_gelu_kernel", "row_mean_var_kernel", "layernorm_forward_kernel"}
    assert set(a.functions) == {"fused_linear_gelu", "row_mean_var", "layernorm"}
    assert a.max_score == 40
    assert len({c.id for c in a.cases}) == len(a.cases)
    assert {c.target for c in a.cases} == set(a.targets)  # every target is graded
    assert any(c.is_public for c in a.cases) and any(not c.is_public for c in a.cases)


def test_every_case_has_a_tolerance_for_both_backends(fused_layers) -> None:
    for case in fused_layers.cases:
        profile = fused_layers.tolerances[case.tolerance]
        for backend in BACKENDS:
            tol = profile.lookup(backend, "float32")  # raises KeyError when missing
            assert tol.why.strip(), (case.id, backend)


def test_every_exposed_and_signature_trap_is_documented(fused_layers) -> None:
    catalog = trap_catalog(fused_layers)
    for case in fused_layers.cases:
        for trap in case.exposes:
            assert trap in catalog, (case.id, trap)
    for problem in load_problems(fused_layers).values():
        for trap in problem.traps:
            assert trap in catalog, (problem.name, trap)


# ------------------------------------------------------------------------------------ performance cases
# (the [[performance]] section's own tests: test_spec_sections.py)

PERF = """
[[performance]]
id = "perf-copy"
target = "copy"
description = "a million elements"
dims = { N = 1000000 }
tolerance = "exact"
thresholds = [[0.5, 1], [0.8, 2.5]]

[[performance]]
id = "perf-copy-kernel"
target = "copy_kernel"
dims = { N = 4096 }
meta = { BLOCK = 1024 }
tolerance = "exact"
relative_to = "torch"
input_sets = 4
repeats = 7
timeout_s = 60
"""
WITH_PERF = VALID + PERF


def test_performance_target_needs_a_baseline(tmp_path: Path) -> None:
    """A performance case's problem must declare torch eager to compare with (checked when the oracle
    module is loaded: the spec alone cannot know)."""
    path = write_spec(tmp_path, WITH_PERF)
    (tmp_path / "oracles.py").write_text(
        "from grader.authoring.problem import In, Out, Problem\n"
        "PROBLEMS = {'copy': Problem(name='copy', make_inputs=lambda c, m: {}, expected=lambda i: {},\n"
        "    kernel_args=lambda i: {}, call_args=lambda i: ([], {}))}\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_problems(load_assignment(path))
    assert info.value.key == "performance[0] (id='perf-copy').target"
    assert "declares no baseline" in info.value.problem


def test_real_assignments_declare_performance(repo_root: Path) -> None:
    fused = load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")
    shapes = {(p.target, p.shape) for p in fused.performance}
    assert {("row_mean_var", "8192x8192"), ("layernorm", "8192x8192"),
            ("fused_linear_gelu", "4096x4096x4096")} <= shapes
    softmax = load_assignment(repo_root / "assignments" / "softmax" / "assignment.toml")
    assert ("softmax", "8192x8192") in {(p.target, p.shape) for p in softmax.performance}
    for a in (fused, softmax):
        problems = load_problems(a)  # every performance target's problem has a baseline
        for perf in a.performance:
            spec = a.kernels.get(perf.target) or a.functions[perf.target]
            baseline = problems[spec.problem].baseline
            assert baseline is not None
            assert baseline.bytes_moved or baseline.flops, perf.id
            assert perf.max_score == 0  # informational: the grade is correctness only
