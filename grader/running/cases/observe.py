"""A worker's reply to a case's request, as an `Observation` (grader.evidence.observation): the storages compared
bit for bit with what was sent (guard bands, unwritten outputs), a wrapper's returned tensors mapped onto the
spec's outputs, the worker's error named. Pure: judging reads what this makes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from grader import trap_ids
from grader.authoring.spec import Case, FunctionSpec
from grader.backends import Backend
from grader.evidence import guard_bits
from grader.evidence.observation import Observation
from grader.judging.compare import close_mask
from grader.judging.errors import classify_error, failure_message
from grader.judging.false_hints import HintCall, gpu_fault_note
from grader.running import guards, protocol
from grader.running.cases.placement import Placed

# Failures after which a worker may hold memory the student's code corrupted, or state it left behind.
RESTART_AFTER = frozenset({"runtime-error", "compile-error", "crash", "timeout", "oob-write", "oob-read",
                           "out-of-memory", "memory-fault"})


def launched(placed: Placed, reply: protocol.Launched, case: Case, output_tail: str,
             launches: tuple[Mapping[str, Any], ...] | None = None) -> Observation:
    """The storages after a launch (or a call) against those sent: guard findings, outputs, unwritten elements."""
    after = reply.storages
    if len(after) != len(placed.storages):
        return Observation(trap=trap_ids.CRASH, message="the worker returned a malformed reply")
    findings: list[guard_bits.GuardFinding] = []
    outputs: dict[str, torch.Tensor] = {}
    unwritten: dict[str, torch.Tensor] = {}
    for key, before, now in zip(placed.keys, placed.storages, after, strict=True):  # length checked above
        plan = placed.plans[key]
        if now.shape != before.shape or now.dtype != before.dtype:
            return Observation(trap=trap_ids.CRASH, message="the worker returned a malformed buffer")
        findings.extend(guards.check_storage(plan, before, now))
        if plan.role == "output":
            outputs[plan.name] = guards.view_of(now, plan).clone()
            unwritten[plan.name] = guards.unwritten_mask(plan, now)
    return Observation(
        outputs=outputs,
        guard_findings=tuple(findings),
        unwritten=unwritten,
        launches=launches,
        output_tail=output_tail,
        elapsed_s=reply.elapsed_s,
        block_meta={**case.meta, **_plain_meta(reply.resolved)},  # what autotune/heuristics chose wins
        row_strides=placed.row_strides(),
        strides=placed.strides(),
        false_hint=reply.false_hint,
        traffic=_traffic(reply.traffic),
    )


def called(spec: FunctionSpec, placed: Placed, reply: protocol.Called, case: Case, backend: Backend,
           output_tail: str) -> Observation:
    """A wrapper's call: what it returned, mapped onto the spec's outputs, and everything `launched` sees."""
    returned, problem_text = unpack_returns(reply.result or {}, spec.returns, backend)
    if problem_text:
        return Observation(trap=trap_ids.BAD_OUTPUT, message=f"{spec.name} returned {problem_text}",
                           launches=reply.launches, torch_ops=dict(reply.torch_ops), false_hint=reply.false_hint)
    observation = launched(placed, reply, case, output_tail, launches=reply.launches)
    unwritten, findings = poisoned_outputs(returned)
    own = allocation_guard_findings(reply.allocation_findings, reply.result_views, spec)
    return Observation(
        outputs=returned,
        sent_storages=tuple(placed.storages),
        result_views=reply.result_views,
        unwritten=unwritten,
        guard_findings=observation.guard_findings + own + findings,
        launches=observation.launches,
        torch_ops=dict(reply.torch_ops),
        output_tail=observation.output_tail,
        elapsed_s=reply.elapsed_s,
        row_strides=placed.row_strides(),
        strides=placed.strides(),
        false_hint=observation.false_hint,
        traffic=observation.traffic,
    )


def raised(reply: protocol.Reply, what: str, submission_name: str, calls: Sequence[HintCall],
           output_tail: str, false_hint: Mapping[str, Any] | None = None) -> Observation:
    """A request the student's code raised in: the trap the error names and the sentence that says it."""
    failure = classify_error(reply.error, calls)
    message = failure_message(reply.error, what, submission_name)
    if failure == trap_ids.FALSE_HINT:
        message += "\n" + gpu_fault_note(calls, submission_name)
    return Observation(trap=failure, message=message, output_tail=output_tail, false_hint=false_hint)


def outputs_close(outputs: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], tol: Any) -> bool:
    for name, exp in expected.items():
        out = outputs.get(name)
        if out is None or tuple(out.shape) != tuple(exp.shape):
            return False
        if not bool(close_mask(out, exp, tol.atol, tol.rtol).all()):
            return False
    return True


def needs_fresh_worker(observation: Observation) -> bool:
    """Did the case write out of bounds, raise or crash? Then the next case gets a fresh worker."""
    return (observation.trap in RESTART_AFTER
            or any(f.trap == "oob-write" for f in observation.guard_findings)
            or any(f.trap == "oob-write" for f in (*observation.sanitizer_findings, *observation.fault_findings)))


def unpack_returns(
    encoded: Mapping[str, Any], names: tuple[str, ...], backend: Backend
) -> tuple[dict[str, torch.Tensor], str]:
    """Map a wrapper's encoded return value onto the spec's output names; say what is wrong if not."""
    if len(names) == 1:
        items = [encoded]
    elif "sequence" in encoded and len(encoded["sequence"]) == len(names):
        items = list(encoded["sequence"])
    else:
        got = f"a {encoded.get('type')} of {len(encoded['sequence'])}" if "sequence" in encoded else _what(encoded)
        return {}, f"{got}, but it must return {len(names)} tensors ({', '.join(names)})"
    out: dict[str, torch.Tensor] = {}
    expected_device = backend.device
    for name, item in zip(names, items, strict=True):  # lengths checked above
        tensor = item.get("tensor") if isinstance(item, Mapping) else None
        if type(tensor) is not torch.Tensor:
            return {}, f"{_what(item)} for `{name}`, not a torch.Tensor"
        if not str(item.get("device", "")).startswith(expected_device):
            device = item.get("device")
            return {}, f"`{name}` on device {device}; it must stay on the input's device ({expected_device})"
        out[name] = tensor
    return out, ""


def allocation_guard_findings(
    found: Sequence[Any], result_views: Sequence[Any], spec: FunctionSpec
) -> tuple[guard_bits.GuardFinding, ...]:
    """Stores past the buffers a wrapper allocated itself (the worker guards them, worker.recording):
    `oob-write`, named after the output the buffer was returned as, else by its shape."""
    names = {view["sid"]: name for name, view in zip(spec.returns, result_views, strict=False)
             if isinstance(view, Mapping) and isinstance(view.get("sid"), int)}
    findings = []
    for item in found:
        if not isinstance(item, Mapping):
            continue
        shape = item.get("shape")
        shape_text = tuple(shape) if isinstance(shape, list) else "?"
        sid = item.get("sid")
        name = ((names.get(sid) if isinstance(sid, int) else None)
                or f"a buffer {spec.name} allocated (shape {shape_text})")
        finding = guards.allocation_guard_finding(dict(item), name)
        if finding is not None:
            findings.append(finding)
    return tuple(findings)


def poisoned_outputs(
    outputs: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], tuple[guard_bits.GuardFinding, ...]]:
    """Elements of returned tensors still holding the poison the worker put into fresh allocations."""
    unwritten: dict[str, torch.Tensor] = {}
    findings = []
    for name, tensor in outputs.items():
        if not tensor.dtype.is_floating_point:
            continue
        poison = guard_bits.nan_pattern(tensor.dtype, guard_bits.PAYLOAD_OUTPUT_POISON)
        mask = guard_bits.bits(tensor.contiguous()) == poison
        unwritten[name] = mask
        if mask.any():
            first = tuple(int(i) for i in torch.nonzero(mask)[0])
            findings.append(
                guard_bits.GuardFinding(trap_ids.UNWRITTEN_OUTPUT, name, int(mask.sum()), f"{name}{list(first)}"))
    return unwritten, tuple(findings)


def _what(item: Any) -> str:
    if isinstance(item, Mapping) and "other" in item:
        return f"a {item['other']} ({item.get('repr', '')[:60]})"
    if isinstance(item, Mapping) and "sequence" in item:
        return f"a {item.get('type')}"
    return "something else"


def _traffic(counted: Sequence[Any] | None) -> tuple[Mapping[str, Any], ...] | None:
    """The memory traffic the worker counted (interpreter), as plain data; None where it counted none."""
    if counted is None:
        return None
    return tuple(dict(launch) for launch in counted if isinstance(launch, dict))


def _plain_meta(resolved: Mapping[str, Any] | None) -> dict[str, int]:
    """The integer meta-parameters autotune or heuristics chose for a kernel case's launch (num_warps and other launch
    options too: a trap's signature reads only the block sizes it knows)."""
    return {k: v for k, v in (resolved or {}).items() if type(v) is int}
