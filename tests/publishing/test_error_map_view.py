"""Error maps as the report draws them (grader/publishing/error_map_view.py), on hand-made tensors (fast).

These pin the map's geometry (extent of the launch's tiles, the worst element's cell, the drawn size), its
text form and its PNG, because the report draws whatever the map says: a wrong cell or colour would draw a
convincing, wrong picture."""

from __future__ import annotations

import struct
import zlib

import torch

from grader.judging.error_maps import CODES, error_map
from grader.publishing.error_map_view import MAP_COLOURS, MAP_MAX_PX, map_view, palette_png

ATOL = RTOL = 1e-5


def store_mask_output() -> tuple[torch.Tensor, torch.Tensor]:
    """A 37x19 output where each 16x16 tile's store spills one column too far, into column 0 of the next
    row: column 0 is wrong on every row except the first of each tile row (the pattern of
    store_mask_off_by_one on linear-kernel-primes)."""
    expected = torch.rand(37, 19, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 1.0
    actual = expected.to(torch.float32).clone()
    for row in range(37):
        if row % 16:
            actual[row, 0] = 0.0
    return actual, expected


def test_map_view_geometry() -> None:
    actual, expected = store_mask_output()
    m = map_view("out", error_map(actual, expected, ATOL, RTOL, tile=(16, 16)), [34, 0])
    assert (m.rows, m.cols) == (37, 19)
    assert m.extent == (48, 32)  # 3 x 2 tiles of 16
    assert m.tile_lines == ([16], [16, 32])
    assert m.worst == (34, 0)
    assert m.image_size == (19, 37)
    width, height = m.size_px
    assert max(width, height) <= MAP_MAX_PX and height > width
    assert m.overhang and "the launch's 16×16 tiles" in m.caption
    strip = map_view(
        "var", {"shape": [8], "cell": [1, 1], "grid": [".....NN."], "tile": None, "wrong": 2, "total": 8}, [5]
    )
    assert strip.strip and (strip.rows, strip.cols) == (1, 8) and strip.worst == (0, 5)
    assert strip.tile_lines == ([], [])


def test_text_map_marks_tile_boundaries() -> None:
    data = {
        "shape": [3, 5],
        "cell": [1, 1],
        "grid": ["..N..", ".....", "4...."],
        "tile": [2, 2],
        "wrong": 2,
        "total": 15,
    }
    assert map_view("out", data, None).text_lines() == ["..|N.|.", "..|..|.", "--+--+-", "4.|..|."]
    assert map_view("out", dict(data, tile=[1, 8]), None).text_lines() == ["..N..", ".....", "4...."]
    assert map_view("out", data, None).text_lines(max_rows=2) == []


def decode_png(data: bytes) -> tuple[int, int, bytes, bytes]:
    """(width, height, palette, raw scanlines) of a PNG, checking signature and every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body), kind
        chunks[kind] = body
        pos += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour_type) == (8, 3)
    return width, height, chunks[b"PLTE"], zlib.decompress(chunks[b"IDAT"])


def test_palette_png_has_one_pixel_per_cell() -> None:
    width, height, palette, raw = decode_png(palette_png([".N", "U4", "R."]))
    assert (width, height) == (2, 3)
    assert len(palette) == 3 * len(CODES)
    assert raw == bytes(
        [0, 0, CODES.index("N"), 0, CODES.index("U"), CODES.index("4"), 0, CODES.index("R"), 0]
    )
    assert palette[3 * CODES.index("N") : 3 * CODES.index("N") + 3] == bytes.fromhex(
        MAP_COLOURS["N"][1:]
    )
