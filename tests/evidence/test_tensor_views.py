"""grader/evidence/tensor_views.py: a described view rebuilt on its storage's bytes, refused where it would reach
outside the storage."""

from __future__ import annotations

import pytest
import torch

from grader.evidence.tensor_views import tensor_from


def storage_of(values: torch.Tensor) -> torch.Tensor:
    return values.contiguous().view(torch.uint8)


def test_a_view_is_rebuilt_with_its_offset_shape_and_stride() -> None:
    values = torch.arange(12, dtype=torch.float32)
    view = tensor_from({7: storage_of(values)}, {"sid": 7, "dtype": "float32", "offset": 2, "shape": [2, 3],
                                                "stride": [4, 1]})
    assert view.tolist() == [[2.0, 3.0, 4.0], [6.0, 7.0, 8.0]]


@pytest.mark.parametrize("described", [
    {"offset": 0, "shape": [13], "stride": [1]},  # one past the end
    {"offset": 10, "shape": [2, 2], "stride": [1, 1]},  # reaches index 12
    {"offset": -1, "shape": [1], "stride": [1]},
    {"offset": 0, "shape": [2], "stride": [-1]},
    {"offset": 0, "shape": [2, 2], "stride": [1]},
])
def test_views_outside_their_storage_are_refused(described: dict) -> None:
    with pytest.raises(ValueError):
        tensor_from({0: storage_of(torch.zeros(12))}, {"sid": 0, "dtype": "float32", **described})
