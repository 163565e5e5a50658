"""grader/running/worker/fence.py: in the interpreter, a store outside every tensor of its launch is
stopped (and named oob-write) before it lands; an in-bounds launch runs as before. In a subprocess: the
interpreter is chosen when @triton.jit runs."""

from __future__ import annotations

from tests.running.worker.interpreted import run_interpreted

FENCE_SCRIPT = """
import json, torch, triton, triton.language as tl
from grader.running.worker import errors, fence, recording
from grader.judging.errors import classify_error
assert fence.install()

@triton.jit
def copy(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + cols, tl.load(x_ptr + cols, mask=cols < N), mask=cols < N)
    tl.store(out_ptr + cols * stride, tl.load(x_ptr + cols, mask=cols < N), mask=cols < N)

recording.patch_kernel_runs()
x, out = torch.arange(16.0), torch.zeros(16)
copy[(1,)](x, out, 16, 1, BLOCK=16)
ok = bool(torch.equal(out, x))
out2 = torch.zeros(16)
try:
    copy[(1,)](x, out2, 16, 10_000_000, BLOCK=16)
    error = None
except Exception as exc:
    error = errors.describe_exception(exc, "none")
print(json.dumps({"ok": ok, "trap": classify_error(error) if error else None,
                  "message": error.root_message if error else "", "first_store_done": float(out2[1])}))
"""

def test_the_fence_stops_a_store_outside_every_tensor_of_the_launch() -> None:
    report = run_interpreted(FENCE_SCRIPT)
    assert report["ok"]  # an in-bounds launch runs as before
    assert report["trap"] == "oob-write"
    assert "15 store(s) addressed memory outside every tensor" in report["message"]
    assert "past the end of the whole storage behind `out_ptr`" in report["message"]
    assert report["first_store_done"] == 1.0  # stores before the stray one happened; the stray one did not
