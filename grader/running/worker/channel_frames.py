"""A message as a channel frame and back (grader.running.worker.channel sends and receives them): the tree with
every bulk CPU tensor taken out and put in a table of views and storages, and, on receipt, every entry of that
table checked against the limits and the bytes that came (a view inside its storage, every storage and view used,
sizes as announced) before a tensor is built on it; then the tensors are put back where the markers are. Pure:
no socket here."""

from __future__ import annotations

import collections
import io
import math
from dataclasses import dataclass, field
from typing import Any

import torch

MAGIC = b"KGC1"
FORMAT = 1
MARK = "kernel-grader.channel.bulk"
BULK_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint16, torch.uint32, torch.uint64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
})  # complex32 is left out: merely creating one warns that it is experimental
STREAM, MEMFD = 0, 1  # a storage's carrier: its bytes streamed after the skeleton, or in a sealed memfd
_MAX_DIMS = 64
_CONTAINERS = (dict, list, tuple, collections.OrderedDict)


class ChannelClosed(Exception):
    """The other side closed its end (the worker died or the grader went away)."""


class ChannelTimeout(Exception):
    """No complete message arrived (or could be written) before the deadline."""


class ChannelError(ChannelClosed):
    """The peer sent something malformed; callers treat it like a dead peer."""




@dataclass
class Frame:
    skeleton: memoryview
    streamed: list[memoryview]
    memfd_data: list[memoryview]
    bulk_bytes: int
    fds: list[int] = field(default_factory=list)


class _Inline(Exception):
    """The message cannot be taken apart safely (a cycle, a tuple that looks like a marker): send it whole."""


_BUSY = object()


class _Extraction:
    """Replace bulk tensors in a message tree by markers, without touching the caller's containers."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.views: list[tuple[int, torch.dtype, tuple[int, ...], tuple[int, ...], int]] = []
        self.storages: list[torch.UntypedStorage] = []
        self._view_of: dict[int, int] = {}
        self._storage_of: dict[tuple[int, int], int] = {}
        self._memo: dict[int, Any] = {}

    def rebuild(self, node: Any) -> Any:
        kind = type(node)
        if kind is torch.Tensor:
            return self._tensor(node)
        if kind not in _CONTAINERS:
            return node
        key = id(node)
        done = self._memo.get(key)
        if done is _BUSY:
            raise _Inline("a cycle")
        if done is not None:
            return done
        if kind is tuple and node and isinstance(node[0], str) and node[0] == MARK:
            raise _Inline("a tuple that looks like a marker")
        self._memo[key] = _BUSY
        result: Any
        if kind is list or kind is tuple:
            items = [self.rebuild(item) for item in node]
            changed = any(new is not old for new, old in zip(items, node, strict=True))
            result = kind(items) if changed else node
        else:
            pairs = [(k, self.rebuild(v)) for k, v in node.items()]
            changed = any(new is not old for (_, new), old in zip(pairs, node.values(), strict=True))
            result = kind(pairs) if changed else node
        self._memo[key] = result
        return result

    def _tensor(self, tensor: torch.Tensor) -> Any:
        known = self._view_of.get(id(tensor))
        if known is not None:
            return (MARK, known)
        if (tensor.device.type != "cpu" or tensor.layout != torch.strided or tensor.dtype not in BULK_DTYPES
                or tensor.requires_grad or tensor.is_nested or tensor.is_conj() or tensor.is_neg()):
            return tensor
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # no plain storage (a functorch wrapper, say)
            return tensor
        nbytes = storage.nbytes()
        if nbytes < self.threshold:
            return tensor
        index = self._storage_of.setdefault((storage.data_ptr(), nbytes), len(self.storages))
        if index == len(self.storages):
            self.storages.append(storage)
        view = len(self.views)
        offset = int(tensor.storage_offset())
        self.views.append((index, tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), offset))
        self._view_of[id(tensor)] = view
        return (MARK, view)


def encode_frame(message: Any, threshold: int, max_fds: int) -> Frame:
    """The skeleton and the bulk of `message`: the `max_fds` largest storages go in memfds, the rest
    is streamed."""
    extraction = _Extraction(threshold)
    try:
        tree = extraction.rebuild(message)
    except (_Inline, RecursionError):
        extraction = _Extraction(threshold)
        tree = message
    data = [_storage_bytes(storage) for storage in extraction.storages]
    by_size = sorted(range(len(data)), key=lambda i: len(data[i]), reverse=True)
    in_memfd = set(by_size[:max_fds])
    table = [(MEMFD if i in in_memfd else STREAM, len(d)) for i, d in enumerate(data)]
    buffer = io.BytesIO()
    torch.save((FORMAT, tree, extraction.views, table), buffer)
    return Frame(skeleton=buffer.getbuffer(), streamed=[d for i, d in enumerate(data) if i not in in_memfd],
                  memfd_data=[d for i, d in enumerate(data) if i in in_memfd], bulk_bytes=sum(map(len, data)))


def _storage_bytes(storage: torch.UntypedStorage) -> memoryview:
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy().data


def load_skeleton(payload: bytearray) -> tuple[Any, list[Any], list[Any]]:
    try:
        loaded = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as exc:  # whatever a crafted payload makes the loader raise
        raise ChannelError(f"the skeleton does not load: {type(exc).__name__}: {exc}") from exc
    if not (type(loaded) is tuple and len(loaded) == 4 and type(loaded[0]) is int and loaded[0] == FORMAT
            and type(loaded[2]) is list and type(loaded[3]) is list):
        raise ChannelError("the skeleton is not (format, tree, views, storages)")
    return loaded[1], loaded[2], loaded[3]


def _is_size(value: Any) -> bool:
    return type(value) is int and 0 <= value < 1 << 63


def check_storages(storages: list[Any], nfds: int, streamed: int, max_bulk_bytes: int) -> None:
    for entry in storages:
        if not (type(entry) is tuple and len(entry) == 2 and type(entry[0]) is int and entry[0] in (STREAM, MEMFD)
                and _is_size(entry[1])):
            raise ChannelError(f"bad storage entry {entry!r:.200}")
    if sum(1 for carrier, _ in storages if carrier == MEMFD) != nfds:
        raise ChannelError(f"the storages do not use the {nfds} descriptors sent, each once")
    if sum(nbytes for carrier, nbytes in storages if carrier == STREAM) != streamed:
        raise ChannelError(f"the streamed storages do not add up to the {streamed} bytes announced")
    total = sum(nbytes for _, nbytes in storages)
    if total > max_bulk_bytes:
        raise ChannelError(f"{total} bytes of tensors, over max_bulk_bytes={max_bulk_bytes}")


def check_view(entry: Any, storages: list[tuple[int, int]]) -> tuple[int, torch.dtype, tuple[int, ...],
                                                                      tuple[int, ...], int]:
    """`entry` if it describes a tensor lying inside its storage; ChannelError otherwise."""
    if not (type(entry) is tuple and len(entry) == 5):
        raise ChannelError(f"bad view entry {entry!r:.200}")
    index, dtype, shape, stride, offset = entry
    if not (type(index) is int and 0 <= index < len(storages)):
        raise ChannelError(f"view names storage {index!r:.50} of {len(storages)}")
    if type(dtype) is not torch.dtype or dtype not in BULK_DTYPES:
        raise ChannelError(f"view of dtype {dtype!r:.50}")
    if not (type(shape) is tuple and type(stride) is tuple and len(shape) == len(stride) <= _MAX_DIMS
            and all(map(_is_size, shape + stride)) and _is_size(offset)):
        raise ChannelError(f"bad view geometry {shape!r:.100} {stride!r:.100} {offset!r:.50}")
    end = offset
    if math.prod(shape):
        end += 1 + sum((size - 1) * step for size, step in zip(shape, stride, strict=True))
    if end * dtype.itemsize > storages[index][1]:
        raise ChannelError(f"view {shape} {stride} +{offset} of {dtype} reaches past its storage of "
                           f"{storages[index][1]} bytes")
    return index, dtype, shape, stride, offset


class Substitution:
    """Put the received tensors back where the markers are, rebuilding the containers around them."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self.tensors = tensors
        self.used: set[int] = set()
        self._memo: dict[int, Any] = {}

    def rebuild(self, node: Any) -> Any:
        try:
            return self._rebuild(node)
        except RecursionError:
            raise ChannelError("the message is nested too deeply") from None

    def _rebuild(self, node: Any) -> Any:
        kind = type(node)
        if kind not in _CONTAINERS:
            return node
        if kind is tuple and node and type(node[0]) is str and node[0] == MARK:
            if not (len(node) == 2 and type(node[1]) is int and 0 <= node[1] < len(self.tensors)):
                raise ChannelError(f"bad marker {node!r:.100}")
            self.used.add(node[1])
            return self.tensors[node[1]]
        key = id(node)
        done = self._memo.get(key)
        if done is _BUSY:
            raise ChannelError("the message has a cycle")
        if done is not None:
            return done
        self._memo[key] = _BUSY
        result: Any
        if kind is list or kind is tuple:
            result = kind([self._rebuild(item) for item in node])
        else:
            result = kind([(k, self._rebuild(v)) for k, v in node.items()])
        self._memo[key] = result
        return result
