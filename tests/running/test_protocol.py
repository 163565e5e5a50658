"""grader/running/protocol.py: every message between the grader and a worker round-trips through the one codec
(over the worker's real channel too), and a tree that is not the declared message, an unknown op, a missing or
unknown field, a value of the wrong type, is refused with a ProtocolError naming the field: what a worker
running student code may send back is checked before anything reads it."""

from __future__ import annotations

import dataclasses
import socket

import pytest
import torch

from grader.evidence.worker_error import Frame, WorkerError
from grader.running import protocol
from grader.running.worker.channel import Channel

LAUNCH = protocol.Launch(kernel="softmax_kernel", storages=(torch.arange(4.0),),
                         views=({"storage": 0, "shape": [4], "stride": [1], "offset": 0},),
                         args=({"view": 0}, 4), meta={"BLOCK": 4}, grid=("1",), count_traffic=True)
REQUESTS = (
    protocol.Load(path="/w/softmax.py", names=("softmax_kernel", "softmax")),
    LAUNCH,
    protocol.Call(function="softmax", storages=(torch.zeros(2, 3),), views=(), args=({"view": 0},), kwargs={"dim": 1}),
    protocol.Compile(kernel="k", signature={"x_ptr": "*fp32"}, constexprs={"BLOCK": 16}),
    protocol.Warmup(launches=(LAUNCH, LAUNCH)),
    protocol.Replay(launches=({"kernel": "k", "grid": [1], "args": [], "kwargs": {}, "load": {7: torch.ones(2)}},)),
    protocol.Run(kind="kernel", target="k", inputs=(torch.ones(3),), args=({"in": 0},), kwargs={}, outputs=(),
                 meta={}, grid=("1",), record=True, warmup_ms=None),
    protocol.TimeLaunches(inputs=(torch.ones(3),), buffers={5: {"input": 0, "nbytes": 12}}, launches=(), outputs=(),
                          keep="perf-1"),
    protocol.TimeKept(key="perf-1", repeats=1, spin_up_ms=30.0, hold=True),
    protocol.ProfileKept(key="perf-softmax"),
    protocol.Fork(backend="cuda", env={"HOME": "/w"}, cwd="/w", log="/w/output.log", address_limit=None),
    protocol.Status(pid=12),
    protocol.KillStrays(),
)
ERROR = WorkerError(type="ValueError", message="bad", chain=("builtins.ValueError",), frames=(Frame(3, "f", "x"),))
REPLIES = (
    protocol.Ready(ok=True, pid=7, warm=True),
    protocol.Loaded(ok=True, symbols={"k": {"kind": "kernel", "params": ["x_ptr"]}}),
    protocol.Launched(ok=True, storages=(torch.ones(2),), device_ptrs=(140000000,), traffic=({"bytes": 8},)),
    protocol.Called(ok=False, error=ERROR, launches=({"kernel": "k", "grid": "(1,)"},), torch_ops={"aten.add": 1}),
    protocol.Replayed(ok=True, buffers={7: torch.ones(2), 9: torch.zeros(1)}),
    protocol.Timed(ok=True, outputs=(torch.ones(1),), sets=4, medians_ms=(0.5, 0.25)),
    protocol.Ran(ok=True, record={"launches": [], "outputs": []}, medians_ms=(1.0,)),
    protocol.ExitStatus(ok=True, exited=True, status=-9),
    protocol.Profiled(ok=True, launches=2, kernels={"softmax_kernel": {"registers": 40, "spills": 0,
                                                                       "tensor_cores": False, "vector_loads": True}}),
)


def same(a: object, b: object) -> bool:
    """Equal, tensors compared by value (dataclass equality would compare them with ==)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_request_round_trips(request_: protocol.Request) -> None:
    accepted = protocol.ZYGOTE_REQUESTS if type(request_) in protocol.ZYGOTE_REQUESTS else protocol.WORKER_REQUESTS
    tree = protocol.encode(request_)
    assert tree[protocol.OP] == request_.OP
    assert same(protocol.decode_request(tree, accepted), request_)


@pytest.mark.parametrize("reply", REPLIES, ids=lambda r: type(r).__name__)
def test_every_reply_round_trips(reply: protocol.Reply) -> None:
    tree = protocol.encode(reply)
    assert protocol.OP not in tree  # a reply is read as the class its request names
    assert same(protocol.decode_reply(type(reply), tree), reply)


def test_messages_cross_the_workers_channel() -> None:
    grader_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with Channel(grader_end) as ours, Channel(worker_end) as theirs:
        ours.send(protocol.encode(LAUNCH))
        assert same(protocol.decode_request(theirs.receive(timeout=30)), LAUNCH)
        reply = protocol.Launched(ok=True, storages=(torch.arange(4.0) * 2,))
        theirs.send(protocol.encode(reply))
        assert same(protocol.decode_answer(LAUNCH, ours.receive(timeout=30)), reply)


@pytest.mark.parametrize(("tree", "why"), [
    ({"op": "exec"}, "unknown op 'exec'"),
    ({"op": 3}, "unknown op 3"),
    ("load", "a request must be a dict, not str"),
    ({"op": "load", "path": "/s.py"}, "Load: missing field 'names'"),
    ({"op": "load", "path": "/s.py", "names": [], "extra": 1}, "Load: unknown field 'extra'"),
    ({"op": "load", "path": b"/s.py", "names": []}, "Load.path: a string, not bytes"),
    ({"op": "time_kept", "key": "k", "repeats": True, "spin_up_ms": 1.0}, "TimeKept.repeats: an integer, not bool"),
    ({"op": "launch", "kernel": "k", "storages": [[1.0]], "views": [], "args": [], "meta": {}, "grid": []},
     "Launch.storages[0]: a tensor, not list"),
    ({"op": "warmup", "launches": [{"op": "launch", "kernel": 1}]}, "Warmup.launches[0].kernel: a string, not int"),
])
def test_a_request_that_is_not_declared_is_refused(tree: object, why: str) -> None:
    with pytest.raises(protocol.ProtocolError, match=why.replace("(", r"\(").replace("[", r"\[")):
        protocol.decode_request(tree)


def test_a_worker_cannot_send_a_reply_that_does_not_fit() -> None:
    with pytest.raises(protocol.ProtocolError, match="Launched.storages: a list, not str"):
        protocol.decode_reply(protocol.Launched, {"ok": True, "storages": "all of them"})
    with pytest.raises(protocol.ProtocolError, match="Replayed.buffers key: an integer, not str"):
        protocol.decode_reply(protocol.Replayed, {"ok": True, "buffers": {"7": torch.ones(1)}})
    with pytest.raises(protocol.ProtocolError, match="Called.error.frames"):
        protocol.decode_reply(protocol.Called, {"ok": False, "error": {"type": "E", "frames": [{"line": "3"}]}})
    with pytest.raises(protocol.ProtocolError, match="a reply must be a dict"):
        protocol.decode_answer(LAUNCH, [True])
    loaded = protocol.decode_reply(protocol.Loaded, {"ok": False})  # every reply field has a default
    assert loaded.failure == WorkerError() and loaded.symbols == {}


def test_a_zygote_request_is_no_worker_request() -> None:
    with pytest.raises(protocol.ProtocolError, match="unknown op 'fork'"):
        protocol.decode_request(protocol.encode(protocol.Fork(backend="cuda", env={}, cwd="/", log="/l")))


def test_the_sanitizer_reads_the_marker_lines_declared_here() -> None:
    from grader.running.cases import sanitizer

    assert protocol.POINTERS_LINE.endswith(":") and protocol.ALLOCATION_LINE.endswith(":")
    assert sanitizer.POINTERS_LINE is protocol.POINTERS_LINE and sanitizer.ALLOCATION_LINE is protocol.ALLOCATION_LINE
