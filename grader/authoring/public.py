"""The public form of an assignment spec: the one place that decides what of a spec a student may see.

`public_spec` (pure) turns a parsed assignment.toml into its public form: the public cases only, and no
reference solution (the layout keeps that in reference/<id>/, which the public form never points to).
Everything else stays: the contract (kernels, functions), the tolerances, the trap texts (a report shows
them when a case fails) and the [[performance]] cases (their shapes are the ones `grader list` shows).
Traps the spec takes from the course's trap library (`shared_traps`, the course folder's traps.toml) are
written into the public form as its own [traps.<id>] tables, so what ships needs no library beside it.
Comments do not survive the round trip, so a comment about a hidden case cannot ship either.

That form, written by `dump_toml`, is the only spec that leaves the course: the wheel
(setup.py's build step), the student bundle (grader.operations.student_bundle) and `grader check`
(grader.authoring.spec.load_public_assignment) all go through here.

This module imports nothing but the standard library (and tomli on Python 3.10): setup.py loads it by
file path inside setuptools' isolated build environment, where neither torch nor the grader is installed.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

PUBLIC = "public"
HEADER = ("# The public form of this assignment (grader/authoring/public.py): its public cases only, no "
          "reference solution.")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class PublicFormError(ValueError):
    """A value the TOML writer cannot express; the message names it."""


SHARED_TRAPS = "shared_traps"  # [assignment] key: ids of the course library's traps the assignment uses
COURSE_TRAPS = "traps.toml"  # the course's trap library: beside assignments/, in the course folder


def public_spec(raw: dict[str, Any], library: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pure: the parsed spec with its hidden cases removed and no reference solution named; the traps it
    takes from the course's trap `library` (parsed traps.toml) written in as its own. An id the library
    lacks stays in `shared_traps`, for the loader to report."""
    public = dict(raw)
    head = dict(raw.get("assignment", {}))
    head.pop("reference", None)  # older specs named the reference file; the public form names none
    shared = head.pop(SHARED_TRAPS, None)
    if isinstance(shared, list):
        traps = dict(raw.get("traps", {}))
        missing = [tid for tid in shared if not (library and tid in library)]
        for tid in shared:
            if library and tid in library and tid not in traps:
                traps[tid] = dict(library[tid])
        if traps:
            public["traps"] = traps
        if missing:
            head[SHARED_TRAPS] = missing
    elif shared is not None:
        head[SHARED_TRAPS] = shared
    public["assignment"] = head
    public["cases"] = [case for case in raw.get("cases", []) if case.get("visibility") == PUBLIC]
    return public


def hidden_case_ids(raw: dict[str, Any]) -> list[str]:
    """The ids of the spec's hidden cases (what must appear in no public artefact; the tests look)."""
    return [str(case.get("id")) for case in raw.get("cases", []) if case.get("visibility") != PUBLIC]


def public_toml(spec_text: str, library_text: str | None = None) -> str:
    """The public form of an assignment.toml's text, as TOML text; `library_text`: the course's traps.toml."""
    library = tomllib.loads(library_text) if library_text is not None else None
    return dump_toml(public_spec(tomllib.loads(spec_text), library))


# ------------------------------------------------------------------------------------------- TOML writer


def dump_toml(data: dict[str, Any]) -> str:
    """TOML text for a parsed spec: tables as [sections], [[cases]] as arrays of tables, nested values inline.

    Enough for assignment.toml's shapes (strings, numbers, booleans, lists, tables); tomllib reads it back
    to the same dict (the tests check)."""
    lines = [HEADER]
    _dump_table(lines, [], data)
    return "\n".join(lines) + "\n"


def _dump_table(lines: list[str], path: list[str], table: dict[str, Any]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)}
    if path and (scalars or not table):
        lines += ["", f"[{'.'.join(_key(p) for p in path)}]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in scalars.items()]
    for key, value in table.items():
        if isinstance(value, dict):
            _dump_table(lines, [*path, key], value)
    for key, value in table.items():
        if _is_table_array(value):
            for entry in value:
                lines += ["", f"[[{'.'.join(_key(p) for p in [*path, key])}]]"]
                lines += [f"{_key(k)} = {_value(v)}" for k, v in entry.items()]


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise PublicFormError(f"cannot write {type(value).__name__} value {value!r} as TOML")
