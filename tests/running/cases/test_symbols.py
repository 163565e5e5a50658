"""grader/running/cases/symbols.py: is the student's symbol the contract's: there, the right kind (a Triton kernel
posing as one is tampering), with the contract's parameters, named by file and line."""

from __future__ import annotations

from grader import trap_ids
from grader.authoring.spec import load_assignment
from grader.running.cases.symbols import check_symbol
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


def test_a_wrapper_may_take_more_parameters_than_the_contract_names_a_kernel_may_not() -> None:
    wrapper = list(SOFTMAX.functions["softmax"].params)
    function = {"kind": "function", "params": [*wrapper, "extra"]}
    assert check_symbol("softmax", function, SOFTMAX, "softmax.py") is None
    kernel = {"kind": "kernel", "triton_class": True, "params": [*PARAMS, "extra"]}
    extra = check_symbol("softmax_kernel", kernel, SOFTMAX, "softmax.py")
    assert extra is not None and f"it has {len(PARAMS) + 1} parameters, the contract has {len(PARAMS)}" in extra.message
