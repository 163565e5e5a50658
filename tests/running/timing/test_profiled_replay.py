"""The profiled replay's bookkeeping on the CPU (the replay itself needs a GPU: tests/e2e/test_gpu_why_slow.py): ncu's
one report split back into cases by the launch counts the replies gave, the reason when the report is missing or
refused, the reference's profile kept per GPU and versions beside the calibration, and the note without ncu."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from grader.evidence.kernel_profiles import SideProfile, StaticFacts
from grader.running import protocol
from grader.running.processes.sandbox import WorkerOptions
from grader.running.profiling.ncu import MAX_PROFILED_LAUNCHES, NOT_INSTALLED, parse_ncu_csv, range_profiler_command
from grader.running.timing.calibration import CalibrationKey, CalibrationStore
from grader.running.timing.profiled_replay import PROFILE_FORMAT, Profiler, _Side, no_counters
from tests import ncu_profiles as runs
from tests.ncu_profiles import csv_text

FACTS = {"row_mean_var_kernel": {"registers": 40, "spills": 0, "tensor_cores": False, "vector_loads": True}}
KEY = CalibrationKey("softmax", "perf-softmax", {"dims": {"M": 8192}}, "o" * 64, "r" * 64, "NVIDIA H200", "570",
                     "2.11", "3.6", "0.4")


class FakeWorker:
    """What `_collect` uses of a Worker: its options' tool, `end`, the log and `close`."""

    def __init__(self, output: str, tool: tuple[str, ...] = ("ncu",), ends: bool = True) -> None:
        self.options = SimpleNamespace(tool=tool)
        self.output, self.ends, self.closed = output, ends, False

    def end(self, wait_s: float) -> bool:
        return self.ends

    def output_since(self, offset: int, limit: int = 1 << 20) -> str:
        return self.output

    def close(self) -> None:
        self.closed = True


def profiler(tmp_path: Path, command: tuple[str, ...] | None = ("ncu",)) -> Profiler:
    store = CalibrationStore(tmp_path)
    return Profiler(SimpleNamespace(), SimpleNamespace(), store, {"perf-softmax": KEY}, command=command, find=False)


def side_with(worker: Any, counts: dict[str, int]) -> _Side:
    side = _Side("your kernels", worker=worker)
    side.replies = {perf: protocol.Profiled(ok=True, kernels=FACTS, launches=n) for perf, n in counts.items()}
    return side


def test_one_report_is_split_into_cases_by_launch_counts(tmp_path) -> None:
    report = csv_text(runs.ROW_REFERENCE, runs.ROW_THREE_PASSES, runs.ROW_ONE_WARP)
    worker = FakeWorker(report)
    found = profiler(tmp_path)._collect(side_with(worker, {"perf-a": 1, "perf-b": 2}))
    a, why_a = found["perf-a"]
    b, why_b = found["perf-b"]
    assert a is not None and b is not None and why_a == why_b == ""
    assert len(a.launches) == 1 and len(b.launches) == 2
    assert a.launches[0].get("dram__bytes_read.sum") == runs.ROW_BYTES
    assert b.kernels["row_mean_var_kernel"] == StaticFacts(False, True, 40, 0)
    assert worker.closed


def test_a_refused_profiler_leaves_the_static_facts_and_says_why(tmp_path) -> None:
    refused = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    found = profiler(tmp_path)._collect(side_with(FakeWorker(refused), {"perf-a": 1}))
    profile, why = found["perf-a"]
    assert profile is not None and profile.launches == () and profile.static == StaticFacts(False, True, 40, 0)
    assert "ERR_NVGPUCTRPERM" in why and "static facts" in why
    late = profiler(tmp_path)._collect(side_with(FakeWorker("", ends=False), {"perf-a": 1}))
    assert "did not finish writing its counters" in late["perf-a"][1]


def test_without_ncu_every_case_says_so_once(tmp_path) -> None:
    bare = profiler(tmp_path, command=None)
    bare.student = side_with(FakeWorker("", tool=()), {"perf-softmax": 1})
    prepared = SimpleNamespace(perf=SimpleNamespace(id="perf-softmax", target="softmax"))
    (case,) = bare.finish([prepared]).values()  # type: ignore[list-item]
    assert case.unmeasured.startswith(NOT_INSTALLED) and case.student is not None and not case.measured
    assert case.student.kernels and case.student.launches == ()


def test_the_reference_profile_is_kept_beside_the_calibration(tmp_path) -> None:
    first = profiler(tmp_path)
    collected = first._collect(side_with(FakeWorker(csv_text(runs.ROW_REFERENCE)), {"p": 1}))["p"][0]
    assert collected is not None
    profile = SideProfile(collected.launches, {"k": StaticFacts(False, True, 40, 0)})
    first._store(KEY, profile)
    stored = tmp_path / (KEY.file_name.removesuffix(".json") + ".profile.json")
    assert stored.is_file() and f'"format": {PROFILE_FORMAT}' in stored.read_text()
    assert profiler(tmp_path)._cached(KEY) == profile
    assert profiler(tmp_path, command=("ncu", "--other"))._cached(KEY) is None  # another command: measured again
    recalibrated = profiler(tmp_path)
    recalibrated.calibration = dataclasses.replace(CalibrationStore(tmp_path), not_before=9e18)
    assert recalibrated._cached(KEY) is None
    stored.write_text("{not json")
    assert profiler(tmp_path)._cached(KEY) is None


def test_the_range_command_profiles_only_the_marked_range() -> None:
    command = range_profiler_command(ncu="/usr/local/cuda/bin/ncu", max_launches=8)
    assert command is not None
    assert command[:3] == ("/usr/local/cuda/bin/ncu", "--profile-from-start", "off")
    assert ("--clock-control", "none") == command[3:5] and command[-2:] == ("--launch-count", "8")
    assert not any(flag in command for flag in ("--reset", "--clock-control base", "--lock-clocks"))


class AnsweringWorker(FakeWorker):
    """Answers ProfileKept requests from a script: a reply, or a failure to raise."""

    def __init__(self, answers: list[Any]) -> None:
        super().__init__("")
        self.answers, self.asked, self.alive = answers, [], True

    def request(self, message: Any, deadline: Any, what: str) -> Any:
        self.asked.append(message.key)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_after_a_failed_case_the_side_stops_so_the_report_still_splits(tmp_path) -> None:
    from grader.running.processes.client import WorkerFailure

    cases = [SimpleNamespace(perf=SimpleNamespace(id=f"perf-{n}", target="softmax", timeout_s=60.0)) for n in "abc"]
    worker = AnsweringWorker([protocol.Profiled(ok=True, launches=1), WorkerFailure("timeout", "did not finish"),
                              protocol.Profiled(ok=True, launches=1)])
    replay = profiler(tmp_path)
    replay.student = _Side("your kernels", worker=worker, ready=list(cases))  # type: ignore[arg-type]
    replay.measure()
    assert worker.asked == ["perf-a", "perf-b"]  # perf-c is not asked: ncu may hold part of perf-b's launches
    assert list(replay.student.replies) == ["perf-a"]
    assert "timeout: did not finish" in replay.student.problems["perf-b"]
    assert replay.student.problems["perf-c"].startswith("not profiled: profiling your kernels failed")


def test_only_the_cases_that_passed_the_timing_check_are_profiled(tmp_path) -> None:
    cases = [SimpleNamespace(perf=SimpleNamespace(id=f"perf-{n}", target="softmax", timeout_s=60.0)) for n in "abc"]
    worker = AnsweringWorker([protocol.Profiled(ok=True, launches=1), protocol.Profiled(ok=True, launches=2)])
    replay = profiler(tmp_path)
    replay.student = _Side("your kernels", worker=worker, ready=list(cases))  # type: ignore[arg-type]
    replay.measure(["perf-a", "perf-c"])  # perf-b's outputs were wrong at the timed size: never profiled
    assert worker.asked == ["perf-a", "perf-c"]
    assert {k: r.launches for k, r in replay.student.replies.items()} == {"perf-a": 1, "perf-c": 2}


OPTIONS = WorkerOptions(backend="cuda", import_timeout_s=60.0)


@dataclasses.dataclass(frozen=True)
class Case:
    """What prepare reads of a Prepared: the case, and the plan it replaces for the reference's launches."""

    perf: Any
    timed: Any = None


class SpawnedWorker(FakeWorker):
    """A Worker as `spawn` / `prepare` use it: spawn, finish_start (via `Ready`), alive, and the options."""

    made: list[SpawnedWorker] = []

    def __init__(self, submission: Path, names: list[str], options: Any, sandbox: Any = None,
                 triton_cache: Path | None = None, bundle: Any = None, gpu_budget_bytes: int | None = None) -> None:
        super().__init__("", tool=tuple(options.tool))
        self.submission, self.names, self.sandbox, self.spawned, self.alive = submission, names, sandbox, False, True
        self.triton_cache, self.bundle, self.gpu_budget_bytes = triton_cache, bundle, gpu_budget_bytes
        SpawnedWorker.made.append(self)

    def spawn(self) -> None:
        self.spawned = True

    def finish_start(self) -> protocol.Loaded:
        return protocol.Loaded(ok=True)


def test_spawn_then_prepare_keeps_each_case_in_both_workers_under_the_shared_slot(tmp_path, monkeypatch) -> None:
    import contextlib

    from grader.running.timing import profiled_replay

    SpawnedWorker.made = []
    monkeypatch.setattr(profiled_replay, "Worker", SpawnedWorker)
    submission = tmp_path / "softmax.py"
    submission.write_text("import triton\n\n@triton.jit\ndef k(x):\n    pass\n\nprint('student python')\n")
    folder = tmp_path / "timer"
    folder.mkdir()
    slot: list[str] = []

    @contextlib.contextmanager
    def shared_gpu():
        slot.append("taken")
        yield
        slot.append("released")

    kept: list[tuple[str, str, bool]] = []

    def run_plan(worker, prepared, what, keep="", profiled=False, outputs=True):
        assert not outputs  # a profiled replay checks no output: none crosses the channel
        kept.append((worker.submission.name, keep, profiled))
        assert slot[-1] == "taken"  # the launches run while the slot is held shared
        return ((), ())

    reference_path = tmp_path / "reference.py"
    contestants = SimpleNamespace(
        folder=folder, reference_plans={"perf-a": "plan-a"}, reference_cache=tmp_path / "course-reference-cache",
        assignment=SimpleNamespace(reference_solution=reference_path, required_symbols=("softmax",)),
        new_reference=lambda tool=(): SpawnedWorker(reference_path, ["softmax"],
                                                    dataclasses.replace(OPTIONS, tool=tool),
                                                    triton_cache=contestants.reference_cache),
        run_plan=run_plan, host_budget_bytes=None)
    bundle = protocol.KernelBundle(filename="softmax.py", source="", digest="d")
    battery = SimpleNamespace(submission=submission, workers=SimpleNamespace(shared_gpu=shared_gpu, bundle=bundle),
                              sandbox=SimpleNamespace(options=OPTIONS))
    replay = Profiler(contestants, battery, None, {}, command=("ncu", "--x"), find=False)  # type: ignore[arg-type]
    replay.spawn(["perf-a", "perf-b"])
    student, reference = SpawnedWorker.made
    assert student.spawned and reference.spawned and student.sandbox is battery.sandbox
    # the reference's profiled worker loads the course's compiled reference kernels; the student's, its sandbox's
    assert reference.triton_cache == contestants.reference_cache and student.triton_cache is None
    assert student.options.tool == reference.options.tool == ("ncu", "--x")  # both run under the profiler
    # the student's side is a kernel host: it builds the grade's bundle and never imports the file
    assert student.bundle is bundle and reference.bundle is None
    cases = [Case(SimpleNamespace(id=p, target="softmax")) for p in ("perf-a", "perf-b")]
    # The student's side needs nothing of the timing checks: it runs beside them, before the reference's launches
    # are planned; the reference's side runs after, on the plans the checks made.
    contestants.reference_plans = {}
    replay.prepare_student(cases)  # type: ignore[arg-type]
    assert kept == [("softmax.py", "perf-a", True), ("softmax.py", "perf-b", True)] and not replay.reference.problems
    contestants.reference_plans = {"perf-a": "plan-a"}
    replay.prepare_reference(cases)  # type: ignore[arg-type]
    assert slot == ["taken", "released", "taken", "released"]
    assert kept[2:] == [("reference.py", "perf-a", True)]
    assert replay.reference.problems == {"perf-b": "the reference's launches were not recorded for this case"}
    assert [p.perf.id for p in replay.student.ready] == ["perf-a", "perf-b"]
    assert [p.perf.id for p in replay.reference.ready] == ["perf-a"]


def test_a_kept_reference_profile_spares_the_reference_worker(tmp_path, monkeypatch) -> None:
    from grader.running.timing import profiled_replay

    SpawnedWorker.made = []
    monkeypatch.setattr(profiled_replay, "Worker", SpawnedWorker)
    submission = tmp_path / "softmax.py"
    submission.write_text("import triton\n")
    store = CalibrationStore(tmp_path)
    contestants = SimpleNamespace(folder=tmp_path, reference_plans={}, host_budget_bytes=None,
                                  assignment=SimpleNamespace(
        reference_solution=tmp_path / "reference.py", required_symbols=("softmax",)))
    battery = SimpleNamespace(submission=submission, sandbox=SimpleNamespace(options=OPTIONS),
                              workers=SimpleNamespace(bundle=protocol.KernelBundle(filename="softmax.py", source="")))
    first = Profiler(contestants, battery, store, {"perf-softmax": KEY}, command=("ncu",), find=False)  # type: ignore[arg-type]
    first._store(KEY, SideProfile((), {"k": StaticFacts(False, True, 40, 0)}))
    first.spawn(["perf-softmax"])
    assert len(SpawnedWorker.made) == 1 and "perf-softmax" in first.cached  # the student's alone


def test_a_reference_profile_kept_meanwhile_by_another_grade_spares_the_replay(tmp_path, monkeypatch) -> None:
    """In a class, grades start together and none finds the reference's profile; when one keeps it before another
    has run the reference's launches, the other uses it and lets its reference worker go."""
    from grader.running.timing import profiled_replay

    SpawnedWorker.made = []
    monkeypatch.setattr(profiled_replay, "Worker", SpawnedWorker)
    submission = tmp_path / "softmax.py"
    submission.write_text("import triton\n")
    store = CalibrationStore(tmp_path)
    ran: list[str] = []
    contestants = SimpleNamespace(
        folder=tmp_path, reference_plans={"perf-softmax": "plan"}, reference_cache=None, host_budget_bytes=None,
        assignment=SimpleNamespace(reference_solution=tmp_path / "reference.py", required_symbols=("softmax",)),
        new_reference=lambda tool=(): SpawnedWorker(tmp_path / "reference.py", ["softmax"],
                                                    dataclasses.replace(OPTIONS, tool=tool)),
        run_plan=lambda worker, prepared, what, keep="", profiled=False, outputs=True: ran.append(keep) or ((), ()))
    battery = SimpleNamespace(submission=submission, sandbox=SimpleNamespace(options=OPTIONS),
                              workers=SimpleNamespace(bundle=protocol.KernelBundle(filename="softmax.py", source="")))
    mine = Profiler(contestants, battery, store, {"perf-softmax": KEY}, command=("ncu",), find=False)  # type: ignore[arg-type]
    mine.spawn(["perf-softmax"])
    student, reference = SpawnedWorker.made  # nothing kept yet: both sides spawned
    other = Profiler(contestants, battery, store, {"perf-softmax": KEY}, command=("ncu",), find=False)  # type: ignore[arg-type]
    other._store(KEY, SideProfile((), {"k": StaticFacts(False, True, 40, 0)}))  # the grade beside finished first
    mine.prepare_reference([Case(SimpleNamespace(id="perf-softmax", target="softmax"))])  # type: ignore[list-item]
    assert ran == [] and "perf-softmax" in mine.cached and not mine.reference.problems
    assert reference.closed and mine.reference.worker is None and not student.closed


def test_a_worker_that_dies_while_keeping_leaves_every_later_case_a_reason(tmp_path) -> None:
    """The student's side keeps every case before the checks end; a kernel that crashes at the timed size kills
    its worker, and the cases after it say they were not profiled, and why (never a profile missing silently)."""
    worker = SimpleNamespace(alive=True)
    calls: list[str] = []

    def run_plan(w, prepared, what, keep="", profiled=False, outputs=True):
        calls.append(keep)
        if keep == "perf-b":
            worker.alive = False
            return "crash: the worker died (exit code -11)"
        return ((), ())

    replay = profiler(tmp_path)
    replay.contestants = SimpleNamespace(run_plan=run_plan)
    side = _Side("your kernels", worker=worker)  # type: ignore[arg-type]
    cases = [Case(SimpleNamespace(id=f"perf-{n}", target="softmax")) for n in "abc"]
    replay._keep(side, cases, lambda p: p)  # type: ignore[arg-type]
    assert calls == ["perf-a", "perf-b"] and [p.perf.id for p in side.ready] == ["perf-a"]
    assert side.problems["perf-b"].startswith("crash")
    assert side.problems["perf-c"] == "not profiled: your kernels' profiling worker ended at softmax's launches"


def test_a_case_whose_launches_ncu_did_not_all_count_says_so(tmp_path) -> None:
    """ncu counts at most MAX_PROFILED_LAUNCHES launches a grade: a submission whose wrapper launches a kernel per
    row fills them in its first case; that case keeps what was counted and says so, the next ones say why they have
    none, never a case without counters in silence."""
    report = csv_text(runs.ROW_REFERENCE, runs.ROW_THREE_PASSES, runs.ROW_ONE_WARP)
    found = profiler(tmp_path)._collect(side_with(FakeWorker(report), {"perf-a": 1, "perf-b": 8192, "perf-c": 2}))
    assert found["perf-a"][1] == ""
    b, why_b = found["perf-b"]
    assert b is not None and len(b.launches) == 2
    assert "counted 2 of this case's 8192 kernel launches" in why_b and str(MAX_PROFILED_LAUNCHES) in why_b
    assert "the counters are those of the launches counted" in why_b
    c, why_c = found["perf-c"]
    assert c is not None and c.launches == () and "counted 0 of this case's 2" in why_c and "static facts" in why_c


def test_a_timed_case_without_counters_always_says_why(tmp_path) -> None:
    counted = SideProfile(parse_ncu_csv(csv_text(runs.ROW_REFERENCE)), {})
    assert no_counters(counted, counted) == ""
    assert "for your kernels in this case" in no_counters(SideProfile((), {}), counted)
    assert "for your kernels or the reference" in no_counters(None, None)
    bare = profiler(tmp_path)
    bare.student = side_with(FakeWorker(""), {})  # asked for nothing: no reply, no problem recorded
    bare.reference = side_with(FakeWorker(""), {})
    prepared = SimpleNamespace(perf=SimpleNamespace(id="perf-softmax", target="softmax"))
    profile = bare.finish([prepared])["perf-softmax"]
    assert not profile.measured and profile.unmeasured.startswith("Nsight Compute gave no counters")
