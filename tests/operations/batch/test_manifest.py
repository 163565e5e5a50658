"""grader/operations/batch/manifest.py: batch.json keeps its seed, backend and generation until --force, and
what canvas.csv depends on (column, roster, missing score) for every rerun; each result's state against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.operations.batch import (
    BatchError,
    settle_manifest,
)
from grader.operations.batch.manifest import (
    CanvasSettings,
    keep_canvas_settings,
    kept_canvas_settings,
    settle_canvas_settings,
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


def test_canvas_settings_given_win_and_are_said_kept_ones_fill_in(tmp_path: Path) -> None:
    export = tmp_path / "export.csv"
    kept = CanvasSettings("Fused layers (12345)", export, 0.0)
    assert settle_canvas_settings(kept, CanvasSettings(), "Fused layers") == (kept, [])  # a rerun without options
    same = CanvasSettings("Fused layers (12345)", tmp_path / "." / "export.csv", 0.0)
    assert settle_canvas_settings(kept, same, "Fused layers") == (kept, [])  # the same values: nothing to say
    other = tmp_path / "export-2.csv"
    chosen, said = settle_canvas_settings(kept, CanvasSettings("Fused layers (999)", other, 1.5), "Fused layers")
    assert chosen == CanvasSettings("Fused layers (999)", other, 1.5)
    assert said == ["canvas.csv's column: 'Fused layers (999)' (this folder's earlier runs used "
                    "'Fused layers (12345)')",
                    f"the roster: {other} (this folder's earlier runs used {export})",
                    "--missing-score: 1.5 (this folder's earlier runs used 0)"]
    # a first run: the column is the title's, kept as it is for the reruns (a renamed title renames nothing)
    first, said = settle_canvas_settings(CanvasSettings(), CanvasSettings(roster=Path("export.csv")), "Fused layers")
    assert first == CanvasSettings("Fused layers", Path("export.csv").resolve(), None) and said == []


def test_canvas_settings_are_kept_in_batch_json_beside_the_manifest(tmp_path: Path) -> None:
    assert kept_canvas_settings(tmp_path) == CanvasSettings()  # no batch.json yet
    first = settle_manifest(tmp_path, "fused_layers", "interpreter", None, False, lambda: 77)
    settings = CanvasSettings("Fused layers (12345)", tmp_path / "export.csv", 0.0)
    keep_canvas_settings(tmp_path, settings)
    assert kept_canvas_settings(tmp_path) == settings
    assert settle_manifest(tmp_path, "fused_layers", "interpreter", None, False, lambda: 1) == first
    forced = settle_manifest(tmp_path, "fused_layers", "interpreter", None, True, lambda: 1)  # a new generation
    assert forced.generation != first.generation and kept_canvas_settings(tmp_path) == settings
    data = json.loads((tmp_path / "batch.json").read_text())
    assert data["canvas"] == {"column": "Fused layers (12345)", "roster": str(tmp_path / "export.csv"),
                              "missing_score": 0.0}
