"""A submission's kernels as data (`KernelBundle`): what a kernel host builds from, sent in protocol's `LoadKernels`.

Below grader.running.protocol (standard library only: both sides import it, the worker before it confines imports).
grader.running.bundle makes one from the grader's copy of the file; grader.running.worker.kernel_host builds from it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KernelBundle:
    """A submission's kernels as data, for a worker that runs none of its Python (grader.running.worker.kernel_host):
    `source` holds each kernel's `def` at its own line (cut by the grader from its copy of the file, decorators left
    out), `defs` each kernel's name, line and JIT options, `symbols` each module-level name that holds a kernel (the
    def under it, the meta-parameters autotune/heuristics choose, whether it is wrapped), `values` every module-level
    value as the submission's worker encoded it, `digest` the SHA-256 of the rest (kernel_bundle_digest)."""

    filename: str
    source: str
    defs: tuple[Mapping[str, Any], ...] = ()
    symbols: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    values: Mapping[str, Any] = field(default_factory=dict)
    constexpr_annotated: tuple[str, ...] = ()
    future_annotations: bool = False
    digest: str = ""


def kernel_bundle_digest(bundle: KernelBundle) -> str:
    """SHA-256 of a bundle's content (every field but the digest), as canonical JSON."""
    content = {f.name: _plain(getattr(bundle, f.name)) for f in dataclasses.fields(bundle) if f.name != "digest"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=repr).encode()).hexdigest()


def _plain(value: Any) -> Any:
    """Tuples and lists as lists, mappings as dicts, all the way down (as the protocol's codec writes them)."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value
