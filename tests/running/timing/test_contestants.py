"""grader/running/timing/contestants.py without a GPU: the deadline of a request at the timed size, the spin-up
of a grade's first timing and the shorter one of the next. (The timer and the reference at work, on a fake clock:
tests/judging/test_performance.py; on a GPU: tests/e2e/test_gpu_performance.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.authoring.spec import PerformanceCase, load_assignment
from grader.running.timing import contestants as contestants_module
from grader.running.timing.contestants import (
    COMPILE_LIMIT_S,
    IN_TURN_ROUNDS,
    RUN_GRACE_S,
    SLOWDOWN_ALLOWED,
    Contestants,
    InTurn,
    in_turn_rounds,
    timed_deadline,
)
from grader.running.worker.measuring import samplers
from tests.conftest import ROOT

PERF = PerformanceCase(id="p", target="layernorm", dims={"M": 4096, "N": 4096}, tolerance="rowwise", timeout_s=90)


def test_timed_deadline() -> None:
    unknown = timed_deadline(PERF, None)
    assert (unknown.cap_s, unknown.run_s, unknown.compile_s) == (90, RUN_GRACE_S, COMPILE_LIMIT_S)
    assert timed_deadline(PERF, 20.0).run_s == RUN_GRACE_S + SLOWDOWN_ALLOWED * 0.020


def test_the_first_timing_spins_the_clocks_up_and_the_rest_follow(tmp_path: Path) -> None:
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    contestants = Contestants(assignment, "cpu", tmp_path, lambda perf: timed_deadline(perf, None))
    assert contestants.spin_up_ms() == samplers.DEFAULT_SPIN_UP_MS
    assert contestants.spin_up_ms() == contestants.spin_up_ms() == samplers.FOLLOW_UP_SPIN_UP_MS
    assert contestants.timer is None and contestants.timer_problem  # started by the runner, not here
    assert contestants.reference_problem == ""  # the course has a reference solution to time
    warm = Contestants(assignment, "cpu", tmp_path, lambda perf: timed_deadline(perf, None))
    warm.clocks_already_up()  # another grade's timed phase let the GPU go a moment ago
    assert warm.spin_up_ms() == samplers.FOLLOW_UP_SPIN_UP_MS


def test_the_reference_compiles_once_per_course_in_a_cache_student_code_cannot_see(tmp_path: Path) -> None:
    """The reference's workers (each grade's, and its profiled one) share one Triton cache under the bars' folder, so
    a course's later grades load its compiled kernels instead of compiling them again; a submission's workers keep
    a cache of their own sandbox's, and the bars' folder (the shared cache with it) is hidden from them."""
    from grader.operations.grade import GradeRequest, guard_calibration
    from grader.running.processes.sandbox import Sandbox, sandbox_options
    from grader.running.timing.calibration import CalibrationStore

    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    store = CalibrationStore(tmp_path / "calibration")
    shared = store.reference_triton_cache
    assert store.folder in shared.parents
    workers = []
    try:
        for _ in range(2):  # two grades
            contestants = Contestants(assignment, "cuda", tmp_path, lambda perf: timed_deadline(perf, None), shared)
            workers.append(contestants.new_reference())
        assert [w.triton_cache for w in workers] == [shared, shared] and shared.is_dir()
        # the course's code runs as the grader's user: a sandbox user (nobody) could not reach a cache folder under
        # the grader's home, and student workers run as that user
        assert all(w.options.sandbox_user is None and w.sandbox_ref.identity is None for w in workers)
        profiled = contestants.new_reference(tool=("ncu", "--x"))  # the reference's profiled worker: the same cache
        workers.append(profiled)
        assert profiled.options.tool == ("ncu", "--x") and profiled.triton_cache == shared
        env = workers[0].sandbox_ref.environment(tmp_path, "cuda")
        assert env["TRITON_CACHE_DIR"] == str(shared)
        alone = Contestants(assignment, "cuda", tmp_path, lambda perf: timed_deadline(perf, None))
        workers.append(alone.new_reference())
        assert workers[-1].triton_cache != shared  # no store: a cache of the worker's own
        from grader.running.timing.runner import PerformanceRunner

        runner = PerformanceRunner(assignment, 3, device="cpu", calibration=store)
        assert runner.contestants.reference_cache == shared  # what a grade's runner hands its contestants
        runner.close()
    finally:
        for worker in workers:
            worker.close()
            worker.sandbox_ref.close()
    submission = tmp_path / "fused_layers.py"
    submission.write_text("", encoding="utf-8")
    guarded = guard_calibration(GradeRequest(assignment, submission, "cuda", calibration=store))
    student = Sandbox(sandbox_options(assignment, submission, "cuda", guarded.hidden))
    try:
        assert str(store.folder.resolve()) in student.hidden().split(":")
        assert student.triton_cache != shared and student.root in student.triton_cache.parents
    finally:
        student.close()


def test_in_turn_the_reference_and_the_student_take_turns_going_first(tmp_path: Path) -> None:
    """Rounds timed in turn swap who goes first, at least IN_TURN_ROUNDS of them and an even number, so that the
    worth of going first (a power-capped GPU: ~4% on an H100) cancels in `paired_speedup`; the first sample
    spins the clocks up, the last lets both graphs go."""
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    contestants = Contestants(assignment, "cuda", tmp_path, lambda perf: timed_deadline(perf, None))
    calls: list[tuple[str, float, bool]] = []
    student_worker, reference_worker = object(), object()
    contestants.reference = reference_worker  # type: ignore[assignment]

    def sample(worker: object, perf: PerformanceCase, what: str, *, spin_up_ms: float, hold: bool) -> list[float]:
        calls.append(("reference" if worker is reference_worker else "student", spin_up_ms, hold))
        return [float(len(calls))]

    contestants.sample = sample  # type: ignore[method-assign]
    in_turn = contestants.time_in_turn(student_worker, PERF, "timing")  # type: ignore[arg-type]
    assert isinstance(in_turn, InTurn) and in_turn.cut_short == ""
    student, reference = in_turn.student, in_turn.reference
    rounds = in_turn_rounds(PERF)
    assert rounds == IN_TURN_ROUNDS == len(student) == len(reference) and rounds % 2 == 0
    assert in_turn_rounds(dataclasses.replace(PERF, repeats=13)) == 14
    firsts = [calls[2 * r][0] for r in range(rounds)]
    assert firsts == ["student", "reference"] * (rounds // 2)
    assert calls[0][1] == samplers.DEFAULT_SPIN_UP_MS and all(spin == 0.0 for _, spin, _ in calls[1:])
    assert [hold for _, _, hold in calls] == [True] * (2 * rounds - 2) + [False, False]
    assert student[1] == 4.0 and reference[1] == 3.0  # round 1: the reference's sample came first


def _scripted(tmp_path: Path, samples: dict[str, list[list[float] | str]]) -> Contestants:
    """Contestants whose `sample` plays each side's script (a list of medians, or a failure's words)."""
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    contestants = Contestants(assignment, "cuda", tmp_path, lambda perf: timed_deadline(perf, None))
    contestants.reference = "reference"  # type: ignore[assignment]

    def sample(worker: object, perf: PerformanceCase, what: str, *, spin_up_ms: float, hold: bool) -> list[float] | str:
        return samples[str(worker)].pop(0)

    contestants.sample = sample  # type: ignore[method-assign]
    return contestants


def test_a_slow_kernel_is_timed_in_the_rounds_its_budget_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose samples take long: after each block of two rounds, another block starts only if it would end
    within the case's timeout_s at the last block's pace; the time is the blocks measured, and the case says so."""
    clock = iter([0.0, 50.0, 100.0, 150.0])  # the start, then one reading per block begun: 50 s a block
    monkeypatch.setattr(contestants_module.time, "monotonic", lambda: next(clock))
    wandering = [[40.0], [44.0], [48.0], [40.0]] * 3  # blocks apart: the timing never settles before its budget ends
    contestants = _scripted(tmp_path, {"student": wandering, "reference": [[0.4]] * 10})
    in_turn = contestants.time_in_turn("student", dataclasses.replace(PERF, timeout_s=120), "timing")  # type: ignore[arg-type]
    assert isinstance(in_turn, InTurn)
    # after block 1 (50 s): 50 + 50 <= 120, a second block; after it (100 s): 100 + 50 > 120, stop
    assert in_turn.student == [40.0, 44.0, 48.0, 40.0] and in_turn.reference == [0.4] * 4
    assert "timed in 4 of 10 rounds" in in_turn.cut_short and "120 s" in in_turn.cut_short


def test_a_sample_that_times_out_ends_the_timing_with_the_blocks_measured(tmp_path: Path) -> None:
    timeout = "timeout: timing layernorm: did not finish within 10 s"
    contestants = _scripted(tmp_path, {"student": [[5.0], [5.0], [5.0], timeout], "reference": [[0.1]] * 4})
    in_turn = contestants.time_in_turn("student", PERF, "timing")  # type: ignore[arg-type]
    assert isinstance(in_turn, InTurn) and in_turn.student == [5.0, 5.0] and in_turn.reference == [0.1, 0.1]
    assert "timed in 2 of 10 rounds: a sample did not finish (timeout" in in_turn.cut_short
    first = _scripted(tmp_path, {"student": [timeout], "reference": [[0.1]]})
    assert first.time_in_turn("student", PERF, "timing") == timeout  # type: ignore[arg-type]  # nothing measured
    crashed = "crash: timing layernorm: the worker died (signal SIGSEGV)"
    crash = _scripted(tmp_path, {"student": [[5.0], [5.0], crashed], "reference": [[0.1]] * 3})
    assert crash.time_in_turn("student", PERF, "timing") == crashed  # type: ignore[arg-type]  # only a timeout ends early


def test_a_timing_in_turn_that_settles_ends_early_and_lets_both_graphs_go(tmp_path: Path) -> None:
    """Blocks of two rounds that agree within 0.5% (judging.performance.settled) end the rounds after two blocks:
    both workers are asked to let their held graphs go (a request of no samples, not held); timings that keep
    wandering run every round, and the last round lets the graphs go as before."""
    steady = _scripted(tmp_path, {"student": [[0.200], [0.201], [0.200], [0.200]] + [[0.2]] * 6,
                                  "reference": [[0.400]] * 10})
    let_go: list[tuple[str, str]] = []
    steady.let_go = lambda worker, perf: let_go.append((str(worker), perf.id))  # type: ignore[method-assign]
    in_turn = steady.time_in_turn("student", PERF, "timing")  # type: ignore[arg-type]
    assert isinstance(in_turn, InTurn) and in_turn.cut_short == ""
    assert in_turn.student == [0.200, 0.201, 0.200, 0.200] and in_turn.reference == [0.400] * 4
    assert let_go == [("student", PERF.id), ("reference", PERF.id)]
    noisy = [[0.38], [0.41], [0.40], [0.43], [0.39]] * 2  # a power-capped matmul's rounds: blocks 2-4% apart
    wandering = _scripted(tmp_path, {"student": noisy, "reference": [[0.4]] * 10})
    wandering.let_go = lambda worker, perf: let_go.append((str(worker), perf.id))  # type: ignore[method-assign]
    in_turn = wandering.time_in_turn("student", PERF, "timing")  # type: ignore[arg-type]
    assert isinstance(in_turn, InTurn) and len(in_turn.student) == len(in_turn.reference) == IN_TURN_ROUNDS
    assert len(let_go) == 2  # none more: the last round's samples were not held


def test_letting_a_graph_go_asks_for_no_sample_and_a_worker_that_fails_it_is_dropped(tmp_path: Path) -> None:
    from grader.running import protocol
    from grader.running.processes.client import WorkerFailure

    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    contestants = Contestants(assignment, "cuda", tmp_path, lambda perf: timed_deadline(perf, None))
    sent: list[object] = []

    class Held:
        def __init__(self, fails: bool) -> None:
            self.fails, self.closed = fails, False

        def request(self, request: object, deadline: object, what: str) -> protocol.Timed:
            sent.append(request)
            if self.fails:
                raise WorkerFailure("crash", "the worker died")
            return protocol.Timed(ok=True)

        def close(self) -> None:
            self.closed = True

    timer, reference = Held(fails=False), Held(fails=True)
    contestants.timer, contestants.reference = timer, reference  # type: ignore[assignment]
    contestants.let_go(timer, PERF)  # type: ignore[arg-type]
    assert contestants.timer is timer and sent == [protocol.TimeKept(key=PERF.id, repeats=0, spin_up_ms=0.0,
                                                                     hold=False)]
    contestants.let_go(reference, PERF)  # type: ignore[arg-type]
    assert contestants.reference is None and reference.closed  # its failure costs the next case a new worker only


def test_in_a_batch_the_references_worker_forks_from_the_shared_zygote(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """grader.running.processes.shared_zygote: the reference's worker of each grade is a fork of the batch's zygote
    (no torch import per grade); Nsight Compute's reference worker stays a fresh process under the tool; an
    unreachable zygote leaves the reference's workers fresh processes, as in a single grade."""
    from grader.running.processes.shared_zygote import ADDRESS_VARIABLE, SharedZygote

    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    shared = SharedZygote("interpreter")
    monkeypatch.setenv(ADDRESS_VARIABLE, shared.address)
    contestants = Contestants(assignment, "cpu", tmp_path, lambda perf: timed_deadline(perf, None))
    try:
        worker = contestants.new_reference()
        assert not worker.own_sandbox and worker.sandbox_ref.zygote_address == shared.address
        assert worker.start().ok and worker.warm
        with open(f"/proc/{worker.pid}/stat", "rb") as f:
            assert int(f.read().rsplit(b")", 1)[-1].split()[1]) == shared.process.pid
        contestants.reference = worker
        under_tool = contestants.new_reference(tool=("true",))
        assert under_tool.own_sandbox  # a tool's worker (Nsight Compute's): never forked
        under_tool.close()
    finally:
        contestants.close()
        shared.close()
    monkeypatch.setenv(ADDRESS_VARIABLE, str(tmp_path / "gone.sock"))
    fresh = Contestants(assignment, "cpu", tmp_path, lambda perf: timed_deadline(perf, None))
    worker = fresh.new_reference()
    assert worker.own_sandbox and "could not be reached" in fresh._shared_problem
    worker.close()
    fresh.close()


def test_a_timer_whose_memory_watch_stood_aside_is_remembered_for_the_grades_notes(tmp_path: Path) -> None:
    """Three sessions of GPU grades went unwatched with only a worker's log to say so: every timer reply says why
    the watch stood aside, and the grade (grading_run.timing_notes) says it once."""
    from grader.operations.grading_run import GradingRun
    from grader.running import protocol

    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    contestants = Contestants(assignment, "cuda", tmp_path, lambda perf: timed_deadline(perf, None))
    why = "its kernels could not run: TypeError: Cannot reinterpret a <class '_Address'>"
    replies = [protocol.Timed(ok=True, medians_ms=(0.5,), unwatched=why), protocol.Timed(ok=True, medians_ms=(0.4,))]

    class Timer:
        def request(self, request: object, deadline: object, what: str) -> protocol.Timed:
            return replies.pop(0)

    for _ in range(2):
        assert contestants.sample(Timer(), PERF, "timing", spin_up_ms=0.0, hold=False) in ([0.5], [0.4])  # type: ignore[arg-type]
    assert contestants.unwatched == {why}
    run = GradingRun.__new__(GradingRun)
    run._performance_runner = type("Runner", (), {"contestants": contestants})()
    (note,) = run.timing_notes()
    assert why in note and "not watched" in note and "not your code" in note
    contestants.unwatched.clear()
    assert run.timing_notes() == []
    run._performance_runner = None
    assert run.timing_notes() == []


def test_the_timer_is_a_kernel_host_with_the_seats_budget(tmp_path: Path) -> None:
    """The timer holds every timed case's tensors: it is started with the budget the runner gave the contestants (a
    seat's part of the GPU, gpu_seats.host_budget_bytes), not the sandbox's correctness share; without one, the
    sandbox's (None)."""
    from types import SimpleNamespace

    from grader.running import protocol
    from grader.running.processes.sandbox import Sandbox, WorkerOptions

    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    contestants = Contestants(assignment, "cpu", tmp_path, lambda perf: timed_deadline(perf, None))
    sandbox = Sandbox(WorkerOptions(backend="interpreter", import_timeout_s=30))
    bundle = protocol.KernelBundle(filename="fused_layers.py", source="")
    battery = SimpleNamespace(submission=tmp_path / "fused_layers.py", sandbox=sandbox,
                              workers=SimpleNamespace(bundle=bundle, bundle_problem=""))
    try:
        plain = contestants.new_timer(battery)  # type: ignore[arg-type]
        contestants.host_budget_bytes = 8 << 30
        seated = contestants.new_timer(battery)  # type: ignore[arg-type]
        assert not isinstance(plain, str) and not isinstance(seated, str)
        assert plain.gpu_budget_bytes is None and seated.gpu_budget_bytes == 8 << 30
    finally:
        sandbox.close()


def test_the_timer_compiles_a_cases_kernels_in_a_request_that_sends_no_tensor(tmp_path: Path) -> None:
    """Ahead of the checks (outside the seat and the GPU's shared hold, while the student's worker records the next
    case) the timer gets a case's launches to compile, and no tensor: its check then finds them compiled. A timer
    that fails at it says so (the runner drops it; the first check starts another and reports), and off CUDA nothing
    is sent."""
    from types import SimpleNamespace

    from grader.running import protocol
    from grader.running.processes.client import WorkerFailure
    from grader.running.timing.launch_plan import PerformancePlan

    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    sent: list[tuple[object, object]] = []

    class Timer:
        def __init__(self, fails: bool = False) -> None:
            self.fails = fails

        def request(self, request: object, deadline: object, what: str) -> protocol.Timed:
            sent.append((request, deadline))
            if self.fails:
                raise WorkerFailure("timeout", "a compilation did not finish")
            return protocol.Timed(ok=True, outputs=(), sets=3)

    def prepared(*kernels: str) -> SimpleNamespace:
        launches = tuple({"kernel": k, "grid": [8], "args": [1], "kwargs": {}} for k in kernels)
        return SimpleNamespace(timed=PerformancePlan(buffers={0: {"fresh": True, "nbytes": 64}}, launches=launches,
                                                     outputs=()))

    ready = [prepared("row_mean_var_kernel"), prepared("row_mean_var_kernel", "layernorm_kernel")]
    contestants = Contestants(assignment, "cuda", tmp_path, lambda perf: timed_deadline(perf, None))
    assert contestants.compile_ahead(Timer(), ready)  # type: ignore[arg-type]
    (request, deadline), = sent
    assert isinstance(request, protocol.TimeLaunches) and request.compile_only
    assert [launch["kernel"] for launch in request.launches] == ["row_mean_var_kernel", "row_mean_var_kernel",
                                                                 "layernorm_kernel"]
    assert request.inputs == () and request.more_inputs == () and not request.return_outputs and not request.time
    assert deadline.compile_s == COMPILE_LIMIT_S

    assert not contestants.compile_ahead(Timer(fails=True), ready)  # type: ignore[arg-type]
    sent.clear()
    interpreted = Contestants(assignment, "cpu", tmp_path, lambda perf: timed_deadline(perf, None))
    assert interpreted.compile_ahead(Timer(), ready)  # type: ignore[arg-type]
    assert sent == []
