"""grader/running/timing/calls.py without a GPU: a target bound to contiguous inputs as the worker's `Run`
request, the check of an output at the timed size, torch's outputs by name. (The runner at work:
tests/running/worker/test_performance_run.py here, tests/e2e/test_gpu_performance.py on a GPU.)"""

from __future__ import annotations

import pytest
import torch

from grader.authoring.problem import Baseline
from grader.running import protocol
from grader.running.timing.calls import CallPlan, baseline_outputs, compare_outputs


def test_compare_outputs_says_what_is_wrong() -> None:
    expected = {"out": torch.zeros(4, 4)}
    assert compare_outputs({"out": torch.zeros(4, 4)}, expected, 0.0, 0.0) == ""
    wrong = torch.zeros(4, 4)
    wrong[1, 2] = 0.5
    assert "1 of 16 elements differ" in compare_outputs({"out": wrong}, expected, 1e-3, 0.0)
    assert "shape (4, 3)" in compare_outputs({"out": torch.zeros(4, 3)}, expected, 0.0, 0.0)
    assert "shape None" in compare_outputs({}, expected, 0.0, 0.0)


def test_baseline_outputs_by_name() -> None:
    stats = Baseline("torch.var_mean", run=lambda inputs: None, outputs=("var", "mean"))
    var, mean = torch.ones(2), torch.zeros(2)
    assert baseline_outputs(stats, (var, mean)) == {"var": var, "mean": mean}
    with pytest.raises(ValueError, match=r"torch.var_mean returned 1 values for outputs \('var', 'mean'\)"):
        baseline_outputs(stats, var)


def test_a_call_plan_is_the_workers_run_request() -> None:
    x = torch.ones(3, 4)
    plan = CallPlan("kernel", "row_sum_kernel", (x,), ({"in": 0}, {"out": 0}, 3), {}, ({"shape": [3], "dtype":
                    "float32"},), ("out",), {"BLOCK": 4}, ("M",))
    request = plan.request(sets=3, repeats=5, time=True, return_outputs=False, record=True)
    assert isinstance(request, protocol.Run) and request.OP == "time"
    assert (request.kind, request.target, request.sets, request.repeats, request.time, request.record) == (
        "kernel", "row_sum_kernel", 3, 5, True, True)
    assert request.inputs[0] is x and request.args == ({"in": 0}, {"out": 0}, 3) and request.grid == ("M",)
    assert protocol.decode_request(protocol.encode(request)).meta == {"BLOCK": 4}


def test_every_input_sets_first_run_is_checked_against_torch_on_its_own_values() -> None:
    """The timer returns the first run of every input set (set after set); each must match torch eager on that set's
    own inputs, so a kernel cannot compute the first set and leave a cheap wrong answer in the others, which every
    later sample would then only have to repeat."""
    from grader.running.timing.calls import InputSet, Prepared

    sets = [{"x": torch.arange(4.0) + shift} for shift in (0.0, 10.0, -3.0)]
    call = CallPlan("kernel", "double", (sets[0]["x"],), (), {}, (), ("out",), {}, ())
    prepared = Prepared(None, None, call, sets[0], None,  # type: ignore[arg-type]
                        tuple(InputSet(s, (s["x"],)) for s in sets[1:]))
    assert len(prepared.more_inputs) == 2

    def doubled(inputs):
        return {"out": inputs["x"] * 2}

    honest = [s["x"] * 2 for s in sets]
    assert prepared.wrong_set(honest, doubled, 0.0, 0.0) == ""
    lazy = [honest[0], torch.zeros(4), honest[2]]
    assert prepared.wrong_set(lazy, doubled, 0.0, 0.0).endswith("(input set 2 of 3)")
    alone = Prepared(None, None, call, sets[0], None)  # type: ignore[arg-type]
    assert "input set" not in alone.wrong_set([torch.zeros(4)], doubled, 0.0, 0.0) != ""
