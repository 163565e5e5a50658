"""DIR/batch.json, what every current result in DIR was graded with, and the state of one student's
result against it (current, outdated, an error, none)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
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
    write_json(path, manifest.to_dict())
    return manifest

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
