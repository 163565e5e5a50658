"""grader/judging/error_maps.py: where an output is wrong, as a map of cell codes: the codes, the
downsampling that keeps each cell's worst element, the launch tile, the bounds."""

from __future__ import annotations

import json

import pytest
import torch

from grader.judging.error_maps import MAX_CELLS, error_map, error_maps, launch_tile
from tests.publishing.test_error_map_view import ATOL, RTOL, store_mask_output


def test_store_mask_spill_shows_as_column_zero_outside_tile_starts() -> None:
    actual, expected = store_mask_output()
    m = error_map(actual, expected, ATOL, RTOL, tile=(16, 16))
    assert m["shape"] == [37, 19] and m["cell"] == [1, 1] and m["tile"] == [16, 16]
    assert len(m["grid"]) == 37 and {len(row) for row in m["grid"]} == {19}
    assert m["wrong"] == 34 and m["total"] == 703
    for row, line in enumerate(m["grid"]):
        assert line[1:] == "." * 18
        assert line[0] == ("." if row % 16 == 0 else "3"), (row, line)  # |0 - ~1.5| / 2.5e-5 ~ 6e4x

def test_codes_for_each_kind_of_wrong() -> None:
    expected = torch.tensor(
        [[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, float("nan"), 1.0, 1.0, 1.0, 1.0]], dtype=torch.float64
    )
    allowed = ATOL + RTOL * 1.0
    actual = torch.tensor(
        [
            [
                1.0,
                1.0 + 5 * allowed,
                1.0 + 500 * allowed,
                1.0 + 5e4 * allowed,
                1.0 + 1e7 * allowed,
                float("inf"),
                float("nan"),
                float("nan"),
                float("nan"),
                float("nan"),
                1.0,
            ]
        ]
    )
    unwritten = torch.zeros(1, 11, dtype=torch.bool)
    unwritten[0, 9] = True
    oob = torch.zeros(1, 11, dtype=torch.bool)
    oob[0, 8] = True
    oob[0, 10] = True  # a correct element is never marked, whatever the mask says
    m = error_map(actual, expected, ATOL, RTOL, unwritten=unwritten, oob_reads=oob)
    assert m["grid"] == [".1234I.NRU."]
    assert m["wrong"] == 8

def test_unwritten_wins_even_where_the_oracle_is_nan() -> None:
    expected = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    actual = torch.tensor([float("nan"), 1.0])
    assert error_map(actual, expected, ATOL, RTOL, unwritten=torch.tensor([True, False]))["grid"] == ["U."]

def test_downsampled_cells_keep_their_worst_element() -> None:
    expected = torch.zeros(200, 3, dtype=torch.float64)
    actual = torch.zeros(200, 3)
    actual[5, 1] = 1e-4  # ratio 10: level 1
    actual[6, 1] = float("nan")  # same 4-row cell: NaN wins
    actual[199, 2] = 10.0
    m = error_map(actual, expected, ATOL, RTOL)
    assert m["cell"] == [4, 1]
    assert len(m["grid"]) == 50
    assert m["grid"][1] == ".N."
    assert m["grid"][49] == "..4"
    assert sum(ch != "." for row in m["grid"] for ch in row) == 2

def test_maps_are_bounded_and_json() -> None:
    expected = torch.randn(1000, 700, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    m = error_map(expected.to(torch.float32) + 1.0, expected, ATOL, RTOL, tile=(128, 64))
    assert len(m["grid"]) <= MAX_CELLS and len(m["grid"][0]) <= MAX_CELLS
    assert m["cell"] == [16, 11]
    text = json.dumps(m, allow_nan=False)
    assert len(text) < 5000
    assert json.loads(text) == m

def test_row_outputs_are_one_strip_without_tiles() -> None:
    expected = torch.tensor([0.5, 0.25, 1.0, 2.0], dtype=torch.float64)
    actual = torch.tensor([0.5, 0.3, 1.0, float("nan")])
    m = error_maps({"mean": actual}, {"mean": expected}, ATOL, RTOL, block_meta={"BLOCK_N": 16})["mean"]
    assert m["shape"] == [4] and m["grid"] == [".3.N"] and m["tile"] is None  # 0.05 / 1.25e-5 = 4e3x

def test_error_maps_keeps_only_wrong_outputs() -> None:
    good = torch.ones(3, 4, dtype=torch.float64)
    bad = good.clone()
    bad[1, 2] = 5.0
    maps = error_maps(
        {"mean": good.float(), "out": bad.float(), "var": torch.ones(2)},
        {"mean": good, "out": good, "var": good},
        ATOL,
        RTOL,
        block_meta={"BLOCK_M": 2, "BLOCK_N": 2, "BLOCK_K": 2},
    )
    assert list(maps) == ["out"]  # mean is right; var has the wrong shape (judge reports that itself)
    assert maps["out"]["tile"] == [2, 2]
    assert maps["out"]["grid"] == ["....", "..4.", "...."]

def test_launch_tile_conventions() -> None:
    assert launch_tile({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16}, 2) == (16, 32)
    assert launch_tile({"BLOCK_N": 64}, 2) == (1, 64)  # row kernels: grid = M, one row per program
    assert launch_tile({"BLOCK_N": 64}, 1) is None
    assert launch_tile({}, 2) is None  # wrapper cases: the student's wrapper picked the blocks

def test_error_map_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"shape \(2, 3\) vs expected \(3, 2\)"):
        error_map(torch.zeros(2, 3), torch.zeros(3, 2), ATOL, RTOL)
