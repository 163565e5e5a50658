"""The sections of assignment.toml, each read into the spec model and validated, every error naming the
file and the key: [tolerances.<profile>.<backend>.<dtype>], [kernels.<name>], [functions.<name>], [[cases]]
and [[performance]] (checked against the targets, tolerance profiles and kernels read before them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grader.authoring.spec_model import (
    BACKENDS,
    DTYPES,
    GPU_ONLY_DTYPES,
    LAYOUTS,
    PERF_DTYPES,
    PERF_RELATIVE_TO,
    VISIBILITIES,
    Case,
    FunctionSpec,
    KernelSpec,
    PerformanceCase,
    Threshold,
    Tolerance,
    ToleranceProfile,
)
from grader.authoring.spec_reader import SpecReader


def load_tolerances(top: SpecReader) -> dict[str, ToleranceProfile]:
    profiles = {}
    for name, profile in top.subs("tolerances").items():
        entries = {}
        for backend, per_dtype in _backend_tables(profile):
            for dtype, entry in per_dtype.items():
                entry.reject_unknown({"atol", "rtol", "why"})
                tol = Tolerance(
                    atol=float(entry.get("atol", (int, float))),
                    rtol=float(entry.get("rtol", (int, float))),
                    why=entry.get("why", str),
                )
                if tol.atol < 0 or tol.rtol < 0:
                    raise entry.fail("atol", "tolerances must be non-negative")
                entries[(backend, dtype)] = tol
        profiles[name] = ToleranceProfile(name=name, entries=entries)
    if not profiles:
        raise top.fail("tolerances", "at least one tolerance profile is required")
    return profiles


def _backend_tables(profile: SpecReader) -> list[tuple[str, dict[str, SpecReader]]]:
    out = []
    for backend in profile.table:
        if backend not in BACKENDS:
            raise profile.fail(backend, f"unknown backend (known: {', '.join(BACKENDS)})")
        out.append((backend, profile.subs(backend)))
    return out


def load_kernel(name: str, r: SpecReader) -> KernelSpec:
    r.reject_unknown({"params", "constexprs", "grid", "problem", "description", "float_params", "matmul"})
    params = r.strings("params")
    constexprs = r.strings("constexprs", ())
    for c in constexprs:
        if c not in params:
            raise r.fail("constexprs", f"{c!r} is not one of params")
    grid = r.strings("grid")
    if not 1 <= len(grid) <= 3:
        raise r.fail("grid", "must have 1 to 3 expressions")
    for expr in grid:
        try:
            compile(expr, "<grid>", "eval")
        except SyntaxError as exc:
            raise r.fail("grid", f"{expr!r} is not a Python expression: {exc.msg}") from None
    float_params = r.strings("float_params", ())
    for f in float_params:
        if f not in params:
            raise r.fail("float_params", f"{f!r} is not one of params")
    return KernelSpec(name, params, constexprs, grid, r.get("problem", str), r.get("description", str, ""),
                      float_params, r.get("matmul", bool, False))


def load_function(name: str, r: SpecReader) -> FunctionSpec:
    r.reject_unknown({"params", "returns", "problem", "max_launches", "description", "matmul"})
    max_launches = r.get("max_launches", int, 1)
    if max_launches < 0:
        raise r.fail("max_launches", "must be >= 0")
    return FunctionSpec(
        name=name,
        params=r.strings("params"),
        returns=r.strings("returns"),
        problem=r.get("problem", str),
        max_launches=max_launches,
        description=r.get("description", str, ""),
        matmul=r.get("matmul", bool, False),
    )


def _entry(top: SpecReader, table: Any, section: str, index: int, keys: set[str], seen: set[str],
           clash: str) -> tuple[SpecReader, str]:
    """One [[section]] table: a reader that names it by index and id, and its id (unique in `seen`)."""
    if not isinstance(table, dict):
        raise top.fail(f"{section}[{index}]", f"must be a table ([[{section}]])")
    r = SpecReader(top.path, table, f"{section}[{index}]")
    r.reject_unknown(keys)
    entry_id = r.get("id", str)
    r = SpecReader(top.path, table, f"{section}[{index}] (id={entry_id!r})")
    if entry_id in seen:
        raise r.fail("id", clash)
    seen.add(entry_id)
    return r, entry_id


def _target_and_tolerance(
    r: SpecReader, targets: set[str], tolerances: Mapping[str, ToleranceProfile]
) -> tuple[str, str]:
    target = r.get("target", str)
    if target not in targets:
        raise r.fail("target", f"{target!r} is not a kernel or function of this assignment")
    tolerance = r.get("tolerance", str)
    if tolerance not in tolerances:
        raise r.fail("tolerance", f"{tolerance!r} is not a profile under [tolerances]")
    return target, tolerance


_CASE_KEYS = {
    "id", "target", "dims", "kind", "points", "visibility", "tolerance", "layout", "meta", "options",
    "backends", "exposes", "description", "dtype",
}


def load_cases(
    top: SpecReader,
    targets: set[str],
    tolerances: Mapping[str, ToleranceProfile],
    kernels: Mapping[str, KernelSpec],
) -> tuple[Case, ...]:
    raw_cases = top.get("cases", list)
    seen: set[str] = set()
    cases = []
    for index, table in enumerate(raw_cases):
        r, case_id = _entry(top, table, "cases", index, _CASE_KEYS, seen,
                            "is used by an earlier case; case ids must be unique")
        target, tolerance = _target_and_tolerance(r, targets, tolerances)
        points = float(r.get("points", (int, float)))
        if points < 0:
            raise r.fail("points", "must be >= 0")
        dims = _int_table(r, "dims", required=True)
        meta = _int_table(r, "meta", required=False)
        if target in kernels:
            missing = [c for c in kernels[target].constexprs if c not in meta]
            if missing:
                raise r.fail("meta", f"kernel cases must give every constexpr; missing {', '.join(missing)}")
        backends = r.strings("backends", BACKENDS)
        for b in backends:
            if b not in BACKENDS:
                raise r.fail("backends", f"unknown backend {b!r} (known: {', '.join(BACKENDS)})")
        cases.append(
            Case(
                id=case_id,
                target=target,
                dims=dims,
                kind=r.get("kind", str, "random"),
                points=points,
                visibility=r.choice("visibility", VISIBILITIES),
                tolerance=tolerance,
                layout=r.choice("layout", tuple(LAYOUTS), "contiguous"),
                meta=meta,
                options=dict(r.get("options", dict, {})),
                backends=backends,
                exposes=r.strings("exposes", ()),
                description=r.get("description", str, ""),
                dtype=_case_dtype(r, backends),
            )
        )
    if not cases:
        raise top.fail("cases", "the assignment has no cases")
    return tuple(cases)


def _case_dtype(r: SpecReader, backends: tuple[str, ...]) -> str:
    dtype = r.choice("dtype", DTYPES, "float32")
    if dtype in GPU_ONLY_DTYPES and "interpreter" in backends:
        raise r.fail("dtype", f"{dtype} arithmetic is wrong in Triton's interpreter (it holds {dtype} as integers): "
                     'give this case backends = ["cuda"]')
    return dtype


def _int_table(r: SpecReader, name: str, required: bool) -> dict[str, int]:
    table = r.get(name, dict) if required else r.get(name, dict, {})
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise r.fail(f"{name}.{key}", f"must be a non-negative integer, got {value!r}")
    return dict(table)


_PERF_KEYS = {
    "id", "target", "dims", "dtype", "tolerance", "kind", "meta", "options", "thresholds", "relative_to",
    "input_sets", "repeats", "timeout_s", "description",
}


def load_performance(
    top: SpecReader,
    targets: set[str],
    tolerances: Mapping[str, ToleranceProfile],
    kernels: Mapping[str, KernelSpec],
    case_ids: set[str],
) -> tuple[PerformanceCase, ...]:
    raw = top.get("performance", list, [])
    seen = set(case_ids)
    out = []
    for index, table in enumerate(raw):
        r, perf_id = _entry(top, table, "performance", index, _PERF_KEYS, seen,
                            "is used by an earlier case or performance case; ids must be unique")
        target, tolerance = _target_and_tolerance(r, targets, tolerances)
        dtype = r.choice("dtype", PERF_DTYPES, "float32")
        if ("cuda", dtype) not in tolerances[tolerance].entries:
            raise r.fail("tolerance", f"profile {tolerance!r} has no cuda.{dtype} entry")
        meta = _int_table(r, "meta", required=False)
        if target in kernels:
            missing = [c for c in kernels[target].constexprs if c not in meta]
            if missing:
                raise r.fail("meta", "kernel targets must give every constexpr; missing "
                             + ", ".join(missing))
        timeout_s = float(r.get("timeout_s", (int, float), 120.0))
        if timeout_s <= 0:
            raise r.fail("timeout_s", "must be > 0")
        out.append(PerformanceCase(
            id=perf_id, target=target, dims=_int_table(r, "dims", required=True), tolerance=tolerance,
            dtype=dtype, kind=r.get("kind", str, "random"), meta=meta,
            options=dict(r.get("options", dict, {})), thresholds=_thresholds(r),
            relative_to=r.choice("relative_to", PERF_RELATIVE_TO, "reference"),
            input_sets=_positive_int(r, "input_sets", 3), repeats=_positive_int(r, "repeats", 5),
            timeout_s=timeout_s, description=r.get("description", str, ""),
        ))
    return tuple(out)


def _positive_int(r: SpecReader, name: str, default: int) -> int:
    value = r.get(name, int, default)
    if value < 1:
        raise r.fail(name, f"must be >= 1, got {value}")
    return value


def _thresholds(r: SpecReader) -> tuple[Threshold, ...]:
    """`thresholds = [[speedup, points], ...]`: speedups strictly increasing, points non-decreasing."""
    raw = r.get("thresholds", list, [])
    out: list[Threshold] = []
    for i, pair in enumerate(raw):
        ok = (isinstance(pair, list) and len(pair) == 2
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair))
        if not ok:
            raise r.fail(f"thresholds[{i}]", f"must be [speedup, points] (two numbers), got {pair!r}")
        speedup, points = float(pair[0]), float(pair[1])
        if speedup <= 0 or points < 0:
            raise r.fail(f"thresholds[{i}]", "speedup must be > 0 and points >= 0")
        if out and (speedup <= out[-1].speedup or points < out[-1].points):
            raise r.fail(f"thresholds[{i}]", "speedups must increase and points must not decrease")
        out.append(Threshold(speedup, points))
    return tuple(out)
