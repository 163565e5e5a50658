"""GPU memory per process, as the grader's watchdog reads it (grader.running.processes.gpu_memory): NVML through
nvidia-ml-py's `pynvml` on the GPU the grade's workers see (CUDA_VISIBLE_DEVICES's first), or any reader with the
same two methods (a fake in tests). Where NVML cannot report it (no pynvml, no driver, a GPU it cannot name), one
line says why."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Protocol

logger = logging.getLogger(__name__)

_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE as an unsigned long long


class GpuMemoryReader(Protocol):
    """Where the watchdog reads GPU memory from: NVML on a GPU machine, a fake in tests."""

    def used_by_pid(self) -> dict[int, int]:
        """Host pid -> bytes of GPU memory it holds now (every process on the GPU, not only ours)."""
        ...

    def total_bytes(self) -> int:
        """The GPU's memory."""
        ...


class GpuMemoryUnavailable(Exception):
    """NVML cannot report per-process memory here; `str()` says why, in words."""


class NvmlReader:
    """Per-process memory of one GPU through NVML (nvidia-ml-py's `pynvml`). Made by `open_nvml_reader`.

    A process is in both of NVML's lists (compute and graphics) if it has both kinds of context; each
    list reports the process's memory, so it is counted once, at the larger value. NVML reports
    NVML_VALUE_NOT_AVAILABLE (None in pynvml) where it cannot attribute memory: counted as 0."""

    def __init__(self, nvml: ModuleType, handle: Any, device: str) -> None:
        self._nvml = nvml
        self._handle = handle
        self.device = device  # how CUDA_VISIBLE_DEVICES named it, for messages
        self._closed = False

    def used_by_pid(self) -> dict[int, int]:
        used: dict[int, int] = {}
        for processes in (self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle), self._graphics()):
            for process in processes:
                pid = int(process.pid)
                used[pid] = max(used.get(pid, 0), _process_bytes(process.usedGpuMemory))
        return used

    def _graphics(self) -> list[Any]:
        try:
            return list(self._nvml.nvmlDeviceGetGraphicsRunningProcesses(self._handle))
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == self._nvml.NVML_ERROR_NOT_SUPPORTED:
                return []  # compute-only boards may not report graphics contexts at all
            raise

    def total_bytes(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).total)

    def close(self) -> None:
        """Release NVML (nvmlShutdown); the reader is unusable afterwards."""
        if not self._closed:
            self._closed = True
            self._nvml.nvmlShutdown()


def _process_bytes(value: int | None) -> int:
    if value is None or value >= _NOT_AVAILABLE or value < 0:
        return 0
    return int(value)


def open_nvml_reader(environ: Mapping[str, str] | None = None, nvml: ModuleType | None = None) -> NvmlReader:
    """An NVML reader for the GPU the workers use: the first entry of CUDA_VISIBLE_DEVICES in `environ`
    (default: this process's environment), an index or a GPU UUID (or a unique prefix of one, as CUDA
    accepts). Raises GpuMemoryUnavailable without pynvml, a driver, or a usable device (MIG instances
    are not supported: NVML does not report their per-process memory the same way).

    `nvml`: the pynvml module to use (tests pass a fake); imported here when not given."""
    environ = os.environ if environ is None else environ
    nvml = _import_pynvml() if nvml is None else nvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise GpuMemoryUnavailable(f"NVML could not start: {exc} (no NVIDIA driver here?)") from None
    try:
        handle, device = _visible_device(nvml, environ.get("CUDA_VISIBLE_DEVICES"), environ.get("CUDA_DEVICE_ORDER"))
        reader = NvmlReader(nvml, handle, device)
        reader.used_by_pid()  # fails here, once, rather than in every poll of the watchdog
        reader.total_bytes()
    except GpuMemoryUnavailable:
        nvml.nvmlShutdown()
        raise
    except _nvml_errors(nvml) as exc:
        nvml.nvmlShutdown()
        raise GpuMemoryUnavailable(f"NVML cannot report per-process GPU memory: {exc}") from None
    return reader


def _nvml_errors(nvml: ModuleType) -> tuple[type[Exception], ...]:
    """NVMLError, and the error pynvml raises when the driver's NVML lacks a function it calls (an
    older driver than the bindings)."""
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    return (nvml.NVMLError,) if mismatch is None else (nvml.NVMLError, mismatch)


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        raise GpuMemoryUnavailable("pynvml is not installed (pip install 'kernel-grader[gpu]' installs "
                                   "nvidia-ml-py)") from None
    return pynvml


def nvml_reader(environ: Mapping[str, str] | None = None) -> NvmlReader | None:
    """`open_nvml_reader()`, or None where NVML is not available (the reason is logged; call
    `open_nvml_reader` to get it as a GpuMemoryUnavailable)."""
    try:
        return open_nvml_reader(environ)
    except GpuMemoryUnavailable as exc:
        logger.info("no GPU memory watchdog: %s", exc)
        return None


def _visible_device(nvml: ModuleType, visible: str | None, order: str | None) -> tuple[Any, str]:
    """The NVML handle of CUDA's device 0 under CUDA_VISIBLE_DEVICES, and its name there."""
    entry = "0" if visible is None else visible.split(",")[0].strip()
    if not entry:
        raise GpuMemoryUnavailable("CUDA_VISIBLE_DEVICES is empty: no GPU is visible")
    if entry.startswith("MIG-"):
        raise GpuMemoryUnavailable(f"CUDA_VISIBLE_DEVICES names a MIG instance ({entry}): the GPU memory "
                                   "watchdog does not support MIG")
    count = int(nvml.nvmlDeviceGetCount())
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    if entry.startswith("GPU-"):
        found = [h for h in handles if _text(nvml.nvmlDeviceGetUUID(h)).startswith(entry)]
        if len(found) != 1:
            raise GpuMemoryUnavailable(f"CUDA_VISIBLE_DEVICES names {entry}, which is "
                                       f"{'no GPU' if not found else 'the prefix of several GPUs'} here")
        return found[0], entry
    if not entry.isdigit():
        raise GpuMemoryUnavailable(f"CUDA_VISIBLE_DEVICES starts with {entry!r}, which names no GPU")
    index = int(entry)
    if index >= count:
        raise GpuMemoryUnavailable(f"CUDA_VISIBLE_DEVICES names GPU {index}, but NVML sees {count}")
    # NVML numbers GPUs in PCI bus order; CUDA does too only with CUDA_DEVICE_ORDER=PCI_BUS_ID, and
    # otherwise puts the fastest first. Identical GPUs come out in PCI order either way; mixed ones may not.
    names = {_text(nvml.nvmlDeviceGetName(h)) for h in handles}
    if len(names) > 1 and (order or "").strip().upper() != "PCI_BUS_ID":
        raise GpuMemoryUnavailable(f"GPU {index} is ambiguous on a machine with different GPUs "
                                   f"({', '.join(sorted(names))}): set CUDA_DEVICE_ORDER=PCI_BUS_ID or name "
                                   "the GPU by its UUID")
    return handles[index], entry


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
