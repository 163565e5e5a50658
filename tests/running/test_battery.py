"""grader/running/battery.py's decisions without a worker: is the student's symbol the contract's, the
grid of the grader's own launch, a wrapper's return value mapped onto the spec's outputs, when a case
gets a fresh worker. (The battery running cases: tests/test_cli.py, tests/e2e/, tests/running/test_guards.py.)"""

from __future__ import annotations

import torch

from grader import trap_ids
from grader.authoring.spec import load_assignment
from grader.evidence.guard_bits import GuardFinding
from grader.evidence.observation import Observation
from grader.running.battery import check_symbol, failure_sentence, needs_fresh_worker, unpack_returns
from grader.running.client import WorkerFailure
from tests.conftest import ROOT

SOFTMAX = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
PARAMS = list(SOFTMAX.kernels["softmax_kernel"].params)


def test_check_symbol() -> None:
    kernel = {"kind": "kernel", "triton_class": True, "params": PARAMS, "line": 7}
    assert check_symbol("softmax_kernel", kernel, SOFTMAX, "softmax.py") is None
    missing = check_symbol("softmax_kernel", {"kind": "missing"}, SOFTMAX, "softmax.py")
    assert missing is not None and missing.trap == trap_ids.MISSING_SYMBOL
    swapped = check_symbol("softmax_kernel", {**kernel, "params": [PARAMS[1], PARAMS[0], *PARAMS[2:]]}, SOFTMAX,
                           "softmax.py")
    assert swapped is not None and swapped.trap == trap_ids.WRONG_SIGNATURE
    assert "parameter 1 is `out_ptr` but the contract says `x_ptr`" in swapped.message
    assert "(softmax.py, line 7)" in swapped.message
    posing = check_symbol("softmax_kernel", {**kernel, "triton_class": False, "type": "Fake"}, SOFTMAX, "softmax.py")
    assert posing is not None and posing.trap == trap_ids.TAMPERING
    not_a_function = check_symbol("softmax", {"kind": "kernel", "type": "JITFunction"}, SOFTMAX, "softmax.py")
    assert not_a_function is not None and not_a_function.trap == trap_ids.WRONG_SIGNATURE


def test_unpack_returns() -> None:
    tensor = torch.zeros(2)
    assert unpack_returns({"tensor": tensor, "device": "cpu"}, ("out",), "interpreter") == ({"out": tensor}, "")
    _, problem = unpack_returns({"tensor": tensor, "device": "cpu"}, ("out",), "cuda")
    assert "must stay on the input's device (cuda)" in problem
    _, problem = unpack_returns({"type": "tuple", "sequence": [{}]}, ("mean", "rstd"), "interpreter")
    assert problem.startswith("a tuple of 1, but it must return 2 tensors (mean, rstd)")


def test_needs_fresh_worker() -> None:
    assert not needs_fresh_worker(Observation())
    assert needs_fresh_worker(Observation(trap=trap_ids.TIMEOUT))
    assert needs_fresh_worker(Observation(guard_findings=(GuardFinding("oob-write", "out", 1, "out[9]"),)))
    assert not needs_fresh_worker(Observation(guard_findings=(GuardFinding("unwritten-output", "out", 1, "out[0]"),)))


def test_failure_sentence_says_plainly_what_did_not_finish() -> None:
    timeout = WorkerFailure(trap_ids.TIMEOUT, "did not finish within 15 s (layernorm(...))")
    assert failure_sentence("layernorm(...)", timeout) == ("Did not finish within 15 s (layernorm(...)): the grader "
                                                           "stopped it.")
    on_gpu = WorkerFailure(trap_ids.TIMEOUT, "did not finish: nothing happened for 3 s after its last kernel launch")
    assert failure_sentence("softmax(...)", on_gpu) == ("Did not finish: nothing happened for 3 s after its last "
                                                        "kernel launch (softmax(...)): the grader stopped it.")
    crash = WorkerFailure(trap_ids.CRASH, "the worker died while softmax(...) (killed by SIGSEGV)")
    assert failure_sentence("softmax(...)", crash) == ("softmax(...) crashed the worker: the worker died while "
                                                       "softmax(...) (killed by SIGSEGV).")
