"""grader/running/worker/cuda_wait.py: `GRADER_CUDA_WAIT=block` sets blocking sync on every visible device's primary
context, through the driver (a fake one here: the CPU machine has none); unset, or without a driver, nothing is
touched and the grade goes on as CUDA would."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from grader.running.processes.confinement import PASSED_ENVIRONMENT
from grader.running.worker import cuda_wait


class FakeDriver:
    def __init__(self, devices: int) -> None:
        self.devices = devices
        self.calls: list[tuple[str, Any]] = []

    def cuInit(self, flags: int) -> int:  # noqa: N802 - the driver's names
        self.calls.append(("init", flags))
        return 0

    def cuDeviceGetCount(self, count: Any) -> int:  # noqa: N802
        count._obj.value = self.devices
        return 0

    def cuDeviceGet(self, device: Any, ordinal: int) -> int:  # noqa: N802
        device._obj.value = 10 + ordinal
        return 0

    def cuDevicePrimaryCtxSetFlags_v2(self, device: ctypes.c_int, flags: ctypes.c_uint) -> int:  # noqa: N802
        self.calls.append(("flags", (device.value, flags.value)))
        return 0


def test_block_sets_blocking_sync_on_every_device_and_nothing_else_touches_the_driver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    driver = FakeDriver(devices=2)
    monkeypatch.setattr(cuda_wait.ctypes, "CDLL", lambda name: driver)
    assert cuda_wait.wait_as_asked({}) == "" and driver.calls == []
    assert cuda_wait.wait_as_asked({"GRADER_CUDA_WAIT": "spin"}) == "" and driver.calls == []
    assert cuda_wait.wait_as_asked({"GRADER_CUDA_WAIT": "block"}) == "blocking sync on 2 of 2 devices"
    assert driver.calls == [("init", 0), ("flags", (10, 0x04)), ("flags", (11, 0x04))]
    assert "GRADER_CUDA_WAIT" in PASSED_ENVIRONMENT  # the grader's choice reaches its workers


def test_without_a_driver_the_grade_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(cuda_wait.ctypes, "CDLL", missing)
    assert cuda_wait.wait_as_asked({"GRADER_CUDA_WAIT": "block"}) == ""
