"""What the grader observed of one case: raw facts, before any judgement (grader.judging.judge reads them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.evidence.guard_bits import GuardFinding


@dataclass(frozen=True)
class Finding:
    """A trap some check named, with the sentence that explains it to the student."""

    trap: str
    message: str


@dataclass(frozen=True)
class Observation:
    trap: str | None = None  # the trap that ended the case early (crash, timeout, missing-symbol...)
    message: str = ""
    at_import: bool = False  # `trap` happened while the file was imported: the case itself never ran
    outputs: Mapping[str, torch.Tensor] = field(default_factory=dict)
    guard_findings: tuple[GuardFinding, ...] = ()
    unwritten: Mapping[str, torch.Tensor] = field(default_factory=dict)
    launches: tuple[Mapping[str, Any], ...] | None = None  # None: the grader launched the kernel itself
    torch_ops: Mapping[str, int] = field(default_factory=dict)
    output_tail: str = ""
    elapsed_s: float = 0.0
    block_meta: Mapping[str, int] = field(default_factory=dict)
    row_strides: Mapping[str, int] = field(default_factory=dict)  # input name -> row stride as placed
    strides: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # input name -> its view's strides
    # Output positions whose NaN turned finite when the input guards held a finite value: values read
    # from outside the input tensors (filled by the battery's probe run).
    guard_reads: Mapping[str, torch.Tensor] = field(default_factory=dict)
    # Outputs whose bits differed when the identical case was run a second time.
    nondeterministic: tuple[str, ...] = ()
    # Wrapper cases: the storages the grader sent, where each returned tensor lives in the worker, and
    # what replaying the recorded launches in a fresh worker found (grader/judging/replay.py).
    sent_storages: tuple[torch.Tensor, ...] = ()
    result_views: tuple[Any, ...] = ()
    replay_finding: Finding | None = None
    # Kernel cases run again under compute-sanitizer memcheck (`--sanitize`): what it reported.
    sanitizer_findings: tuple[Finding, ...] = ()
    # Interpreter: the first tl.multiple_of / tl.max_contiguous promise the values broke, as the worker
    # reported it (grader/running/worker/hint_check.py; checked in grader/judging/false_hints.py).
    false_hint: Mapping[str, Any] | None = None
    # A GPU memory fault (illegal or misaligned address) named by grader/judging/faults.py: the traps it was
    # named besides `failure`, each with its sentence, and plain data for the case's evidence (`gpu_fault`).
    fault_findings: tuple[Finding, ...] = ()
    fault: Mapping[str, Any] | None = None
    # Interpreter: each launch's loads and stores as counted lane by lane (grader/running/worker/traffic.py),
    # the evidence of the performance traps (grader/judging/performance_traps.py). None: not counted.
    traffic: tuple[Mapping[str, Any], ...] | None = None
