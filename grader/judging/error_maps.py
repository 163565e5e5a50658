"""Error maps: where one output is wrong, as a small JSON-able grid a report can draw.

One map per wrong output of a case. Each cell of the grid covers a block of elements (one element
when the output is at most MAX_CELLS a side) and holds one character, the worst thing in its block:

    .   within tolerance
    1-4 wrong, by how far past the tolerance: |got - expected| / (atol + rtol * |expected|) up to
        10x, up to 1e3x, up to 1e5x, beyond (RATIO_LEVELS)
    I   infinite where a finite value was expected (or the reverse)
    N   NaN where a number was expected (or the reverse)
    R   NaN read from outside an input (the guard bands): an out-of-bounds read
    U   never written (still the grader's poison)

Characters later in CODES win inside a cell. With the launch's tile (BLOCK_M x BLOCK_N, or one row per
program for row kernels) a report draws the block grid over the map, so a mask mistake shows up as a
bad last column of tiles and a bias on the wrong axis as a row pattern. Pure: tensors in, dict out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from grader.judging.compare import close_mask

MAX_CELLS = 64  # a map is at most 64 x 64 cells: <= 4 KB of JSON per output
RATIO_LEVELS = (10.0, 1e3, 1e5)
CODES = ".1234INRU"
LEGEND = {
    ".": "within tolerance",
    "1": "wrong, up to 10x the tolerance",
    "2": "wrong, up to 1000x the tolerance",
    "3": "wrong, up to 1e5x the tolerance",
    "4": "wrong, more than 1e5x the tolerance",
    "I": "infinite where a finite value was expected (or the reverse)",
    "N": "NaN where a number was expected (or the reverse)",
    "R": "NaN read from outside an input (out-of-bounds read)",
    "U": "never written",
}


def launch_tile(block_meta: Mapping[str, int], ndim: int) -> tuple[int, int] | None:
    """The output tile one program of the launch covers, for drawing the block grid on a 2-D output:
    BLOCK_M x BLOCK_N for tiled kernels, one row of BLOCK_N for row kernels (grid = M), else None
    (wrapper cases: the student's wrapper picked the blocks)."""
    if ndim != 2:
        return None
    bm, bn = block_meta.get("BLOCK_M"), block_meta.get("BLOCK_N")
    if bm and bn:
        return (int(bm), int(bn))
    if bn:
        return (1, int(bn))
    return None


def error_map(
    actual: torch.Tensor,
    expected: torch.Tensor,
    atol: float,
    rtol: float,
    *,
    unwritten: torch.Tensor | None = None,
    oob_reads: torch.Tensor | None = None,
    tile: tuple[int, int] | None = None,
    max_cells: int = MAX_CELLS,
) -> dict[str, Any]:
    """The map of one output (same shape as `expected`): shape, cell size, grid rows, tile, counts."""
    if tuple(actual.shape) != tuple(expected.shape):
        raise ValueError(f"shape {tuple(actual.shape)} vs expected {tuple(expected.shape)}")
    shape = [int(s) for s in expected.shape]
    codes = _as_matrix(element_codes(actual, expected, atol, rtol, unwritten=unwritten, oob_reads=oob_reads))
    rows, cols = codes.shape
    cell = [max(1, math.ceil(rows / max_cells)), max(1, math.ceil(cols / max_cells))]
    grid = _max_pool(codes, cell)
    return {
        "shape": shape,
        "cell": cell,
        "grid": ["".join(CODES[v] for v in row) for row in grid.tolist()],
        "tile": list(tile) if tile and len(shape) == 2 else None,
        "wrong": int((codes > 0).sum()),
        "total": int(codes.numel()),
    }


def error_maps(
    outputs: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    atol: float,
    rtol: float,
    *,
    unwritten: Mapping[str, torch.Tensor] | None = None,
    oob_reads: Mapping[str, torch.Tensor] | None = None,
    block_meta: Mapping[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """Maps of every output that has a wrong element, keyed by output name (the evidence's shape)."""
    maps = {}
    for name, exp in expected.items():
        got = outputs.get(name)
        if got is None or tuple(got.shape) != tuple(exp.shape):
            continue
        m = error_map(
            got,
            exp,
            atol,
            rtol,
            unwritten=(unwritten or {}).get(name),
            oob_reads=(oob_reads or {}).get(name),
            tile=launch_tile(block_meta or {}, exp.dim()),
        )
        if m["wrong"]:
            maps[name] = m
    return maps


def element_codes(
    actual: torch.Tensor,
    expected: torch.Tensor,
    atol: float,
    rtol: float,
    *,
    unwritten: torch.Tensor | None = None,
    oob_reads: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per element: the index into CODES (0 = within tolerance), as int8."""
    a = actual.detach().to(torch.float64).cpu()
    e = expected.detach().to(torch.float64).cpu()
    ok = close_mask(a, e, atol, rtol)
    with torch.no_grad():
        ratio = (a - e).abs() / (atol + rtol * e.abs())
    level = torch.ones_like(a, dtype=torch.int8)
    for bound in RATIO_LEVELS:
        level += (ratio > bound).to(torch.int8)
    code = torch.where(ok, torch.zeros_like(level), level)
    nan_mismatch = (torch.isnan(a) ^ torch.isnan(e)) & ~ok
    inf_mismatch = (torch.isinf(a) | torch.isinf(e)) & ~ok & ~nan_mismatch
    code[inf_mismatch] = CODES.index("I")
    code[nan_mismatch] = CODES.index("N")
    if oob_reads is not None:
        code[oob_reads.cpu().bool() & ~ok] = CODES.index("R")
    if unwritten is not None:
        code[unwritten.cpu().bool()] = CODES.index("U")
    return code


def _as_matrix(t: torch.Tensor) -> torch.Tensor:
    """0-D -> 1x1, 1-D -> one row (a per-row output drawn as a strip), >2-D -> rows x last dim."""
    if t.dim() == 0:
        return t.reshape(1, 1)
    if t.dim() == 1:
        return t.reshape(1, -1)
    return t.reshape(-1, t.shape[-1])


def _max_pool(codes: torch.Tensor, cell: list[int]) -> torch.Tensor:
    rows, cols = codes.shape
    cr, cc = cell
    grid_rows, grid_cols = math.ceil(rows / cr), math.ceil(cols / cc)
    padded = F.pad(codes.to(torch.int16), (0, grid_cols * cc - cols, 0, grid_rows * cr - rows))
    return padded.reshape(grid_rows, cr, grid_cols, cc).amax(dim=(1, 3))
