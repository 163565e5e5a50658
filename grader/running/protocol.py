"""Every message between the grader and its workers, declared once, with the one codec that writes and reads them.

A request is a frozen dataclass whose class names its `op` and the reply it gets (`Request.REPLY`); a reply is
a frozen dataclass too, every field with a default (a failed request answers with `ok` False and an `error`).
On the wire a message is a plain tree (dicts, lists, scalars, tensors): `encode` turns a message into
`{"op": OP, field: value, ...}`, the only place such a dict is built; `decode_request` (the worker's side) and
`decode_reply` (the grader's side) turn a tree back into its class and check it against the class's field
types: an unknown op, an unknown or missing field, or a value of the wrong type raises `ProtocolError`. The
grader treats a reply that does not decode like a dead worker (the worker runs student code, which can write
anything on its socket); the worker answers a request that does not decode with an error reply.

Two transports carry them: the worker's channel (grader.running.worker.channel: `torch.save` skeletons loaded
with `weights_only=True`, large tensors beside them) and the zygote's control socket (length-prefixed JSON,
grader.running.worker.zygote). Nested payloads that already have a format of their own (a launch record, a
symbol's description, an encoded return value, traffic counts) stay plain data, typed as mappings here and
read by the modules that define them.

Imported by both sides, so only the standard library and grader.evidence (torch only where a message's tensors
are checked: the grader starts a sandbox, and talks to its zygote, before it imports torch); a worker keeps it
loaded when it confines imports (grader.running.worker.confinement)."""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, Union

from grader.evidence.worker_error import WorkerError
from grader.running.kernel_bundle import KernelBundle as KernelBundle  # LoadKernels' payload (re-exported)
from grader.running.kernel_bundle import kernel_bundle_digest as kernel_bundle_digest

if TYPE_CHECKING:
    import torch

# A launch under compute-sanitizer prints its buffers' device addresses on this line first (the
# invalid access it is run to find often kills the worker before it can reply).
POINTERS_LINE = "grader-buffer-addresses:"
# A wrapper called under compute-sanitizer prints one such line per tensor it allocates: the address and
# size of the allocation (its guarded storage) and its shape, so memcheck's nearest allocation has a name.
ALLOCATION_LINE = "grader-allocation:"

OP = "op"  # the key that names a message's class on the wire


class ProtocolError(ValueError):
    """A tree that is not one of the declared messages (the text says which field is wrong)."""


# --------------------------------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Reply:
    """What every reply carries. `fatal`: the worker's device context is unusable (the grader replaces it);
    `exits`: the worker ends itself after this reply (under compute-sanitizer, so the tool writes its report);
    `compile_s`: the worker's cumulative Triton compile seconds (serve sets it); `elapsed_s`: the request's
    wall time as the grader measured it (grader.running.processes.client sets it)."""

    ok: bool = False
    error: WorkerError | None = None
    fatal: bool = False
    exits: bool = False
    compile_s: float = -1.0
    elapsed_s: float = 0.0

    @property
    def failure(self) -> WorkerError:
        """The error of a failed reply (an empty one where the worker sent none)."""
        return self.error if self.error is not None else WorkerError()


@dataclass(frozen=True)
class Ready(Reply):
    """A worker's first message, before any request: `warm` when it was forked from a preloaded zygote."""

    pid: int = 0
    warm: bool = False
    ready: bool = True


@dataclass(frozen=True)
class Loaded(Reply):
    """The submission imported: each required symbol described (grader.running.worker.harness.describe_symbol), and
    its kernels and module-level values as data (grader.running.worker.kernel_report). A kernel host's reply to
    `LoadKernels` carries the digest of the bundle it built from, and for each symbol it could not build, why."""

    symbols: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    kernels: Mapping[str, Any] = field(default_factory=dict)
    digest: str = ""
    unavailable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Launched(Reply):
    """A kernel case's launch: every storage after it, the device addresses of the buffers (sanitizer), the first
    false tl.multiple_of / tl.max_contiguous promise (interpreter), each launch's traffic when counted."""

    storages: tuple[torch.Tensor, ...] = ()
    device_ptrs: tuple[int, ...] = ()
    false_hint: Mapping[str, Any] | None = None
    traffic: tuple[Mapping[str, Any], ...] | None = None
    resolved: Mapping[str, Any] | None = None  # `resolve`: what autotune/heuristics chose (plain values)


@dataclass(frozen=True)
class Called(Launched):
    """A wrapper case's call: its encoded return value (harness.encode_value), its launches (with their replay
    records) and torch operators, where each returned tensor lives (`result_views`), and stores past the
    buffers it allocated itself (`allocation_findings`)."""

    result: Mapping[str, Any] | None = None
    launches: tuple[Mapping[str, Any], ...] = ()
    torch_ops: Mapping[str, int] = field(default_factory=dict)
    result_views: tuple[Mapping[str, Any] | None, ...] = ()
    allocation_findings: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Compiled(Reply):
    """A kernel compiled ahead of time for a GPU target (no GPU needed)."""


@dataclass(frozen=True)
class WarmedUp(Reply):
    """How many kernel specialisations the parallel warm-up compiled."""

    compiled: int = 0


@dataclass(frozen=True)
class Replayed(Reply):
    """Recorded launches run again: every buffer after the last, by storage id. `stage` of a failure: "record"
    (the record could not be decoded: it was altered) or "kernel" (the student's kernel failed)."""

    buffers: Mapping[int, torch.Tensor] = field(default_factory=dict)
    stage: str = ""


@dataclass(frozen=True)
class Ran(Reply):
    """A performance target run at the timed size: its launches and torch operators (a wrapper stays fused), its
    launches recorded by layout (`record`, grader.running.timing.launch_plan reads it), its outputs or encoded
    result when asked, and its medians when timed."""

    launches: tuple[Mapping[str, Any], ...] = ()
    torch_ops: Mapping[str, int] = field(default_factory=dict)
    record: Mapping[str, Any] | None = None
    outputs: tuple[torch.Tensor, ...] | None = None
    result: Mapping[str, Any] | None = None
    medians_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class Timed(Reply):
    """A timer's run of planned launches: the outputs of the first run (of every set the grader gave values, set
    after set; none for `TimeKept`), the input sets it used, the medians when it timed them, why they are no time
    when a sample's check failed (`refused`), and why the memory watch stood aside for its samples (`unwatched`)."""

    outputs: tuple[torch.Tensor, ...] | None = None
    sets: int = 0
    medians_ms: tuple[float, ...] = ()
    refused: str = ""  # what the check after a sample found (outputs unlike the checked run's, an input changed)
    unwatched: str = ""  # its self-test failed on this device (memory_watch.self_test): no sample was watched


@dataclass(frozen=True)
class Profiled(Reply):
    """Kept launches run once between cudaProfilerStart and cudaProfilerStop (the worker runs under Nsight Compute,
    which profiles only that range), and what the compiler says of each kernel they launched: kernel name ->
    {"registers", "spills", "tensor_cores", "vector_loads"} (grader.evidence.kernel_profiles.StaticFacts)."""

    kernels: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    launches: int = 0  # kernel launches inside the range (what ncu's report holds for this request)


# -------------------------------------------------------------------------------------------------- requests

R = TypeVar("R", bound=Reply)
R_co = TypeVar("R_co", bound=Reply, covariant=True)  # a request's reply class (a Call is a request for a Launched)


@dataclass(frozen=True)
class Request(Generic[R_co]):
    """A message the grader sends a worker; `REPLY` is the class of its answer."""

    OP: ClassVar[str] = ""
    REPLY: ClassVar[type[Reply]] = Reply


@dataclass(frozen=True)
class Load(Request[Loaded]):
    """Import the submission at `path` and describe the symbols `names`."""

    OP: ClassVar[str] = "load"
    REPLY: ClassVar[type[Reply]] = Loaded
    path: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class LoadKernels(Request[Loaded]):
    """Build the submission's kernels from `bundle` (no line of the submission runs: grader.running.worker.kernel_host)
    and describe the symbols `names`."""

    OP: ClassVar[str] = "load_kernels"
    REPLY: ClassVar[type[Reply]] = Loaded
    bundle: KernelBundle
    names: tuple[str, ...]


@dataclass(frozen=True)
class Launch(Request[Launched]):
    """Launch `kernel` on the grader's guarded storages: `views` ({storage, shape, stride, offset}) are the
    tensors, `args` the kernel's arguments (a tensor as {"view": i}), `meta` its constexprs, `grid` the
    contract's grid expressions. `count_traffic`: count each launch's loads and stores (interpreter);
    `announce_pointers`: print the buffers' addresses first (under compute-sanitizer). `resolve` (the submission's
    worker): reply with the meta-parameters and launch options autotune or heuristics chose; `resolved` (a kernel
    host, whose kernel is bare): those values, over `meta`."""

    OP: ClassVar[str] = "launch"
    REPLY: ClassVar[type[Reply]] = Launched
    kernel: str
    storages: tuple[torch.Tensor, ...]
    views: tuple[Mapping[str, Any], ...]
    args: tuple[Any, ...]
    meta: Mapping[str, Any]
    grid: tuple[str, ...]
    count_traffic: bool = False
    announce_pointers: bool = False
    resolve: bool = False
    resolved: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Call(Request[Called]):
    """Call the wrapper `function` on the grader's guarded storages (arguments as for `Launch`)."""

    OP: ClassVar[str] = "call"
    REPLY: ClassVar[type[Reply]] = Called
    function: str
    storages: tuple[torch.Tensor, ...]
    views: tuple[Mapping[str, Any], ...]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    count_traffic: bool = False
    announce_pointers: bool = False


@dataclass(frozen=True)
class Compile(Request[Compiled]):
    """Compile `kernel` ahead of time for sm_`arch` with this signature and these constexprs."""

    OP: ClassVar[str] = "compile"
    REPLY: ClassVar[type[Reply]] = Compiled
    kernel: str
    signature: Mapping[str, str]
    constexprs: Mapping[str, Any]
    arch: int = 90


@dataclass(frozen=True)
class Warmup(Request[WarmedUp]):
    """Compile the specialisations of these launches in parallel, launching nothing (CUDA)."""

    OP: ClassVar[str] = "warmup"
    REPLY: ClassVar[type[Reply]] = WarmedUp
    launches: tuple[Launch, ...]
    threads: int = 8


@dataclass(frozen=True)
class Replay(Request[Replayed]):
    """Run recorded launches again, in order, running no wrapper code (grader.judging.replay plans them)."""

    OP: ClassVar[str] = "replay"
    REPLY: ClassVar[type[Reply]] = Replayed
    launches: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class Run(Request[Ran]):
    """Run a performance target once on contiguous inputs (grader.running.worker.measuring.samplers.prepare_call
    reads `inputs`, `args`, `kwargs` and `outputs`); then, when asked, record its launches by layout, send its
    outputs back, or time it over `sets` rotated copies of the inputs (`warmup_ms`/`rep_ms` None: the timer's
    defaults)."""

    OP: ClassVar[str] = "time"
    REPLY: ClassVar[type[Reply]] = Ran
    kind: str  # "kernel" | "function"
    target: str
    inputs: tuple[torch.Tensor, ...]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    outputs: tuple[Mapping[str, Any], ...]
    meta: Mapping[str, Any]
    grid: tuple[str, ...]
    sets: int = 1
    repeats: int = 5
    time: bool = False
    return_outputs: bool = False
    record: bool = False
    warmup_ms: float | None = None
    rep_ms: float | None = None


@dataclass(frozen=True)
class TimeLaunches(Request[Timed]):
    """A timer's run of planned launches (grader.running.timing.launch_plan) on fresh buffers: their outputs, and
    with `time` the medians of CUDA-graph replays; with `keep` the run is kept under that key for `TimeKept` (or
    `ProfileKept`). `rotate`: as many input sets as keep a pass over them out of L2 (timing); off, exactly `sets`
    (a profiled replay runs one). `return_outputs` off: no outputs in the reply (the reference's, a profiled replay's).
    `more_inputs`: the other sets' own values (below); without them every set is a copy of the first. `compile_only`:
    the launches compiled and loaded, nothing allocated or run (measuring.compile_ahead; the reply's `sets` counts)."""

    OP: ClassVar[str] = "time_launches"
    REPLY: ClassVar[type[Reply]] = Timed
    inputs: tuple[torch.Tensor, ...]
    buffers: Mapping[int, Mapping[str, Any]]
    launches: tuple[Mapping[str, Any], ...]
    outputs: tuple[Mapping[str, Any], ...]
    sets: int = 1
    repeats: int = 0
    time: bool = False
    keep: str = ""
    spin_up_ms: float | None = None
    rotate: bool = True
    return_outputs: bool = True
    # the inputs of input sets 2, 3, ... in order, as many tensors per set as `inputs`: values of their own, drawn by
    # the grader, so that no set's answer is another's (then the sets are exactly these; outputs set after set)
    more_inputs: tuple[torch.Tensor, ...] = ()
    compile_only: bool = False


@dataclass(frozen=True)
class TimeKept(Request[Timed]):
    """Time the launches kept under `key`: `repeats` samples of CUDA-graph replays; with `hold` the captured
    graph stays for the next request with this key (timing in turn)."""

    OP: ClassVar[str] = "time_kept"
    REPLY: ClassVar[type[Reply]] = Timed
    key: str
    repeats: int
    spin_up_ms: float
    hold: bool = False


@dataclass(frozen=True)
class ProfileKept(Request[Profiled]):
    """Run the launches kept under `key` once, on one input set, inside the profiler's range (nothing else the
    worker does is profiled), and describe the compiled kernels."""

    OP: ClassVar[str] = "profile_kept"
    REPLY: ClassVar[type[Reply]] = Profiled
    key: str


# ---------------------------------------------------------------------------------- the zygote's control socket


@dataclass(frozen=True)
class ZygoteReady(Reply):
    """The zygote's first message: what it preloaded, and whether CUDA got initialised (it must not)."""

    pid: int = 0
    ready: bool = True
    preloaded: tuple[str, ...] = ()
    cuda_initialized: bool = False


@dataclass(frozen=True)
class Forked(Reply):
    pid: int = 0


@dataclass(frozen=True)
class ExitStatus(Reply):
    """`status` as subprocess reports it (-signal or the exit code), once `exited`."""

    exited: bool = False
    status: int | None = None


@dataclass(frozen=True)
class StraysKilled(Reply):
    killed: int = 0


@dataclass(frozen=True)
class Fork(Request[Forked]):
    """Fork a worker (the channel's socket and the progress pipe go beside it as fds) with this environment,
    folder, log and address-space limit."""

    OP: ClassVar[str] = "fork"
    REPLY: ClassVar[type[Reply]] = Forked
    backend: str
    env: Mapping[str, str]
    cwd: str
    log: str
    address_limit: int | None = None


@dataclass(frozen=True)
class Status(Request[ExitStatus]):
    OP: ClassVar[str] = "status"
    REPLY: ClassVar[type[Reply]] = ExitStatus
    pid: int


@dataclass(frozen=True)
class KillStrays(Request[StraysKilled]):
    """Kill every process that escaped a worker's process group."""

    OP: ClassVar[str] = "strays"
    REPLY: ClassVar[type[Reply]] = StraysKilled


@dataclass(frozen=True)
class ZygoteStarted(Reply):
    pid: int = 0  # the forked zygote's as the grader sees it (1 in its namespace); its ZygoteReady follows


@dataclass(frozen=True)
class StartZygote(Request[ZygoteStarted]):
    """To the batch's zygote template (grader.running.worker.zygote_template): become one sandbox's zygote, confined
    as a fresh one (these limits, new namespaces with `hide` under empty tmpfs, the user `uid`:`gid`, no new
    privileges, this environment, folder and log); the connection becomes its control channel."""

    OP: ClassVar[str] = "start_zygote"
    REPLY: ClassVar[type[Reply]] = ZygoteStarted
    backend: str
    env: Mapping[str, str]
    cwd: str
    log: str
    hide: tuple[str, ...]
    uid: int | None
    gid: int | None
    file_limit: int
    cpu_limit_s: int
    address_limit: int | None = None


WORKER_REQUESTS: tuple[type[Request[Any]], ...] = (Load, LoadKernels, Launch, Call, Compile, Warmup, Replay, Run,
                                                   TimeLaunches, TimeKept, ProfileKept)
ZYGOTE_REQUESTS: tuple[type[Request[Any]], ...] = (Fork, Status, KillStrays)
TEMPLATE_REQUESTS: tuple[type[Request[Any]], ...] = (StartZygote,)


# ------------------------------------------------------------------------------------------------------ codec


def encode(message: Request[Any] | Reply) -> dict[str, Any]:
    """A message as the plain tree that goes on the wire: a request with its `op`, a reply without."""
    tree = {f.name: _plain(getattr(message, f.name)) for f in dataclasses.fields(message)}
    if isinstance(message, Request):
        return {OP: message.OP, **tree}
    return tree


def decode_request(tree: Any, accepted: tuple[type[Request[Any]], ...] = WORKER_REQUESTS) -> Request[Any]:
    """The request a tree encodes, one of `accepted`; ProtocolError if it is none of them or does not fit."""
    if not isinstance(tree, dict):
        raise ProtocolError(f"a request must be a dict, not {type(tree).__name__}")
    by_op = {cls.OP: cls for cls in accepted}
    op = tree.get(OP)
    cls = by_op.get(op) if isinstance(op, str) else None
    if cls is None:
        raise ProtocolError(f"unknown op {op!r}")
    return _build(cls, {k: v for k, v in tree.items() if k != OP}, cls.__name__)


def decode_reply(cls: type[R], tree: Any) -> R:
    """The reply of class `cls` a tree encodes; ProtocolError if it does not fit."""
    if not isinstance(tree, dict):
        raise ProtocolError(f"a reply must be a dict, not {type(tree).__name__}")
    return _build(cls, tree, cls.__name__)


def decode_answer(request: Request[R], tree: Any) -> R:
    """The reply to `request` that a tree encodes (of the request's `REPLY` class); ProtocolError if it does not
    fit."""
    return typing.cast(R, decode_reply(request.REPLY, tree))


def failed(cls: type[R], error: WorkerError, **fields: Any) -> R:
    """A failed reply of class `cls`."""
    return cls(ok=False, error=error, **fields)


def error_reply(kind: str, message: str) -> Reply:
    """A reply to a request that could not be served at all (it did not decode, say)."""
    return Reply(ok=False, error=WorkerError(type=kind, message=message))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value) if isinstance(value, (Request, Reply)) else {
            f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The declared type of each field of `cls`, resolved once. A message that carries tensors names torch.Tensor:
    torch is imported for it then (a zygote's messages never need it)."""
    found = _HINTS.get(cls)
    if found is None:
        try:
            found = typing.get_type_hints(cls)
        except NameError:
            import torch

            found = typing.get_type_hints(cls, localns={"torch": torch})
        _HINTS[cls] = found
    return found


def _is_tensor_type(kind: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and kind is torch.Tensor


def _build(cls: type, tree: Mapping[str, Any], where: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in tree if k not in fields)
    if unknown:
        raise ProtocolError(f"{where}: unknown field {unknown[0]!r}")
    hints = _hints(cls)
    values = {}
    for name, declared in fields.items():
        if name in tree:
            values[name] = _check(hints[name], tree[name], f"{where}.{name}")
        elif declared.default is dataclasses.MISSING and declared.default_factory is dataclasses.MISSING:
            raise ProtocolError(f"{where}: missing field {name!r}")
    return cls(**values)


def _check(kind: Any, value: Any, where: str) -> Any:
    """`value` as a `kind` (a field's declared type), or ProtocolError."""
    if kind is Any:
        return value
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check(option, value, where)
            except ProtocolError as exc:
                errors.append(str(exc))
        raise ProtocolError(errors[0] if errors else f"{where}: not None")
    if origin is tuple:
        item = typing.get_args(kind)[0]
        if not isinstance(value, (list, tuple)):
            raise ProtocolError(f"{where}: a list, not {type(value).__name__}")
        return tuple(_check(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict):
        key_kind, value_kind = typing.get_args(kind)
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: a dict, not {type(value).__name__}")
        return {_check(key_kind, k, f"{where} key"): _check(value_kind, v, f"{where}[{k!r}]") for k, v in value.items()}
    if _is_tensor_type(kind):
        if type(value) is not kind:
            raise ProtocolError(f"{where}: a tensor, not {type(value).__name__}")
        return value
    if kind is bool:
        if type(value) is not bool:
            raise ProtocolError(f"{where}: true or false, not {type(value).__name__}")
        return value
    if kind is int:
        if type(value) is not int:
            raise ProtocolError(f"{where}: an integer, not {type(value).__name__}")
        return value
    if kind is float:
        if type(value) not in (int, float):
            raise ProtocolError(f"{where}: a number, not {type(value).__name__}")
        return float(value)
    if kind is str:
        if type(value) is not str:
            raise ProtocolError(f"{where}: a string, not {type(value).__name__}")
        return value
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: a dict, not {type(value).__name__}")
        body = {k: v for k, v in value.items() if not (k == OP and issubclass(kind, Request) and v == kind.OP)}
        return _build(kind, body, where)
    raise ProtocolError(f"{where}: no codec for {kind!r}")  # pragma: no cover - every declared type is above
