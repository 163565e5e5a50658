"""grader/running/worker/performance_run.py: timed runs execute none of the submission's Python: recorded
launches replayed in a timer worker that loaded only its kernels (on the interpreter here, untimed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.spec import Assignment, load_assignment
from grader.running import protocol
from grader.running.timing.kernel_source import kernels_only
from grader.running.timing.performance_plan import PerformancePlan, plan_performance_run

ROOT = Path(__file__).resolve().parents[3]



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
    from grader.running.processes.client import Worker, WorkerOptions
    from grader.running.timing.calls import encode_call

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
        assert student.start().ok
        reply = student.request(call.request(sets=1, repeats=0, time=False, return_outputs=False, record=True),
                                120, "record")
        assert reply.ok, reply
        plan = plan_performance_run(reply.record or {}, call.inputs, perf.target)
        assert isinstance(plan, PerformancePlan), plan
        assert timer.start().ok
        timed = timer.request(plan.request(list(call.inputs), sets=2, repeats=1, time=False), 120, "replay")
        assert timed.ok and timed.outputs is not None, timed
        # The profiled replay's half: the same launches kept, then run once inside the profiler's range. The
        # interpreter compiles nothing, so no kernel has static facts; the launch count splits ncu's report.
        kept = timer.request(plan.request(list(call.inputs), sets=1, repeats=0, time=False, keep="k",
                                          return_outputs=False), 120, "keep")
        assert kept.ok and kept.outputs == (), kept  # nobody checks a kept replay's outputs: none sent back
        profiled = timer.request(protocol.ProfileKept(key="k"), 120, "profile")
        assert profiled.ok and profiled.launches == len(plan.launches) and profiled.kernels == {}, profiled
    finally:
        student.close()
        timer.close()
    expected = problem.expected(inputs)
    for name, got in zip(call.output_names, timed.outputs, strict=True):
        assert bool(close_mask(got, expected[name], 1e-5, 1e-5).all()), name


class _Binary:
    def __init__(self, ptx: str, regs: int, spills: int) -> None:
        self.asm, self.n_regs, self.n_spills = {"ptx": ptx}, regs, spills

    def _init_handles(self) -> None:
        pass


class _Jit:
    """What compiled_facts reads of a JITFunction: its name and device_caches (kernel cache first)."""

    def __init__(self, name: str, *binaries: _Binary) -> None:
        self.__name__ = name
        self.device_caches = {0: ({i: b for i, b in enumerate(binaries)}, {}, None, None, None)}


def test_compiled_facts_read_every_specialisation_through_an_autotuner() -> None:
    from types import SimpleNamespace

    from grader.running.worker.performance_run import compiled_facts

    matmul = _Jit("mm_kernel", _Binary("ld.global.v4.f32 {%r1}; wgmma.mma_async.sync", 168, 0),
                  _Binary("mma.sync.aligned", 255, 24))
    rows = _Jit("row_kernel", _Binary("ld.global.f32 %f1;", 40, 0))
    autotuned = SimpleNamespace(fn=matmul)  # an Autotuner holds the JITFunction as .fn
    facts = compiled_facts([autotuned, rows, object()])
    assert facts == {"mm_kernel": {"registers": 255, "spills": 24, "tensor_cores": True, "vector_loads": True},
                     "row_kernel": {"registers": 40, "spills": 0, "tensor_cores": False, "vector_loads": False}}
