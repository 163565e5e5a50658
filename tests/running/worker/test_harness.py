"""grader/running/worker/harness.py: each correctness request answered in a real worker's harness on Triton's
interpreter (a fresh Python: the harness patches Triton once per process), replies typed and plain; a launch that
raises is an error reply with the student's line, never an exception out of the worker; a fatal device error ends
the worker, and under compute-sanitizer the worker ends itself so the tool can write its report."""

from __future__ import annotations

import textwrap

from grader.running import protocol
from grader.running.worker.harness import _failed
from tests.running.worker.interpreted import run_interpreted

SUBMISSION = '''
import torch, triton, triton.language as tl

@triton.jit
def double_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < N) * 2, mask=offs < N)

def double(x):
    out = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), 4),)](x, out, x.numel(), BLOCK=4)
    return out

def broken(x):
    return x.reshape(7, 7)  # line 15
'''

SCRIPT = textwrap.dedent('''
    import json, sys, tempfile, torch
    from pathlib import Path
    from grader.judging.replay import plan_replay  # imported before the harness confines imports
    from grader.running import protocol
    from grader.running.worker.harness import Harness

    path = Path(tempfile.mkdtemp()) / "submission.py"
    path.write_text(sys.argv[1] if len(sys.argv) > 1 else SUBMISSION)
    harness = Harness("interpreter")
    loaded = harness.load(protocol.Load(path=str(path), names=("double_kernel", "double", "absent")))
    x = torch.arange(6.0)
    views = ({"storage": 0, "shape": [6], "stride": [1], "offset": 0},
             {"storage": 1, "shape": [6], "stride": [1], "offset": 0})
    launched = harness.launch(protocol.Launch(kernel="double_kernel", storages=(x, torch.zeros(6)), views=views,
                                              args=({"view": 0}, {"view": 1}, 6), meta={"BLOCK": 4},
                                              grid=("cdiv(N, BLOCK)",), count_traffic=True))
    called = harness.call(protocol.Call(function="double", storages=(x,), views=views[:1], args=({"view": 0},),
                                        kwargs={}))
    plan = plan_replay(called.launches, (x,), {"x": x})
    replayed = harness.replay(protocol.Replay(launches=plan.launches))
    raised = harness.call(protocol.Call(function="broken", storages=(x,), views=views[:1], args=({"view": 0},),
                                        kwargs={}))
    altered = harness.replay(protocol.Replay(launches=(dict(plan.launches[0], kernel="no_such_kernel"),)))
    print(json.dumps({
        "loaded": [loaded.ok, {k: v["kind"] for k, v in loaded.symbols.items()}],
        "launched": [launched.ok, launched.storages[1].tolist(), len(launched.traffic or ())],
        "called": [called.ok, called.result["tensor"].tolist(), len(called.launches), dict(called.torch_ops)],
        "replayed": [replayed.ok, sorted(len(b) for b in replayed.buffers.values())],
        "raised": [raised.ok, raised.error.type, [f.line for f in raised.error.frames], raised.fatal],
        "altered": [altered.ok, altered.stage],
        "encodes": sorted(protocol.encode(called)),
    }))
''')


def test_every_correctness_request_is_answered_with_its_typed_reply() -> None:
    report = run_interpreted(f"SUBMISSION = {SUBMISSION!r}\n" + SCRIPT)
    assert report["loaded"] == [True, {"double_kernel": "kernel", "double": "function", "absent": "missing"}]
    assert report["launched"] == [True, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0], 1]  # one launch's traffic counted
    ok, values, launches, torch_ops = report["called"]
    assert ok and values == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0] and launches == 1 and "aten.empty_like" in torch_ops
    replay_ok, sizes = report["replayed"]
    # the launch's two storages came back: x's 6 floats, and the wrapper's output inside its guard bands
    assert replay_ok and sizes[0] == 24 and sizes[1] > 24
    assert report["raised"] == [False, "RuntimeError", [15], False]  # the student's line, not the harness's
    assert report["altered"] == [False, "record"]  # a record naming no kernel of the file: altered, not the kernel
    assert set(report["encodes"]) >= {"ok", "result", "launches", "torch_ops", "storages", "compile_s"}


def test_the_worker_ends_itself_under_the_tool_after_a_fatal_error() -> None:
    fault = RuntimeError("CUDA error: an illegal memory access was encountered")
    under = _failed(protocol.Launched, fault, "softmax.py", under_tool=True)
    assert (under.ok, under.fatal, under.exits) == (False, False, True)  # the grader waits for the tool's report
    plain = _failed(protocol.Called, fault, "softmax.py", under_tool=False, launches=())
    assert (plain.fatal, plain.exits, plain.launches) == (True, False, ())
    other = _failed(protocol.Launched, ValueError("bad"), "softmax.py", under_tool=True)
    assert (other.fatal, other.exits, other.failure.type) == (False, False, "ValueError")
