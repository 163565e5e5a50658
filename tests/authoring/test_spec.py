"""The spec loader: every error names the file and the key; the real fused_layers spec is consistent."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.authoring.catalog import trap_catalog
from grader.authoring.mutants import load_mutants
from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import BACKENDS, SpecError, TrapText, load_assignment
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
    "unknown key in a case": (
        (FIRST_CASE, FIRST_CASE + 'colour = "red"\n'), "cases[0].colour", "unknown key"),
    "case target that does not exist": (
        ('target = "copy_kernel"', 'target = "paste_kernel"'), "cases[0] (id='kernel-basic').target",
        "'paste_kernel' is not a kernel or function"),
    "tolerance profile not defined": (
        ('tolerance = "exact"\npoints = 1', 'tolerance = "loose"\npoints = 1'),
        "cases[0] (id='kernel-basic').tolerance", "'loose' is not a profile"),
    "duplicate case id": (
        ('id = "wrapper-basic"', 'id = "kernel-basic"'), "cases[1] (id='kernel-basic').id", "unique"),
    "kernel case missing a constexpr": (
        ("meta = { BLOCK = 16 }\n", ""), "cases[0] (id='kernel-basic').meta", "missing BLOCK"),
    "negative points": (
        ("points = 2", "points = -2"), "cases[1] (id='wrapper-basic').points", "must be >= 0"),
    "boolean points": (("points = 2", "points = true"), "cases[1] (id='wrapper-basic').points", "boolean"),
    "bad grid expression": (
        ('grid = ["cdiv(N, BLOCK)"]', 'grid = ["cdiv(N, BLOCK"]'), "kernels.copy_kernel.grid",
        "'cdiv(N, BLOCK' is not a Python expression"),
    "constexpr that is not a param": (
        ('constexprs = ["BLOCK"]', 'constexprs = ["BLOCK_N"]'), "kernels.copy_kernel.constexprs",
        "'BLOCK_N'"),
    "negative tolerance": (
        ("atol = 0.0\nrtol = 0.0\nwhy = \"exact\"\n[tolerances.exact.cuda.float32]",
         "atol = -1.0\nrtol = 0.0\nwhy = \"exact\"\n[tolerances.exact.cuda.float32]"),
        "tolerances.exact.interpreter.float32.atol", "non-negative"),
    "unknown backend in a tolerance profile": (
        ("[tolerances.exact.cuda.float32]", "[tolerances.exact.rocm.float32]"), "tolerances.exact.rocm",
        "unknown backend"),
    "unknown visibility": (
        ('visibility = "hidden"', 'visibility = "secret"'), "cases[1] (id='wrapper-basic').visibility",
        "one of public, hidden"),
    "negative dimension": (
        ('dims = { N = 10 }\ntolerance = "exact"\npoints = 2',
         'dims = { N = -1 }\ntolerance = "exact"\npoints = 2'),
        "cases[1] (id='wrapper-basic').dims.N", "non-negative integer"),
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


TRAP = """
[traps.{id}]
title = "t"
explanation = "e"
exposed_by = "x"
fix = "f"
"""


def test_loading_refuses_an_assignment_trap_with_a_generic_id(tmp_path: Path) -> None:
    err = spec_error(tmp_path, VALID + TRAP.format(id="oob-read"))
    assert err.key == "traps.oob-read" and "'oob-read' is a generic trap" in err.problem


def test_the_catalog_refuses_an_assignment_that_redefines_a_generic_trap(tmp_path: Path) -> None:
    path = write_spec(tmp_path, VALID + TRAP.format(id="own-trap"))
    assignment = load_assignment(path)
    assert "own-trap" in trap_catalog(assignment)
    clash = dataclasses.replace(assignment, traps={"timeout": TrapText("timeout", "t", "e", "x", "f")})
    with pytest.raises(SpecError) as info:
        trap_catalog(clash)
    assert info.value.path == path.resolve() and info.value.key == "traps.timeout"
    assert str(path.resolve()) in str(info.value) and "'timeout' is a generic trap" in str(info.value)


def test_invalid_toml_names_file_and_line(tmp_path: Path) -> None:
    err = spec_error(tmp_path, edited("[kernels.copy_kernel]", "[kernels.copy_kernel"))
    assert "not valid TOML" in err.problem
    line = VALID.splitlines().index("[kernels.copy_kernel]") + 1
    assert f"line {line}" in str(err)


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="file not found") as info:
        load_assignment(tmp_path / "assignment.toml")
    assert str(tmp_path) in str(info.value)


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


def test_reference_and_mutants_exist(fused_layers, repo_root) -> None:
    assert fused_layers.course_root == repo_root
    assert fused_layers.reference_dir == repo_root / "reference" / "fused_layers"
    assert fused_layers.reference_solution == repo_root / "reference" / "fused_layers" / "reference.py"
    assert fused_layers.template_dir == repo_root / "student_template" / "fused_layers"
    assert load_mutants(fused_layers.reference_dir)


# ------------------------------------------------------------------------------------ performance cases

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


def perf_edited(old: str, new: str) -> str:
    assert WITH_PERF.count(old) == 1, old
    return WITH_PERF.replace(old, new)


def test_performance_cases_load(tmp_path: Path) -> None:
    a = load_assignment(write_spec(tmp_path, WITH_PERF))
    first, second = a.performance
    assert (first.id, first.target, dict(first.dims)) == ("perf-copy", "copy", {"N": 1000000})
    assert first.dtype == "float32"
    assert [(t.speedup, t.points) for t in first.thresholds] == [(0.5, 1.0), (0.8, 2.5)]
    assert first.max_score == 2.5 and first.relative_to == "reference"
    assert (first.input_sets, first.repeats, first.timeout_s) == (3, 5, 120.0)  # defaults
    assert second.thresholds == () and second.max_score == 0  # informational by default
    assert (second.relative_to, second.input_sets, second.repeats, second.timeout_s) == ("torch", 4, 7, 60.0)
    assert second.as_case().meta == {"BLOCK": 1024} and second.as_case().dims == {"N": 4096}
    assert a.max_score == 3  # correctness points only: performance points come with a timed run


def test_no_performance_section_means_none(tmp_path: Path) -> None:
    assert load_assignment(write_spec(tmp_path, VALID)).performance == ()


PERF_ID = "performance[0] (id='perf-copy')"
PERF_ID_2 = "performance[1] (id='perf-copy-kernel')"
BROKEN_PERF = {
    "unknown key": (('id = "perf-copy"\n', 'id = "perf-copy"\ncolour = "red"\n'),
                    "performance[0].colour", "unknown key"),
    "unknown target": (('target = "copy"\ndescription', 'target = "paste"\ndescription'),
                       f"{PERF_ID}.target", "'paste' is not a kernel or function"),
    "id shared with a correctness case": (('id = "perf-copy"\n', 'id = "kernel-basic"\n'),
                                          "performance[0] (id='kernel-basic').id", "unique"),
    "threshold not a pair": (("[[0.5, 1], [0.8, 2.5]]", "[[0.5, 1, 2]]"), f"{PERF_ID}.thresholds[0]",
                             "[speedup, points]"),
    "threshold of strings": (("[[0.5, 1], [0.8, 2.5]]", '[["fast", 1]]'), f"{PERF_ID}.thresholds[0]",
                             "[speedup, points]"),
    "speedups not increasing": (("[[0.5, 1], [0.8, 2.5]]", "[[0.8, 1], [0.5, 2]]"),
                                f"{PERF_ID}.thresholds[1]", "must increase"),
    "points decreasing": (("[[0.5, 1], [0.8, 2.5]]", "[[0.5, 2], [0.8, 1]]"), f"{PERF_ID}.thresholds[1]",
                          "must not decrease"),
    "negative points": (("[[0.5, 1], [0.8, 2.5]]", "[[0.5, -1]]"), f"{PERF_ID}.thresholds[0]", "points >= 0"),
    "unknown dtype": (('dims = { N = 1000000 }\n', 'dims = { N = 1000000 }\ndtype = "float64"\n'),
                      f"{PERF_ID}.dtype", "must be one of float32"),
    "tolerance without that dtype": (
        ('dims = { N = 1000000 }\n', 'dims = { N = 1000000 }\ndtype = "float16"\n'),
        f"{PERF_ID}.tolerance", "no cuda.float16 entry"),
    "kernel target missing a constexpr": (("meta = { BLOCK = 1024 }\n", ""), f"{PERF_ID_2}.meta",
                                          "missing BLOCK"),
    "bad relative_to": (('relative_to = "torch"', 'relative_to = "cublas"'),
                        f"{PERF_ID_2}.relative_to", "must be one of reference, torch"),
    "zero repeats": (("repeats = 7", "repeats = 0"), f"{PERF_ID_2}.repeats", ">= 1"),
    "negative timeout": (("timeout_s = 60", "timeout_s = -1"), f"{PERF_ID_2}.timeout_s", "> 0"),
    "a table, not an array of tables": (
        (PERF, '\n[performance]\nid = "perf-copy"\n'), "performance", "must be a list"),
}


@pytest.mark.parametrize("name", list(BROKEN_PERF))
def test_performance_spec_errors_name_file_and_key(tmp_path: Path, name: str) -> None:
    (old, new), key, problem = BROKEN_PERF[name]
    err = spec_error(tmp_path, perf_edited(old, new))
    assert err.key == key
    assert problem in err.problem


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
