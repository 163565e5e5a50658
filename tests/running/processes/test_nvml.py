"""grader/running/processes/nvml.py against a fake pynvml module: the reader picks CUDA's first visible device
(by index or UUID, PCI order on mixed GPUs), merges NVML's two process lists, refuses what it cannot read with a
reason in words, and without pynvml there is no reader (said once in the log)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from types import ModuleType, SimpleNamespace

import pytest

from grader.running.processes.gpu_memory import GiB
from grader.running.processes.nvml import GpuMemoryUnavailable, nvml_reader, open_nvml_reader


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_pynvml(devices: list[dict], init_error: int | None = None) -> ModuleType:
    """A pynvml with these devices: dicts of uuid, name, total, compute, graphics (lists of (pid, bytes),
    or an error code to raise). Handles are indices; `module.open_count` is nvmlInit minus nvmlShutdown."""
    nvml = ModuleType("pynvml")
    nvml.NVMLError = FakeNvmlError
    nvml.NVMLLibraryMismatchError = type("NVMLLibraryMismatchError", (Exception,), {})
    nvml.NVML_ERROR_NOT_SUPPORTED = 3
    nvml.open_count = 0

    def init() -> None:
        if init_error is not None:
            raise FakeNvmlError(init_error)
        nvml.open_count += 1

    def shutdown() -> None:
        nvml.open_count -= 1

    def processes(kind: str) -> Callable[[int], list]:
        def listing(handle: int) -> list:
            found = devices[handle].get(kind, [])
            if found == "mismatch":
                raise nvml.NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does "
                                                    "not match the NVML lib version")
            if isinstance(found, int):
                raise FakeNvmlError(found)
            return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in found]
        return listing

    nvml.nvmlInit = init
    nvml.nvmlShutdown = shutdown
    nvml.nvmlDeviceGetCount = lambda: len(devices)
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index
    nvml.nvmlDeviceGetUUID = lambda handle: devices[handle]["uuid"]
    nvml.nvmlDeviceGetName = lambda handle: devices[handle].get("name", "NVIDIA H200")
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: SimpleNamespace(total=devices[handle]["total"])
    nvml.nvmlDeviceGetComputeRunningProcesses = processes("compute")
    nvml.nvmlDeviceGetGraphicsRunningProcesses = processes("graphics")
    return nvml


TWO_GPUS = [
    {"uuid": "GPU-aaaa1111", "total": 80 * GiB, "compute": [(10, 1 * GiB)]},
    {"uuid": "GPU-bbbb2222", "total": 140 * GiB, "compute": [(20, 2 * GiB)]},
]


@pytest.mark.parametrize(("visible", "total"), [
    (None, 80 * GiB), ("0", 80 * GiB), ("1", 140 * GiB), ("1,0", 140 * GiB),
    ("GPU-bbbb2222", 140 * GiB), ("GPU-bbbb", 140 * GiB), (" GPU-aaaa1111 ,GPU-bbbb2222", 80 * GiB),
])
def test_the_reader_picks_cudas_first_device(visible, total) -> None:
    nvml = fake_pynvml(TWO_GPUS)
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    reader = open_nvml_reader(environ, nvml)
    assert reader.total_bytes() == total
    reader.close()
    reader.close()
    assert nvml.open_count == 0


@pytest.mark.parametrize(("visible", "reason"), [
    ("", "empty"), ("MIG-4f2e1c3a-0000-1111-2222-333344445555", "MIG"), ("GPU-cccc", "no GPU"),
    ("GPU-", "several GPUs"), ("2", "NVML sees 2"), ("-1", "names no GPU"), ("nope", "names no GPU"),
])
def test_the_reader_refuses_devices_it_cannot_read(visible, reason) -> None:
    nvml = fake_pynvml(TWO_GPUS)
    with pytest.raises(GpuMemoryUnavailable, match=reason):
        open_nvml_reader({"CUDA_VISIBLE_DEVICES": visible}, nvml)
    assert nvml.open_count == 0  # every nvmlInit is shut down again


def test_an_index_on_mixed_gpus_needs_pci_order() -> None:
    mixed = [dict(TWO_GPUS[0], name="NVIDIA A100"), dict(TWO_GPUS[1], name="NVIDIA H200")]
    with pytest.raises(GpuMemoryUnavailable, match="CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        open_nvml_reader({"CUDA_VISIBLE_DEVICES": "1"}, fake_pynvml(mixed))
    reader = open_nvml_reader({"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, fake_pynvml(mixed))
    assert reader.total_bytes() == 140 * GiB
    assert open_nvml_reader({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, fake_pynvml(mixed)).total_bytes() == 140 * GiB


def test_the_reader_merges_both_process_lists() -> None:
    device = {"uuid": "GPU-aaaa", "total": 80 * GiB,
              "compute": [(10, 1 * GiB), (11, None), (13, (1 << 64) - 1)],
              "graphics": [(10, 1 * GiB), (12, 2 * GiB)]}
    reader = open_nvml_reader({}, fake_pynvml([device]))
    # 10 in both lists counts once; None and NVML_VALUE_NOT_AVAILABLE count as 0
    assert reader.used_by_pid() == {10: 1 * GiB, 11: 0, 12: 2 * GiB, 13: 0}


def test_graphics_not_supported_is_no_graphics() -> None:
    device = {"uuid": "GPU-aaaa", "total": 80 * GiB, "compute": [(10, 1 * GiB)], "graphics": 3}
    assert open_nvml_reader({}, fake_pynvml([device])).used_by_pid() == {10: 1 * GiB}


def test_nvml_errors_while_opening_are_unavailable() -> None:
    with pytest.raises(GpuMemoryUnavailable, match="no NVIDIA driver"):
        open_nvml_reader({}, fake_pynvml(TWO_GPUS, init_error=9))
    broken = fake_pynvml([{"uuid": "GPU-aaaa", "total": 80 * GiB, "compute": 999}])
    with pytest.raises(GpuMemoryUnavailable, match="per-process"):
        open_nvml_reader({}, broken)
    assert broken.open_count == 0
    other_error = fake_pynvml([{"uuid": "GPU-aaaa", "total": 80 * GiB, "graphics": 15}])
    with pytest.raises(GpuMemoryUnavailable):
        open_nvml_reader({}, other_error)
    old_driver = fake_pynvml([{"uuid": "GPU-aaaa", "total": 80 * GiB, "compute": "mismatch"}])
    with pytest.raises(GpuMemoryUnavailable, match="does not match the NVML lib"):
        open_nvml_reader({}, old_driver)
    assert old_driver.open_count == 0


def test_without_pynvml_there_is_no_reader(monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with pytest.raises(GpuMemoryUnavailable, match="nvidia-ml-py"):
        open_nvml_reader({})
    with caplog.at_level(logging.INFO, logger="grader.running.processes.nvml"):
        assert nvml_reader({}) is None
    assert "pynvml is not installed" in caplog.text
