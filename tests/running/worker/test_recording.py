"""grader/running/worker/recording.py: the tensors a wrapper allocates sit inside poisoned guards, a store
past them is reported (allocation_reports) and named, and they stay grounded for the replay; a wrapper's returned
value is encoded as plain data and its tensors' views described."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from grader.evidence import guard_bits
from grader.judging.replay import grounded
from grader.running import guards
from grader.running.worker.launch_record import describe_tensor, storage_bytes
from grader.running.worker.recording import Recorder, TorchOps, allocation_reports, encode_value, result_views


@contextlib.contextmanager
def recorded_call() -> Any:
    """What Harness.call sets up around a wrapper: a recorder with guarded allocations, the torch mode."""
    recorder = Recorder()
    recorder.allocations = []
    Recorder.active = recorder
    try:
        with TorchOps():
            yield recorder
    finally:
        Recorder.active = None

def test_a_wrappers_allocation_sits_inside_poisoned_guards() -> None:
    with recorded_call() as recorder:
        out = torch.empty((3, 5), dtype=torch.float32)
        ones = torch.ones(4)
        ints = torch.empty(4, dtype=torch.int64)  # not a float: left as it is
    assert out.shape == (3, 5) and out.stride() == (5, 1) and torch.equal(ones, torch.ones(4))
    assert ints.storage_offset() == 0
    (alloc_out, alloc_ones) = recorder.allocations
    assert out.storage_offset() == alloc_out.guard >= guards.GUARD_MIN
    poison = guard_bits.nan_pattern(torch.float32, guard_bits.PAYLOAD_OUTPUT_POISON)
    assert bool((guard_bits.bits(alloc_out.storage) == poison).all())  # guards and body: one repeated value
    assert allocation_reports(recorder.allocations) == []

def test_a_store_one_past_a_wrappers_own_output_is_found_and_named() -> None:
    with recorded_call() as recorder:
        out = torch.empty((3, 5), dtype=torch.float32)
    out.fill_(1.0)
    out.view(-1).as_strided((1,), (1,), out.storage_offset() + 15).fill_(0.0)  # out[3, 0]: past the end
    (found,) = allocation_reports(recorder.allocations)
    assert found["sid"] == describe_tensor(out)["sid"] and found["count"] == 1
    finding = guards.allocation_guard_finding(found, "out")
    assert finding is not None and finding.trap == "oob-write"
    assert finding.message() == "1 out-of-bounds write(s) in out; first at 1 element(s) past the end of out's storage"
    assert guards.allocation_guard_finding(dict(found, first=-1), "out") is None  # malformed: ignored

def test_guarded_allocations_stay_grounded_for_the_replay() -> None:
    x = torch.randn(4, 6)
    inputs = {"x": x}
    with recorded_call():
        fresh = torch.empty(4)
        zeros = torch.zeros(4)
        copy = torch.empty((4, 6))
        copy.copy_(x)
        answer = torch.empty(4)
        answer.copy_(x.mean(dim=1))
    for tensor in (fresh, zeros, copy):
        assert grounded(storage_bytes(tensor), [describe_tensor(tensor)], (), inputs)
    assert not grounded(storage_bytes(answer), [describe_tensor(answer)], (), inputs)


def test_a_returned_value_is_plain_data() -> None:
    tensor = torch.arange(6.0).reshape(2, 3)
    encoded = encode_value((tensor, 3))
    assert encoded["type"] == "tuple" and len(encoded["sequence"]) == 2
    first, second = encoded["sequence"]
    assert torch.equal(first["tensor"], tensor) and first["tensor"] is not tensor  # a copy, on the CPU
    assert (first["device"], first["dtype"], first["shape"]) == ("cpu", "torch.float32", [2, 3])
    assert second == {"other": "int", "repr": "3"}
    assert encode_value(torch.zeros(2).to_sparse())["other"] == "sparse_coo Tensor"
    assert "sequence" not in encode_value([[tensor]])["sequence"][0]  # one level of sequence, no deeper


def test_result_views_name_each_returned_tensors_storage() -> None:
    base = torch.zeros(4, 5)
    (row, other) = result_views((base[1], 7))
    assert row is not None and row["sid"] == describe_tensor(base)["sid"] and other is None


def test_a_worker_records_a_wrappers_torch_ops_without_importing_dynamo() -> None:
    """torch wraps every dispatch mode so that Dynamo never compiles inside it, importing torch._dynamo at the first
    call (6 s of a worker's start on an H100 machine). A fresh process with only the zygote's preload records a
    wrapper's ops (and poisons its allocation) without it."""
    import subprocess
    import sys

    code = """
import importlib, sys
from grader.running.worker.zygote import PRELOAD
for name in PRELOAD:
    importlib.import_module(name)
import torch
from grader.running.worker.recording import Recorder, TorchOps
recorder = Recorder()
Recorder.active = recorder
with TorchOps():
    out = torch.empty(8)
    (torch.randn(8) * 2).sum()
Recorder.active = None
assert recorder.torch_ops.get("aten.mul", 0) == 1 and recorder.torch_ops.get("aten.empty", 0) == 1, recorder.torch_ops
assert torch.isnan(out).all()  # the fresh allocation was poisoned
print(sorted(name for name in sys.modules if name.startswith("torch._dynamo")))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
