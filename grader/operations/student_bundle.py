"""`grader student-bundle`: the zip a course hands its students for one assignment.

Layout (one folder named after the assignment, so unzipping never spills files):

    <id>/<submission_file>, <id>/README.md   the template: the starting file and the assignment text
    <id>/assignments/<id>/assignment.toml    the public spec: the public cases only
    <id>/assignments/<id>/oracles.py         the oracle module, which `grader check` needs

so a student with the grader installed runs, inside <id>/,

    grader check <submission_file> --assignments assignments

and sees the report `grader check` shows with the full assignment folder (same public cases, same
oracles, same traps).

What is secret and stays out: the hidden cases, the reference solution (the public spec names none, so a
performance case is timed against torch only), the mutant corpus (mutants.toml, mutants/) and the
variants (correct solutions in other styles). What a student may see: the public cases (`grader check`
shows them anyway), the trap texts (a report shows them when a case fails) and the oracle module: it
computes expected outputs with torch.nn modules and predicts each trap's output, which tells no more
than the assignment text and the trap texts do. An assignment whose oracles.py holds more (a solution
written in torch, say) should not be bundled for students.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from grader.authoring.spec import TEMPLATE_DIR, Assignment

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed: the same assignment gives the same zip, byte for byte
ASSIGNMENTS_DIR = "assignments"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class StudentBundleError(Exception):
    """A problem building the student bundle; the message is for the course staff."""


# ------------------------------------------------------------------------------------------- the public spec


def public_spec(raw: dict[str, Any]) -> dict[str, Any]:
    """Pure: the parsed assignment.toml without its hidden cases and without a reference solution.

    [[performance]] cases stay (their shapes are the ones `grader list` shows; `grader check` reports them
    as not measured off CUDA, as it does with the full spec); with `reference = ""` a student's CUDA run
    times them against torch only."""
    public = dict(raw)
    public["assignment"] = {**raw.get("assignment", {}), "reference": ""}
    public["cases"] = [case for case in raw.get("cases", []) if case.get("visibility") == "public"]
    return public


def dump_toml(data: dict[str, Any]) -> str:
    """TOML text for a parsed spec: tables as [sections], [[cases]] as arrays of tables, nested values inline.

    Enough for assignment.toml's shapes (strings, numbers, booleans, lists, tables); tomllib reads it back
    to the same dict (the tests check)."""
    lines = ["# Public part of this assignment (written by `grader student-bundle`): the public cases only."]
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
    raise StudentBundleError(f"cannot write {type(value).__name__} value {value!r} as TOML")


# ------------------------------------------------------------------------------------------- the zip


def student_files(assignment: Assignment) -> dict[str, bytes]:
    """Every file of the student zip: name -> bytes."""
    template = assignment.root / TEMPLATE_DIR
    if not (template / assignment.submission_file).is_file():
        raise StudentBundleError(f"{template / assignment.submission_file} is missing: the student bundle "
                                 "starts from the template")
    top = assignment.id
    files: dict[str, bytes] = {}
    for path in sorted(p for p in template.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        files[f"{top}/{path.relative_to(template).as_posix()}"] = path.read_bytes()
    raw = tomllib.loads(assignment.spec_path.read_text(encoding="utf-8"))
    spec_dir = f"{top}/{ASSIGNMENTS_DIR}/{assignment.id}"
    files[f"{spec_dir}/{assignment.spec_path.name}"] = dump_toml(public_spec(raw)).encode()
    files[f"{spec_dir}/{assignment.module}"] = (assignment.root / assignment.module).read_bytes()
    return files


def write_student_bundle(assignment: Assignment, out: Path) -> Path:
    """Write the zip deterministically (sorted names, fixed dates) via a temporary file and os.replace."""
    files = student_files(assignment)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name in sorted(files):
                info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
                info.external_attr = (0o100000 | 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3
                zf.writestr(info, files[name])
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
