"""The generic trap ids: grader/trap_ids.py and grader/authoring/generic_traps.toml name the same set.
(That an assignment cannot redefine one is in tests/authoring/test_trap_library.py and test_catalog.py.)"""

from __future__ import annotations

import sys

from grader import trap_ids
from grader.authoring.catalog import GENERIC_TRAPS_PATH

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_registry_equals_the_generic_traps_file() -> None:
    in_file = set(tomllib.loads(GENERIC_TRAPS_PATH.read_text(encoding="utf-8")))
    constants = {v for k, v in vars(trap_ids).items() if k.isupper() and isinstance(v, str)}
    assert trap_ids.GENERIC == in_file == constants
