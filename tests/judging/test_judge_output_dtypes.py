"""Outputs in the dtype their problem declares (float16 attention output beside a float32 log-sum-exp), and where
an output of more than two dimensions is wrong, said per leading slice."""

from __future__ import annotations

import torch

from grader.authoring.problem import Problem
from grader.judging.diagnosis import locate
from grader.judging.judge import output_shape_problems
from grader.publishing.case_view import _where_words


def test_an_output_in_another_dtype_than_declared_is_a_bad_output() -> None:
    expected = {"out": torch.zeros(2, 3, dtype=torch.float64), "lse": torch.zeros(2, dtype=torch.float64)}
    dtypes = {"out": torch.float16, "lse": torch.float32}
    right = {"out": torch.zeros(2, 3, dtype=torch.float16), "lse": torch.zeros(2)}
    assert output_shape_problems(right, expected, dtypes) == []
    wrong = {"out": torch.zeros(2, 3), "lse": torch.zeros(2)}
    assert output_shape_problems(wrong, expected, dtypes) == [
        "output `out` has dtype torch.float32, expected torch.float16"]
    assert output_shape_problems(right, expected, {}) == [  # nothing declared: float32, as before
        "output `out` has dtype torch.float16, expected torch.float32"]


def test_a_problem_declares_output_dtypes_and_the_rest_follow_the_case() -> None:
    plain = Problem(name="p", make_inputs=dict, expected=dict)
    assert plain.dtypes_of_outputs({}, ["out"], "float16") == {"out": torch.float16}
    declared = Problem(name="p", make_inputs=dict, expected=dict, output_dtypes=lambda i: {"lse": torch.float32})
    assert declared.dtypes_of_outputs({}, ["out", "lse"], "float16") == {"out": torch.float16, "lse": torch.float32}


def test_where_a_4d_output_is_wrong_names_its_slices_rows_and_columns() -> None:
    mask = torch.zeros(2, 3, 5, 4, dtype=torch.bool)
    mask[1, 2, 4, 1] = True
    mask[0, 1, 3, 0] = True
    where = locate(mask, {"BLOCK_M": 16, "BLOCK_N": 16})
    assert where["wrong"] == 2 and where["total"] == 120
    assert where["slices"] == [[0, 1], [1, 2]] and where["slices_wrong"] == 2 and where["slices_total"] == 6
    assert where["rows"] == "3-4 (of 5)" and where["cols"] == "0-1 (of 4)"
    assert "tiles" not in where
    assert _where_words(where) == "2 of 120 wrong; in 2 of 6 slices [0,1] [1,2]; rows 3-4 (of 5); cols 0-1 (of 4)"
