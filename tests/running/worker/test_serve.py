"""grader/running/worker/serve.py: one dispatch table maps every request type to the harness's handler; a tree
that is not a request is answered with an error reply (the worker stays up), and every reply carries the
worker's compile seconds."""

from __future__ import annotations

import torch

from grader.running import protocol
from grader.running.worker.serve import answer, handlers


class FakeHarness:
    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def __getattr__(self, name: str):
        def handler(request):
            self.seen.append((name, request))
            return protocol.Reply(ok=True)
        return handler


def test_every_worker_request_has_a_handler() -> None:
    harness = FakeHarness()
    table = handlers(harness)
    assert set(table) == set(protocol.WORKER_REQUESTS)
    load = protocol.Load(path="/s.py", names=("k",))
    assert answer(table, protocol.encode(load), lambda: 1.5) == protocol.Reply(ok=True, compile_s=1.5)
    assert harness.seen[-1] == ("load", load)  # decoded back into the message that was sent
    kept = protocol.TimeKept(key="perf", repeats=3, spin_up_ms=30.0, hold=True)
    answer(table, protocol.encode(kept), lambda: 0.0)
    assert harness.seen[-1] == ("time_kept", kept)


def test_what_does_not_decode_gets_an_error_reply() -> None:
    table = handlers(FakeHarness())
    for tree, why in (({"op": "shell"}, "unknown op 'shell'"), ([1, 2], "a request must be a dict"),
                      ({"op": "replay", "launches": "all"}, "Replay.launches: a list"),
                      ({"op": "launch", "kernel": "k"}, "missing field")):
        reply = answer(table, tree, lambda: 0.25)
        assert not reply.ok and reply.failure.type == "ProtocolError" and why in reply.failure.message, tree
        assert reply.compile_s == 0.25


def test_a_request_with_tensors_decodes_with_them() -> None:
    harness = FakeHarness()
    launch = protocol.Launch(kernel="k", storages=(torch.arange(3.0),), views=(), args=({"view": 0}, 3), meta={},
                             grid=("1",))
    answer(handlers(harness), protocol.encode(launch), lambda: 0.0)
    (_, got), = harness.seen
    assert isinstance(got, protocol.Launch) and torch.equal(got.storages[0], torch.arange(3.0))
