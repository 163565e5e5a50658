"""Inside a worker: the two halves of a timed run that executes none of the submission's Python.

1. In the student's worker, `storage_describer` lets a launch record say where each buffer came from
   at the timed size: one of the inputs the grader sent, a fresh uninitialised allocation, or (for
   anything else) its size, first bytes and SHA-256, which the grader checks against what it can
   rebuild (a constant fill, a copy of an input). No bytes travel: at 8192 x 8192 they are 256 MB.
2. In a timer worker, a kernel host that built only the submission's kernels from data
   (grader.running.worker.kernel_host), or the trusted reference, `time_launches` rebuilds those buffers for several
   input sets, runs the launches once (their outputs go back to the grader, which checks them), and times every
   set's launches on freshly poisoned outputs, between CUDA events inside one graph
   (grader.running.worker.measuring.samplers.FreshSampler); after every sample each set's outputs must still be the
   checked run's and its inputs their original bytes (`PlannedRun.check`), or the timing is refused.

Only torch and triton are imported (the worker may load this after it confined imports).
"""

from __future__ import annotations

import functools
import hashlib
import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from grader.evidence.kernel_profiles import uses_tensor_cores, vectorised_loads
from grader.evidence.tensor_views import tensor_from
from grader.running import protocol
from grader.running.worker import progress
from grader.running.worker.launch_record import decode_value, storage_id
from grader.running.worker.measuring import compile_ahead, samplers
from grader.running.worker.measuring.memory_watch import MemoryWatch, digest, note_rewritten

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


def rotated_sets(requested: int, set_bytes: int) -> int:
    """Input sets a timed run rotates through: one where the case asks for one (`requested` 1: back to back, a warm
    cache); else as many as make one pass over them exceed L2_FLUSH_BYTES (each sample then finds its inputs out of
    the cache), at least two and MAX_SETS at most. Each set has values of its own (the grader draws them) and the
    timer keeps each one's inputs and checked outputs beside it, so no more sets than the cache needs: two 256 MB
    sets of a LayerNorm hold the timer's memory where three copies of one set did (docs/security.md)."""
    if requested <= 1:
        return 1
    return min(max(2, -(-L2_FLUSH_BYTES // max(set_bytes, 1))), MAX_SETS)


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
               device: torch.device) -> tuple[dict[int, torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]],
                                              list[torch.Tensor]]:
    """One input set: a uint8 buffer per storage id, the (destination, source) copies that initialise buffers before
    each run (constant fills, copies of an input), and the buffers poisoned before each run (every other one that is
    not an input: the outputs and scratch a run must write afresh)."""
    flat_inputs = [torch.empty(0, dtype=torch.uint8, device=device).set_(t.untyped_storage()) for t in inputs]
    built: dict[int, torch.Tensor] = {}
    inits: list[tuple[torch.Tensor, torch.Tensor]] = []
    poisoned: list[torch.Tensor] = []
    for sid, spec in buffers.items():
        if "input" in spec:
            built[sid] = flat_inputs[int(spec["input"])]
            continue
        buffer = torch.full((int(spec["nbytes"]),), POISON_BYTE, dtype=torch.uint8, device=device)  # NaN poison
        built[sid] = buffer
        if "fill" in spec:
            pattern = torch.tensor(list(spec["fill"]), dtype=torch.uint8, device=device)
            inits.append((buffer, pattern.repeat(buffer.numel() // pattern.numel())))
        elif "copy_of" in spec:
            inits.append((buffer, flat_inputs[int(spec["copy_of"])]))
        else:
            poisoned.append(buffer)
    return built, inits, poisoned


POISON_BYTE = 0xFF  # every float NaN
CHECK_RTOL, CHECK_ATOL = 1e-3, 1e-5  # a timed run's outputs against the checked run's (atomics may reorder sums)


class SealedOutput:
    """The checked run's output, kept on the device where a timed kernel could read it (the caching allocator's
    layout is deterministic: an address learned offline finds it again) only as its bytes XOR a key stream drawn
    from a seed this process holds on the host. `chunks()` gives the plain values a chunk at a time, between samples,
    each poisoned before it is let go: while a sample runs, no copy of the answer is in the timer's memory (for one
    input set; docs/security.md, "Known limits", for several). Chunks keep the check's extra memory small."""

    CHUNK_BYTES = 1 << 25

    def __init__(self, tensor: torch.Tensor) -> None:
        flat = tensor.detach().reshape(-1)
        self.numel, self.dtype, self.device = flat.numel(), flat.dtype, flat.device
        self.size = flat.element_size()
        self.per_chunk = max(1, self.CHUNK_BYTES // self.size)
        self.seed = int.from_bytes(os.urandom(7), "little")
        self.sealed = torch.empty(self.numel * self.size, dtype=torch.uint8, device=self.device)
        for number, first in enumerate(range(0, self.numel, self.per_chunk)):
            count = min(self.per_chunk, self.numel - first)
            plain = flat[first:first + count].contiguous().view(torch.uint8)
            self.sealed[first * self.size:(first + count) * self.size] = torch.bitwise_xor(
                plain, self._key(number, count * self.size))
        self.digest = digest(self.sealed)

    def intact(self) -> bool:
        """Do the sealed bytes still hold what they held when sealed (memory_watch.digest)?"""
        return digest(self.sealed) == self.digest

    def _key(self, number: int, count: int) -> torch.Tensor:
        generator = torch.Generator(device=self.device).manual_seed(self.seed + number)
        return torch.randint(0, 256, (count,), dtype=torch.uint8, device=self.device, generator=generator)

    def chunks(self) -> Iterator[tuple[int, torch.Tensor]]:
        """(first element, its chunk's plain values), chunk by chunk; each chunk poisoned once the caller moves on."""
        for number, first in enumerate(range(0, self.numel, self.per_chunk)):
            count = min(self.per_chunk, self.numel - first)
            plain = torch.bitwise_xor(self.sealed[first * self.size:(first + count) * self.size],
                                      self._key(number, count * self.size))
            try:
                yield first, plain.view(self.dtype)
            finally:
                plain.fill_(POISON_BYTE)  # the allocator hands this memory out again: no answer left in it


class PlannedRun:
    """Planned launches bound to `sets` input sets on the device: each set's `prepare` (poison its outputs and scratch,
    initialise what starts from a value) and `launch`, the first run's outputs kept on the device, the inputs' original
    bytes, and `check()`: do the outputs every set holds now equal the first run's, and do the inputs still hold
    their bytes? What the grader checked is the first run; every timed run must compute the same."""

    def __init__(self, find_kernel: Callable[[str], Any], request: protocol.TimeLaunches, device: torch.device,
                 sets: int) -> None:
        first = [t.to(device) for t in request.inputs]
        given = [first] + _per_set([t.to(device) for t in request.more_inputs], len(first))
        buffers = {int(k): v for k, v in request.buffers.items()}
        launches = list(request.launches)
        kernels = [find_kernel(launch["kernel"]) for launch in launches]
        # Sets beyond those given are copies of the first (a request without more_inputs); each given set is checked
        # against its own first run, each copy against the first set's.
        self.distinct = len(given)
        self.inputs = given + [[t.clone() for t in first] for _ in range(sets - len(given))]
        # the inputs' original bytes, sealed like the checked outputs: a kernel that overwrote an input and its copy
        # alike (to keep an answer there) could not write the copy's sealed bytes without the key
        self.pristine = [[SealedOutput(_bytes_of(t)) for t in inputs] for inputs in given]
        self.input_digests = [[digest(_bytes_of(t)) for t in inputs] for inputs in given]  # the cheaper check
        self.built = [_build_set(buffers, inputs, device) for inputs in self.inputs]
        self.fill_sources = [[(source, bytes(buffers[sid]["fill"])) for sid, (_, source) in _fill_inits(buffers, built)]
                             for _, built, _ in self.built]
        self.bound = []
        for storages, _, _ in self.built:
            self.bound.append([
                (kernel, tuple(launch["grid"]),
                 [decode_value(a, storages) for a in launch["args"]],
                 {k: decode_value(v, storages) for k, v in launch["kwargs"].items()})
                for kernel, launch in zip(kernels, launches, strict=True)
            ])
        self.kernels = kernels
        self.views = list(request.outputs)
        self.device = device
        self.sets = len(self.inputs)
        self.expected: list[list[SealedOutput]] = []  # per given set
        note_rewritten(self.rewritten())  # poisoned before every sample of any run (memory_watch)
        _LIVE.add(self)  # its constant data checked after every sample of any run

    def prepare(self, index: int) -> None:
        _, inits, poisoned = self.built[index]
        for buffer in poisoned:
            buffer.fill_(POISON_BYTE)
        for destination, source in inits:
            destination.copy_(source)

    def launch(self, index: int) -> None:
        for kernel, grid, args, kwargs in self.bound[index]:
            kernel[grid](*args, **kwargs)

    def run(self, index: int) -> None:
        self.prepare(index)
        self.launch(index)

    def outputs(self, index: int) -> list[torch.Tensor]:
        return [tensor_from(self.built[index][0], view) for view in self.views]

    def first_runs(self) -> None:
        """Every given set run once (the runs whose outputs the grader checks), finished."""
        for index in range(self.distinct):
            self.run(index)
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def keep_first_outputs(self) -> None:
        """Each given set's first-run outputs kept, sealed, for `check`."""
        self.expected = [[SealedOutput(t) for t in self.outputs(index)] for index in range(self.distinct)]

    def rewritten(self) -> list[torch.Tensor]:
        """The buffers a run itself rewrites (poisoned or initialised before it): every other byte of the timer's
        device memory must hold still during a sample (memory_watch.MemoryWatch)."""
        return [buffer for _, inits, poisoned in self.built for buffer in poisoned + [d for d, _ in inits]]

    def memory_watch(self) -> MemoryWatch:
        return MemoryWatch(self.rewritten(), self.device)

    def steps(self) -> list[samplers.Step]:
        return [(functools.partial(self.prepare, i), functools.partial(self.launch, i)) for i in range(self.sets)]

    def check(self) -> str:
        """"" when every set's outputs equal the first run's, every input holds its bytes and every fill source its
        pattern, and every other kept run's constant data is intact (a kernel may keep nothing there either); else
        what differs."""
        for index in range(self.sets):
            own = index if index < self.distinct else 0
            for number, (got, sealed) in enumerate(zip(self.outputs(index), self.expected[own], strict=True)):
                wrong = _differing(got.reshape(-1), sealed)
                if wrong:
                    return (f"output {number + 1} of input set {index + 1} differs from the checked run's at {wrong} "
                            f"of {got.numel()} elements after a timed sample")
        others = (other.constants_changed(exact=False) for other in list(_LIVE) if other is not self)
        return self.constants_changed() or next((f"another case's {problem}" for problem in others if problem), "")

    def constants_changed(self, exact: bool = True) -> str:
        """What of this run's constant data (inputs against their pristine copies, or with `exact` False against their
        digests, a cheaper check for the runs not being timed; fill sources against the host's pattern; the sealed
        checked outputs against their digests) no longer holds its bytes ("" for nothing)."""
        for number, sealed_set in enumerate(self.expected):
            if not all(sealed.intact() for sealed in sealed_set):
                return f"checked outputs of input set {number + 1} were overwritten during a timed sample"
        for index in range(self.sets):
            own = index if index < self.distinct else 0
            for number, got in enumerate(self.inputs[index]):
                changed = _differing(_bytes_of(got), self.pristine[own][number]) if exact \
                    else digest(_bytes_of(got)) != self.input_digests[own][number]
                if changed:
                    return f"input {number + 1} of input set {index + 1} changed during a timed sample"
            for source, pattern in self._fills(index):
                if not torch.equal(source.view(-1, pattern.numel()), pattern.expand(source.numel() // pattern.numel(),
                                                                                    -1)):
                    return f"the value a buffer of input set {index + 1} starts from changed during a timed sample"
        return ""

    def _fills(self, index: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(source, its pattern as a 1 x width row, rebuilt from the host's bytes) of every buffer of set `index` that
        starts from a constant fill: a kernel may not keep anything in a fill's source either."""
        return [(source, torch.tensor(list(pattern), dtype=torch.uint8, device=self.device).view(1, -1))
                for source, pattern in self.fill_sources[index]]


_LIVE: weakref.WeakSet[PlannedRun] = weakref.WeakSet()  # every run this process keeps


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes, flat (uint8): what an input's check compares, bit for bit."""
    return tensor.detach().reshape(-1).contiguous().view(torch.uint8)


def _fill_inits(buffers: Mapping[int, Mapping[str, Any]],
                inits: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[int, tuple[torch.Tensor, torch.Tensor]]]:
    """(storage id, its init) of the buffers that start from a constant fill, in `_build_set`'s order."""
    initialised = [sid for sid, spec in buffers.items()
                   if "input" not in spec and ("fill" in spec or "copy_of" in spec)]
    return [(sid, init) for sid, init in zip(initialised, inits, strict=True) if "fill" in buffers[sid]]


def _per_set(tensors: list[torch.Tensor], per_set: int) -> list[list[torch.Tensor]]:
    """`more_inputs` split into sets of `per_set` tensors (ValueError when they do not divide)."""
    if not tensors:
        return []
    if per_set <= 0 or len(tensors) % per_set:
        raise ValueError(f"{len(tensors)} more inputs are no whole number of sets of {per_set}")
    return [tensors[i:i + per_set] for i in range(0, len(tensors), per_set)]


def _differing(got: torch.Tensor, sealed: SealedOutput) -> int:
    """How many elements of `got` (flat) differ from the sealed output (within CHECK_RTOL/ATOL for floats)."""
    wrong = 0
    for first, want in sealed.chunks():
        part = got[first:first + want.numel()]
        if torch.equal(part, want):
            continue
        close = torch.isclose(part, want, rtol=CHECK_RTOL, atol=CHECK_ATOL, equal_nan=True) \
            if part.is_floating_point() else part == want
        wrong += int((~close).sum())
    return wrong


def time_launches(find_kernel: Callable[[str], Any], request: protocol.TimeLaunches,
                  device: torch.device) -> protocol.Timed:
    """Run the planned launches on fresh input sets: outputs of the first run, then (CUDA, `time`) samples of every
    set's launches, each on freshly poisoned outputs and timed between events inside a CUDA graph
    (samplers.FreshSampler); with `keep`, kept for `time_kept` instead; `compile_only`, compiled and nothing run
    (compile_ahead)."""
    if request.compile_only:
        return compile_ahead.compile_launches(find_kernel, request, device)
    buffers = {int(k): v for k, v in request.buffers.items()}
    sets = max(request.sets, 1)
    if request.more_inputs:  # the grader drew every set's values: exactly those sets
        sets = 1 + len(request.more_inputs) // max(len(request.inputs), 1)
    elif (request.time or request.keep) and request.rotate:
        sets = rotated_sets(sets, sum(int(spec["nbytes"]) for spec in buffers.values()))
    planned = PlannedRun(find_kernel, request, device, sets)
    planned.first_runs()
    progress.mark(progress.STEP)  # the launches finished: copying their outputs out is work, not a spin
    outputs = tuple(t.detach().to("cpu").clone() for index in range(planned.distinct)
                    for t in planned.outputs(index)) if request.return_outputs else ()
    planned.keep_first_outputs()
    progress.mark(progress.STEP)
    medians: tuple[float, ...] = ()
    refused = unwatched = ""
    if request.keep:  # timed later, by `time_kept`, when the GPU is this grade's alone
        _KEPT[request.keep] = planned
    elif request.time and device.type == "cuda":
        for index in range(sets):  # every set compiled and warm before the capture
            planned.run(index)
        spin_up_ms = request.spin_up_ms if request.spin_up_ms is not None else samplers.DEFAULT_SPIN_UP_MS
        sampler = samplers.FreshSampler(planned.steps(), planned.check, planned.memory_watch())
        timing, refused = sampler.samples(request.repeats, spin_up_ms)
        medians, unwatched = timing.medians_ms, _unwatched(sampler)
    return protocol.Timed(ok=True, outputs=outputs, sets=sets, medians_ms=medians, refused=refused,
                          unwatched=unwatched)


_KEPT: dict[str, PlannedRun] = {}  # key -> launches run once and kept, for time_kept or profile_kept
_HELD: dict[str, samplers.FreshSampler] = {}  # key -> its captured graph, sampled request by request


def held_graphs() -> bool:
    """Is a captured graph held for a later request (time_kept's `hold`)?"""
    return bool(_HELD)


def time_kept(request: protocol.TimeKept, device: torch.device) -> protocol.Timed:
    """Time launches an earlier `time_launches(keep=key)` ran and kept (their outputs already checked): only the
    CUDA-graph capture and its replays happen here, inside the grade's exclusive slot. `repeats` samples; with
    `hold`, the captured graph stays for the next request with the same key, so the grader can take one sample
    here and one of another contestant in turn (without it the graph is let go). A sample whose check fails ends the
    request with the reply's `refused` saying why."""
    key = request.key
    sampler = _HELD.pop(key, None)
    if sampler is None:
        planned = _KEPT.pop(key)
        if device.type != "cuda":  # nothing to time (the interpreter): a held run stays for the next request
            if request.hold:
                _KEPT[key] = planned
            return protocol.Timed(ok=True, sets=planned.sets)
        for index in range(planned.sets):  # every set compiled and warm before the capture
            planned.run(index)
        sampler = samplers.FreshSampler(planned.steps(), planned.check, planned.memory_watch())
    timing, refused = sampler.samples(request.repeats, request.spin_up_ms)
    if request.hold and not refused:
        _HELD[key] = sampler
    return protocol.Timed(ok=True, sets=sampler.calls, medians_ms=timing.medians_ms, refused=refused,
                          unwatched=_unwatched(sampler))


def _unwatched(sampler: samplers.FreshSampler) -> str:
    """Why the memory watch stood aside for the sampler's samples ("" when it watched them)."""
    return sampler.watch.off if isinstance(sampler.watch, MemoryWatch) else ""


# A case's first launches profiled, at most: a wrapper that launches a kernel per row (8192 launches) would
# otherwise take every launch ncu counts in a grade (MAX_PROFILED_LAUNCHES) and leave its later cases none.
PROFILED_LAUNCHES_PER_CASE = 8


def profile_kept(request: protocol.ProfileKept, device: torch.device) -> protocol.Profiled:
    """Run the first input set of the launches kept under the key once, its first PROFILED_LAUNCHES_PER_CASE
    launches alone inside the CUDA profiler's range (the worker runs under `ncu --profile-from-start off`: only this
    range is profiled) and the rest after it, after one run outside it so nothing in the range compiles or warms
    up; then what the compiler says of each kernel it launched. The reply's count is the launches in the range."""
    planned = _KEPT[request.key]
    bound = planned.bound[0]
    counted = min(len(bound), PROFILED_LAUNCHES_PER_CASE)
    if device.type == "cuda":
        planned.run(0)
        planned.prepare(0)  # outputs poisoned, as before every timed run; this runs outside the range, so only the
        torch.cuda.synchronize()  # kernels' launches are profiled (the reply's count splits ncu's report)
        torch.cuda.profiler.start()
        try:
            for kernel, grid, args, kwargs in bound[:counted]:
                kernel[grid](*args, **kwargs)
            torch.cuda.synchronize()
        finally:
            torch.cuda.profiler.stop()
        for kernel, grid, args, kwargs in bound[counted:]:  # the run completes, unprofiled
            kernel[grid](*args, **kwargs)
        torch.cuda.synchronize()
    progress.mark(progress.STEP)
    return protocol.Profiled(ok=True, kernels=compiled_facts(planned.kernels), launches=counted)


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
