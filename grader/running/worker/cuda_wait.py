"""How a worker's host thread waits for its GPU work. CUDA's default (cudaDeviceScheduleAuto) spins a core at
100% while it waits whenever the machine has more cores than the process has contexts: in a batch of 16 grades
sharing one GPU, every process waiting for its time slice spins, and the machine runs out of CPU before the GPU is
busy. `GRADER_CUDA_WAIT=block` (set by whoever runs the grader; the worker's environment passes it) makes each
worker's primary context sleep until its work is done (CU_CTX_SCHED_BLOCKING_SYNC) instead. It changes when the
host learns the GPU finished, never what the GPU does or what CUDA events measure. Set before the worker's first
CUDA call (a zygote's fork has none)."""

from __future__ import annotations

import ctypes
import os

VARIABLE = "GRADER_CUDA_WAIT"
_CU_CTX_SCHED_BLOCKING_SYNC = 0x04


def wait_as_asked(environment: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """Apply `GRADER_CUDA_WAIT` to every visible device's primary context: what was done, in words ("" for the
    default, or where the driver cannot be reached: the grade goes on as CUDA would)."""
    if environment.get(VARIABLE, "") != "block":
        return ""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return ""
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return ""
    set_flags = getattr(driver, "cuDevicePrimaryCtxSetFlags_v2", None) or driver.cuDevicePrimaryCtxSetFlags
    done = 0
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        if driver.cuDeviceGet(ctypes.byref(device), ordinal) == 0 \
                and set_flags(device, ctypes.c_uint(_CU_CTX_SCHED_BLOCKING_SYNC)) == 0:
            done += 1
    return f"blocking sync on {done} of {count.value} devices"
