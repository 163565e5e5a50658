"""The sections of assignment.toml (grader/authoring/spec_sections.py): each error names the file and the
key ([tolerances], [kernels], [[cases]], [[performance]]); performance cases load with their defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.spec import load_assignment
from tests.authoring.test_spec import FIRST_CASE, PERF, VALID, WITH_PERF, edited, spec_error, write_spec

# (edit: old text -> new text, the key the error must name, words the problem must contain), as
# test_spec.BROKEN: each a one-edit change of VALID
BROKEN_SECTIONS = {
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
}


@pytest.mark.parametrize("name", list(BROKEN_SECTIONS))
def test_section_errors_name_file_and_key(tmp_path: Path, name: str) -> None:
    (old, new), key, problem = BROKEN_SECTIONS[name]
    err = spec_error(tmp_path, edited(old, new))
    assert err.key == key
    assert problem in err.problem
    assert str(err) == f"{tmp_path.resolve() / 'assignment.toml'}: [{key}] {err.problem}"


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
