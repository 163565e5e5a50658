"""grader/running/worker/measuring/planned_launches.py: timed runs execute none of the submission's Python: recorded
launches replayed in a timer worker that built only its kernels, from data (on the interpreter here, untimed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from grader.authoring.spec import Assignment, load_assignment
from grader.running import protocol
from grader.running.bundle import build_bundle
from grader.running.timing.launch_plan import PerformancePlan, plan_performance_run

ROOT = Path(__file__).resolve().parents[4]



@pytest.fixture(scope="module")
def fused_layers() -> Assignment:
    return load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")


@pytest.mark.slow
@pytest.mark.parametrize("perf_id", ["p-layernorm", "p-stats-kernel"])
def test_recorded_launches_replay_in_a_worker_that_built_only_the_kernels(
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
    timer = None
    try:
        loaded = student.start()
        assert loaded.ok
        bundle = build_bundle(reference.read_text(encoding="utf-8"), reference.name, loaded.kernels)
        timer = Worker(reference, list(fused_layers.required_symbols), options, bundle=bundle)
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
        if timer is not None:
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

    from grader.running.worker.measuring.planned_launches import compiled_facts

    matmul = _Jit("mm_kernel", _Binary("ld.global.v4.f32 {%r1}; wgmma.mma_async.sync", 168, 0),
                  _Binary("mma.sync.aligned", 255, 24))
    rows = _Jit("row_kernel", _Binary("ld.global.f32 %f1;", 40, 0))
    autotuned = SimpleNamespace(fn=matmul)  # an Autotuner holds the JITFunction as .fn
    facts = compiled_facts([autotuned, rows, object()])
    assert facts == {"mm_kernel": {"registers": 255, "spills": 24, "tensor_cores": True, "vector_loads": True},
                     "row_kernel": {"registers": 40, "spills": 0, "tensor_cores": False, "vector_loads": False}}


# ------------------------------------------------------------------------------------------ fresh work per timed run


class _FakeKernel:
    """`kernel[grid](x, out)` as a timed launch calls it; `work(x, out, calls)` does what the "kernel" does."""

    def __init__(self, work) -> None:
        self.work, self.calls = work, 0

    def __getitem__(self, grid):
        def launch(x, out):
            self.calls += 1
            self.work(x, out, self.calls)
        return launch


def _request(sets: int, more_inputs: tuple = ()) -> protocol.TimeLaunches:
    x = torch.arange(8, dtype=torch.float32)
    view = {"sid": 2, "offset": 0, "shape": [8], "stride": [1], "dtype": "float32"}
    return protocol.TimeLaunches(
        inputs=(x,), buffers={1: {"input": 0, "nbytes": 32}, 2: {"fresh": True, "nbytes": 32}},
        launches=({"kernel": "k", "grid": [1], "args": [{"tensor": {**view, "sid": 1}}, {"tensor": view}],
                   "kwargs": {}},), outputs=(view,), sets=sets, more_inputs=more_inputs)


def _planned(work, sets: int = 3, more_inputs: tuple = ()):
    from grader.running.worker.measuring.planned_launches import PlannedRun

    kernel = _FakeKernel(work)
    planned = PlannedRun(lambda name: kernel, _request(sets, more_inputs), torch.device("cpu"), sets)
    planned.first_runs()
    planned.keep_first_outputs()
    return planned


def _timed_runs(planned) -> str:
    """What the sampler does on a GPU: every set prepared and launched (twice over), then the check."""
    for _ in range(2):
        for prepare, work in planned.steps():
            prepare()
            work()
    return planned.check()


def test_every_timed_run_starts_from_poisoned_outputs_and_is_checked_after() -> None:
    def honest(x, out, calls):
        out.copy_(x * 2)

    def stale(x, out, calls):  # does the work only where its output still holds the poison
        if torch.isnan(out).all():
            out.copy_(x * 2)

    def drifts(x, out, calls):  # right once, then something else
        out.copy_(x * 2 if calls == 1 else x * 3)

    def scribbles(x, out, calls):  # keeps state in its input (-0.0 over 0.0: the same value, other bytes)
        out.copy_(x * 2)
        x[0] = -0.0

    assert _timed_runs(_planned(honest)) == ""
    stale_run = _planned(stale)
    assert _timed_runs(stale_run) == ""  # poisoned before every run, so it works every time
    assert stale_run.built[1][2][0].numel() == 32  # the output buffer is among those poisoned
    assert "differs from the checked run's at 7 of 8 elements" in _timed_runs(_planned(drifts))
    assert "input 1 of input set 1 changed" in _timed_runs(_planned(scribbles))


def test_each_input_set_has_values_of_its_own_so_no_set_can_copy_anothers_answer() -> None:
    """A kernel that works once per pass over the sets and copies that answer into every other set's outputs (their
    buffers hold it from the run before): with every set a copy of the first it passes every check, so the sets
    were worth one run; with values of their own per set (the grader's more_inputs) it is caught."""
    outputs: list[torch.Tensor] = []

    def copies_another_sets_answer(x, out, calls):
        done = [o for o in outputs if o.data_ptr() != out.data_ptr() and not torch.isnan(o).any()]
        out.copy_(done[0] if done and calls > 3 else x * 2)  # honest in the checked runs

    for more, caught in (((), False), ((torch.arange(8.0) + 10, torch.arange(8.0) - 5), True)):
        planned = _planned(copies_another_sets_answer, sets=3, more_inputs=more)
        outputs[:] = [planned.outputs(i)[0] for i in range(planned.sets)]
        found = _timed_runs(planned)
        assert ("differs from the checked run's" in found) == caught, found
    assert planned.distinct == 3  # each set checked against its own first run


def test_the_timer_returns_every_given_sets_first_outputs_set_after_set() -> None:
    from grader.running.worker.measuring.planned_launches import time_launches

    kernel = _FakeKernel(lambda x, out, calls: out.copy_(x * 2))
    more = (torch.arange(8.0) + 10, torch.arange(8.0) - 5)
    reply = time_launches(lambda name: kernel, _request(1, more), torch.device("cpu"))
    assert reply.sets == 3 and len(reply.outputs) == 3
    for got, x in zip(reply.outputs, (torch.arange(8.0), *more), strict=True):
        assert torch.equal(got, x * 2)
    with pytest.raises(ValueError, match="no whole number of sets"):
        time_launches(lambda name: kernel, dataclasses.replace(_request(1), inputs=(torch.ones(8), torch.ones(8)),
                                                               more_inputs=more[:1]), torch.device("cpu"))


def test_a_case_profiles_its_first_launches_and_runs_the_rest_outside_the_range(monkeypatch) -> None:
    """A wrapper that launches a kernel per row: only its first PROFILED_LAUNCHES_PER_CASE launches are inside the
    profiler's range (ncu's count a grade is left for the later cases), the rest run after it, and the reply's
    count, which splits ncu's report, is the launches in the range."""
    from grader.running.worker.measuring import planned_launches

    events: list[str] = []
    planned = _planned(lambda x, out, calls: events.append("launch"), sets=1)
    planned.bound[0] = planned.bound[0] * 20  # twenty launches of the one kernel
    events.clear()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: events.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: events.append("stop"))
    monkeypatch.setitem(planned_launches._KEPT, "perf-rows", planned)
    monkeypatch.setattr(planned_launches, "compiled_facts", lambda kernels: {})
    reply = planned_launches.profile_kept(protocol.ProfileKept(key="perf-rows"), torch.device("cuda"))
    counted = planned_launches.PROFILED_LAUNCHES_PER_CASE
    assert reply.ok and reply.launches == counted < 20
    warm, profiled = events.index("start"), events.index("stop")
    assert events[:warm] == ["launch"] * 20  # the run before the range: nothing compiles inside it
    assert events[warm + 1:profiled] == ["launch"] * counted
    assert events[profiled + 1:] == ["launch"] * (20 - counted)  # the run completes, unprofiled


def test_state_kept_in_a_scratch_buffer_is_poisoned_before_every_run() -> None:
    """A kernel that remembers its answer in a scratch buffer of its own (allocated by its wrapper, no output) and
    copies it back on later runs instead of working: the scratch is poisoned before every run like the outputs,
    so it finds nothing to copy and works every time; a kernel that trusts poisoned memory is caught."""
    from grader.running.worker.measuring.planned_launches import PlannedRun

    worked: list[int] = []

    class Remembers:
        def __getitem__(self, grid):
            def launch(x, out, memo):
                if torch.isnan(memo).any():  # nothing remembered (poisoned): work, and remember
                    worked.append(1)
                    out.copy_(x * 2)
                    memo.copy_(out)
                else:
                    out.copy_(memo)
            return launch

    class TrustsMemory:
        def __getitem__(self, grid):
            def launch(x, out, memo):
                if not worked:
                    worked.append(1)
                    memo.copy_(x * 2)
                out.copy_(memo)
            return launch

    x = torch.arange(8, dtype=torch.float32)
    views = [{"sid": sid, "offset": 0, "shape": [8], "stride": [1], "dtype": "float32"} for sid in (1, 2, 3)]
    request = protocol.TimeLaunches(
        inputs=(x,), buffers={1: {"input": 0, "nbytes": 32}, 2: {"fresh": True, "nbytes": 32},
                              3: {"fresh": True, "nbytes": 32}},
        launches=({"kernel": "k", "grid": [1], "args": [{"tensor": v} for v in views], "kwargs": {}},),
        outputs=(views[1],), sets=2)
    for kernel, expected in ((Remembers(), ""), (TrustsMemory(), "differs from the checked run's")):
        worked.clear()
        planned = PlannedRun(lambda name, k=kernel: k, request, torch.device("cpu"), 2)
        planned.run(0)
        planned.keep_first_outputs()
        found = _timed_runs(planned)
        if expected:
            assert expected in found
        else:
            assert found == "" and len(worked) == 1 + 2 * 2  # the checked run, then every timed run worked


def test_state_kept_in_another_kept_cases_inputs_or_in_a_fill_source_is_caught() -> None:
    """Two cases kept in one timer: a kernel of the first that writes into the second case's input (memory it can
    reach past its own buffers) is refused at its own sample's check, not only when the second is timed; a kernel that
    writes into the source its zero-filled scratch starts from (so the scratch starts from its answer) is refused; one
    that keeps its answer in its own input and overwrites the grader's copy of the input alike is refused (the copy
    is sealed: its bytes are not the input's)."""
    from grader.running.worker.measuring.planned_launches import PlannedRun

    other = _planned(lambda x, out, calls: out.copy_(x * 2))
    thief = _planned(lambda x, out, calls: (out.copy_(x * 2), other.inputs[0][0].__setitem__(0, 99.0)))
    assert "another case's input 1 of input set 1 changed" in _timed_runs(thief)

    def overwrites_its_input_and_the_copy(x, out, calls):  # keeps its answer in its input, and the copy alike
        out.copy_(x * 2 if calls <= 2 else x)
        if calls == 2:  # the first timed run: the checked run is done
            x.copy_(out)
            for kept in (p for run in runs for sets in run.pristine for p in sets):
                getattr(kept, "sealed", kept).view(torch.uint8).copy_(x.view(torch.uint8))

    runs: list = []
    runs.append(_planned(overwrites_its_input_and_the_copy, sets=1))
    assert _timed_runs(runs[0]).startswith("input 1 of input set 1 changed")  # its own, before the other case's


    sources: list[torch.Tensor] = []

    class KeepsItInTheFill:
        def __getitem__(self, grid):
            def launch(x, out, acc):
                out.copy_(x * 2 if calls.append(1) or len(calls) == 1 else acc)
                sources[0].view(torch.float32).copy_(x * 2)  # the fill's source: acc starts from the answer
            return launch

    calls: list[int] = []
    x = torch.arange(8, dtype=torch.float32)
    views = [{"sid": sid, "offset": 0, "shape": [8], "stride": [1], "dtype": "float32"} for sid in (1, 2, 3)]
    request = protocol.TimeLaunches(
        inputs=(x,), buffers={1: {"input": 0, "nbytes": 32}, 2: {"fresh": True, "nbytes": 32},
                              3: {"fill": [0, 0, 0, 0], "nbytes": 32}},
        launches=({"kernel": "k", "grid": [1], "args": [{"tensor": v} for v in views], "kwargs": {}},),
        outputs=(views[1],), sets=1)
    planned = PlannedRun(lambda name: KeepsItInTheFill(), request, torch.device("cpu"), 1)
    sources.append(planned.fill_sources[0][0][0])
    assert planned.fill_sources[0][0][1] == bytes(4)
    planned.run(0)
    planned.keep_first_outputs()
    assert "the value a buffer of input set 1 starts from changed" in _timed_runs(planned)


def test_a_kernel_that_overwrites_another_kept_cases_checked_outputs_is_refused() -> None:
    """The checked outputs are kept sealed and digested with a key only the timer holds: a kernel of one case that
    writes over another case's (to keep something there) is found at its own sample's check."""
    import gc

    gc.collect()  # runs of earlier tests, and the damage their kernels did, are gone
    victim = _planned(lambda x, out, calls: out.copy_(x * 2), sets=1)
    raider = _planned(lambda x, out, calls: (out.copy_(x * 2), victim.expected[0][0].sealed.__setitem__(0, 7)),
                      sets=1)
    assert _timed_runs(raider) == "another case's checked outputs of input set 1 were overwritten during a timed sample"
    assert _timed_runs(victim) == "checked outputs of input set 1 were overwritten during a timed sample"


def _held_tensors(value, seen=None):
    """Every tensor reachable from `value` (a PlannedRun: its lists, dicts and sealed outputs): what a kernel that
    reads the timer's memory at addresses learned offline could find there."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif hasattr(value, "__dict__"):
        items = list(vars(value).values())
    else:
        return []
    return [t for item in items for t in _held_tensors(item, seen)]


def test_while_a_timed_run_works_the_timer_holds_no_copy_of_its_answer() -> None:
    """A kernel that copies the checked run's answer from wherever the timer keeps it (the layout of its memory is
    the same every time) instead of computing it: the answer is kept sealed (its bytes XOR a key stream whose seed
    is on the host), so the kernel finds nothing to copy, and the check still sees every wrong element."""
    found: list[bool] = []
    holder: dict = {}

    def copies_the_answer(x, out, calls):
        answer = (x * 2).view(-1).view(torch.uint8)
        if calls == 1:  # the checked run: honest
            out.copy_(x * 2)
            return
        kept = [t for t in _held_tensors(holder["planned"]) if t.data_ptr() != out.data_ptr()
                and t.numel() * t.element_size() == answer.numel()
                and torch.equal(t.reshape(-1).view(torch.uint8), answer)]
        found.append(bool(kept))
        out.copy_(kept[0].reshape(-1).view(torch.float32) if kept else torch.zeros_like(out))

    planned = _planned(copies_the_answer, sets=1)
    holder["planned"] = planned
    assert "differs from the checked run's at 7 of 8 elements" in _timed_runs(planned)  # x[0] * 2 == 0 matches
    assert found == [False, False]  # before each timed run the answer was nowhere in the timer's memory


def test_a_sealed_output_opens_to_its_values_chunk_by_chunk_and_leaves_no_copy() -> None:
    from grader.running.worker.measuring.planned_launches import POISON_BYTE, SealedOutput

    values = torch.randn(3, 5).t()  # a non-contiguous view, as an output view may be
    SealedOutput.CHUNK_BYTES, before = 16, SealedOutput.CHUNK_BYTES  # four float32 per chunk
    try:
        sealed = SealedOutput(values)
        assert not torch.equal(sealed.sealed.view(torch.float32), values.reshape(-1))
        chunks = []
        for first, plain in sealed.chunks():
            chunks.append((first, plain.clone()))
            last = plain
        assert torch.equal(torch.cat([c for _, c in chunks]), values.reshape(-1))
        assert [f for f, _ in chunks] == [0, 4, 8, 12]
        assert bool((last.view(torch.uint8) == POISON_BYTE).all())  # let go: poisoned
    finally:
        SealedOutput.CHUNK_BYTES = before


def test_a_timed_reply_says_why_the_memory_watch_stood_aside() -> None:
    from types import SimpleNamespace

    from grader.running.worker.measuring.memory_watch import MemoryWatch
    from grader.running.worker.measuring.planned_launches import _unwatched

    watch = MemoryWatch.__new__(MemoryWatch)  # as its constructor leaves it after a failed self-test
    watch.off = "its kernels could not run: TypeError"
    assert _unwatched(SimpleNamespace(watch=watch)) == "its kernels could not run: TypeError"  # type: ignore[arg-type]
    watch.off = ""
    assert _unwatched(SimpleNamespace(watch=watch)) == ""  # type: ignore[arg-type]
    assert _unwatched(SimpleNamespace(watch=None)) == ""  # type: ignore[arg-type]  # a sampler given no watch
