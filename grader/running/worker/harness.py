"""Inside the worker: import the submission, launch its kernels, call its wrappers, replay recorded launches.

One method per request type of grader.running.protocol (grader.running.worker.serve dispatches to them); the
timed requests are grader.running.worker.measuring.handlers's. Nothing here judges anything: replies carry plain data
(tensors copied to the CPU, strings, numbers) back to the grader, which does every comparison itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import triton

from grader.running import protocol
from grader.running.worker import fence, interpreter_compat, kernel_host, scratch, traffic
from grader.running.worker.confinement import confine_imports
from grader.running.worker.errors import describe_exception, is_fatal_device_error
from grader.running.worker.hint_check import HintLog
from grader.running.worker.kernel_report import describe_kernels
from grader.running.worker.kernels import (
    compile_for_gpu,
    compile_in_parallel,
    compile_seconds,
    describe_symbol,
    make_grid,
    patch_autotune_for_interpreter,
    replayable_kernel,
    time_jit_compiles,
    tuned_meta,
)
from grader.running.worker.launch_record import decode_value
from grader.running.worker.measuring import handlers as measuring
from grader.running.worker.recording import (
    Recorder,
    TorchOps,
    allocation_reports,
    encode_value,
    patch_kernel_runs,
    result_views,
)

SUBMISSION_MODULE = "submission"
# The import paths a kernel host keeps besides the interpreter's own: the grader's checkout (never the sandbox's).
TRUSTED_PATHS = (str(Path(__file__).resolve().parents[3]),)


class Harness:
    """The submission's module in this worker, and the handlers of every correctness request."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.device = torch.device("cuda") if backend == "cuda" else torch.device("cpu")
        self.module: Any = None
        self.path = ""
        self._storages: list[torch.Tensor] = []
        # Interpreter only: the first false tl.multiple_of / tl.max_contiguous promise of each launch or call.
        self.hints = HintLog()
        patch_kernel_runs()
        time_jit_compiles()
        if backend == "interpreter":
            patch_autotune_for_interpreter()
            interpreter_compat.install(self.hints)  # before the submission is imported: it may alias what this patches
            fence.install()
        fraction = os.environ.get("GRADER_GPU_MEMORY_FRACTION")  # grader.running.processes.sandbox: the first guard
        if backend == "cuda" and fraction:
            # Cooperative (the submission could raise it again): the grader's watchdog is the limit that holds.
            torch.cuda.set_per_process_memory_fraction(min(1.0, max(0.0, float(fraction))))

    @staticmethod
    def compile_seconds() -> float:
        return compile_seconds()

    # ------------------------------------------------------------------ requests

    def load(self, request: protocol.Load) -> protocol.Loaded:
        self.path = request.path
        spec = importlib.util.spec_from_file_location(SUBMISSION_MODULE, request.path)
        if spec is None or spec.loader is None:
            return protocol.failed(protocol.Loaded, protocol.WorkerError(type="ImportError",
                                                                         message=f"cannot import {request.path}"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[SUBMISSION_MODULE] = module
        confine_imports()
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the worker stays up
            return protocol.failed(protocol.Loaded, describe_exception(exc, request.path))
        self.module = module
        try:
            kernels = describe_kernels(module)
        except Exception:  # the module's objects are the submission's: one that cannot be described leaves no kernels
            kernels = {}
        return protocol.Loaded(ok=True, symbols={name: describe_symbol(getattr(module, name, None))
                                                 for name in request.names}, kernels=kernels)

    def load_kernels(self, request: protocol.LoadKernels) -> protocol.Loaded:
        """Become a kernel host: build the submission's kernels from the bundle (grader.running.worker.kernel_host);
        no line of the submission runs here, and no import path the sandbox can write stays."""
        bundle = request.bundle
        self.path = bundle.filename
        digest = protocol.kernel_bundle_digest(bundle)
        if digest != bundle.digest:
            return protocol.failed(protocol.Loaded, protocol.WorkerError(
                type="BundleError", message="the kernels arrived altered (their digest does not match)"))
        kernel_host.forget_untrusted_paths(TRUSTED_PATHS)
        try:
            module, unavailable = kernel_host.build_module(bundle)
        except kernel_host.KernelRefused as exc:
            return protocol.failed(protocol.Loaded, protocol.WorkerError(type="KernelRefused", message=str(exc)))
        except BaseException as exc:
            return protocol.failed(protocol.Loaded, describe_exception(exc, bundle.filename))
        confine_imports()
        if self.backend == "cuda":
            scratch.install()  # kernels that build tensor descriptors on the device get their scratch from the grader
        self.module = module
        symbols = {name: ({"kind": "unavailable", "why": unavailable[name]} if name in unavailable
                          else describe_symbol(getattr(module, name, None))) for name in request.names}
        return protocol.Loaded(ok=True, symbols=symbols, digest=digest, unavailable=dict(unavailable))

    def launch(self, request: protocol.Launch) -> protocol.Launched:
        kernel = getattr(self.module, request.kernel)
        tensors = self._tensors(request.storages, request.views)
        args = [self._resolve(a, tensors) for a in request.args]
        meta = {**_untuned(kernel, request.meta), **request.resolved}
        self._announce(request.announce_pointers)
        self.hints.reset()
        counted: list[traffic.LaunchTraffic] = []
        recorder = Recorder(replayable=True, describe=_nothing) if request.resolve else None
        Recorder.active = recorder
        try:
            with self._counting(request.count_traffic) as counted:
                kernel[make_grid(request.grid)](*args, **meta)
            self._sync()
        except BaseException as exc:
            return _failed(protocol.Launched, exc, self.path, request.announce_pointers,
                           device_ptrs=self._device_ptrs(), false_hint=self.hints.first)
        finally:
            Recorder.active = None
        return protocol.Launched(ok=True, storages=self._storages_back(), device_ptrs=self._device_ptrs(),
                                 false_hint=self.hints.first, traffic=self._traffic(request.count_traffic, counted),
                                 resolved=resolved_meta(kernel, recorder) if recorder is not None else None)

    def call(self, request: protocol.Call) -> protocol.Called:
        function = getattr(self.module, request.function)
        tensors = self._tensors(request.storages, request.views)
        args = [self._resolve(a, tensors) for a in request.args]
        kwargs = {k: self._resolve(v, tensors) for k, v in request.kwargs.items()}
        recorder = Recorder()
        recorder.allocations = []
        recorder.announce = request.announce_pointers
        self._announce(request.announce_pointers)
        Recorder.active = recorder
        self.hints.reset()
        counted: list[traffic.LaunchTraffic] = []
        try:
            with TorchOps(), self._counting(request.count_traffic) as counted:
                result = function(*args, **kwargs)
            self._sync()
        except BaseException as exc:
            return _failed(protocol.Called, exc, self.path, request.announce_pointers,
                           launches=tuple(recorder.launches), torch_ops=recorder.torch_ops,
                           false_hint=self.hints.first)
        finally:
            Recorder.active = None
        return protocol.Called(
            ok=True,
            result=encode_value(result),
            launches=tuple(recorder.launches),
            torch_ops=recorder.torch_ops,
            storages=self._storages_back(),
            result_views=tuple(result_views(result)),
            allocation_findings=tuple(allocation_reports(recorder.allocations)),
            false_hint=self.hints.first,
            traffic=self._traffic(request.count_traffic, counted),
        )

    def warmup(self, request: protocol.Warmup) -> protocol.WarmedUp:
        """Compile and load the kernel specialisations of the given launches in parallel before any runs
        (kernels.compile_in_parallel); nothing is launched. Errors are left for the real launch to report. The
        interpreter compiles nothing."""
        if self.backend != "cuda" or not request.launches:
            return protocol.WarmedUp(ok=True, compiled=0)
        calls = []
        for launch in request.launches:
            kernel = getattr(self.module, launch.kernel, None)
            if not isinstance(kernel, triton.runtime.KernelInterface) or not hasattr(kernel, "warmup"):
                continue
            try:
                tensors = self._tensors(launch.storages, launch.views)
            except Exception:  # noqa: BLE001 - the real launch reports it, with the student's line
                continue
            calls.append((kernel, [self._resolve(a, tensors) for a in launch.args], make_grid(launch.grid),
                          _untuned(kernel, launch.meta)))
        count, _ = compile_in_parallel(calls, request.threads)
        return protocol.WarmedUp(ok=True, compiled=count)

    def compile(self, request: protocol.Compile) -> protocol.Compiled:
        kernel = getattr(self.module, request.kernel)
        constexprs = _untuned(kernel, request.constexprs)
        configs = getattr(kernel, "configs", None) or [None]
        try:
            for config in configs:  # an autotuned kernel must compile with each of its configs
                chosen = dict(constexprs, **(getattr(config, "kwargs", None) or {}))
                compile_for_gpu(kernel, dict(request.signature), chosen, request.arch)
        except BaseException as exc:
            return protocol.failed(protocol.Compiled, describe_exception(exc, self.path))
        return protocol.Compiled(ok=True)

    def replay(self, request: protocol.Replay) -> protocol.Replayed:
        """Run recorded launches again, in order, on the storages the grader vouched for; no wrapper
        code runs. Storages a launch does not reload keep what earlier launches wrote."""
        buffers: dict[int, torch.Tensor] = {}
        for launch in request.launches:
            try:  # a record that cannot be decoded was altered: `stage` tells the grader it was not the kernel
                for sid, data in launch["load"].items():
                    buffers[sid] = data.to(self.device).clone()
                jit = replayable_kernel(self.module, launch["kernel"])
                args = [decode_value(a, buffers) for a in launch["args"]]
                kwargs = {k: decode_value(v, buffers) for k, v in launch["kwargs"].items()}
                grid = tuple(launch["grid"])
            except BaseException as exc:
                return protocol.failed(protocol.Replayed, describe_exception(exc, self.path), stage="record")
            try:
                jit[grid](*args, **kwargs)
                self._sync()
            except BaseException as exc:
                return protocol.failed(protocol.Replayed, describe_exception(exc, self.path), stage="kernel",
                                       fatal=is_fatal_device_error(exc))
        return protocol.Replayed(ok=True, buffers={sid: b.detach().to("cpu").clone() for sid, b in buffers.items()})

    # ------------------------------------------------------------------ performance (grader.running.worker.measuring)

    def run(self, request: protocol.Run) -> protocol.Ran:
        return measuring.run_target(self.module, request, self.device, self.path)

    def time_launches(self, request: protocol.TimeLaunches) -> protocol.Timed:
        return measuring.time_planned(self.module, request, self.device, self.path)

    def time_kept(self, request: protocol.TimeKept) -> protocol.Timed:
        return measuring.time_kept(request, self.device, self.path)

    def profile_kept(self, request: protocol.ProfileKept) -> protocol.Profiled:
        return measuring.profile_kept(request, self.device, self.path)

    # ------------------------------------------------------------------ helpers

    def _tensors(self, storages: Sequence[torch.Tensor], views: Sequence[Any]) -> list[torch.Tensor]:
        on_device = [s.to(self.device) for s in storages]
        self._storages = on_device
        return [torch.as_strided(on_device[v["storage"]], v["shape"], v["stride"], v["offset"]) for v in views]

    @staticmethod
    def _resolve(value: Any, tensors: list[torch.Tensor]) -> Any:
        if isinstance(value, dict) and "view" in value:
            return tensors[value["view"]]
        return value

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _storages_back(self) -> tuple[torch.Tensor, ...]:
        return tuple(s.detach().to("cpu").clone() for s in self._storages)

    def _device_ptrs(self) -> tuple[int, ...]:
        return tuple(int(s.data_ptr()) for s in self._storages)

    def _counting(self, asked: bool) -> Any:
        """Count the request's memory traffic (interpreter, when asked: `count_traffic`)."""
        if asked and self.backend == "interpreter":
            return traffic.counting()
        return contextlib.nullcontext([])

    @staticmethod
    def _traffic(asked: bool, counted: list[traffic.LaunchTraffic]) -> tuple[dict[str, Any], ...] | None:
        return tuple(traffic.summaries(counted)) if asked else None

    def _announce(self, asked: bool) -> None:
        """Under memcheck a launch may kill the worker: print the buffers' device addresses first."""
        if asked:
            print(f"{protocol.POINTERS_LINE} {' '.join(str(p) for p in self._device_ptrs())}", file=sys.stderr,
                  flush=True)


def _nothing(tensor: torch.Tensor) -> None:
    return None


def resolved_meta(kernel: Any, recorder: Recorder) -> dict[str, Any]:
    """What autotune or heuristics chose for the launch just made: the innermost JIT call's meta-parameters they set
    and its launch options (num_warps, num_stages, ...), as plain values."""
    if not recorder.launches:
        return {}
    record = recorder.launches[-1].get("replay") or {}
    params = set(record.get("params") or [])
    tuned = set(tuned_meta(kernel))
    kwargs = record.get("kwargs") or {}
    return {k: v for k, v in kwargs.items() if (k in tuned or k not in params)
            and (v is None or type(v) in (bool, int, float, str))}


def _untuned(kernel: Any, meta: Any) -> dict[str, Any]:
    """The constexprs the grader gives, minus those @autotune or @heuristics choose."""
    tuned = set(tuned_meta(kernel))
    return {k: v for k, v in meta.items() if k not in tuned}


def _failed(cls: type[protocol.R], exc: BaseException, path: str, under_tool: bool, **fields: Any) -> protocol.R:
    """The reply to a launch or call that raised. A fatal device error ends the worker: the grader replaces it
    (`fatal`); under compute-sanitizer (`under_tool`: the request announced its pointers) the worker ends itself
    instead (`exits`), so the tool can write its report as the process ends, before the grader stops it."""
    fatal = is_fatal_device_error(exc)
    exits = fatal and under_tool
    return protocol.failed(cls, describe_exception(exc, path), fatal=fatal and not exits, exits=exits, **fields)
