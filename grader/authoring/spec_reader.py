"""Reading assignment.toml so that every problem names the file and the key: SpecError, read_spec (the
parsed TOML, or a SpecError when the file is missing or not TOML) and SpecReader, typed access to one
table that reports its dotted key on every error."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class SpecError(Exception):
    """A problem in an assignment spec, located by file and key."""

    def __init__(self, path: Path, key: str, problem: str) -> None:
        super().__init__(f"{path}: [{key}] {problem}" if key else f"{path}: {problem}")
        self.path = path
        self.key = key
        self.problem = problem


class SpecReader:
    """Typed access to a TOML table that reports the file and dotted key on every error."""

    def __init__(self, path: Path, table: Mapping[str, Any], key: str) -> None:
        self.path = path
        self.table = table
        self.key = key

    def _where(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def fail(self, name: str, problem: str) -> SpecError:
        return SpecError(self.path, self._where(name), problem)

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if name not in self.table:
            if default is ...:
                raise self.fail(name, "is required")
            return default
        value = self.table[name]
        if isinstance(value, bool) and kind in (int, float, (int, float)):
            raise self.fail(name, f"must be {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise self.fail(name, f"must be {_kind_name(kind)}, got {type(value).__name__} {value!r}")
        return value

    def strings(self, name: str, default: Any = ...) -> tuple[str, ...]:
        if name not in self.table and default is not ...:
            return tuple(default)
        value = self.get(name, list)
        if not all(isinstance(v, str) for v in value):
            raise self.fail(name, "must be a list of strings")
        return tuple(value)

    def choice(self, name: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(name, str, default)
        if value not in choices:
            raise self.fail(name, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def sub(self, name: str) -> SpecReader:
        return SpecReader(self.path, self.get(name, dict), self._where(name))

    def subs(self, name: str) -> dict[str, SpecReader]:
        table = self.get(name, dict, {})
        out = {}
        for child, value in table.items():
            if not isinstance(value, dict):
                raise self.fail(f"{name}.{child}", "must be a table")
            out[child] = SpecReader(self.path, value, self._where(f"{name}.{child}"))
        return out

    def reject_unknown(self, allowed: set[str]) -> None:
        for name in self.table:
            if name not in allowed:
                raise self.fail(name, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def read_spec(spec_path: Path) -> dict[str, Any]:
    """The parsed `assignment.toml` (SpecError when it is missing or not TOML)."""
    try:
        return tomllib.loads(Path(spec_path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(spec_path, "", "file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(spec_path, "", f"not valid TOML: {exc}") from None
