"""DIR/batch.json: what every current result in DIR was graded with, and what canvas.csv depends on (kept so a
rerun imports the same way); the state of one student's result against it (current, outdated, an error, none)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from grader.atomic import write_json
from grader.operations.batch.folder import BATCH_FORMAT_VERSION, ERROR, MANIFEST, RECORD, BatchError, read_json
from grader.results import GradeResult


@dataclass(frozen=True)
class Manifest:
    """DIR/batch.json: what every current result in DIR was graded with."""

    assignment: str
    backend: str
    seed: int
    generation: str  # changes with --force, a new seed or backend: results of older generations are regraded

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": BATCH_FORMAT_VERSION, "assignment": self.assignment,
                "backend": self.backend, "seed": self.seed, "generation": self.generation}

def settle_manifest(out: Path, assignment: str, backend: str, seed: int | None, force: bool,
                    new_seed: Callable[[], int]) -> Manifest:
    """The manifest for this run: the folder's own, or (first run, --force) a new generation. A seed or
    backend other than the folder's needs --force: one gradebook never mixes inputs or backends."""
    path = out / MANIFEST
    old = None
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            old = Manifest(data["assignment"], data["backend"], int(data["seed"]), data["generation"])
        except (ValueError, KeyError, TypeError):
            raise BatchError(f"{path} is damaged; move it away (or use a new --out) to start over") from None
    if old is not None:
        if old.assignment != assignment:
            raise BatchError(f"{out} holds a batch of assignment {old.assignment!r}, not {assignment!r}; "
                             "use another --out")
        if not force and seed is not None and seed != old.seed:
            raise BatchError(f"{out} was graded with seed {old.seed}; pass --force to regrade everyone with "
                             f"seed {seed}, or leave --seed out to continue")
        if not force and backend != old.backend:
            raise BatchError(f"{out} was graded on the {old.backend} backend, this run would use {backend}; "
                             f"pass --force to regrade everyone on {backend}, or --backend {old.backend}")
        if not force:
            return old
    chosen = seed if seed is not None else (old.seed if old is not None else new_seed())
    manifest = Manifest(assignment, backend, chosen, uuid.uuid4().hex)
    write_json(path, {**(read_json(path) or {}), **manifest.to_dict()})  # what else batch.json keeps stays
    return manifest


@dataclass(frozen=True)
class CanvasSettings:
    """What an import of canvas.csv depends on beyond the grades, kept in DIR/batch.json (`canvas`): the Canvas
    column (`--canvas-column`; Canvas makes a new column for a new name), the roster (`--roster`, kept as the
    file's absolute path and read again on every run) and the score for a student without a gradable file
    (`--missing-score`). None: not given (on the command line), not kept (in DIR)."""

    column: str | None = None
    roster: Path | None = None
    missing_score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "roster": str(self.roster) if self.roster is not None else None,
                "missing_score": self.missing_score}


CANVAS_SETTINGS = "canvas"  # batch.json's key
_SAID = {"column": "canvas.csv's column", "roster": "the roster", "missing_score": "--missing-score"}


def kept_canvas_settings(out: Path) -> CanvasSettings:
    """The settings an earlier run kept in DIR/batch.json (all None when there are none)."""
    data = (read_json(out / MANIFEST) or {}).get(CANVAS_SETTINGS)
    if not isinstance(data, dict):
        return CanvasSettings()
    score = data.get("missing_score")
    return CanvasSettings(data.get("column") if isinstance(data.get("column"), str) else None,
                          Path(data["roster"]) if isinstance(data.get("roster"), str) else None,
                          float(score) if isinstance(score, (int, float)) else None)


def settle_canvas_settings(kept: CanvasSettings, given: CanvasSettings,
                           title: str) -> tuple[CanvasSettings, list[str]]:
    """Pure: this run's settings (what is given, else what DIR kept; the column defaults to the assignment's
    title, so a rerun never renames it), and one line for each given value that replaces a kept one."""
    given = replace(given, roster=given.roster.resolve() if given.roster is not None else None)
    chosen = CanvasSettings(*(getattr(given, f.name) if getattr(given, f.name) is not None
                              else getattr(kept, f.name) for f in fields(CanvasSettings)))
    chosen = replace(chosen, column=chosen.column or title)
    said = []
    for f in fields(CanvasSettings):
        old, new = getattr(kept, f.name), getattr(given, f.name)
        if old is not None and new is not None and old != new:
            said.append(f"{_SAID[f.name]}: {_shown(new)} (this folder's earlier runs used {_shown(old)})")
    return chosen, said


def keep_canvas_settings(out: Path, settings: CanvasSettings) -> None:
    """Write `settings` into DIR/batch.json (written by settle_manifest first), keeping everything else in it."""
    path = out / MANIFEST
    write_json(path, {**(read_json(path) or {}), CANVAS_SETTINGS: settings.to_dict()})


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else str(value)

def result_state(folder: Path, manifest: Manifest,
                 sha256: str) -> tuple[str, GradeResult | None, dict[str, Any]]:
    """("current" | "outdated" | "error" | "none", the result if any, the batch record if any)."""
    record = read_json(folder / RECORD) or {}
    if (folder / "results.json").is_file():
        grade = read_json(folder / "grade.json")
        if grade is not None:
            try:
                result = GradeResult.from_dict(grade)
            except (KeyError, TypeError, ValueError):
                result = None
            if result is not None:
                current = (record.get("generation") == manifest.generation
                           and record.get("submission_sha256") == sha256)
                return ("current" if current else "outdated"), result, record
    if (folder / ERROR).is_file():
        return "error", None, {**record, **(read_json(folder / ERROR) or {})}
    return "none", None, record
