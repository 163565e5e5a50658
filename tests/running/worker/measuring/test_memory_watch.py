"""grader/running/worker/measuring/memory_watch.py: which bytes a timer watches around a sample (pure parts; the
watch itself runs on a GPU: test_samplers_gpu_fresh.py)."""

from __future__ import annotations

from grader.running.worker.measuring.memory_watch import chunk_table, spans_outside


def test_every_byte_of_the_segments_but_the_rewritten_buffers_is_watched() -> None:
    segments = [(1000, 100), (5000, 50)]
    rewritten = [(1010, 20), (1025, 10), (1090, 30), (5000, 50), (9000, 4)]  # overlapping, past the end, outside
    assert spans_outside(segments, rewritten) == [(1000, 10), (1035, 55)]
    assert spans_outside(segments, []) == [(1000, 100), (5000, 50)]
    assert spans_outside([(0, 10)], [(0, 0)]) == [(0, 10)]  # an empty buffer hides nothing


def test_spans_become_chunks_of_one_bound_relative_to_the_base() -> None:
    table = chunk_table([(1000, 10), (1035, 55)], base=1000, entries=8, min_chunk=20)
    pairs = list(zip(table[::2], table[1::2], strict=True))
    assert pairs == [(0, 10), (35, 20), (55, 20), (75, 15)]
    assert sum(size for _, size in pairs) == 65  # every watched byte in exactly one chunk
    big = chunk_table([(0, 10_000)], base=0, entries=4, min_chunk=1)
    assert len(big) // 2 <= 4 and sum(big[1::2]) == 10_000  # chunks grow so the table holds them


def test_free_blocks_and_the_slack_behind_allocations_are_what_gets_poisoned() -> None:
    from grader.running.worker.measuring.memory_watch import layout_of

    snapshot = [
        {"device": 0, "address": 0, "total_size": 2048, "blocks": [
            {"address": 0, "size": 512, "requested_size": 100, "state": "active_allocated"},
            {"address": 512, "size": 512, "requested_size": 512, "state": "active_allocated"},
            {"address": 1024, "size": 512, "requested_size": 0, "state": "active_allocated"},  # size unknown: all used
            {"address": 1536, "size": 512, "requested_size": 0, "state": "inactive"},
        ]},
        {"device": 1, "address": 9000, "total_size": 512, "blocks": [
            {"address": 9000, "size": 512, "requested_size": 0, "state": "inactive"}]},  # another GPU's
    ]
    segments, unused = layout_of(snapshot, 0)
    assert segments == [(0, 2048)]
    assert unused == [(100, 412), (1536, 512)]


def test_spans_are_cut_to_whole_words_and_chunked_in_words() -> None:
    from grader.running.worker.measuring.memory_watch import words_inside

    assert words_inside([(1003, 30), (2000, 7), (4096, 16)]) == [(1008, 24), (4096, 16)]  # 1003..1033 -> 1008..1032
    table = chunk_table([(1008, 24), (4096, 16)], base=1008, min_chunk=16, unit=8)
    assert list(zip(table[::2], table[1::2], strict=True)) == [(0, 2), (2, 1), (386, 2)]



def test_memory_cut_into_more_pieces_than_the_watch_holds_is_refused_not_left_unwatched() -> None:
    from grader.running.worker.measuring.memory_watch import too_many_spans

    assert too_many_spans(10, 20, entries=21) == ""
    assert "more than the memory watch holds (20)" in too_many_spans(21, 3, entries=21)
    assert "cannot be timed unwatched" in too_many_spans(0, 500, entries=21)


def test_the_watch_kernels_poison_a_span_and_fingerprint_its_words_in_the_interpreter() -> None:
    """The kernels themselves on CPU tensors under Triton's interpreter, with the worker's shims (on a GPU they take
    raw addresses): the poison reaches exactly its span; the fingerprint is the same twice, changes with any one byte
    and with the key, and comes back when the byte does."""
    from tests.running.worker.interpreted import run_interpreted

    result = run_interpreted('''
import json, torch
from grader.running.worker import interpreter_compat
from grader.running.worker.measuring import memory_watch as mw
interpreter_compat.install()
buf = torch.zeros(4096, dtype=torch.uint8)
table = torch.tensor(mw.chunk_table([(1000, 1000)], 0, min_chunk=300), dtype=torch.int64)
mw._poison_kernel[(len(table) // 2,)](buf, table, BLOCK=256)
poisoned = [int(buf[:1000].sum()), int((buf[1000:2000] == 255).sum()), int(buf[2000:].sum())]
words = buf.view(torch.int64)
wtable = torch.tensor(mw.chunk_table(mw.words_inside([(1000, 1000)]), 0, min_chunk=128, unit=8), dtype=torch.int64)
def fingerprint(key):
    out = torch.zeros(1, dtype=torch.int64)
    mw._fingerprint_kernel[(len(wtable) // 2,)](words, wtable, out, key, BLOCK=16)
    return int(out)
sums = [fingerprint(7), fingerprint(7)]
buf[1500] = 3
sums.append(fingerprint(7))
buf[1500] = 255
sums += [fingerprint(7), fingerprint(8)]
print(json.dumps({"poisoned": poisoned, "sums": sums, "chunks": len(wtable) // 2}))
''')
    assert result["poisoned"] == [0, 1000, 0]
    first, again, changed, restored, other_key = result["sums"]
    assert result["chunks"] > 1 and first == again == restored and changed != first and other_key != first


def test_a_raw_address_becomes_a_pointer_triton_takes() -> None:
    """On a GPU the watch's kernels take raw device addresses (`_pointer`): Triton's reinterpret needs an object with
    `data_ptr` (on the H100, session 9, a misplaced method left `_Address` without one: every self-test failed and the
    watch stood aside). The same object, in bytes or in 8-byte words, reports the address it was given."""
    import torch
    import triton.language as tl

    from grader.running.worker.measuring.memory_watch import _pointer

    for words, dtype in ((False, tl.uint8), (True, tl.int64)):
        pointer = _pointer(1 << 20, torch.device("cpu"), words)
        assert pointer.data_ptr() == 1 << 20 and pointer.dtype == dtype and pointer.stride(0) == (1,)
