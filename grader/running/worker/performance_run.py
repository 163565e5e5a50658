"""Inside a worker: the two halves of a timed run that executes none of the submission's Python.

1. In the student's worker, `storage_describer` lets a launch record say where each buffer came from
   at the timed size: one of the inputs the grader sent, a fresh uninitialised allocation, or (for
   anything else) its size, first bytes and SHA-256, which the grader checks against what it can
   rebuild (a constant fill, a copy of an input). No bytes travel: at 8192 x 8192 they are 256 MB.
2. In a timer worker, which loaded only the submission's kernels (grader.running.timing.kernel_source) or
   the trusted reference, `time_launches` rebuilds those buffers for several input sets, runs the
   launches once (their outputs go back to the grader, which checks them), captures the launches of
   all sets in one CUDA graph and times its replays (grader.running.worker.performance_timing.time_graph).

Only torch and triton are imported (the worker may load this after it confined imports).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from grader.evidence.kernel_profiles import uses_tensor_cores, vectorised_loads
from grader.evidence.tensor_views import tensor_from
from grader.running import protocol
from grader.running.worker import performance_timing, progress
from grader.running.worker.launch_record import decode_value, storage_id

# Torch operators that make views: they neither initialise nor write a storage.
VIEW_OPS = frozenset(f"aten.{name}" for name in (
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand", "detach",
    "alias", "select", "slice", "unsqueeze", "squeeze", "lift_fresh", "is_same_size",
    "_has_compatible_shallow_copy_type",
))
ALLOCATIONS = frozenset(f"aten.{name}" for name in (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
))
HEAD_BYTES = 16
L2_FLUSH_BYTES = 128 << 20  # input sets rotate until one pass over them exceeds this (H200 L2: 50 MB)
MAX_SETS = 16


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def note_freshness(fresh: set[int], name: str, args: Any, kwargs: Any, out: Any) -> None:
    """Keep `fresh` = storages allocated uninitialised and not touched by a torch operator since.
    Tensors without a plain storage (sparse, nested, meta) are no buffer a launch can be given."""
    if name in VIEW_OPS:
        return
    if name in ALLOCATIONS:
        for tensor in _tensors(out):
            if _has_storage(tensor):
                fresh.add(storage_id(tensor))
        return
    for tensor in _tensors(args) + _tensors(kwargs) + _tensors(out):
        if _has_storage(tensor):
            fresh.discard(storage_id(tensor))


def _has_storage(tensor: torch.Tensor) -> bool:
    return tensor.layout == torch.strided and not tensor.is_nested and tensor.device.type != "meta"


def storage_describer(inputs: list[torch.Tensor], fresh: set[int]) -> Callable[[torch.Tensor], dict[str, Any]]:
    input_sids = {storage_id(t): index for index, t in enumerate(inputs)}

    def describe(tensor: torch.Tensor) -> dict[str, Any]:
        storage = tensor.untyped_storage()
        sid, nbytes = storage_id(tensor), int(storage.nbytes())
        if sid in input_sids:
            return {"input": input_sids[sid], "nbytes": nbytes}
        if sid in fresh:
            return {"fresh": True, "nbytes": nbytes}
        flat = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage).detach().to("cpu")
        return {"nbytes": nbytes, "head": bytes(flat[:HEAD_BYTES].tolist()),
                "sha256": hashlib.sha256(flat.numpy().tobytes()).hexdigest()}

    return describe


# --------------------------------------------------------------------------- the timer's side


def _build_set(buffers: Mapping[int, Mapping[str, Any]], inputs: list[torch.Tensor],
               device: torch.device) -> tuple[dict[int, torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
    """One input set: a uint8 buffer per storage id, and the (destination, source) copies that
    initialise buffers before each run (constant fills, copies of an input)."""
    flat_inputs = [torch.empty(0, dtype=torch.uint8, device=device).set_(t.untyped_storage()) for t in inputs]
    built: dict[int, torch.Tensor] = {}
    inits: list[tuple[torch.Tensor, torch.Tensor]] = []
    for sid, spec in buffers.items():
        if "input" in spec:
            built[sid] = flat_inputs[int(spec["input"])]
            continue
        buffer = torch.full((int(spec["nbytes"]),), 0xFF, dtype=torch.uint8, device=device)  # NaN poison
        built[sid] = buffer
        if "fill" in spec:
            pattern = torch.tensor(list(spec["fill"]), dtype=torch.uint8, device=device)
            inits.append((buffer, pattern.repeat(buffer.numel() // pattern.numel())))
        elif "copy_of" in spec:
            inits.append((buffer, flat_inputs[int(spec["copy_of"])]))
    return built, inits


def time_launches(find_kernel: Callable[[str], Any], request: protocol.TimeLaunches,
                  device: torch.device) -> protocol.Timed:
    """Run the planned launches on fresh input sets: outputs of the first run, then (CUDA, `time`)
    the medians of CUDA-graph replays of every set's launches; with `keep`, kept for `time_kept` instead."""
    first = [t.to(device) for t in request.inputs]
    buffers = {int(k): v for k, v in request.buffers.items()}
    launches = list(request.launches)
    kernels = [find_kernel(launch["kernel"]) for launch in launches]
    set_bytes = sum(int(spec["nbytes"]) for spec in buffers.values())
    sets = max(request.sets, 1)
    if (request.time or request.keep) and request.rotate:
        sets = min(max(sets, -(-L2_FLUSH_BYTES // max(set_bytes, 1))), MAX_SETS)
    all_inputs = [first] + [[t.clone() for t in first] for _ in range(sets - 1)]
    built = [_build_set(buffers, inputs, device) for inputs in all_inputs]
    bound = []
    for storages, _ in built:
        bound.append([
            (kernel, tuple(launch["grid"]),
             [decode_value(a, storages) for a in launch["args"]],
             {k: decode_value(v, storages) for k, v in launch["kwargs"].items()})
            for kernel, launch in zip(kernels, launches, strict=True)
        ])

    def copy_in(index: int) -> None:
        for destination, source in built[index][1]:
            destination.copy_(source)

    def launch(index: int) -> None:
        for kernel, grid, args, kwargs in bound[index]:
            kernel[grid](*args, **kwargs)

    def run(index: int) -> None:
        copy_in(index)
        launch(index)

    run(0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    progress.mark(progress.STEP)  # the launches finished: copying their outputs out is work, not a spin
    outputs = tuple(tensor_from(built[0][0], view).detach().to("cpu").clone() for view in request.outputs
                    if request.return_outputs)
    progress.mark(progress.STEP)

    def run_all() -> None:
        for index in range(sets):
            run(index)

    medians: tuple[float, ...] = ()
    if request.keep:  # timed later, by `time_kept`, when the GPU is this grade's alone
        _KEPT[request.keep] = (run_all, sets)
        _ONE_SET[request.keep] = (lambda: copy_in(0), lambda: launch(0), [kernel for kernel, *_ in bound[0]])
    elif request.time and device.type == "cuda":
        run_all()  # every set compiled and warm before the capture
        spin_up_ms = request.spin_up_ms if request.spin_up_ms is not None else performance_timing.DEFAULT_SPIN_UP_MS
        medians = performance_timing.time_graph(run_all, calls=sets, repeats=request.repeats,
                                                spin_up_ms=spin_up_ms).medians_ms
    return protocol.Timed(ok=True, outputs=outputs, sets=sets, medians_ms=medians)


_KEPT: dict[str, tuple[Callable[[], None], int]] = {}  # key -> (run every set once, number of sets)
# key -> (copy the first set's inputs in, launch its kernels, those kernels)
_ONE_SET: dict[str, tuple[Callable[[], None], Callable[[], None], list[Any]]] = {}
_HELD: dict[str, performance_timing.GraphSampler] = {}  # key -> its captured graph, sampled request by request


def held_graphs() -> bool:
    """Is a captured graph held for a later request (time_kept's `hold`)?"""
    return bool(_HELD)


def time_kept(request: protocol.TimeKept, device: torch.device) -> protocol.Timed:
    """Time launches an earlier `time_launches(keep=key)` ran and kept (their outputs already checked): only the
    CUDA-graph capture and its replays happen here, inside the grade's exclusive slot. `repeats` samples; with
    `hold`, the captured graph stays for the next request with the same key, so the grader can take one sample
    here and one of another contestant in turn (without it the graph is let go)."""
    key = request.key
    sampler = _HELD.pop(key, None)
    if sampler is None:
        run_all, sets = _KEPT.pop(key)
        _ONE_SET.pop(key, None)  # the timer never profiles: its one-set run lets its buffers go
        if device.type != "cuda":  # nothing to time (the interpreter): a held run stays for the next request
            if request.hold:
                _KEPT[key] = (run_all, sets)
            return protocol.Timed(ok=True, sets=sets)
        run_all()  # every set compiled and warm before the capture
        sampler = performance_timing.GraphSampler(run_all, calls=sets)
    timing = sampler.samples(request.repeats, request.spin_up_ms)
    if request.hold:
        _HELD[key] = sampler
    return protocol.Timed(ok=True, sets=sampler.calls, medians_ms=timing.medians_ms)


def profile_kept(request: protocol.ProfileKept, device: torch.device) -> protocol.Profiled:
    """Run the first input set of the launches kept under the key once, alone inside the CUDA profiler's range
    (the worker runs under `ncu --profile-from-start off`: only this range is profiled), after one run outside
    it so nothing in the range compiles or warms up; then what the compiler says of each kernel it launched."""
    copy_in, launch, kernels = _ONE_SET[request.key]
    if device.type == "cuda":
        copy_in()
        launch()
        copy_in()  # the inputs as the timed runs see them; the copies run outside the range, so only the
        torch.cuda.synchronize()  # kernels' launches are profiled (the reply's count splits ncu's report)
        torch.cuda.profiler.start()
        try:
            launch()
            torch.cuda.synchronize()
        finally:
            torch.cuda.profiler.stop()
    progress.mark(progress.STEP)
    return protocol.Profiled(ok=True, kernels=compiled_facts(kernels), launches=len(kernels))


def compiled_facts(kernels: list[Any]) -> dict[str, dict[str, Any]]:
    """Registers, spills, tensor-core and 128-bit load instructions of every compiled specialisation of these
    Triton kernels (the largest register count and spills where a kernel has several); {} for none compiled
    (the interpreter compiles nothing)."""
    facts: dict[str, dict[str, Any]] = {}
    for kernel in kernels:
        function = kernel
        while function is not None and not hasattr(function, "device_caches"):
            function = getattr(function, "fn", None)  # an autotuner or heuristics wraps the JITFunction
        if function is None:
            continue
        name = str(getattr(function, "__name__", None) or getattr(getattr(function, "fn", None), "__name__", "?"))
        for cache in list(getattr(function, "device_caches", {}).values()):
            compiled = cache[0] if isinstance(cache, tuple) else cache
            for binary in list(dict(compiled).values()):
                try:
                    binary._init_handles()
                    assembly = str(binary.asm.get("ptx", ""))
                    found = {"registers": int(binary.n_regs), "spills": int(binary.n_spills),
                             "tensor_cores": uses_tensor_cores(assembly), "vector_loads": vectorised_loads(assembly)}
                except Exception:  # a specialisation whose facts cannot be read says nothing
                    continue
                known = facts.get(name)
                if known is None:
                    facts[name] = found
                else:
                    known.update(registers=max(known["registers"], found["registers"]),
                                 spills=max(known["spills"], found["spills"]),
                                 tensor_cores=known["tensor_cores"] or found["tensor_cores"],
                                 vector_loads=known["vector_loads"] or found["vector_loads"])
    return facts
