"""Replaying a wrapper's recorded launches: which buffers are trusted, and what counts as reproduced."""

from __future__ import annotations

import torch

from grader.evidence import guard_bits
from grader.judging.replay import ReplayPlan, check_outputs, grounded, plan_replay
from grader.running.worker.launch_record import describe_tensor, storage_bytes, storage_id


def poisoned(n: int) -> torch.Tensor:
    out = torch.empty(n, dtype=torch.float32)
    guard_bits.bits(out).fill_(guard_bits.nan_pattern(out.dtype, guard_bits.PAYLOAD_OUTPUT_POISON))
    return out


def record(kernel: str, params: list[str], tensors: list[torch.Tensor], grid=(4,)) -> dict:
    storages = {}
    for t in tensors:
        storages.setdefault(storage_id(t), storage_bytes(t))
    return {
        "kernel": kernel,
        "replay": {
            "complete": True,
            "why": "",
            "kernel": kernel,
            "params": params,
            "grid": list(grid),
            "args": [{"tensor": describe_tensor(t)} for t in tensors] + [4],
            "kwargs": {"BLOCK": 8},
            "storages": storages,
        },
    }


X = torch.randn(4, 6)
INPUTS = {"x": X, "eps": 1e-5}


def test_buffers_from_the_case_are_grounded() -> None:
    sent = (X.clone().reshape(-1),)
    view = describe_tensor(X)
    assert grounded(storage_bytes(X), [view], sent, INPUTS)  # the very bytes the grader sent
    assert grounded(
        storage_bytes(X.T.contiguous()), [describe_tensor(X.T.contiguous())], (), INPUTS
    )  # a copy
    assert grounded(
        storage_bytes(X.double()), [describe_tensor(X.double())], (), INPUTS
    )  # a dtype conversion
    assert grounded(storage_bytes(poisoned(4)), [describe_tensor(poisoned(4))], (), INPUTS)  # fresh
    assert grounded(
        storage_bytes(torch.zeros(4)), [describe_tensor(torch.zeros(4))], (), INPUTS
    )  # one constant
    answer = X.mean(dim=1)
    assert not grounded(storage_bytes(answer), [describe_tensor(answer)], sent, INPUTS)
    wider = torch.cat([X, X], dim=1)  # a copy covering only part of its storage is no copy of an input
    assert not grounded(storage_bytes(wider), [describe_tensor(wider[:, :6])], (), INPUTS)


def test_a_missing_or_altered_record_is_tampering() -> None:
    plan = plan_replay([{"kernel": "k", "grid": "(4,)"}], (), INPUTS)
    assert plan.trap == "tampering" and "launch 1 (k)" in plan.problem
    bad = record("k", ["x_ptr", "out_ptr", "N"], [X, poisoned(4)])
    bad["replay"]["args"][0]["tensor"]["offset"] = 1000  # a view outside its storage
    assert plan_replay([bad], (), INPUTS).trap == "tampering"
    bad = record("k", ["x_ptr", "out_ptr", "N"], [X, poisoned(4)], grid=(-1,))
    assert plan_replay([bad], (), INPUTS).trap == "tampering"


def test_an_output_buffer_prefilled_with_the_answer_is_caught_before_replaying() -> None:
    answer = X.mean(dim=1)  # computed outside the kernels, then handed to a kernel that stores nothing
    plan = plan_replay(
        [record("k", ["x_ptr", "mean_ptr", "N"], [X, answer])], (X.reshape(-1).clone(),), INPUTS
    )
    assert plan.trap == "not-fused"
    assert "`mean_ptr`" in plan.problem and "launch 1 (k)" in plan.problem


def test_a_later_launch_reads_what_the_replay_wrote_not_what_the_wrapper_put_there() -> None:
    out = poisoned(4)
    first = record("k1", ["x_ptr", "out_ptr", "N"], [X, out])
    out.copy_(X.mean(dim=1))  # the wrapper overwrote the first launch's output outside the kernels
    second = record("k2", ["out_ptr", "N"], [out])
    plan = plan_replay([first, second], (), INPUTS)
    assert not plan.trap
    assert storage_id(out) in plan.launches[0]["load"]
    assert storage_id(out) not in plan.launches[1]["load"]  # not trusted: the replay keeps its own bytes


def test_outputs_must_be_what_the_replay_left_in_their_buffers() -> None:
    out = poisoned(4)
    rec = record("k", ["x_ptr", "out_ptr", "N"], [X, out])
    plan = plan_replay([rec], (), INPUTS)
    view = describe_tensor(out)
    replayed = {storage_id(X): storage_bytes(X), storage_id(out): storage_bytes(X.mean(dim=1))}
    mean = X.mean(dim=1)
    assert check_outputs({"mean": mean}, [view], plan, replayed, 1e-6, 1e-6) is None
    # the replay left the buffer untouched (the kernel stores nothing): the returned values came from elsewhere
    untouched = {storage_id(X): storage_bytes(X), storage_id(out): storage_bytes(out)}
    finding = check_outputs({"mean": mean}, [view], plan, untouched, 1e-6, 1e-6)
    assert finding is not None and finding.trap == "not-fused"
    assert "`mean`" in finding.message and "k" in finding.message and "elements differ" in finding.message
    # a returned copy (e.g. .to(dtype)) of a replayed buffer is fine; of nothing replayed it is not
    assert (
        check_outputs({"mean": mean.double()}, [describe_tensor(mean.double())], plan, replayed, 1e-6, 1e-6)
        is None
    )
    assert (
        check_outputs({"mean": mean + 1}, [describe_tensor(mean + 1)], plan, replayed, 1e-6, 1e-6) is not None
    )


def test_a_malformed_replay_reply_is_tampering() -> None:
    finding = check_outputs({"mean": torch.zeros(4)}, [None], ReplayPlan(), {1: torch.zeros(4)}, 1e-6, 1e-6)
    assert finding is not None and finding.trap == "tampering"


def test_a_replay_that_races_is_no_sign_of_torch() -> None:
    """Replayed launches that give other values are `not-fused` only when they are deterministic: in a case that
    stores out of bounds the stray store races with its neighbour's program on a GPU (oob-write, the finding the
    guards already made); replays that disagree with each other are `nondeterministic`."""
    from grader import trap_ids
    from grader.evidence.observation import Finding
    from grader.judging.replay import explain_replay_mismatch, same_buffers

    mismatch = Finding(trap_ids.NOT_FUSED, "`out` is not what the wrapper's kernel launches computed: running the "
                       "recorded launches (k) again on the same inputs, with no wrapper code, gives other values.")
    assert explain_replay_mismatch(mismatch, writes_out_of_bounds=False, replays_agree=True) == mismatch
    raced = explain_replay_mismatch(mismatch, writes_out_of_bounds=True, replays_agree=True)
    assert raced.trap == trap_ids.OOB_WRITE and "races" in raced.message and "`out`" in raced.message
    moving = explain_replay_mismatch(mismatch, writes_out_of_bounds=False, replays_agree=False)
    assert moving.trap == trap_ids.NONDETERMINISTIC and "replayed twice" in moving.message
    other = Finding(trap_ids.TAMPERING, "altered")
    assert explain_replay_mismatch(other, writes_out_of_bounds=True, replays_agree=False) == other
    a = {0: torch.arange(8, dtype=torch.uint8)}
    assert same_buffers(a, {0: torch.arange(8, dtype=torch.uint8)})
    assert not same_buffers(a, {0: torch.arange(8, dtype=torch.uint8).flip(0)})
    assert not same_buffers(a, {1: torch.arange(8, dtype=torch.uint8)})
