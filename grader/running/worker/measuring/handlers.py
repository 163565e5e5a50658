"""Inside the worker: the requests of a performance case. `run_target` (the student's worker and the reference's)
runs a target once at the timed size, records its launches by layout and, when asked, times it; `time_planned`
and `time_kept` (a timer worker, which loaded only the submission's kernels) run and time planned launches
(grader.running.worker.measuring.planned_launches). Every failure is an error reply, never an exception out of the
worker."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from grader.running import protocol
from grader.running.worker import progress
from grader.running.worker.errors import describe_exception, is_fatal_device_error
from grader.running.worker.kernels import make_grid, replayable_kernel, tuned_meta
from grader.running.worker.launch_record import describe_tensor, storage_id
from grader.running.worker.measuring import planned_launches, samplers
from grader.running.worker.recording import Recorder, TorchOps, encode_value, result_views


def run_target(module: Any, request: protocol.Run, device: torch.device, path: str) -> protocol.Ran:
    """Run a target once on the request's inputs (that run compiles and autotunes it); record its launches by
    layout if asked (`record`), send back its outputs if asked (`return_outputs`), then, on CUDA and if asked
    (`time`), time it with samplers.bench over `sets` rotated copies of the inputs. See
    samplers.prepare_call for the encoding of `inputs`, `args`, `kwargs` and `outputs`."""
    prepared = None
    try:
        target = getattr(module, request.target)
        is_kernel = request.kind == "kernel"
        tuned = set(tuned_meta(target)) if is_kernel else set()
        meta = {k: v for k, v in request.meta.items() if k not in tuned}
        grid = make_grid(request.grid) if is_kernel else None
        prepared = samplers.prepare_call(target, request, device, grid, meta)
        recorder = Recorder(replayable=False)  # a wrapper must stay fused at the timed size too
        Recorder.active = recorder if not is_kernel else None
        try:
            with TorchOps():
                result = prepared.call(0)
            _sync(device)
        finally:
            Recorder.active = None
        progress.mark(progress.STEP)
        record = None
        if request.record:
            record = _record_timed_call(prepared, is_kernel, device)
            progress.mark(progress.STEP)
        outputs = encoded = None
        if request.return_outputs:
            if is_kernel:
                outputs = tuple(t.detach().to("cpu").clone() for t in prepared.outputs[0])
            else:
                encoded = encode_value(result)
        del result
        medians: tuple[float, ...] = ()
        if request.time and device.type == "cuda":
            warmup_ms = request.warmup_ms if request.warmup_ms is not None else samplers.DEFAULT_WARMUP_MS
            rep_ms = request.rep_ms if request.rep_ms is not None else samplers.DEFAULT_REP_MS
            medians = samplers.bench(prepared.call, sets=request.sets, repeats=request.repeats,
                                               warmup_ms=warmup_ms, rep_ms=rep_ms).medians_ms
        return protocol.Ran(ok=True, launches=tuple(recorder.launches), torch_ops=recorder.torch_ops, record=record,
                            outputs=outputs, result=encoded, medians_ms=medians)
    except BaseException as exc:
        return protocol.failed(protocol.Ran, describe_exception(exc, path), fatal=is_fatal_device_error(exc))
    finally:
        del prepared
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _record_timed_call(prepared: samplers.PreparedCall, is_kernel: bool,
                       device: torch.device) -> dict[str, Any]:
    """Call the target once more (it is compiled and tuned by now) with every launch recorded by layout, not
    bytes: what a timer worker needs to run the same launches without this code."""
    recorder = Recorder(replayable=True)
    recorder.fresh = {storage_id(t) for t in prepared.outputs[0]} if is_kernel else set()
    recorder.describe = planned_launches.storage_describer(list(prepared.inputs[0]), recorder.fresh)
    Recorder.active = recorder
    try:
        with TorchOps():
            result = prepared.call(0)
        _sync(device)
    finally:
        Recorder.active = None
    views = [describe_tensor(t) for t in prepared.outputs[0]] if is_kernel else result_views(result)
    return {"launches": [launch.get("replay") for launch in recorder.launches], "outputs": views}


def time_planned(module: Any, request: protocol.TimeLaunches, device: torch.device, path: str) -> protocol.Timed:
    """The timer's run of planned launches on rebuilt buffers (timed, or kept for `time_kept`)."""
    return _timer_reply(lambda: planned_launches.time_launches(lambda name: replayable_kernel(module, name), request,
                                                              device), device, path)


def time_kept(request: protocol.TimeKept, device: torch.device, path: str) -> protocol.Timed:
    """Samples of the launches an earlier `time_planned` kept under the request's key."""
    return _timer_reply(lambda: planned_launches.time_kept(request, device), device, path)


def profile_kept(request: protocol.ProfileKept, device: torch.device, path: str) -> protocol.Profiled:
    """The launches kept under the request's key, run once inside the profiler's range."""
    try:
        return planned_launches.profile_kept(request, device)
    except BaseException as exc:
        return protocol.failed(protocol.Profiled, describe_exception(exc, path), fatal=is_fatal_device_error(exc))


def _timer_reply(run: Callable[[], protocol.Timed], device: torch.device, path: str) -> protocol.Timed:
    try:
        return run()
    except BaseException as exc:
        return protocol.failed(protocol.Timed, describe_exception(exc, path), fatal=is_fatal_device_error(exc))
    finally:
        release_cached_memory(device)


def release_cached_memory(device: torch.device) -> None:
    """Give cached GPU memory back between timed requests, unless a captured graph is held for the next one (its
    pool must stay as it is); never an error of the request's own."""
    if device.type != "cuda" or planned_launches.held_graphs():
        return
    with contextlib.suppress(RuntimeError):
        torch.cuda.empty_cache()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
