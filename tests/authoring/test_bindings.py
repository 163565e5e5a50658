"""grader/authoring/bindings.py: a problem whose bindings do not fit the contract fails when the assignment loads,
naming the oracle module, the key and the parameter, instead of leaving a case the grader cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.authoring.test_validation import edit, problems_of
from tests.conftest import copy_course


@pytest.fixture
def attention_copy(tmp_path: Path) -> Path:
    return copy_course("attention", tmp_path)


def test_a_stride_of_a_parameter_the_kernel_does_not_have(attention_copy: Path) -> None:
    # the slip this check was written for: strides of `out_ptr` asked for as `o_ptr`
    edit(attention_copy / "oracles.py", '("o", "out_ptr")', '("o", "o_ptr")')
    message = problems_of(attention_copy)
    assert "oracles.py" in message and "[PROBLEMS['attention'].kernel_args]" in message
    assert "binds stride_ob to Stride('o_ptr', 0): 'o_ptr' is no parameter of kernels.attention_kernel" in message


def test_a_parameter_left_unbound_and_one_too_many(attention_copy: Path) -> None:
    edit(attention_copy / "oracles.py", '"B": b, "H": h,', '"Z": b, "H": h,')
    message = problems_of(attention_copy)
    assert "binds no value to B of kernels.attention_kernel.params" in message
    assert "binds Z, which kernels.attention_kernel has not among its non-constexpr params" in message


def test_a_stride_past_the_tensors_dimensions(attention_copy: Path) -> None:
    edit(attention_copy / "oracles.py", '"stride_lh": Stride("lse_ptr", 1)', '"stride_lh": Stride("lse_ptr", 3)')
    assert "binds stride_lh to Stride('lse_ptr', 3): that tensor has 3 dimension(s)" in problems_of(attention_copy)


def test_a_wrapper_passing_an_input_make_inputs_does_not_make(attention_copy: Path) -> None:
    edit(attention_copy / "oracles.py", 'return [In("q"), In("k"), In("v")], kwargs',
         'return [In("query"), In("k"), In("v")], kwargs')
    assert "passes In('query'), which make_inputs does not make as a tensor" in problems_of(attention_copy)
