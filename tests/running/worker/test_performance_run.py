"""Timed runs execute none of the submission's Python: its kernels alone (kernel_source), launches whose
every buffer is accounted for (performance_plan), replayed in a timer worker (on the interpreter here)."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest
import torch

from grader.authoring.spec import Assignment, load_assignment
from grader.running.kernel_source import kernels_only
from grader.running.performance_plan import PerformancePlan, plan_performance_run

ROOT = Path(__file__).resolve().parents[3]

HOSTILE = textwrap.dedent('''\
    """A submission that tampers with timing at import."""
    import os
    import math
    import triton
    import triton.language as tl
    import triton.testing
    from triton.language.extra import libdevice

    triton.testing.do_bench = lambda *a, **k: 0.001
    SCALE = 1 / math.sqrt(2.0)
    BLOCK: tl.constexpr = tl.constexpr(128)
    erf = tl.math.erf
    EVIL = os.system("true")
    CONFIGS = [triton.Config({"BLOCK": 64}, num_warps=4)]


    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.jit(do_not_specialize=["n"])
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, erf(tl.load(x_ptr + offs, mask=offs < n) * SCALE), mask=offs < n)


    @triton.jit
    def bad_default(x_ptr, n=os.getpid()):
        pass


    def wrapper(x):
        return x
    ''')


def test_kernels_only_keeps_kernels_and_constants_and_nothing_else() -> None:
    reduced = kernels_only(HOSTILE)
    assert reduced.kernels == ("scale_kernel",)
    text = reduced.text
    assert "do_bench" not in text and "os.system" not in text and "def wrapper" not in text
    assert "import os" not in text and "CONFIGS" not in text and "autotune" not in text
    for kept in ("SCALE = 1 / math.sqrt(2.0)", "BLOCK: tl.constexpr = tl.constexpr(128)", "erf = tl.math.erf",
                 "from triton.language.extra import libdevice", "def scale_kernel("):
        assert kept in text, kept
    assert '@__grader_triton.jit(do_not_specialize=["n"])' in text or "do_not_specialize=['n']" in text
    # line numbers still match the student's file
    assert text.splitlines().index("def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):") == \
        HOSTILE.splitlines().index("def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):")
    dropped = dict(reduced.dropped)
    assert any("bad_default" in what and "not a constant" in what for what in dropped.values())


def test_the_reduced_module_runs_no_student_statement(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = HOSTILE.replace('os.system("true")', f'open({str(marker)!r}, "w")')
    namespace: dict[str, object] = {}
    path = tmp_path / "kernels.py"
    path.write_text(kernels_only(source).text, encoding="utf-8")
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the reduced module only
    assert not marker.exists()
    assert "scale_kernel" in namespace and "wrapper" not in namespace


@pytest.mark.parametrize("relative", ["reference/fused_layers/reference.py", "reference/softmax/reference.py"])
def test_reference_kernels_survive_the_reduction(relative: str) -> None:
    source = (ROOT / relative).read_text(encoding="utf-8")
    reduced = kernels_only(source)
    assert reduced.kernels and len(reduced.text.splitlines()) == len(source.splitlines())
    compile(reduced.text, relative, "exec")


# ------------------------------------------------------------------------------------------ planning


def _launch(storages: dict[int, dict], args: list) -> dict:
    return {"complete": True, "why": "", "kernel": "k", "params": ["x_ptr", "out_ptr", "n"], "grid": [4],
            "args": args, "kwargs": {"BLOCK": 64}, "storages": storages}


def _tensor(sid: int, n: int) -> dict:
    return {"tensor": {"sid": sid, "offset": 0, "shape": [n], "stride": [1], "dtype": "float32"}}


def test_plan_accounts_for_inputs_fresh_buffers_fills_and_input_copies() -> None:
    x = torch.arange(8, dtype=torch.float32)
    copy_digest = hashlib.sha256(x.numpy().tobytes()).hexdigest()
    zeros = hashlib.sha256(bytes(32)).hexdigest()
    record = {"launches": [
        _launch({1: {"input": 0, "nbytes": 32}, 2: {"fresh": True, "nbytes": 32}}, [_tensor(1, 8), _tensor(2, 8), 8]),
        _launch({3: {"nbytes": 32, "head": bytes(16), "sha256": zeros},
                 4: {"nbytes": 32, "head": x.numpy().tobytes()[:16], "sha256": copy_digest},
                 2: {"nbytes": 32, "head": b"x" * 16, "sha256": "whatever: written by launch 1"}},
                [_tensor(3, 8), _tensor(4, 8), 8]),
    ], "outputs": [{"sid": 2, "offset": 0, "shape": [8], "stride": [1], "dtype": "float32"}]}
    plan = plan_performance_run(record, [x], "f")
    assert isinstance(plan, PerformancePlan)
    assert plan.buffers == {1: {"input": 0, "nbytes": 32}, 2: {"fresh": True, "nbytes": 32},
                            3: {"fill": bytes(1), "nbytes": 32}, 4: {"copy_of": 0, "nbytes": 32}}
    assert [launch["kwargs"] for launch in plan.launches] == [{"BLOCK": 64}] * 2


def test_a_buffer_from_outside_the_kernels_is_not_timed() -> None:
    """A cache of earlier answers (kept across calls, looked up by input pointer) is no input, no fill."""
    record = {"launches": [_launch({1: {"input": 0, "nbytes": 32},
                                    7: {"nbytes": 32, "head": b"\x01\x02" * 8, "sha256": "0" * 64}},
                                   [_tensor(7, 8), _tensor(1, 8), 8])],
              "outputs": [{"sid": 1}]}
    problem = plan_performance_run(record, [torch.zeros(8)], "layernorm")
    assert isinstance(problem, str)
    assert "`x_ptr`" in problem and "computed outside the kernels" in problem


def test_outputs_must_come_from_the_launches() -> None:
    record = {"launches": [_launch({1: {"input": 0, "nbytes": 32}}, [_tensor(1, 8), _tensor(1, 8), 8])],
              "outputs": [{"sid": 99}]}
    assert "not a buffer any of its kernel launches" in str(plan_performance_run(record, [torch.zeros(8)], "f"))
    assert "launched no Triton kernel" in str(plan_performance_run({"launches": []}, [], "f"))
    incomplete = {"launches": [{"complete": False, "why": "a grid that is not a tuple"}], "outputs": []}
    assert "could not be recorded completely (a grid that is not a tuple)" in str(
        plan_performance_run(incomplete, [], "f"))


# ------------------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def fused_layers() -> Assignment:
    return load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")


@pytest.mark.slow
@pytest.mark.parametrize("perf_id", ["p-layernorm", "p-stats-kernel"])
def test_recorded_launches_replay_in_a_worker_that_loaded_only_the_kernels(
        fused_layers: Assignment, tmp_path: Path, perf_id: str) -> None:
    """Record in the student's worker, plan, replay in a timer worker on the interpreter: the timer's
    outputs are the oracle's."""
    from grader.authoring.inputs import InputMaker
    from grader.authoring.oracle_loader import load_problems
    from grader.authoring.spec import PerformanceCase
    from grader.judging.compare import close_mask
    from grader.running.client import Worker, WorkerOptions
    from grader.running.performance import encode_call

    perf = {"p-layernorm": PerformanceCase(id="p-layernorm", target="layernorm", dims={"M": 5, "N": 37},
                                    tolerance="rowwise"),
            "p-stats-kernel": PerformanceCase(id="p-stats-kernel", target="row_mean_var_kernel", dims={"M": 7, "N": 33},
                                       tolerance="rowwise", meta={"BLOCK_N": 64})}[perf_id]
    spec = fused_layers.kernels.get(perf.target) or fused_layers.functions[perf.target]
    problem = load_problems(fused_layers)[spec.problem]
    inputs = problem.make_inputs(perf.as_case(), InputMaker(5))
    call = encode_call(perf, fused_layers, problem, inputs)
    reference = ROOT / "reference" / "fused_layers" / "reference.py"
    options = WorkerOptions(backend="interpreter", import_timeout_s=60)
    student = Worker(reference, list(fused_layers.required_symbols), options)
    reduced = tmp_path / "fused_layers.py"
    kernels = kernels_only(reference.read_text(encoding="utf-8"))
    reduced.write_text(kernels.text, encoding="utf-8")
    timer = Worker(reduced, list(kernels.kernels), options)
    try:
        assert student.start()["ok"]
        reply = student.request(call.request(sets=1, repeats=0, time=False, return_outputs=False, record=True),
                                120, "record")
        assert reply["ok"], reply
        plan = plan_performance_run(reply["record"], call.inputs, perf.target)
        assert isinstance(plan, PerformancePlan), plan
        assert timer.start()["ok"]
        timed = timer.request(plan.request(list(call.inputs), sets=2, repeats=1, time=False), 120, "replay")
        assert timed["ok"], timed
    finally:
        student.close()
        timer.close()
    expected = problem.expected(inputs)
    for name, got in zip(call.output_names, timed["outputs"], strict=True):
        assert bool(close_mask(got, expected[name], 1e-5, 1e-5).all()), name
