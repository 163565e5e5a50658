"""An error map as the report draws it: MapView (a map's geometry, caption and axes), drawn as an SVG
over a palette PNG with one pixel per cell (HTML) or as text with tile boundaries (Markdown). The map
itself (which element is wrong, and how) comes from grader.judging.error_maps."""

from __future__ import annotations

import base64
import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grader.judging.error_maps import CODES

# Error-map colours, one per error_maps.CODES character (the PNG palette and the legend).
MAP_COLOURS = {
    ".": "#cfeedd",
    "1": "#fde68a",
    "2": "#f59e0b",
    "3": "#dc2626",
    "4": "#7f1d1d",
    "I": "#111827",
    "N": "#7c3aed",
    "R": "#db2777",
    "U": "#64748b",
}
MAP_MAX_PX = 360  # the longer side of a drawn map
MAP_MIN_PX = 96  # the shorter side, unless that makes an element taller or wider than 28 px
STRIP_MAX_PX = 480
TEXT_MAP_MAX = (48, 64)  # rows, columns: larger maps are not drawn as text


@dataclass(frozen=True)
class MapView:
    """One error map, with the geometry a template needs to draw it as SVG (element units)."""

    output: str
    shape: tuple[int, ...]
    rows: int  # element rows and columns (a 1-D output is one row)
    cols: int
    cell: tuple[int, int]
    grid: tuple[str, ...]
    tile: tuple[int, int] | None
    wrong: int
    total: int
    worst: tuple[int, int] | None  # (row, col) of the worst element

    @property
    def strip(self) -> bool:
        return len(self.shape) < 2

    @property
    def extent(self) -> tuple[int, int]:
        """Rows and columns the launch's tiles cover (at least the output)."""
        if self.tile is None:
            return self.rows, self.cols
        tm, tn = self.tile
        return math.ceil(self.rows / tm) * tm, math.ceil(self.cols / tn) * tn

    @property
    def size_px(self) -> tuple[float, float]:
        """Width and height the map is drawn at: square elements, the longer side at most MAP_MAX_PX,
        the shorter stretched to at least MAP_MIN_PX so a few long rows stay readable."""
        ext_rows, ext_cols = self.extent
        if self.strip:
            return round(min(28.0, max(3.0, STRIP_MAX_PX / max(ext_cols, 1))) * ext_cols, 1), 22.0
        scale = min(28.0, max(1.0, MAP_MAX_PX / max(ext_rows, ext_cols, 1)))
        width, height = ext_cols * scale, ext_rows * scale
        return round(max(width, min(MAP_MIN_PX, 28.0 * ext_cols)), 1), round(
            max(height, min(MAP_MIN_PX, 28.0 * ext_rows)), 1
        )

    @property
    def image_size(self) -> tuple[int, int]:
        """Width and height, in elements, of the cell image (cells may overhang the output's edge)."""
        return len(self.grid[0]) * self.cell[1] if self.grid else 0, len(self.grid) * self.cell[0]

    @property
    def tile_lines(self) -> tuple[list[int], list[int]]:
        """x positions of vertical and y positions of horizontal block-grid lines."""
        if self.tile is None:
            return [], []
        ext_rows, ext_cols = self.extent
        tm, tn = self.tile
        return list(range(tn, ext_cols, tn)), list(range(tm, ext_rows, tm))

    @property
    def png_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(palette_png(self.grid)).decode("ascii")

    @property
    def caption(self) -> str:
        text = f"{self.output}: {self.wrong} of {self.total} elements wrong"
        if self.cell != (1, 1):
            text += f"; one cell = {self.cell[0]}\u00d7{self.cell[1]} elements (its worst shown)"
        if self.tile is not None:
            tm, tn = self.tile
            text += (
                f"; lines: one program per row, BLOCK_N = {tn}"
                if tm == 1
                else f"; lines: the launch's {tm}\u00d7{tn} tiles"
            )
        return text

    @property
    def overhang(self) -> bool:
        """The launch's tiles reach past the output (their lanes there must be masked)."""
        return self.extent != (self.rows, self.cols)

    @property
    def axes(self) -> str:
        if self.strip:
            return f"index 0 \u2192 {self.cols - 1}"
        return f"rows 0 \u2193 {self.rows - 1}, columns 0 \u2192 {self.cols - 1}"

    def text_lines(self, max_rows: int = TEXT_MAP_MAX[0], max_cols: int = TEXT_MAP_MAX[1]) -> list[str]:
        """The grid as text, tile boundaries as | and -, or [] when it is too big to read as text."""
        if not self.grid or len(self.grid) > max_rows or len(self.grid[0]) > max_cols:
            return []
        cr, cc = self.cell
        tm, tn = self.tile or (0, 0)
        vertical = {j for j in range(1, len(self.grid[0])) if tn and tn % cc == 0 and (j * cc) % tn == 0}
        horizontal = {i for i in range(1, len(self.grid)) if tm > cr and tm % cr == 0 and (i * cr) % tm == 0}
        lines = []
        for i, row in enumerate(self.grid):
            line = "".join(("|" if j in vertical else "") + ch for j, ch in enumerate(row))
            if i in horizontal:
                lines.append("".join("+" if ch == "|" else "-" for ch in line))
            lines.append(line)
        return lines


def worst_cell(shape: Sequence[int], index: Sequence[int] | None) -> tuple[int, int] | None:
    """(row, col) on a map of an output of `shape` (rows flattened, a 1-D output one row) of an element."""
    if not index:
        return None
    if len(shape) < 2:
        return 0, int(index[0])
    if len(index) != len(shape):
        return None
    flat_row = 0
    for size, i in zip(shape[:-1], index[:-1], strict=True):
        flat_row = flat_row * size + int(i)
    return flat_row, int(index[-1])


def map_view(output: str, data: Mapping[str, Any], worst_index: Sequence[int] | None) -> MapView:
    shape = tuple(int(s) for s in data["shape"])
    if len(shape) < 2:
        rows, cols = 1, shape[0] if shape else 1
    else:
        rows, cols = math.prod(shape[:-1]), shape[-1]
    worst = worst_cell(shape, worst_index)
    tile = data.get("tile")
    return MapView(
        output=output,
        shape=shape,
        rows=rows,
        cols=cols,
        cell=(int(data["cell"][0]), int(data["cell"][1])),
        grid=tuple(str(g) for g in data["grid"]),
        tile=(int(tile[0]), int(tile[1])) if tile else None,
        wrong=int(data["wrong"]),
        total=int(data["total"]),
        worst=worst,
    )


def palette_png(grid: Sequence[str]) -> bytes:
    """A palette PNG with one pixel per grid cell, coloured by MAP_COLOURS."""
    height, width = len(grid), len(grid[0]) if grid else 0
    palette = b"".join(bytes.fromhex(MAP_COLOURS[c][1:]) for c in CODES)
    raw = b"".join(b"\x00" + bytes(CODES.index(ch) for ch in row) for row in grid)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", max(width, 1), max(height, 1), 8, 3, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"PLTE", palette)
        + chunk(b"IDAT", zlib.compress(raw or b"\x00\x00", 9))
        + chunk(b"IEND", b"")
    )
