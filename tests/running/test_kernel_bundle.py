"""grader/running/kernel_bundle.py: a bundle's digest covers every field but itself, the same whichever container types
the two sides built it from (the grader's lists and dicts, the wire's tuples and decoded mappings)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

from grader.running import protocol
from grader.running.kernel_bundle import KernelBundle, kernel_bundle_digest

BUNDLE = KernelBundle(filename="s.py", source="def k(x):\n    pass\n",
                      defs=({"name": "k", "line": 1, "options": {"num_warps": 4}},),
                      symbols={"k": {"def": "k", "autotuned": ["BLOCK"]}}, values={"N": {"int": 3}},
                      constexpr_annotated=("BLOCK",))


def test_the_digest_covers_every_field_but_itself() -> None:
    digest = kernel_bundle_digest(BUNDLE)
    assert len(digest) == 64 and kernel_bundle_digest(dataclasses.replace(BUNDLE, digest=digest)) == digest
    changes: tuple[tuple[str, Any], ...] = (("filename", "t.py"), ("source", "def k(x):\n    return\n"), ("defs", ()),
                        ("symbols", {}), ("values", {"N": {"int": 4}}), ("constexpr_annotated", ()),
                        ("future_annotations", True))
    for name, other in changes:
        assert kernel_bundle_digest(dataclasses.replace(BUNDLE, **{name: other})) != digest, name


def test_the_digest_does_not_depend_on_container_types() -> None:
    symbol = MappingProxyType({"def": "k", "autotuned": ("BLOCK",)})
    rebuilt = dataclasses.replace(BUNDLE, defs=[dict(d) for d in BUNDLE.defs],  # type: ignore[arg-type]
                                  symbols=MappingProxyType({"k": symbol}))
    assert kernel_bundle_digest(rebuilt) == kernel_bundle_digest(BUNDLE)
    sent = protocol.LoadKernels(bundle=dataclasses.replace(BUNDLE, digest=kernel_bundle_digest(BUNDLE)), names=("k",))
    received = protocol.decode_request(protocol.encode(sent))
    assert isinstance(received, protocol.LoadKernels)
    assert kernel_bundle_digest(received.bundle) == received.bundle.digest  # what the kernel host checks
