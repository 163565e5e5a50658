"""Inside the worker: import the submission, launch its kernels, call its wrappers, record what ran.

Nothing here judges anything. Replies carry plain data (tensors copied to the CPU, strings, numbers)
back to the grader, which does every comparison itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode

from grader.evidence import guard_bits
from grader.running import guards
from grader.running.worker import fence, interpreter_compat, performance_timing, progress, traffic
from grader.running.worker.hint_check import HintLog
from grader.running.worker.launch_record import LaunchRecord, decode_value, describe_tensor, storage_bytes, storage_id
from grader.running.worker.performance_run import (
    held_graphs,
    note_freshness,
    storage_describer,
    time_kept,
    time_launches,
)
from grader.running.worker.protocol import ALLOCATION_LINE, POINTERS_LINE

try:
    from triton.runtime.autotuner import Autotuner, Heuristics

    _TUNERS: tuple[type, ...] = (Autotuner, Heuristics)
except ImportError:  # pragma: no cover - every supported triton has them
    _TUNERS = ()

SUBMISSION_MODULE = "submission"


# --------------------------------------------------------------------------- errors


def describe_exception(exc: BaseException, submission: str) -> dict[str, Any]:
    """Type, message and the submission's own frames (never the grader's) of an exception chain."""
    chain = []
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    frames = []
    for link in chain:
        for frame in traceback.extract_tb(link.__traceback__):
            if Path(frame.filename).resolve() == Path(submission).resolve():
                frames.append({"line": frame.lineno or 0, "function": frame.name, "code": frame.line or ""})
    root = chain[-1]
    info = {
        "type": type(exc).__name__,
        "qualname": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": _safe_str(exc),
        "root_type": type(root).__name__,
        "root_message": _safe_str(root),
        "chain": [f"{type(e).__module__}.{type(e).__qualname__}" for e in chain],
        "frames": frames,
        "interpreter_limit": interpreter_compat.is_interpreter_limit(exc),
    }
    if isinstance(exc, SyntaxError):
        info["frames"] = [{"line": exc.lineno or 0, "function": "<module>", "code": (exc.text or "").rstrip()}]
    return info


def release_cached_memory(device: torch.device) -> None:
    """Give cached GPU memory back between timed requests, unless a captured graph is held for the next one (its
    pool must stay as it is); never an error of the request's own."""
    if device.type != "cuda" or held_graphs():
        return
    with contextlib.suppress(RuntimeError):
        torch.cuda.empty_cache()


def _safe_str(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a hostile __str__
        text = "<unprintable exception>"
    return text[:4000]


def is_fatal_device_error(exc: BaseException) -> bool:
    """A CUDA error that leaves the context unusable: the worker must be replaced."""
    text = f"{type(exc).__name__} {_safe_str(exc)}"
    return any(sign in text for sign in ("illegal memory access", "misaligned address", "CUDA error",
                                         "AcceleratorError"))


# --------------------------------------------------------------------------- kernels


def kernel_function(obj: Any) -> Any:
    """The Python function under any Triton wrapper (JIT, interpreter, autotune, heuristics)."""
    seen = 0
    while not inspect.isfunction(obj) and hasattr(obj, "fn") and seen < 10:
        obj = obj.fn
        seen += 1
    return obj


def tuned_meta(obj: Any) -> list[str]:
    """Meta-parameters chosen by @autotune configs or @heuristics along the wrapper chain."""
    names: set[str] = set()
    seen = 0
    while isinstance(obj, triton.runtime.KernelInterface) and seen < 10:
        for config in getattr(obj, "configs", None) or []:
            names.update(getattr(config, "kwargs", {}) or {})
        values = getattr(obj, "values", None)
        if isinstance(values, dict):
            names.update(values)
        obj = getattr(obj, "fn", None)
        seen += 1
    return sorted(names)


def describe_symbol(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {"kind": "missing"}
    is_kernel = isinstance(obj, triton.runtime.KernelInterface)
    fn = kernel_function(obj) if is_kernel else obj
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    try:
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        line = 0
    kind = "kernel" if is_kernel else ("function" if callable(obj) else "other")
    return {
        "kind": kind,
        "type": type(obj).__name__,
        # a kernel must be Triton's own object, not a look-alike class whose `run` does the work in Python
        "triton_class": type(obj).__module__.split(".")[0] == "triton",
        "params": params,
        "line": line,
        "tuned": tuned_meta(obj) if is_kernel else [],
    }


def make_grid(exprs: list[str]):
    helpers = {"cdiv": triton.cdiv, "next_power_of_2": triton.next_power_of_2, "max": max, "min": min}

    def grid(meta: dict[str, Any]) -> tuple[int, ...]:
        scope = {**meta, **helpers}
        return tuple(int(eval(expr, {"__builtins__": {}}, scope)) for expr in exprs)  # noqa: S307

    return grid


# --------------------------------------------------------------------------- recording


class _Recorder:
    """What one wrapper call did: kernel launches (top level only) and torch operators."""

    active: _Recorder | None = None

    def __init__(self, replayable: bool = True, describe: Callable[[torch.Tensor], Any] = storage_bytes) -> None:
        self.launches: list[dict[str, Any]] = []
        self.torch_ops: dict[str, int] = {}
        self.depth = 0
        self.replayable = replayable  # keep what a replay needs (storage snapshots): correctness sizes only
        self.describe = describe  # what a launch record keeps of each storage (timed runs: a description)
        self.current: LaunchRecord | None = None
        self.keep: list[torch.Tensor] = []  # every tensor a launch saw, alive until the call returns
        self.fresh: set[int] = set()  # storages allocated uninitialised and not written by torch since
        # Correctness calls: the wrapper's own float allocations, each placed inside guard bands
        # (grader.running.guards.guard_allocation) and checked when the call returns. None: not guarded.
        self.allocations: list[guards.AllocationGuard] | None = None
        self.announce = False  # under compute-sanitizer: print each allocation's address (ALLOCATION_LINE)


def _patch_kernel_runs() -> None:
    """Count launches by wrapping `run` of every KernelInterface class (works in the interpreter,
    where Triton's launch hooks do not fire, and on the GPU; autotune benchmarking and heuristics
    nest inside one top-level run and count once)."""
    todo = [triton.runtime.KernelInterface]
    classes = []
    while todo:
        cls = todo.pop()
        classes.append(cls)
        todo.extend(cls.__subclasses__())
    for cls in classes:
        original = cls.__dict__.get("run")
        if original is None or getattr(original, "_grader_wrapped", False):
            continue

        def run(self, *args, __original=original, **kwargs):
            if not kwargs.get("warmup"):
                progress.mark(progress.LAUNCH)
            with fence.launch(self, args, kwargs):  # interpreter: only these tensors' storages are reachable
                return _recorded_run(self, __original, args, kwargs)

        run._grader_wrapped = True  # type: ignore[attr-defined]
        cls.run = run  # type: ignore[method-assign]


def _recorded_run(self: Any, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One launch through a wrapped `run`: recorded (top level only) while a wrapper call is recorded."""
    rec = _Recorder.active
    if rec is None or kwargs.get("warmup"):
        return original(self, *args, **kwargs)
    top = rec.depth == 0
    rec.depth += 1  # from here on, torch operators the recording itself runs are not counted
    try:
        if top:
            grid = kwargs.get("grid")
            rec.launches.append({"kernel": getattr(kernel_function(self), "__name__", "?"),
                                 "grid": repr(grid)[:80]})
            rec.current = LaunchRecord(args, kwargs, rec.keep, rec.describe) if rec.replayable else None
        if rec.current is not None and not isinstance(self, _TUNERS):
            kwargs = rec.current.innermost_call(self, args, kwargs)
        return original(self, *args, **kwargs)
    finally:
        rec.depth -= 1
        if top and rec.current is not None:
            rec.launches[-1]["replay"] = rec.current.encode()
            rec.current = None


_ALLOCATIONS = {"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided"}
# Allocations that start with values: guarded like the others (their values copied into the view).
_FILLED_ALLOCATIONS = {f"aten.{name}" for name in ("zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones",
                                                   "full", "full_like", "new_full")}


class _TorchOps(TorchDispatchMode):
    """Records torch operators a wrapper runs, and poisons fresh uninitialised allocations so the
    grader can tell output elements the kernel never wrote (torch.empty would hide them). During a
    correctness call it also puts each float allocation inside guard bands (`_guarded`)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        rec = _Recorder.active
        name = str(getattr(func, "overloadpacket", func))
        if rec is not None and rec.depth == 0:
            rec.torch_ops[name] = rec.torch_ops.get(name, 0) + 1
        out = func(*args, **(kwargs or {}))
        if rec is not None and rec.allocations is not None and name in _ALLOCATIONS | _FILLED_ALLOCATIONS:
            out = _guarded(out, rec.allocations, filled=name in _FILLED_ALLOCATIONS)
            if rec.announce:
                _announce_allocation(out)
        if rec is not None:
            note_freshness(rec.fresh, name, args, kwargs, out)
        if name in _ALLOCATIONS and isinstance(out, torch.Tensor) and out.dtype.is_floating_point:
            with torch.no_grad():  # the whole storage: row gaps of a strided allocation too
                whole = torch.empty(0, dtype=out.dtype, device=out.device).set_(out.untyped_storage())
                guard_bits.bits(whole).fill_(guard_bits.nan_pattern(out.dtype, guard_bits.PAYLOAD_OUTPUT_POISON))
        return out


def _guarded(out: Any, allocations: list[guards.AllocationGuard], filled: bool) -> Any:
    """A wrapper's float allocation moved into the middle of a poisoned storage with guard bands: a
    store past it lands in a band the worker checks after the call, not in the worker's heap."""
    if (type(out) is not torch.Tensor or not out.dtype.is_floating_point or out.layout != torch.strided
            or out.requires_grad or out.is_nested or out.device.type == "meta"):
        return out
    with torch.no_grad():
        view, allocation = guards.guard_allocation(out)
        if filled:
            view.copy_(out)
    allocations.append(allocation)
    return view


def _announce_allocation(tensor: Any) -> None:
    """Say where a wrapper's allocation lives (its whole storage: guard bands included), for memcheck's
    report to name (grader.running.sanitizer.announced_allocations)."""
    if type(tensor) is not torch.Tensor or tensor.layout != torch.strided or tensor.device.type == "meta":
        return
    storage = tensor.untyped_storage()
    shape = ",".join(str(n) for n in tensor.shape)
    print(f"{ALLOCATION_LINE} {int(storage.data_ptr())} {int(storage.nbytes())} {shape}", file=sys.stderr, flush=True)


def _patch_autotune_for_interpreter() -> None:
    """Multi-config @autotune benchmarks on a GPU driver; in the interpreter run each config once."""
    from triton.runtime.autotuner import Autotuner

    def run_once(kernel_call, quantiles=None, **_):
        kernel_call()
        return [0.0] * (len(quantiles) if quantiles else 1)

    Autotuner.do_bench = property(lambda self: run_once)  # type: ignore[assignment]


# --------------------------------------------------------------------------- confinement


GUARDED_PACKAGES = ("grader", "reference", "assignments", "tests")


class _ImportGuard:
    """Refuses imports of the grader's own packages from submission code (a submission that imports
    the grader or the reference could read oracles and answers instead of computing them)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in GUARDED_PACKAGES:
            raise ImportError(f"importing {name!r} is not allowed in a submission")
        return None


def _deny_network() -> None:
    """Best effort where the worker is not in its own network namespace: no new sockets."""
    import socket

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError("network access is not allowed in a submission")

    socket.socket = refuse  # type: ignore[assignment,misc]
    socket.create_connection = refuse  # type: ignore[assignment]


# The grader's modules a worker keeps loaded (its own code, and the plain values and messages it shares with the
# grader): everything else of the grader, and the course's packages, leave sys.modules before student code runs.
WORKER_MODULES = ("grader.running.worker", "grader.evidence")
WORKER_SINGLE_MODULES = ("grader", "grader.running", "grader.running.guards", "grader.trap_ids")


def confine_imports() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in GUARDED_PACKAGES and not name.startswith(WORKER_MODULES) \
                and name not in WORKER_SINGLE_MODULES:
            del sys.modules[name]
    sys.meta_path.insert(0, _ImportGuard())  # type: ignore[arg-type]
    sys.path[:] = [p for p in sys.path if p and not (Path(p) / "assignments").is_dir()]
    _deny_network()


# --------------------------------------------------------------------------- compile time

_COMPILE_SECONDS = [0.0]


def _time_jit_compiles() -> None:
    """Add up the seconds Triton's JIT spends compiling (`JITFunction._do_compile`): the grade's
    "compile" phase, reported with every reply (informational; nothing is judged on it)."""
    jit = triton.runtime.JITFunction
    original = jit.__dict__.get("_do_compile")
    if original is None or getattr(original, "_grader_wrapped", False):
        return

    def _do_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        progress.mark(progress.COMPILE_START)
        try:
            return original(self, *args, **kwargs)
        finally:
            progress.mark(progress.COMPILE_END)
            _COMPILE_SECONDS[0] += time.monotonic() - started

    _do_compile._grader_wrapped = True  # type: ignore[attr-defined]
    jit._do_compile = _do_compile  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- the harness


class Harness:
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.device = torch.device("cuda") if backend == "cuda" else torch.device("cpu")
        self.module: Any = None
        self.path = ""
        # Interpreter only: the first false tl.multiple_of / tl.max_contiguous promise of each launch or call.
        self.hints = HintLog()
        _patch_kernel_runs()
        _time_jit_compiles()
        if backend == "interpreter":
            _patch_autotune_for_interpreter()
            interpreter_compat.install(self.hints)  # before the submission is imported: it may alias what this patches
            fence.install()
        fraction = os.environ.get("GRADER_GPU_MEMORY_FRACTION")  # grader.running.sandbox: the first guard
        if backend == "cuda" and fraction:
            # Cooperative (the submission could raise it again): the grader's watchdog is the limit that holds.
            torch.cuda.set_per_process_memory_fraction(min(1.0, max(0.0, float(fraction))))

    def load(self, path: str, names: list[str]) -> dict[str, Any]:
        self.path = path
        spec = importlib.util.spec_from_file_location(SUBMISSION_MODULE, path)
        if spec is None or spec.loader is None:
            return {"ok": False, "error": {"type": "ImportError", "message": f"cannot import {path}",
                                           "frames": []}}
        module = importlib.util.module_from_spec(spec)
        sys.modules[SUBMISSION_MODULE] = module
        confine_imports()
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the worker stays up
            return {"ok": False, "error": describe_exception(exc, path)}
        self.module = module
        symbols = {name: describe_symbol(getattr(module, name, None)) for name in names}
        return {"ok": True, "symbols": symbols}

    def _tensors(self, storages: list[torch.Tensor], views: list[dict[str, Any]]) -> list[torch.Tensor]:
        on_device = [s.to(self.device) for s in storages]
        self._storages = on_device
        return [
            torch.as_strided(on_device[v["storage"]], v["shape"], v["stride"], v["offset"]) for v in views
        ]

    def _resolve(self, value: Any, tensors: list[torch.Tensor]) -> Any:
        if isinstance(value, dict) and "view" in value:
            return tensors[value["view"]]
        return value

    @staticmethod
    def compile_seconds() -> float:
        return round(float(_COMPILE_SECONDS[0]), 4)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def _storages_back(self) -> list[torch.Tensor]:
        return [s.detach().to("cpu").clone() for s in self._storages]

    def launch(self, request: dict[str, Any]) -> dict[str, Any]:
        kernel = getattr(self.module, request["kernel"])
        tensors = self._tensors(request["storages"], request["views"])
        args = [self._resolve(a, tensors) for a in request["args"]]
        tuned = set(tuned_meta(kernel))
        meta = {k: v for k, v in request["meta"].items() if k not in tuned}
        self._announce(request)
        self.hints.reset()
        counted: list[traffic.LaunchTraffic] = []
        try:
            with self._counting(request) as counted:
                kernel[make_grid(request["grid"])](*args, **meta)
            self._sync()
        except BaseException as exc:
            return self._with_hints(_failed(request, exc, self.path, device_ptrs=self._device_ptrs()))
        return self._with_traffic(request, counted, self._with_hints(
            {"ok": True, "storages": self._storages_back(), "device_ptrs": self._device_ptrs()}))

    def _counting(self, request: dict[str, Any]) -> Any:
        """Count the request's memory traffic (interpreter, when asked: `count_traffic`)."""
        if request.get("count_traffic") and self.backend == "interpreter":
            return traffic.counting()
        return contextlib.nullcontext([])

    @staticmethod
    def _with_traffic(request: dict[str, Any], counted: list[traffic.LaunchTraffic],
                      reply: dict[str, Any]) -> dict[str, Any]:
        if request.get("count_traffic"):
            reply["traffic"] = traffic.summaries(counted)
        return reply

    def _announce(self, request: dict[str, Any]) -> None:
        """Under memcheck a launch may kill the worker: print the buffers' device addresses first."""
        if request.get("announce_pointers"):
            print(f"{POINTERS_LINE} {' '.join(str(p) for p in self._device_ptrs())}", file=sys.stderr, flush=True)

    def warmup(self, request: dict[str, Any]) -> dict[str, Any]:
        """Compile the kernel specialisations of the given launches (each as `launch` takes it) in parallel
        before any runs: Triton's AsyncCompileMode with a thread pool; nothing is launched. Errors are left
        for the real launch to report. The interpreter compiles nothing."""
        launches = request.get("launches") or []
        if self.backend != "cuda" or not launches:
            return {"ok": True, "compiled": 0}
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode

        started = time.monotonic()
        count = 0
        progress.mark(progress.COMPILE_START)
        try:
            with ThreadPoolExecutor(max_workers=int(request.get("threads", 8))) as pool, \
                    AsyncCompileMode(pool, ignore_errors=True):
                for launch in launches:
                    kernel = getattr(self.module, launch["kernel"], None)
                    if not isinstance(kernel, triton.runtime.KernelInterface) or not hasattr(kernel, "warmup"):
                        continue
                    tensors = self._tensors(launch["storages"], launch["views"])
                    args = [self._resolve(a, tensors) for a in launch["args"]]
                    tuned = set(tuned_meta(kernel))
                    meta = {k: v for k, v in launch["meta"].items() if k not in tuned}
                    try:
                        kernel.warmup(*args, grid=make_grid(launch["grid"]), **meta)
                        count += 1
                    except Exception:  # the real launch reports it, with the student's line
                        continue
        except Exception:
            pass
        progress.mark(progress.COMPILE_END)
        _COMPILE_SECONDS[0] += time.monotonic() - started
        return {"ok": True, "compiled": count}

    def _with_hints(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The reply, with the first false hint the request's kernels made (interpreter only)."""
        if self.hints.first is not None:
            reply["false_hint"] = self.hints.first
        return reply

    def _device_ptrs(self) -> list[int]:
        return [int(s.data_ptr()) for s in self._storages]

    def compile(self, request: dict[str, Any]) -> dict[str, Any]:
        kernel = getattr(self.module, request["kernel"])
        tuned = set(tuned_meta(kernel))
        constexprs = {k: v for k, v in request["constexprs"].items() if k not in tuned}
        configs = getattr(kernel, "configs", None) or [None]
        try:
            for config in configs:  # an autotuned kernel must compile with each of its configs
                chosen = dict(constexprs, **(getattr(config, "kwargs", None) or {}))
                compile_for_gpu(kernel, request["signature"], chosen, request.get("arch", 90))
        except BaseException as exc:
            return {"ok": False, "error": describe_exception(exc, self.path)}
        return {"ok": True}

    def replay(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run recorded launches again, in order, on the storages the grader vouched for; no wrapper
        code runs. Storages a launch does not reload keep what earlier launches wrote."""
        buffers: dict[int, torch.Tensor] = {}
        for launch in request["launches"]:
            try:  # a record that cannot be decoded was altered: `stage` tells the grader it was not the kernel
                for sid, data in launch["load"].items():
                    buffers[sid] = data.to(self.device).clone()
                jit = replayable_kernel(self.module, launch["kernel"])
                args = [decode_value(a, buffers) for a in launch["args"]]
                kwargs = {k: decode_value(v, buffers) for k, v in launch["kwargs"].items()}
                grid = tuple(launch["grid"])
            except BaseException as exc:
                return {"ok": False, "stage": "record", "error": describe_exception(exc, self.path), "fatal": False}
            try:
                jit[grid](*args, **kwargs)
                self._sync()
            except BaseException as exc:
                return {"ok": False, "stage": "kernel", "error": describe_exception(exc, self.path),
                        "fatal": is_fatal_device_error(exc)}
        return {"ok": True, "buffers": {sid: b.detach().to("cpu").clone() for sid, b in buffers.items()}}

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        function = getattr(self.module, request["function"])
        tensors = self._tensors(request["storages"], request["views"])
        args = [self._resolve(a, tensors) for a in request["args"]]
        kwargs = {k: self._resolve(v, tensors) for k, v in request["kwargs"].items()}
        recorder = _Recorder()
        recorder.allocations = []
        recorder.announce = bool(request.get("announce_pointers"))
        self._announce(request)
        _Recorder.active = recorder
        self.hints.reset()
        counted: list[traffic.LaunchTraffic] = []
        try:
            with _TorchOps(), self._counting(request) as counted:
                result = function(*args, **kwargs)
            self._sync()
        except BaseException as exc:
            return self._with_hints(_failed(request, exc, self.path, launches=recorder.launches,
                                            torch_ops=recorder.torch_ops))
        finally:
            _Recorder.active = None
        return self._with_traffic(request, counted, self._with_hints({
            "ok": True,
            "result": encode_value(result),
            "launches": recorder.launches,
            "torch_ops": recorder.torch_ops,
            "storages": self._storages_back(),
            "result_views": result_views(result),
            "allocation_findings": allocation_reports(recorder.allocations),
        }))

    # ------------------------------------------------------------------ performance: the "time" op

    def _record_timed_call(self, prepared: performance_timing.PreparedCall, is_kernel: bool) -> dict[str, Any]:
        """Call the target once more (it is compiled and tuned by now) with every launch recorded by
        layout, not bytes: what a timer worker needs to run the same launches without this code."""
        fresh = {storage_id(t) for t in prepared.outputs[0]} if is_kernel else set()
        recorder = _Recorder(replayable=True)
        recorder.fresh = fresh
        recorder.describe = storage_describer(list(prepared.inputs[0]), recorder.fresh)
        _Recorder.active = recorder
        try:
            with _TorchOps():
                result = prepared.call(0)
            self._sync()
        finally:
            _Recorder.active = None
        views = [describe_tensor(t) for t in prepared.outputs[0]] if is_kernel else result_views(result)
        return {"launches": [launch.get("replay") for launch in recorder.launches], "outputs": views}

    def time_launches(self, request: dict[str, Any]) -> dict[str, Any]:
        """The timer's ops: run (and time, or keep for `time_kept`) recorded launches on rebuilt buffers."""
        try:
            if request.get("op") == "time_kept":
                return time_kept(request, self.device)
            return time_launches(lambda name: replayable_kernel(self.module, name), request, self.device)
        except BaseException as exc:
            return {"ok": False, "error": describe_exception(exc, self.path), "fatal": is_fatal_device_error(exc)}
        finally:
            release_cached_memory(self.device)

    def time(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run a target once on the request's inputs (that run compiles and autotunes it), send back its
        outputs if asked (`return_outputs`), then, on CUDA and if asked (`time`), time it with
        grader.running.worker.performance_timing.bench over `sets` rotated copies of the inputs. See
        performance_timing.prepare_call
        for the encoding of `inputs`, `args`, `kwargs` and `outputs`."""
        prepared = None
        try:
            target = getattr(self.module, request["target"])
            is_kernel = request["kind"] == "kernel"
            tuned = set(tuned_meta(target)) if is_kernel else set()
            meta = {k: v for k, v in request.get("meta", {}).items() if k not in tuned}
            grid = make_grid(request["grid"]) if is_kernel else None
            prepared = performance_timing.prepare_call(target, request, self.device, grid, meta)
            recorder = _Recorder(replayable=False)  # a wrapper must stay fused at the timed size too
            _Recorder.active = recorder if not is_kernel else None
            try:
                with _TorchOps():
                    result = prepared.call(0)
                self._sync()
            finally:
                _Recorder.active = None
            progress.mark(progress.STEP)
            reply: dict[str, Any] = {"ok": True, "launches": recorder.launches, "torch_ops": recorder.torch_ops}
            if request.get("record"):
                reply["record"] = self._record_timed_call(prepared, is_kernel)
                progress.mark(progress.STEP)
            if request.get("return_outputs"):
                if is_kernel:
                    reply["outputs"] = [t.detach().to("cpu").clone() for t in prepared.outputs[0]]
                else:
                    reply["result"] = encode_value(result)
            del result
            if request.get("time") and self.device.type == "cuda":
                warmup_ms = float(request.get("warmup_ms", performance_timing.DEFAULT_WARMUP_MS))
                rep_ms = float(request.get("rep_ms", performance_timing.DEFAULT_REP_MS))
                measured = performance_timing.bench(prepared.call, sets=int(request.get("sets", 1)),
                                                    repeats=int(request.get("repeats", 5)), warmup_ms=warmup_ms,
                                                    rep_ms=rep_ms)
                reply["timing"] = measured.to_dict()
        except BaseException as exc:
            return {"ok": False, "error": describe_exception(exc, self.path), "fatal": is_fatal_device_error(exc)}
        finally:
            del prepared
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        return reply


def _failed(request: dict[str, Any], exc: BaseException, path: str, **extra: Any) -> dict[str, Any]:
    """The reply to a launch or call that raised. A fatal device error ends the worker: the grader replaces it
    (`fatal`); under compute-sanitizer (`announce_pointers`) the worker ends itself instead (`exits`), so the
    tool can write its report as the process ends, before the grader stops it."""
    fatal = is_fatal_device_error(exc)
    under_tool = fatal and bool(request.get("announce_pointers"))
    return {"ok": False, "error": describe_exception(exc, path), "fatal": fatal and not under_tool,
            "exits": under_tool, **extra}


def allocation_reports(allocations: list[guards.AllocationGuard]) -> list[dict[str, Any]]:
    """The reply's "allocation_findings" (grader.running.battery.allocation_guard_findings reads them): the
    wrapper's own allocations whose guard bands changed: stores past them (with the storage id
    that result_views gives a returned tensor, so the grader can name it)."""
    found = []
    for allocation in allocations:
        finding = allocation.finding()
        if finding is not None:
            found.append(dict(finding, sid=int(allocation.storage.untyped_storage().data_ptr())))
    return found


def replayable_kernel(module: Any, name: str) -> Any:
    """The innermost JIT function called `name` among the module's kernels (under any autotune or
    heuristics wrapper): a replay runs exactly the recorded configuration, without re-tuning."""
    for obj in vars(module).values():
        seen = 0
        while isinstance(obj, triton.runtime.KernelInterface) and seen < 10:
            if not isinstance(obj, _TUNERS) and getattr(getattr(obj, "fn", None), "__name__", None) == name:
                return obj
            obj = getattr(obj, "fn", None)
            seen += 1
    raise LookupError(f"the submission has no Triton kernel named {name!r}")


def result_views(result: Any) -> list[dict[str, Any] | None]:
    """Where each returned tensor lives (storage, offset, shape, stride), in return order."""
    items = list(result) if type(result) in (tuple, list) else [result]
    views: list[dict[str, Any] | None] = []
    for item in items:
        try:
            plain = (type(item) is torch.Tensor and item.layout == torch.strided and not item.is_nested
                     and item.device.type != "meta")
            views.append(describe_tensor(item) if plain else None)
        except Exception:  # a tensor without a storage of its own: nothing to replay into
            views.append(None)
    return views


def compile_for_gpu(kernel: Any, signature: dict[str, str], constexprs: dict[str, Any], arch: int) -> None:
    """Ahead-of-time compile for a CUDA target; works on a machine with no GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    jit = kernel
    seen = 0
    while not isinstance(jit, triton.runtime.JITFunction) and hasattr(jit, "fn") and seen < 10:
        jit = jit.fn
        seen += 1
    if not isinstance(jit, triton.runtime.JITFunction):
        raise TypeError(f"{type(kernel).__name__} is not a compilable Triton kernel")
    triton.compile(ASTSource(jit, signature, constexprs), target=GPUTarget("cuda", arch, 32))


def encode_value(value: Any, depth: int = 0) -> Any:
    """A returned value as plain data: exact tensors are copied to the CPU; anything else is described."""
    if type(value) is torch.Tensor and (value.layout != torch.strided or value.is_nested):
        return {"other": f"{'nested' if value.is_nested else str(value.layout).replace('torch.', '')} Tensor",
                "repr": "a tensor without a plain strided layout"}
    if type(value) is torch.Tensor and value.layout == torch.strided and not value.is_nested \
            and value.device.type != "meta":
        return {"tensor": value.detach().to("cpu").clone(), "device": str(value.device),
                "dtype": str(value.dtype), "shape": list(value.shape)}
    if type(value) in (tuple, list) and depth == 0:
        return {"sequence": [encode_value(v, depth + 1) for v in value], "type": type(value).__name__}
    try:
        text = repr(value)[:200]
    except Exception:
        text = "<unprintable>"
    return {"other": type(value).__name__, "repr": text}
