"""The bars a grade's timed cases are compared with: torch eager's and the reference's times on each case (from the
calibration store, where an earlier grade on this GPU and versions measured them, or measured now and kept), this
GPU's roofs (its copy bandwidth, torch's matmul rate) and the deadline a request at a timed size gets from them. The
base of grader.running.timing.runner.PerformanceRunner, which sets the attributes declared here."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from typing import Any

import torch

from grader.authoring.problem import Baseline, Problem
from grader.authoring.spec import Assignment, PerformanceCase
from grader.environment import versions
from grader.results import DeviceInfo
from grader.running.processes.client import Deadline
from grader.running.timing.calibration import (
    Calibration,
    CalibrationKey,
    CalibrationStore,
    Machine,
    calibration_key,
    this_machine,
)
from grader.running.timing.calls import Prepared, baseline_outputs
from grader.running.timing.contestants import Contestants, timed_deadline
from grader.running.worker.measuring import samplers


class Bars:
    """What a timing session measures once and compares every case with (its attributes are the runner's)."""

    assignment: Assignment
    calibration: CalibrationStore | None
    device: str
    problems: Mapping[str, Problem]
    contestants: Contestants

    def __init__(self) -> None:
        self._machine: Machine | None = None
        self._copy_gb_per_s: float | None = None
        self._roofs: dict[tuple[str, bool], float] = {}  # (dtype, tf32) -> torch's matmul TFLOP/s on this GPU

    def device_info(self, copy_gb_per_s: float | None = None, matmul_tflops: float | None = None) -> DeviceInfo:
        found = versions()
        if copy_gb_per_s is None:
            if self._copy_gb_per_s is None:
                self._copy_gb_per_s = samplers.copy_bandwidth_gbs()
            copy_gb_per_s = self._copy_gb_per_s
        return DeviceInfo(gpu=torch.cuda.get_device_name(0) if self.device == "cuda" else self.device,
                          copy_gb_per_s=copy_gb_per_s, torch=found.get("torch", "?"), triton=found.get("triton", "?"),
                          matmul_tflops=matmul_tflops)

    def _matmul_roof(self, prepared: Prepared) -> float | None:
        """The compute roof for a case that declares flops: torch's matmul in its dtype (tf32 as its baseline
        allows), measured once per grade and kept with the bars; None for the rest, or off CUDA."""
        baseline = prepared.problem.baseline
        if self.device != "cuda" or baseline is None or not baseline.flops:
            return None
        key = (prepared.perf.dtype, bool(baseline.tf32))
        if key not in self._roofs:
            self._roofs[key] = samplers.matmul_tflops(getattr(torch, key[0]), key[1])
        return self._roofs[key]
    def _calibrated(self, perf: PerformanceCase) -> Calibration | None:
        return self.calibration.load(self._calibration_key(perf)) if self.calibration is not None else None

    def _calibration_key(self, perf: PerformanceCase) -> CalibrationKey:
        if self._machine is None:
            self._machine = this_machine(self.device)
        return calibration_key(self.assignment, perf, self.problems, self._machine)

    def _deadline(self, perf: PerformanceCase) -> Deadline:
        """How long a request at the timed size may take: from the reference's measured time when a
        calibration has it (a kernel still running 100x that plus a few seconds after its last launch is
        spinning), compiles allowed their own time, the case's `timeout_s` as the cap."""
        found = self._calibrated(perf)
        bars = (found.reference or found.torch) if found is not None else None
        return timed_deadline(perf, statistics.median(bars) if bars else None)
    def _bars(self, prepared: Prepared, battery: object = None) -> Calibration | str:
        """The reference's and torch eager's medians on this case: from the calibration store (an earlier
        grade on this GPU and versions measured them), or measured now and stored for the next grades.
        Bars without the reference's time are not stored when the assignment has a reference (its failure
        may have been passing)."""
        key = self._calibration_key(prepared.perf)

        def measure() -> Calibration:
            made = self._measure_bars(prepared, key)
            if isinstance(made, str):
                raise _NoBars(made)
            return made

        def keep(bars: Calibration) -> bool:
            return bars.reference is not None or not self.assignment.reference_solution

        try:
            return self.calibration.measure_once(key, measure, keep) if self.calibration is not None else measure()
        except _NoBars as failure:
            return str(failure)

    def _measure_bars(self, prepared: Prepared, key: CalibrationKey) -> Calibration | str:
        perf = prepared.perf
        assert prepared.problem.baseline is not None
        try:
            eager = self._time_eager(prepared.problem.baseline, prepared.inputs, perf)
        except Exception as exc:  # torch eager itself failed (out of memory): no bar to compare with
            return f"torch eager could not be timed at {perf.shape}: {type(exc).__name__}: {exc}"[:400]
        reference, note = self.contestants.time_reference(prepared)
        copy = self._copy_gb_per_s if self._copy_gb_per_s is not None else samplers.copy_bandwidth_gbs()
        self._copy_gb_per_s = copy
        now = time.time()
        return Calibration(id=f"{key.digest}@{int(now)}", reference=tuple(reference) if reference else None,
                           torch=tuple(eager), reference_note=note, copy_gb_per_s=copy, measured_at=now,
                           matmul_tflops=self._matmul_roof(prepared))

    def _eager_outputs(self, baseline: Baseline, inputs: Mapping[str, Any],
                       perf: PerformanceCase) -> dict[str, torch.Tensor]:
        on_device = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        with samplers.tf32_matmul(baseline.tf32):
            return baseline_outputs(baseline, baseline.run(on_device))

    def _time_eager(self, baseline: Baseline, inputs: Mapping[str, Any], perf: PerformanceCase) -> list[float]:
        """Torch eager on `input_sets` copies of the inputs, timed as CUDA-graph replays like the kernels."""
        first = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        copies = [first] + [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in first.items()}
                            for _ in range(perf.input_sets - 1)]
        if self.device != "cuda":
            return []
        with samplers.tf32_matmul(baseline.tf32):
            def run_all() -> None:
                for copy in copies:
                    baseline.run(copy)

            run_all()
            measured = samplers.time_graph(run_all, calls=len(copies), repeats=perf.repeats,
                                           spin_up_ms=self.contestants.spin_up_ms())
        torch.cuda.empty_cache()
        return list(measured.medians_ms)


class _NoBars(Exception):
    """Bars that could not be measured (torch eager failed): the message says why; nothing is stored."""
