"""grader/running/worker/traffic.py: what the fence counts of a launch's loads and stores. The sector and
lane arithmetic on plain arrays; the counting on small kernels in Triton's interpreter, in a subprocess
(the interpreter is chosen when @triton.jit runs)."""

from __future__ import annotations

import numpy as np

from grader.running.worker.traffic import _Side, active_lanes, contiguous_axis
from tests.running.worker.interpreted import run_interpreted

BASE = 1 << 20  # an address aligned to every sector


def side(addresses: np.ndarray, lanes: np.ndarray | None = None, itemsize: int = 4,
         block: int | None = None) -> dict[str, int]:
    counted = _Side()
    counted.add(addresses.astype(np.uint64), np.arange(addresses.size) if lanes is None else lanes, itemsize,
                addresses.size if block is None else block)
    found = counted.to_dict()
    assert found.pop("calls") == 1 and found.pop("block_lanes") == (addresses.size if block is None else block)
    return found


def test_32_consecutive_float32_are_one_request_of_4_sectors() -> None:
    assert side(BASE + 4 * np.arange(32)) == {"bytes": 128, "requests": 1, "sectors": 4, "min_sectors": 4}


def test_lanes_a_row_apart_take_a_sector_each() -> None:
    counted = side(BASE + 4 * 100 * np.arange(64))  # a column of a 100-wide float32 matrix
    assert counted == {"bytes": 256, "requests": 2, "sectors": 64, "min_sectors": 8}


def test_a_broadcast_load_needs_one_sector() -> None:
    assert side(np.full(32, BASE + 8)) == {"bytes": 128, "requests": 1, "sectors": 1, "min_sectors": 1}


def test_masked_lanes_keep_their_warp() -> None:
    # 12 active lanes at the start of each of two warps: two requests of 48 bytes, not one of 96
    lanes = np.concatenate([np.arange(12), 32 + np.arange(12)])
    addresses = BASE + 4 * np.concatenate([np.arange(12), 100 + np.arange(12)])
    counted = side(addresses, lanes)
    assert counted["requests"] == 2 and counted["min_sectors"] == 4 and counted["sectors"] == 4


def test_the_contiguous_axis_of_a_tile_is_found() -> None:
    rows, cols = np.arange(4)[:, None], np.arange(8)[None, :]
    row_major = BASE + 4 * (rows * 64 + cols)
    col_major = BASE + 4 * (rows + cols * 64)  # a transposed view: B = weight.T
    assert contiguous_axis(row_major, 4) == 1
    assert contiguous_axis(col_major, 4) == 0
    addresses, lanes = active_lanes(col_major, None, 4)
    assert addresses[:4].tolist() == (BASE + 4 * np.arange(4)).tolist()  # walked along the contiguous axis
    assert lanes.tolist() == list(range(32))


def test_active_lanes_drop_masked_lanes_with_their_positions() -> None:
    addresses, lanes = active_lanes(BASE + 4 * np.arange(8), np.arange(8) < 5, 4)
    assert lanes.tolist() == [0, 1, 2, 3, 4] and addresses.size == 5


COUNT_SCRIPT = """
import json, torch, triton, triton.language as tl
from grader.running.worker import fence, recording, traffic
assert fence.install()
recording.patch_kernel_runs()

@triton.jit
def rows_twice(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + r * N + c, mask=c < N)
    b = tl.load(x_ptr + r * N + c, mask=c < N)
    tl.store(out_ptr + r * N + c, a + b, mask=c < N)

@triton.jit
def column(x_ptr, out_ptr, M, N, BLOCK: tl.constexpr):
    j = tl.program_id(0)
    r = tl.arange(0, BLOCK)
    tl.store(out_ptr + r * N + j, tl.load(x_ptr + r * N + j, mask=r < M), mask=r < M)

@triton.jit
def tile_dot(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + i[:, None] * BLOCK + i[None, :])
    b = tl.load(b_ptr + i[:, None] + i[None, :] * BLOCK)  # a transposed operand: still coalesced
    tl.store(c_ptr + i[:, None] * BLOCK + i[None, :], tl.dot(a, b))

x, out = torch.randn(64, 100), torch.empty(64, 100)
a, b, c = torch.randn(16, 16), torch.randn(16, 16), torch.empty(16, 16)
found = {}
for name, run in (("rows_twice", lambda: rows_twice[(64,)](x, out, 100, BLOCK=128)),
                  ("column", lambda: column[(100,)](x, out, 64, 100, BLOCK=64)),
                  ("tile_dot", lambda: tile_dot[(1,)](a, b, c, BLOCK=16))):
    with traffic.counting() as launches:
        run()
    found[name] = traffic.summaries(launches)
with traffic.counting() as launches:
    pass
found["nothing"] = traffic.summaries(launches)
rows_twice[(2,)](x, out, 100, BLOCK=128)  # not counted: no request asked
print(json.dumps(found))
"""


def test_counting_small_kernels_in_the_interpreter() -> None:
    found = run_interpreted(COUNT_SCRIPT)

    (rows,) = found["rows_twice"]
    assert rows["kernel"] == "rows_twice" and rows["programs"] == 64 and rows["runs"] == 1 and rows["dots"] == 0
    assert rows["load"]["calls"] == 2 * 64 and rows["load"]["block_lanes"] == 2 * 64 * 128  # masked lanes too
    assert rows["store"]["calls"] == 64
    assert rows["load"]["bytes"] == 2 * 64 * 100 * 4 and rows["store"]["bytes"] == 64 * 100 * 4
    assert rows["storages"] == [{"name": "x_ptr", "loaded": 2 * 25600, "program_distinct": 25600}]
    assert rows["load"]["sectors"] < 1.2 * rows["load"]["min_sectors"]  # rows of 400 bytes: coalesced

    (col,) = found["column"]
    assert col["load"]["sectors"] == 64 * 100 and col["load"]["min_sectors"] == 100 * 8  # 8x
    assert col["storages"][0]["loaded"] == col["storages"][0]["program_distinct"]  # read once

    (tile,) = found["tile_dot"]
    assert tile["dots"] == 1 and tile["programs"] == 1
    assert tile["load"]["sectors"] == tile["load"]["min_sectors"] == 2 * 16 * 16 * 4 // 32
    assert found["nothing"] == []
