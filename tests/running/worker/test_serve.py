"""grader/running/worker/serve.py: one dispatch table maps every request op to the harness's handler."""

from __future__ import annotations

from grader.running.worker.serve import handlers


class FakeHarness:
    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def __getattr__(self, name: str):
        def handler(*args):
            self.seen.append((name, args))
            return {"ok": True, "op": name}
        return handler


def test_every_op_reaches_its_handler() -> None:
    harness = FakeHarness()
    table = handlers(harness)
    assert set(table) == {"load", "launch", "call", "compile", "warmup", "time", "replay", "time_launches",
                          "time_kept"}
    assert table["load"]({"op": "load", "path": "/s.py", "names": ["k"]}) == {"ok": True, "op": "load"}
    assert harness.seen[-1] == ("load", ("/s.py", ["k"]))
    for op in ("launch", "call", "compile", "warmup", "time", "replay", "time_launches"):
        assert table[op]({"op": op})["op"] == op
    assert table["time_kept"]({"op": "time_kept"})["op"] == "time_launches"  # one handler, two ops
