"""Trust a wrapper's outputs only if its recorded kernel launches reproduce them. Pure: no I/O.

The worker records every launch a wrapper makes (grader/running/worker/launch_record.py). Code in the
worker can switch that recording off or forge the worker's whole reply, so the grader checks the
record instead of believing it:

1. `plan_replay`: every buffer a launch was given must come from the case: the inputs the grader
   sent (bit for bit), a contiguous / transposed / dtype-converted copy of an input, a fresh buffer
   (uninitialised poison or one constant), or what an earlier launch wrote. The worker puts a
   wrapper's own allocations inside poisoned guard bands (grader.running.guards.guard_allocation):
   poison around a buffer is no information, so it is looked through. A buffer holding
   anything else was computed outside the kernels (numpy, torch with the recorder off, a cache).
2. The battery replays the launches in a fresh worker that runs no wrapper code.
3. `check_outputs`: each returned tensor must be what the replay left in its buffer (or a copy or
   dtype conversion of a replayed argument), within the case's tolerance.

A launch record that is missing or malformed is `tampering` (an honest wrapper always has one); an
output the replay does not reproduce is `not-fused` (the values came from outside the kernels).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader import trap_ids
from grader.evidence.guard_bits import PAYLOAD_OUTPUT_POISON, nan_pattern
from grader.evidence.observation import Finding
from grader.evidence.tensor_views import tensor_from
from grader.judging.compare import close_mask

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class ReplayPlan:
    launches: tuple[dict[str, Any], ...] = ()  # what the replay worker runs, in order
    trap: str = ""  # set when the record itself already shows the outputs cannot be trusted
    problem: str = ""


def plan_replay(
    launches: Sequence[Mapping[str, Any]], sent: Sequence[torch.Tensor], inputs: Mapping[str, Any]
) -> ReplayPlan:
    """The launches to replay, each with the storages to (re)load first; or why there is no point."""
    planned = []
    known: set[int] = set()
    for number, launch in enumerate(launches, 1):
        record = launch.get("replay") if isinstance(launch, Mapping) else None
        kernel = launch.get("kernel", "?") if isinstance(launch, Mapping) else "?"
        where = f"launch {number} ({kernel})"
        malformed = _malformed(record)
        if malformed:
            return ReplayPlan(
                trap=trap_ids.TAMPERING,
                problem=f"{where} has no usable launch record ({malformed}): the "
                "worker's account of what the wrapper ran was altered",
            )
        assert isinstance(record, Mapping)
        views = _tensor_views(record)
        load = {}
        for sid, data in record["storages"].items():
            mine = [v for v in views if v["sid"] == sid]
            if grounded(data, mine, sent, inputs):
                load[sid] = data
            elif sid not in known:
                param = _param_of(record, sid)
                return ReplayPlan(
                    trap=trap_ids.NOT_FUSED,
                    problem=(
                        f"{where} was given `{param}`, a buffer whose contents come from no input of the case and no "
                        "earlier launch: it was computed outside the kernels"
                    ),
                )
        known |= set(record["storages"])
        planned.append(
            {
                "kernel": record["kernel"],
                "grid": list(record["grid"]),
                "args": list(record["args"]),
                "kwargs": dict(record["kwargs"]),
                "load": load,
            }
        )
    return ReplayPlan(tuple(planned))


def check_outputs(
    outputs: Mapping[str, torch.Tensor],
    result_views: Sequence[Any],
    plan: ReplayPlan,
    buffers: Mapping[int, torch.Tensor],
    atol: float,
    rtol: float,
) -> Finding | None:
    """Each returned tensor against what the replay computed; the first one that disagrees."""
    if not isinstance(buffers, Mapping) or any(not _is_bytes(b) for b in buffers.values()):
        return Finding(trap_ids.TAMPERING, "the replay worker's reply was malformed")
    buffers = dict(buffers)
    arg_views = [v for launch in plan.launches for v in _tensor_views(launch)]
    kernels = ", ".join(str(launch["kernel"]) for launch in plan.launches)
    for index, (name, returned) in enumerate(outputs.items()):
        view = result_views[index] if index < len(result_views) else None
        found: list[torch.Tensor | None] = []
        if view is not None and _is_view(view) and view["sid"] in buffers:
            found.append(_view(buffers, view))
        else:  # returned a copy: of which replayed argument?
            found.extend(_view(buffers, v) for v in arg_views if v["sid"] in buffers)
        candidates = [c for c in found if c is not None and c.numel() == returned.numel()]
        if any(bool(close_mask(returned, c.reshape(returned.shape), atol, rtol).all()) for c in candidates):
            continue
        detail = ""
        if candidates:
            replayed = candidates[0].reshape(returned.shape)
            wrong = ~close_mask(returned, replayed, atol, rtol)
            at = tuple(int(i) for i in torch.nonzero(wrong)[0])
            detail = (
                f" ({int(wrong.sum())} of {wrong.numel()} elements differ; at {list(at)} the replay gives "
                f"{float(replayed[at]):.6g}, the wrapper returned {float(returned[at]):.6g})"
            )
        return Finding(
            trap_ids.NOT_FUSED,
            (
                f"`{name}` is not what the wrapper's kernel launches computed: running the recorded launches "
                f"({kernels}) again on the same inputs, with no wrapper code, gives other values{detail}. The returned "
                "values were computed outside the kernels."
            ),
        )
    return None


def same_buffers(first: Mapping[int, torch.Tensor], second: Mapping[int, torch.Tensor]) -> bool:
    """Two replays of the same launches left the same bytes in every buffer."""
    return first.keys() == second.keys() and all(
        _is_bytes(first[k]) and _is_bytes(second[k]) and torch.equal(first[k], second[k]) for k in first)


def explain_replay_mismatch(finding: Finding, *, writes_out_of_bounds: bool, replays_agree: bool) -> Finding:
    """A wrapper's values that its replayed launches do not reproduce are `not-fused` only when the launches are
    deterministic: in a case whose stores land out of bounds (one element past each row, say) a stray store
    races with the next row's program on a GPU, and replaying the same launches gives other values by itself;
    replays that disagree with each other are a race too. Neither is torch computing the answer."""
    if finding.trap != trap_ids.NOT_FUSED or (replays_agree and not writes_out_of_bounds):
        return finding
    detail = finding.message.split(": running the recorded launches", 1)[0]
    if writes_out_of_bounds:
        return Finding(trap_ids.OOB_WRITE, f"{detail}: replaying the recorded launches gives other values. The "
                       "kernel stores out of bounds (above), and on a GPU such a stray store races with the program "
                       "that owns those elements, so the output changes from run to run.")
    return Finding(trap_ids.NONDETERMINISTIC, f"{detail}: the recorded launches, replayed twice on the same inputs, "
                   "gave different values each time: programs of one launch write the same elements (a race) or "
                   "read memory nothing wrote.")


MAX_META_TEXT = 100
MAX_META_INT = 1 << 31


def _plain_meta(value: Any) -> bool:
    """A meta-parameter value worth passing to trap functions: a bounded number, a flag or a short string."""
    if type(value) is bool or type(value) is float:
        return True
    if type(value) is int:
        return abs(value) < MAX_META_INT
    return type(value) is str and len(value) <= MAX_META_TEXT


def launch_meta(launches: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """What trap functions get as `inputs["_launches"]` from a wrapper's recorded launches: per launch,
    in order, its kernel, its grid and `meta`, the values of the kernel's tl.constexpr parameters (the
    block sizes the wrapper chose, positional or keyword, autotuned or not). Only plain, bounded values
    are kept: the record comes from the worker."""
    out = []
    for launch in launches:
        record = launch.get("replay") if isinstance(launch, Mapping) else None
        if not isinstance(record, Mapping):
            continue
        params = [p for p in record.get("params") or [] if isinstance(p, str)]
        args = record.get("args")
        kwargs = record.get("kwargs")
        values = dict(zip(params, args, strict=False)) if isinstance(args, list) else {}
        if isinstance(kwargs, Mapping):
            values.update((str(k), v) for k, v in kwargs.items())
        constexprs = record.get("constexprs")
        names = {c for c in constexprs if isinstance(c, str)} if isinstance(constexprs, list) else set()
        grid = record.get("grid")
        kernel = record.get("kernel")
        out.append({
            "kernel": kernel if isinstance(kernel, str) else str(launch.get("kernel", "?"))[:MAX_META_TEXT],
            "grid": tuple(grid) if isinstance(grid, list) and all(type(g) is int for g in grid) else None,
            "meta": {k: v for k, v in values.items() if k in names and _plain_meta(v)},
        })
    return tuple(out)


def grounded(
    data: torch.Tensor,
    views: Sequence[Mapping[str, Any]],
    sent: Sequence[torch.Tensor],
    inputs: Mapping[str, Any],
) -> bool:
    """Do these storage bytes come from the case: a sent storage, one repeated value, or an input copy?"""
    if data.numel() == 0:
        return True
    for storage in sent:
        raw = storage.detach().reshape(-1).contiguous().view(torch.uint8)
        if raw.numel() == data.numel() and torch.equal(raw, data):
            return True
    for view in views:
        dtype = _dtype(view["dtype"])
        size = torch.empty(0, dtype=dtype).element_size()
        poison = nan_pattern(dtype, PAYLOAD_OUTPUT_POISON) if dtype is not None and dtype.is_floating_point else None
        if data.numel() % size == 0:
            values = data.view(_BITS[size])
            rest = values[values != poison] if poison is not None else values
            if rest.numel() == 0 or bool((rest == rest[0]).all()):
                return True  # fresh: poison, one constant, or one constant inside poisoned guards
        tensor = _view({0: data}, dict(view, sid=0))
        if tensor is None or not _covers_or_poison_around(data, tensor, size, poison):
            continue
        for value in inputs.values():
            if not isinstance(value, torch.Tensor):
                continue
            for candidate in (value, value.T) if value.dim() == 2 else (value,):
                if tuple(candidate.shape) == tuple(tensor.shape) and torch.equal(
                    candidate.to(tensor.dtype).contiguous().view(_BITS[size]),
                    tensor.contiguous().view(_BITS[size]),
                ):
                    return True
    return False


def _covers_or_poison_around(data: torch.Tensor, tensor: torch.Tensor, size: int, poison: int | None) -> bool:
    """Does the view cover its whole storage, or hold only guard poison outside it?"""
    if tensor.numel() * size == data.numel():
        return True
    if poison is None or data.numel() % size:
        return False
    values = data.view(_BITS[size])
    inside = torch.zeros(values.numel(), dtype=torch.bool)
    torch.as_strided(inside, tensor.shape, tensor.stride(), tensor.storage_offset()).fill_(True)
    return bool((values[~inside] == poison).all())


def _malformed(record: Any) -> str:
    if not isinstance(record, Mapping):
        return "missing"
    if not record.get("complete"):
        return str(record.get("why") or "incomplete")[:200]
    storages = record.get("storages")
    if not isinstance(storages, Mapping) or not all(
        isinstance(k, int) and _is_bytes(v) for k, v in storages.items()
    ):
        return "storages"
    if (
        not isinstance(record.get("kernel"), str)
        or not isinstance(record.get("args"), list)
        or not isinstance(record.get("kwargs"), Mapping)
    ):
        return "kernel or arguments"
    grid = record.get("grid")
    if (
        not isinstance(grid, list)
        or not 1 <= len(grid) <= 3
        or not all(type(g) is int and g >= 0 for g in grid)
    ):
        return "grid"
    for view in _tensor_views(record):
        if not _is_view(view) or view["sid"] not in storages or _view(storages, view) is None:
            return "a tensor argument outside its storage"
    return ""


def _tensor_views(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    values = list(record.get("args") or []) + list((record.get("kwargs") or {}).values())
    return [v["tensor"] for v in values if isinstance(v, Mapping) and "tensor" in v]


def _param_of(record: Mapping[str, Any], sid: int) -> str:
    params = list(record.get("params") or [])
    for index, value in enumerate(record.get("args") or []):
        if (
            isinstance(value, Mapping)
            and isinstance(value.get("tensor"), Mapping)
            and value["tensor"].get("sid") == sid
        ):
            return params[index] if index < len(params) else f"argument {index + 1}"
    for key, value in (record.get("kwargs") or {}).items():
        if (
            isinstance(value, Mapping)
            and isinstance(value.get("tensor"), Mapping)
            and value["tensor"].get("sid") == sid
        ):
            return str(key)
    return "a tensor argument"


def _is_bytes(value: Any) -> bool:
    return (
        type(value) is torch.Tensor
        and value.dtype == torch.uint8
        and value.dim() == 1
        and value.device.type == "cpu"
    )


def _is_view(view: Any) -> bool:
    return (
        isinstance(view, Mapping)
        and isinstance(view.get("sid"), int)
        and isinstance(view.get("offset"), int)
        and isinstance(view.get("shape"), list)
        and isinstance(view.get("stride"), list)
        and isinstance(_dtype(view.get("dtype")), torch.dtype)
    )


def _dtype(name: Any) -> torch.dtype | None:
    value = getattr(torch, name, None) if isinstance(name, str) else None
    return value if isinstance(value, torch.dtype) else None


def _view(buffers: Mapping[int, torch.Tensor], view: Mapping[str, Any]) -> torch.Tensor | None:
    """The described tensor over replayed/snapshot bytes, or None if it does not fit its storage."""
    try:
        if not _is_view(view) or any(type(s) is not int or s < 0 for s in view["shape"] + view["stride"]):
            return None
        return tensor_from(dict(buffers), dict(view))
    except (RuntimeError, ValueError, TypeError, KeyError):
        return None
