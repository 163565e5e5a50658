"""The trap catalog an assignment sees: the grader's generic traps plus the assignment's own."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from grader.authoring.spec_model import Assignment, TrapText
from grader.authoring.trap_library import redefines_generic_trap

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GENERIC_TRAPS_PATH = Path(__file__).with_name("generic_traps.toml")


@lru_cache(maxsize=1)
def generic_traps() -> Mapping[str, TrapText]:
    raw = tomllib.loads(GENERIC_TRAPS_PATH.read_text(encoding="utf-8"))
    return {tid: TrapText(id=tid, **fields) for tid, fields in raw.items()}


def trap_catalog(assignment: Assignment) -> dict[str, TrapText]:
    """Generic traps first, then the assignment's; an assignment may not redefine a generic id (the
    loader refuses it already; an Assignment made some other way is refused here)."""
    catalog = dict(generic_traps())
    for tid, text in assignment.traps.items():
        if tid in catalog:
            raise redefines_generic_trap(assignment.spec_path, tid)
        catalog[tid] = text
    return catalog


def trap_title(catalog: Mapping[str, TrapText], trap_id: str) -> str:
    text = catalog.get(trap_id)
    return text.title if text else trap_id
