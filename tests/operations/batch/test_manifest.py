"""grader/operations/batch/manifest.py: batch.json keeps its seed, backend and generation until --force;
each result's state against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.operations.batch import (
    BatchError,
    settle_manifest,
)


def test_manifest_keeps_seed_and_generation_until_forced(tmp_path: Path) -> None:
    first = settle_manifest(tmp_path, "fused_layers", "interpreter", None, False, lambda: 77)
    assert (first.seed, first.backend) == (77, "interpreter")
    assert settle_manifest(tmp_path, "fused_layers", "interpreter", None, False, lambda: 1) == first
    assert settle_manifest(tmp_path, "fused_layers", "interpreter", 77, False, lambda: 1) == first
    with pytest.raises(BatchError, match="graded with seed 77; pass --force"):
        settle_manifest(tmp_path, "fused_layers", "interpreter", 5, False, lambda: 1)
    with pytest.raises(BatchError, match="interpreter backend, this run would use cuda"):
        settle_manifest(tmp_path, "fused_layers", "cuda", None, False, lambda: 1)
    with pytest.raises(BatchError, match="not 'softmax'"):
        settle_manifest(tmp_path, "softmax", "interpreter", None, False, lambda: 1)
    forced = settle_manifest(tmp_path, "fused_layers", "interpreter", None, True, lambda: 1)
    assert forced.seed == 77 and forced.generation != first.generation
    reseeded = settle_manifest(tmp_path, "fused_layers", "interpreter", 5, True, lambda: 1)
    assert reseeded.seed == 5
    assert json.loads((tmp_path / "batch.json").read_text())["generation"] == reseeded.generation
