"""A case's `dtype`: its inputs are drawn in it, its tolerance is looked up by it, bfloat16 runs on GPUs only
(Triton's interpreter gets bfloat16 arithmetic wrong), and validation wants a tolerance for it on every backend
the case runs on."""

from __future__ import annotations

from pathlib import Path

import torch

from grader.authoring.inputs import case_maker
from grader.authoring.spec import load_assignment
from tests.authoring.test_spec import edited, spec_error, write_spec
from tests.authoring.test_validation import edit, problems_of
from tests.conftest import copy_course

FIRST = 'id = "kernel-basic"\ntarget = "copy_kernel"\n'


def test_cases_default_to_float32_and_take_a_dtype(tmp_path: Path) -> None:
    assignment = load_assignment(write_spec(tmp_path, edited(FIRST, FIRST + 'dtype = "float16"\n')))
    assert assignment.case("kernel-basic").dtype == "float16"
    assert assignment.case("wrapper-basic").dtype == "float32"


def test_the_maker_draws_in_the_case_dtype(tmp_path: Path) -> None:
    assignment = load_assignment(write_spec(tmp_path, edited(FIRST, FIRST + 'dtype = "float16"\n')))
    case = assignment.case("kernel-basic")
    drawn = case_maker(case, 7).normal(3, 4)
    assert drawn.dtype == torch.float16
    assert torch.equal(drawn, case_maker(case, 7).normal(3, 4))  # seeded: the same values again


def test_bfloat16_cases_must_be_gpu_only(tmp_path: Path) -> None:
    err = spec_error(tmp_path, edited(FIRST, FIRST + 'dtype = "bfloat16"\n'))
    assert err.key.endswith("dtype") and "interpreter" in err.problem and 'backends = ["cuda"]' in err.problem
    ok = load_assignment(write_spec(tmp_path, edited(FIRST, FIRST + 'dtype = "bfloat16"\nbackends = ["cuda"]\n')))
    assert ok.case("kernel-basic").dtype == "bfloat16"


def test_an_unknown_dtype_names_the_key(tmp_path: Path) -> None:
    err = spec_error(tmp_path, edited(FIRST, FIRST + 'dtype = "float64"\n'))
    assert err.key.endswith("dtype")


def test_validation_wants_a_tolerance_for_the_case_dtype(tmp_path: Path) -> None:
    folder = copy_course("softmax", tmp_path)
    edit(folder / "assignment.toml", 'id = "kernel-basic"\n', 'id = "kernel-basic"\ndtype = "float16"\n')
    message = problems_of(folder)
    assert "[tolerances.softmax.interpreter.float16]" in message and "kernel-basic" in message
    assert "[tolerances.softmax.cuda.float16]" in message


def test_a_gpu_only_case_needs_no_interpreter_tolerance(tmp_path: Path) -> None:
    folder = copy_course("softmax", tmp_path)
    edit(folder / "assignment.toml", 'id = "kernel-basic"\n',
         'id = "kernel-basic"\ndtype = "float16"\nbackends = ["cuda"]\n')
    message = problems_of(folder)
    assert "[tolerances.softmax.cuda.float16]" in message
    assert "interpreter.float16" not in message
