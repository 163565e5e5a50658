"""The bars' cache (grader.running.timing.calibration) on the CPU, with fake clocks and fake measurements: a hit
across two stores ("runs"), what the key covers (versions, GPU, reference and oracle source, the case's
definition) and what it does not (the seed, points), expiry, corrupt and foreign files, one measurement
for two processes, --recalibrate, and how the CLI, the batch and its children pass the store along."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.oracle_loader import load_problems
from grader.authoring.spec import Assignment, PerformanceCase, Threshold, load_assignment
from grader.running.timing.calibration import (
    CACHE_DIR_VARIABLE,
    Calibration,
    CalibrationKey,
    CalibrationStore,
    Machine,
    calibration_key,
    default_folder,
    parse_driver_version,
)

H200 = Machine(gpu="NVIDIA H200 (GPU-8f0c2b1e)", driver="570.124.06", torch="2.13.0+cu128 (CUDA 12.8)",
               triton="3.6.0", grader="0.4.0")
DAY = 24 * 3600.0


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Measurer:
    """A measure function that counts its calls and returns bars measured at the clock's time."""

    def __init__(self, clock: FakeClock, reference: tuple[float, ...] | None = (0.12, 0.13)) -> None:
        self.clock = clock
        self.calls = 0
        self.reference = reference

    def __call__(self) -> Calibration:
        self.calls += 1
        return Calibration(id=f"bars-{self.calls}@{int(self.clock.now)}", reference=self.reference,
                           torch=(0.2, 0.21), reference_note="", copy_gb_per_s=4000.0, measured_at=self.clock.now)


def never() -> Calibration:
    raise AssertionError("measured although the bars are cached")


# ------------------------------------------------------------------------------------------- the store


def test_bars_measured_in_one_run_are_read_by_the_next(tmp_path: Path, key: CalibrationKey) -> None:
    clock = FakeClock()
    measure = Measurer(clock)
    first = CalibrationStore(tmp_path / "cache", clock=clock).measure_once(key, measure)
    clock.now += 3600  # the next run, an hour later: a new store over the same folder
    second = CalibrationStore(tmp_path / "cache", clock=clock)
    assert second.load(key) == first
    assert second.measure_once(key, never) == first and measure.calls == 1
    stored = json.loads(second.path(key).read_text(encoding="utf-8"))
    assert stored["key"]["assignment"] == "fused_layers" and stored["key"]["perf_id"] == "perf-layernorm"
    assert stored["key"]["case"]["dims"] == {"M": 8192, "N": 8192}  # readable: what it was measured for
    assert stored["key"]["gpu"] == H200.gpu and stored["key"]["driver"] == H200.driver
    assert stored["key"]["case"]["baseline"]["label"] == "F.layer_norm"
    assert stored["measured"] == "1970-01-12T13:46:40+00:00"
    assert second.path(key).name == f"fused_layers.perf-layernorm.{key.digest}.json"


def test_stale_bars_are_measured_again(tmp_path: Path, key: CalibrationKey) -> None:
    clock = FakeClock()
    store = CalibrationStore(tmp_path, max_age_s=DAY, clock=clock)
    measure = Measurer(clock)
    store.measure_once(key, measure)
    clock.now += DAY
    assert store.load(key) is not None  # exactly max_age_s old: still good
    clock.now += 1
    assert store.load(key) is None
    again = store.measure_once(key, measure)
    assert measure.calls == 2 and again.measured_at == clock.now and store.load(key) == again
    clock.now -= 3600  # the clock set back by an hour: an entry from the future is not trusted
    assert store.load(key) is None


@pytest.mark.parametrize("content", [
    "{not json", "", "[1, 2]", "\udcff", '{"format": 1}',
    '{"format": 1, "key": "KEY", "calibration": {"id": "x", "reference": ["fast"], "torch": [0.2], '
    '"copy_gb_per_s": 4000.0, "measured_at": 1000000.0}}',
    '{"format": 1, "key": "KEY", "calibration": {"id": "x", "reference": [0.1], "torch": [0.2], '
    '"copy_gb_per_s": "fast", "measured_at": 1000000.0}}',
    '{"format": 1, "key": "KEY", "calibration": {"id": "x", "reference": 0.1, "torch": [0.2], '
    '"copy_gb_per_s": 4000.0, "measured_at": 1000000.0}}',
], ids=["truncated", "empty", "a-list", "bad-utf8", "no-key", "text-median", "text-bandwidth", "not-a-list"])
def test_a_corrupt_file_is_measured_again(tmp_path: Path, key: CalibrationKey, content: str) -> None:
    clock = FakeClock()
    store = CalibrationStore(tmp_path, clock=clock)
    store.path(key).write_text(content.replace('"KEY"', json.dumps(key.to_dict())), encoding="utf-8",
                               errors="surrogateescape")
    assert store.load(key) is None
    measure = Measurer(clock)
    made = store.measure_once(key, measure)
    assert measure.calls == 1 and store.load(key) == made


def test_a_foreign_file_is_not_taken_for_the_key(tmp_path: Path, key: CalibrationKey) -> None:
    """A file at the key's name whose stored key or format differs (copied from elsewhere, or a hash
    collision) is ignored and replaced."""
    clock = FakeClock()
    store = CalibrationStore(tmp_path, clock=clock)
    other = dataclasses.replace(key, gpu="NVIDIA H100 (GPU-1)")
    store.store(other, Measurer(clock)())
    shutil.copyfile(store.path(other), store.path(key))
    assert store.load(key) is None
    data = json.loads(store.path(other).read_text(encoding="utf-8"))
    store.path(key).write_text(json.dumps({**data, "key": key.to_dict(), "format": 0}), encoding="utf-8")
    assert store.load(key) is None
    store.path(key).write_text(json.dumps({**data, "key": key.to_dict()}), encoding="utf-8")
    assert store.load(key) is not None  # the same file with this key and format is read


def test_recalibrate_measures_once_then_shares(tmp_path: Path, key: CalibrationKey) -> None:
    """--recalibrate ignores bars measured before the run started; the run's later grades reuse the new
    ones, and a later run without --recalibrate reads them too."""
    clock = FakeClock()
    measure = Measurer(clock)
    old = CalibrationStore(tmp_path, clock=clock).measure_once(key, measure)
    clock.now += 60
    fresh = CalibrationStore(tmp_path, clock=clock).recalibrated()
    assert fresh.load(key) is None
    new = fresh.measure_once(key, measure)
    assert measure.calls == 2 and new != old
    clock.now += 60
    assert fresh.measure_once(key, never) == new
    assert CalibrationStore(tmp_path, clock=clock).load(key) == new


def test_what_is_not_kept_or_not_measured_is_not_stored(tmp_path: Path, key: CalibrationKey) -> None:
    clock = FakeClock()
    store = CalibrationStore(tmp_path, clock=clock)
    measure = Measurer(clock, reference=None)
    assert store.measure_once(key, measure, keep=lambda bars: bars.reference is not None).reference is None
    assert store.load(key) is None and not store.path(key).exists()

    def fails() -> Calibration:
        raise RuntimeError("torch eager ran out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        store.measure_once(key, fails)
    assert store.load(key) is None
    nan = dataclasses.replace(Measurer(clock)(), torch=(float("nan"),))  # JSON cannot hold it: used, not kept
    assert store.measure_once(key, lambda: nan) is nan and store.load(key) is None


def test_an_unwritable_folder_measures_for_the_grade_alone(tmp_path: Path, key: CalibrationKey) -> None:
    (tmp_path / "file").write_text("", encoding="utf-8")
    clock = FakeClock()
    measure = Measurer(clock)
    store = CalibrationStore(tmp_path / "file" / "cache", clock=clock)  # under a file: cannot be made
    assert store.measure_once(key, measure).id == "bars-1@1000000" and measure.calls == 1
    assert store.load(key) is None


# ------------------------------------------------------------------------------------------- two processes


def _measure_in_a_process(folder: str, key_data: dict, log: str, out: str) -> None:
    key = CalibrationKey(**key_data)

    def measure() -> Calibration:
        with open(log, "a", encoding="utf-8") as f:
            f.write("measured\n")
        time.sleep(1.0)  # long enough that the other process asks while this one measures
        return Calibration(id=f"by-{out}", reference=(0.1,), torch=(0.2,), reference_note="",
                           copy_gb_per_s=4000.0, measured_at=time.time())

    got = CalibrationStore(Path(folder)).measure_once(key, measure)
    Path(out).write_text(got.id, encoding="utf-8")


def test_concurrent_grades_measure_a_case_once(tmp_path: Path, key: CalibrationKey) -> None:
    context = multiprocessing.get_context("spawn")
    log = tmp_path / "measurements.log"
    outs = [tmp_path / "a.out", tmp_path / "b.out"]
    processes = [context.Process(target=_measure_in_a_process,
                                 args=(str(tmp_path / "cache"), key.to_dict(), str(log), str(out)))
                 for out in outs]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    assert log.read_text(encoding="utf-8") == "measured\n"
    ids = {out.read_text(encoding="utf-8") for out in outs}
    assert len(ids) == 1 and ids <= {f"by-{out}" for out in outs}  # both use the one measurement


# ------------------------------------------------------------------------------------------- the key


def test_the_key_covers_versions_gpu_and_driver(assignment: Assignment, perf: PerformanceCase,
                                                key: CalibrationKey) -> None:
    problems = load_problems(assignment)
    digests = {key.digest}
    for change in ({"gpu": "NVIDIA H200 (GPU-00000000)"}, {"gpu": "NVIDIA H100 (GPU-8f0c2b1e)"},
                   {"driver": "575.51.03"}, {"torch": "2.13.0+cu130 (CUDA 13.0)"}, {"triton": "3.7.0"},
                   {"grader": "0.5.0"}):
        digests.add(calibration_key(assignment, perf, problems, dataclasses.replace(H200, **change)).digest)
    digests.add(dataclasses.replace(key, format=key.format + 1).digest)
    assert len(digests) == 8


def test_the_key_covers_the_case_definition_not_its_points(assignment: Assignment, perf: PerformanceCase,
                                                           key: CalibrationKey) -> None:
    problems = load_problems(assignment)

    def digest(**change) -> str:
        return calibration_key(assignment, dataclasses.replace(perf, **change), problems, H200).digest

    changed = [digest(dims={"M": 8192, "N": 8191}), digest(dtype="float16"), digest(repeats=7),
               digest(input_sets=2), digest(tolerance="matmul"), digest(meta={"BLOCK_N": 1024}),
               digest(kind="ones"), digest(options={"eps": 1e-3})]
    assert len({key.digest, *changed}) == 1 + len(changed)
    assert digest(thresholds=(Threshold(1.0, 5.0),), description="other words", timeout_s=1.0) == key.digest
    other = next(p for p in assignment.performance if p.target == "layernorm" and p.id != perf.id)
    assert calibration_key(assignment, other, problems, H200).digest != key.digest


def test_the_key_covers_the_reference_and_oracle_source(tmp_path: Path, repo_root: Path, perf: PerformanceCase,
                                                         assignment: Assignment, key: CalibrationKey) -> None:
    problems = load_problems(assignment)
    course = tmp_path / "course"  # the course's three folders: the contract, the staff's, the students'
    for folder in ("assignments", "reference"):
        shutil.copytree(repo_root / folder / "fused_layers", course / folder / "fused_layers")
    shutil.copy2(repo_root / "traps.toml", course / "traps.toml")  # the course's trap library
    copy = course / "assignments" / "fused_layers"
    copied = load_assignment(copy / "assignment.toml")
    assert calibration_key(copied, perf, problems, H200) == key  # same bytes elsewhere: the same key
    assert copied.reference_solution is not None
    with copied.reference_solution.open("a", encoding="utf-8") as f:
        f.write("# a faster reference next term\n")
    edited = calibration_key(copied, perf, problems, H200)
    assert edited.reference != key.reference and edited.digest != key.digest
    with (copy / copied.module).open("a", encoding="utf-8") as f:
        f.write("# another baseline\n")
    assert calibration_key(copied, perf, problems, H200).oracles != key.oracles
    assert calibration_key(dataclasses.replace(copied, reference_solution=None), perf, problems, H200).reference == ""


def test_driver_version_from_the_kernel_module() -> None:
    proprietary = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 01:52:03 UTC 2025\n"
                   "GCC version:  gcc version 12.3.0\n")
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.51.03  Release Build  (dvs-builder)\n"
    assert parse_driver_version(proprietary) == "570.124.06"
    assert parse_driver_version(open_module) == "575.51.03"
    assert parse_driver_version("GCC version: 12.3.0\n") == ""


# ------------------------------------------------------------------------------------------- where it lives


def test_the_default_folder_is_the_users_cache(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert default_folder({}, home) == home / ".cache" / "kernel-grader" / "calibration"
    assert default_folder({"XDG_CACHE_HOME": "/var/cache/me"}, home) == Path("/var/cache/me/kernel-grader/calibration")
    assert default_folder({"XDG_CACHE_HOME": "relative"}, home) == home / ".cache" / "kernel-grader" / "calibration"
    both = {CACHE_DIR_VARIABLE: "/srv/grader-cache", "XDG_CACHE_HOME": "/var/cache/me"}
    assert default_folder(both, home) == Path("/srv/grader-cache/calibration")


def test_the_store_travels_on_a_command_line(tmp_path: Path) -> None:
    store = CalibrationStore(tmp_path / "bars", max_age_s=1800.5).recalibrated()
    import argparse

    parser = argparse.ArgumentParser()
    for name in ("--x-calibration-dir", "--x-calibration-max-age-s", "--x-calibrated-after"):
        parser.add_argument(name)
    args = parser.parse_args(store.to_args("--x-"))
    again = CalibrationStore.from_args(args.x_calibration_dir, float(args.x_calibration_max_age_s),
                                       float(args.x_calibrated_after))
    assert again == store and again is not None and again.not_before == store.not_before
    assert CalibrationStore.from_args(None, None, None) is None
    assert CalibrationStore.from_args(tmp_path, None, None) == CalibrationStore(tmp_path)


# ------------------------------------------------------------------------------------------- a grade


def test_a_cuda_grade_makes_and_hides_the_cache_folder(tmp_path: Path, assignment: Assignment) -> None:
    """Student code must not plant bars: the folder exists before the worker starts and is hidden from it."""
    from grader.operations.grade import GradeRequest, guard_calibration

    store = CalibrationStore(tmp_path / "cache" / "calibration")
    request = GradeRequest(assignment, tmp_path / "fused_layers.py", "cuda", hidden=("/out",), calibration=store)
    guarded = guard_calibration(request)
    assert store.folder.is_dir() and guarded.hidden == ("/out", str(store.folder.resolve()))
    assert guarded.calibration == store
    on_cpu = dataclasses.replace(request, backend="interpreter", calibration=CalibrationStore(tmp_path / "cpu"))
    assert guard_calibration(on_cpu) == on_cpu and not (tmp_path / "cpu").exists()  # nothing is timed there
    (tmp_path / "file").write_text("", encoding="utf-8")
    unwritable = dataclasses.replace(request, calibration=CalibrationStore(tmp_path / "file" / "cache"))
    assert guard_calibration(unwritable).calibration is None  # the grade measures its own bars


def test_the_grade_hands_the_store_to_its_grading_run(tmp_path: Path, assignment: Assignment) -> None:
    """GradeRequest.calibration -> the GradingRun (pytest's plugin instance), which makes the PerformanceRunner
    with it."""
    from grader.operations import grade as grade_module
    from grader.operations.grade import GradeRequest

    store = CalibrationStore(tmp_path / "bars", max_age_s=600.0, not_before=1234.5)
    submission = tmp_path / "fused_layers.py"
    submission.write_text("", encoding="utf-8")
    seen: list[CalibrationStore | None] = []

    class Seen(Exception):
        pass

    def probe(run: Any) -> str:
        seen.append(run.calibration)
        raise Seen  # nothing runs (no GPU here): the run is all this test wants

    with pytest.MonkeyPatch.context() as patch, pytest.raises(Seen):
        patch.setattr(grade_module, "run_pytest", probe)
        grade_module.grade(GradeRequest(assignment, submission, "cuda", calibration=store, performance=False))
    assert seen == [store]


def test_the_matmul_roof_is_kept_with_the_bars_and_older_files_still_read() -> None:
    bars = Calibration("k@1", (0.5,), (0.6,), "", 4243.0, 1_000_000.0, matmul_tflops=380.5)
    assert Calibration.from_dict(json.loads(json.dumps(bars.to_dict()))) == bars
    older = {k: v for k, v in bars.to_dict().items() if k != "matmul_tflops"}
    assert Calibration.from_dict(older).matmul_tflops is None
    with pytest.raises(ValueError):
        Calibration.from_dict({**bars.to_dict(), "matmul_tflops": float("nan")})
