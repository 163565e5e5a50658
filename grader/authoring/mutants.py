"""An assignment's mutant corpus: student mistakes as patches of the reference, and a few whole files.

Everything lives in the assignment's reference folder, `reference/<id>/` of the course (course staff
only: it never ships and workers cannot see it), beside the reference solution, and is found by name:

* `mutants.toml`: one `[[mutant]]` table per mistake that is a few local edits of the reference::

      [[mutant]]
      id = "eps_outside_sqrt"                # names the mutant, and its file when written out
      traps = ["eps-outside-sqrt"]           # what the grader must name; [] for a correct variant
      traps_cuda = ["compile-error"]         # optional: where one backend diagnoses differently
      performance_traps = ["re-reading"]     # optional: performance traps it must get where they are
                                             # predicted (the interpreter); informational, no points
      mistake = "eps added after the square root: 1 / (sqrt(var) + eps)"
      edits = [{ find = "tl.sqrt(var + eps)", replace = "(tl.sqrt(var) + eps)" }]

  Edits apply in order, each to the text the one before produced. `find` must occur exactly `count`
  times (default 1) and every occurrence is replaced: when the reference changes under a patch, the
  patch fails loudly (`MutantError`) instead of quietly grading something else.
* `mutants/*.py`: whole-file mutants, where the mistake is the shape of the file (a definition
  deleted, every wrapper rewritten) and a patch would have to quote whole definitions.
* `variants/*.py`: whole-file correct solutions written in genuinely different styles.

A whole file starts with comment lines: `# expect: trap, trap` (or `# expect: none`), optionally
`# expect-<backend>: ...`, `# performance: trap, trap` (performance traps it must get where they are
predicted; a slow but correct variant may have them), `# performance-<backend>: trap, trap` (those a timed,
profiled grade on that backend must measure; none where absent), and `# mistake: ...` (mutants) or
`# variant: ...` (variants), whose text may continue on the comment lines after it.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import trap_ids
from grader.atomic import write_text
from grader.authoring.spec import BACKENDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

PATCHES = "mutants.toml"  # single-mistake mutants as edits of the reference
WHOLE_MUTANTS = "mutants"  # whole-file mutants: structural mistakes (syntax, missing symbol, torch, hang)
VARIANTS = "variants"  # whole-file correct solutions in other styles
CORPUS_NAMES = (PATCHES, WHOLE_MUTANTS, VARIANTS)  # what of reference/<id>/ is the corpus
KINDS = ("reference", "patch", "mutant", "variant")
RESERVED_ID = "reference"  # the reference's own id in a corpus

_ID = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_EXPECT = re.compile(r"^#\s*expect(?:-(\w+))?:\s*(.+)$")
_DESCRIBE = re.compile(r"^#\s*(mistake|variant):\s*(.*)$")
_PERFORMANCE = re.compile(r"^#\s*performance(?:-(\w+))?:\s*(.+)$")
_KEYED_COMMENT = re.compile(r"^#\s*[\w-]+:")
_MUTANT_KEYS = ({"id", "traps", "mistake", "edits", "performance_traps"} | {f"traps_{b}" for b in BACKENDS}
                | {f"performance_traps_{b}" for b in BACKENDS})
_EDIT_KEYS = {"find", "replace", "count"}


class MutantError(Exception):
    """A mutant that cannot be loaded or applied, located by file and mutant id."""

    def __init__(self, origin: Path | str, mutant_id: str, problem: str) -> None:
        super().__init__(origin, mutant_id, problem)
        self.origin = Path(origin)
        self.mutant_id = mutant_id
        self.problem = problem

    def __str__(self) -> str:
        where = f"{self.origin}: mutant {self.mutant_id!r}" if self.mutant_id else str(self.origin)
        return f"{where}: {self.problem}"


@dataclass(frozen=True)
class Edit:
    """Replace every occurrence of `find` by `replace`; `find` must occur exactly `count` times."""

    find: str
    replace: str
    count: int = 1

    def describe(self) -> str:
        lines = self.find.count("\n") + (not self.find.endswith("\n"))
        shown = self.find if len(self.find) <= 80 else self.find[:77] + "..."
        return f"find {shown!r}" + (f" ({lines} lines)" if lines > 1 else "")


@dataclass(frozen=True)
class Mutant:
    """One submission of the corpus: a patch of the reference, or a whole file (`text`)."""

    id: str
    kind: str  # one of KINDS
    traps: tuple[str, ...]  # expected traps; () for a correct submission (full marks, nothing named)
    mistake: str  # the student's mistake in one line (for a variant: its style)
    origin: Path  # mutants.toml, or the whole file
    edits: tuple[Edit, ...] = ()
    overrides: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (backend, traps) where a backend differs
    text: str | None = None  # a whole file's text
    # performance traps the grader must name where it predicts them (grader/judging/performance_traps.py):
    # informational, so a correct variant may have them too
    performance_traps: tuple[str, ...] = ()
    # (backend, traps) measured where the backend times and profiles (cuda: grader/judging/gpu_performance_traps.py);
    # a backend not listed must name none there
    performance_measured: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def measured(self, backend: str) -> tuple[str, ...]:
        """The performance traps a timed, profiled grade on `backend` must name."""
        return dict(self.performance_measured).get(backend, ())

    def expected(self, backend: str) -> tuple[str, ...]:
        """The traps the grader must name on `backend`."""
        return dict(self.overrides).get(backend, self.traps)

    def source(self, reference_text: str, reference_name: str = "the reference") -> str:
        """The submission's text: a whole file as it is, a patch applied to `reference_text`."""
        if self.text is not None:
            return self.text
        text = reference_text
        for number, edit in enumerate(self.edits, 1):
            found = text.count(edit.find)
            if found != edit.count:
                raise MutantError(
                    self.origin, self.id,
                    f"edit {number} of {len(self.edits)} ({edit.describe()}): occurs {found} "
                    f"time{'s' * (found != 1)} in {reference_name}, count = {edit.count}",
                )
            text = text.replace(edit.find, edit.replace)
        if self.edits and text == reference_text:
            raise MutantError(self.origin, self.id, f"the edits leave {reference_name} unchanged")
        return text

    def diff(self, reference_text: str, reference_name: str = "reference.py", context: int = 0) -> str:
        """Unified diff of the submission against the reference: a patch's bug reads in three lines."""
        before = reference_text.splitlines(keepends=True)
        after = self.source(reference_text, reference_name).splitlines(keepends=True)
        lines = difflib.unified_diff(before, after, reference_name, f"{self.id} ({self.kind})", n=context)
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def write_mutant(mutant: Mutant, reference_text: str, folder: Path, filename: str,
                 reference_name: str = "the reference") -> Path:
    """Write the mutant as the submission file `folder/filename` (atomically); return its path."""
    if Path(filename).name != filename or not filename.endswith(".py"):
        raise ValueError(f"a submission file name is a plain .py name, got {filename!r}")
    path = Path(folder) / filename
    write_text(path, mutant.source(reference_text, reference_name))
    return path


def load_mutants(reference_dir: Path | None) -> tuple[Mutant, ...]:
    """Every mutant and variant in an assignment's reference folder (`Assignment.reference_dir`; none
    without one), checked as it loads: patches in mutants.toml order, then whole-file mutants, then
    variants (each sorted by id)."""
    if reference_dir is None:
        return ()
    folder = Path(reference_dir)
    found = list(_load_patches(folder / PATCHES)) if (folder / PATCHES).is_file() else []
    for kind, sub in (("mutant", WHOLE_MUTANTS), ("variant", VARIANTS)):
        found.extend(_load_whole_file(path, kind) for path in sorted((folder / sub).glob("*.py")))
    seen: dict[str, Path] = {}
    for mutant in found:
        if mutant.id == RESERVED_ID:
            raise MutantError(mutant.origin, mutant.id, "the id names the reference solution itself; pick another")
        if mutant.id in seen:
            raise MutantError(mutant.origin, mutant.id, f"the id is taken already, by {seen[mutant.id]}")
        seen[mutant.id] = mutant.origin
    return tuple(found)


# ------------------------------------------------------------------------------------ whole-file headers


@dataclass(frozen=True)
class Header:
    """What a whole file's leading comment lines say about it."""

    traps: tuple[str, ...] | None  # `# expect:`; None where there is no such line
    overrides: Mapping[str, tuple[str, ...]]  # `# expect-<backend>:`
    description: str  # `# mistake:` or `# variant:`, continuation lines joined
    performance_traps: tuple[str, ...] = ()  # `# performance: ...`
    performance_measured: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # `# performance-<backend>:`

    def expected(self, backend: str) -> tuple[str, ...] | None:
        return self.overrides.get(backend, self.traps)


def parse_header(lines: Iterable[str]) -> Header:
    """Read the leading comment lines (blank lines allowed); stop at the first line of code."""
    traps: tuple[str, ...] | None = None
    overrides: dict[str, tuple[str, ...]] = {}
    description: list[str] = []
    performance: tuple[str, ...] = ()
    measured: dict[str, tuple[str, ...]] = {}
    continuing = False  # the line before was the description or its continuation
    for raw in lines:
        line = raw.strip()
        if line and not raw.startswith("#"):
            break
        expect, describe, slow = _EXPECT.match(line), _DESCRIBE.match(line), _PERFORMANCE.match(line)
        if slow:
            found = _listed(slow.group(2))
            if slow.group(1) is None:
                performance = found
            else:
                measured[slow.group(1)] = found
            continuing = False
        elif expect:
            found = _listed(expect.group(2))
            if expect.group(1) is None:
                traps = found
            else:
                overrides[expect.group(1)] = found
            continuing = False
        elif describe and not description:
            description.append(describe.group(2).strip())
            continuing = True
        elif continuing and line.startswith("#") and not _KEYED_COMMENT.match(line):
            description.append(line.lstrip("#").strip())
        else:
            continuing = False
    return Header(traps, overrides, " ".join(d for d in description if d), performance, measured)


def _listed(value: str) -> tuple[str, ...]:
    """A header line's traps: `none`, or names separated by commas."""
    value = value.strip()
    return () if value == "none" else tuple(t.strip() for t in value.split(",") if t.strip())


def _load_whole_file(path: Path, kind: str) -> Mutant:
    text = path.read_text(encoding="utf-8")
    header = parse_header(text.splitlines())
    mutant_id = path.stem
    if not _ID.match(mutant_id):
        raise MutantError(path, mutant_id, "a file name must be lower-case letters, digits and _ (it is the id)")
    if header.traps is None:
        raise MutantError(path, mutant_id, "no '# expect: ...' line among the leading comments")
    if not header.description:
        label = "# variant:" if kind == "variant" else "# mistake:"
        raise MutantError(path, mutant_id, f"no '{label} ...' line among the leading comments")
    unknown = set(header.overrides) - set(BACKENDS)
    if unknown:
        raise MutantError(path, mutant_id, f"'# expect-{sorted(unknown)[0]}:' names no backend "
                                           f"(known: {', '.join(BACKENDS)})")
    if kind == "variant" and (header.traps or any(header.overrides.values())):
        raise MutantError(path, mutant_id, "a variant is a correct solution: '# expect: none'")
    if set(header.performance_measured) - set(BACKENDS):
        raise MutantError(path, mutant_id, f"'# performance-{sorted(set(header.performance_measured))[0]}:' names "
                                           f"no backend (known: {', '.join(BACKENDS)})")
    overrides = tuple(sorted(header.overrides.items()))
    for traps in (header.performance_traps, *header.performance_measured.values()):
        _check_performance(traps, lambda problem: MutantError(path, mutant_id, problem))
    measured = tuple((b, header.performance_measured[b]) for b in BACKENDS if b in header.performance_measured)
    return Mutant(mutant_id, kind, header.traps, header.description, path, overrides=overrides, text=text,
                  performance_traps=header.performance_traps, performance_measured=measured)


# ------------------------------------------------------------------------------------ mutants.toml


def _load_patches(path: Path) -> Iterable[Mutant]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise MutantError(path, "", f"not valid TOML: {exc}") from None
    if set(raw) - {"mutant"}:
        raise MutantError(path, "", f"unknown top-level key(s) {sorted(set(raw) - {'mutant'})}; "
                                    "each mutant is a [[mutant]] table")
    tables = raw.get("mutant", [])
    if not isinstance(tables, list):
        raise MutantError(path, "", "'mutant' must be an array of tables: [[mutant]]")
    for number, table in enumerate(tables, 1):
        yield _patch(path, number, table)


def _patch(path: Path, number: int, table: Mapping[str, Any]) -> Mutant:
    mutant_id = table.get("id")
    if not isinstance(mutant_id, str) or not _ID.match(mutant_id):
        raise MutantError(path, "", f"[[mutant]] number {number}: 'id' must be lower-case letters, digits "
                                    f"and _, got {mutant_id!r}")

    def fail(problem: str) -> MutantError:
        return MutantError(path, mutant_id, problem)

    unknown = set(table) - _MUTANT_KEYS
    if unknown:
        raise fail(f"unknown key(s) {sorted(unknown)} (known: {', '.join(sorted(_MUTANT_KEYS))})")
    mistake = table.get("mistake")
    if not isinstance(mistake, str) or not mistake.strip() or "\n" in mistake.strip():
        raise fail("'mistake' must be one non-empty line: the mistake in words a student understands")
    traps = _traps(table, "traps", fail)
    if traps is None:
        raise fail("'traps' is required ([] for a correct variant)")
    overrides = tuple((b, t) for b in BACKENDS if (t := _traps(table, f"traps_{b}", fail)) is not None)
    edits = table.get("edits")
    if not isinstance(edits, list) or not edits:
        raise fail("'edits' must be a non-empty list of { find = ..., replace = ..., count = N }")
    performance = _traps(table, "performance_traps", fail) or ()
    _check_performance(performance, fail)
    measured = tuple((b, t) for b in BACKENDS if (t := _traps(table, f"performance_traps_{b}", fail)) is not None)
    for _, found in measured:
        _check_performance(found, fail)
    return Mutant(mutant_id, "patch", traps, mistake.strip(), path,
                  edits=tuple(_edit(e, i, fail) for i, e in enumerate(edits, 1)), overrides=overrides,
                  performance_traps=performance, performance_measured=measured)


def _check_performance(traps: tuple[str, ...], fail: Any) -> None:
    unknown = [t for t in traps if t not in trap_ids.PERFORMANCE]
    if unknown:
        known = ", ".join(sorted(trap_ids.PERFORMANCE))
        raise fail(f"performance trap {unknown[0]!r} is none of the grader's ({known})")


def _traps(table: Mapping[str, Any], key: str, fail: Any) -> tuple[str, ...] | None:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(t, str) and t.strip() for t in value):
        raise fail(f"'{key}' must be a list of trap ids")
    if len(set(value)) != len(value):
        raise fail(f"'{key}' names a trap twice")
    return tuple(value)


def _edit(raw: Any, number: int, fail: Any) -> Edit:
    where = f"edit {number}"
    if not isinstance(raw, dict):
        raise fail(f"{where} must be a table {{ find = ..., replace = ..., count = N }}")
    unknown = set(raw) - _EDIT_KEYS
    if unknown:
        raise fail(f"{where}: unknown key(s) {sorted(unknown)} (known: count, find, replace)")
    find, replace, count = raw.get("find"), raw.get("replace"), raw.get("count", 1)
    if not isinstance(find, str) or not find:
        raise fail(f"{where}: 'find' must be a non-empty string")
    if not isinstance(replace, str):
        raise fail(f"{where}: 'replace' must be a string")
    if find == replace:
        raise fail(f"{where}: 'replace' equals 'find'")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise fail(f"{where}: 'count' must be a whole number >= 1, got {count!r}")
    return Edit(find, replace, count)
