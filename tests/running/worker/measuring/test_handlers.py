"""grader/running/worker/measuring/handlers.py on the CPU (nothing is timed there): a target run once at the timed
size, its launches recorded by layout for a timer, its outputs sent back when asked; what raises is an error reply,
never an exception out of the worker. (Timing itself: tests/e2e/test_gpu_performance.py on a GPU.)"""

from __future__ import annotations

import textwrap
import types

import torch

from grader.running import protocol
from grader.running.worker.measuring.handlers import run_target, time_kept
from tests.running.worker.interpreted import run_interpreted


def test_a_function_that_raises_is_an_error_reply() -> None:
    def broken(x):
        raise ValueError("no")

    module = types.SimpleNamespace(broken=broken)
    request = protocol.Run(kind="function", target="broken", inputs=(torch.ones(2),), args=({"in": 0},), kwargs={},
                           outputs=(), meta={}, grid=())
    reply = run_target(module, request, torch.device("cpu"), "softmax.py")
    assert not reply.ok and reply.failure.type == "ValueError" and not reply.fatal


def test_a_key_never_kept_is_an_error_reply() -> None:
    reply = time_kept(protocol.TimeKept(key="never", repeats=1, spin_up_ms=0.0), torch.device("cpu"), "softmax.py")
    assert not reply.ok and reply.failure.type == "KeyError"


SCRIPT = textwrap.dedent('''
    import json, torch, triton, triton.language as tl, types
    from grader.running import protocol
    from grader.running.worker import recording
    from grader.running.worker.measuring.handlers import run_target

    recording.patch_kernel_runs()

    @triton.jit
    def double_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < N) * 2, mask=offs < N)

    module = types.SimpleNamespace(double_kernel=double_kernel)
    request = protocol.Run(kind="kernel", target="double_kernel", inputs=(torch.arange(4.0),),
                           args=({"in": 0}, {"out": 0}, 4), kwargs={}, outputs=({"shape": [4], "dtype": "float32"},),
                           meta={"BLOCK": 4}, grid=("1",), record=True, return_outputs=True, time=True)
    reply = run_target(module, request, torch.device("cpu"), "x.py")
    (launch,) = reply.record["launches"]
    print(json.dumps({"ok": reply.ok, "outputs": [t.tolist() for t in reply.outputs], "timed": list(reply.medians_ms),
                      "recorded": [launch["kernel"], launch["complete"], sorted(launch["storages"])],
                      "views": len(reply.record["outputs"])}))
''')


def test_a_kernel_run_at_the_timed_size_is_recorded_for_the_timer() -> None:
    report = run_interpreted(SCRIPT)
    assert report["ok"] and report["outputs"] == [[0.0, 2.0, 4.0, 6.0]]
    assert report["timed"] == []  # the interpreter times nothing
    kernel, complete, storages = report["recorded"]
    assert kernel == "double_kernel" and complete and len(storages) == 2 and report["views"] == 1


def test_a_request_of_no_samples_lets_a_held_graph_go(monkeypatch) -> None:
    """A timing in turn that settled early (contestants.let_go) asks each worker for no sample, not held: the captured
    graph it held for the case (and the memory its buffers pin) is dropped, with no sample taken."""
    from grader.running.worker.measuring import planned_launches
    from grader.running.worker.measuring.samplers import Timing

    taken: list[int] = []

    class HeldSampler:
        calls, watch = 1, None

        def samples(self, repeats: int, spin_up_ms: float = 0.0) -> tuple[Timing, str]:
            taken.append(repeats)
            return Timing(tuple([0.1] * repeats)), ""

    monkeypatch.setattr(planned_launches, "_HELD", {"perf-x": HeldSampler()})
    held = protocol.TimeKept(key="perf-x", repeats=1, spin_up_ms=0.0, hold=True)
    assert planned_launches.time_kept(held, torch.device("cuda")).medians_ms == (0.1,)
    assert planned_launches.held_graphs()  # held for the next round
    go = planned_launches.time_kept(protocol.TimeKept(key="perf-x", repeats=0, spin_up_ms=0.0, hold=False),
                                    torch.device("cuda"))
    assert go.ok and go.medians_ms == () and taken == [1, 0] and not planned_launches.held_graphs()
