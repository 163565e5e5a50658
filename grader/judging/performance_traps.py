"""Why a kernel may be slow: performance traps named from counted evidence (pure).

On the CPU the evidence is what the interpreter worker counted lane by lane for each case
(grader/running/worker/traffic.py, kept as a case's `evidence["traffic"]`): a prediction of what the kernel
asks of GPU memory, not a measurement. Only cases that passed count (a wrong kernel's traffic predicts
nothing about the right one). Per target (a kernel, or a wrapper and the kernels it launched) the counts
of its cases are summed, so the largest cases weigh most, and each trap is named only where its numbers
pass its threshold (`Thresholds`, data):

- `re-reading`: a program loads the same bytes of one tensor again and again (bytes loaded against the
  bytes each program loads at least once). Reuse across programs (a matmul's tiles, LayerNorm's gamma) is
  not counted: a GPU's L2 serves it. Two reads of a row are what a row kernel that walks its row in
  chunks needs (statistics, then output), so the threshold is above two.
- `uncoalesced-access`: a warp's 32 lanes touch more 32-byte sectors than their bytes need, over every
  load and store (lanes that walk a column, or each lane its own stretch of a row).
- `no-tensor-cores`: a target the spec marks `matmul = true` whose launches never ran tl.dot.

Every finding is informational: it never changes a score. A GPU measurement (roofline, Nsight counters)
would add findings with `basis = "measured"`; it is not built yet (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grader import trap_ids
from grader.results import CaseResult, PerformanceTrap

PREDICTING_BACKENDS = ("interpreter",)  # where the worker counts traffic (the fence runs there only)


@dataclass(frozen=True)
class Thresholds:
    """When the evidence names a trap. Each number is checked against the references, their variants and
    the public kernels of the course (docs/traps.md, "Performance traps")."""

    rereads: float = 2.5  # re-reading: loads per byte a program needs, for one tensor (a chunked row: 2)
    reread_share: float = 0.25  # ... and its bytes read again are at least this share of all bytes needed
    sectors_per_needed: float = 3.0  # uncoalesced-access: sectors touched / the fewest (a float32 column: 8)
    min_requests: int = 64  # fewer requests than this are too little evidence to call a pattern


DEFAULT_THRESHOLDS = Thresholds()


@dataclass
class TargetTraffic:
    """The counts of one target's passed cases, summed."""

    target: str
    cases: int = 0
    launches: int = 0
    kernels: dict[str, None] = field(default_factory=dict)
    dots: int = 0
    loaded: dict[str, int] = field(default_factory=dict)  # per storage (parameter name)
    needed: dict[str, int] = field(default_factory=dict)  # bytes each program loaded at least once, summed
    sides: dict[str, dict[str, int]] = field(default_factory=lambda: {"load": {}, "store": {}})

    def add(self, traffic: Sequence[Mapping[str, Any]]) -> None:
        self.cases += 1
        for launch in traffic:
            self.launches += 1
            self.kernels.setdefault(str(launch.get("kernel", "?")), None)
            self.dots += int(launch.get("dots", 0))
            for storage in launch.get("storages", ()):
                name = str(storage["name"])
                self.loaded[name] = self.loaded.get(name, 0) + int(storage["loaded"])
                self.needed[name] = self.needed.get(name, 0) + int(storage["program_distinct"])
            for side in ("load", "store"):
                for key, value in dict(launch.get(side, {})).items():
                    self.sides[side][key] = self.sides[side].get(key, 0) + int(value)

    def total(self, key: str) -> int:
        return sum(self.sides[side].get(key, 0) for side in ("load", "store"))


def collect(cases: Iterable[CaseResult]) -> dict[str, TargetTraffic]:
    """Per target, the summed traffic of its cases that passed and were counted (in case order)."""
    out: dict[str, TargetTraffic] = {}
    for case in cases:
        traffic = case.evidence.get("traffic")
        if not case.passed or not isinstance(traffic, list) or not traffic:
            continue
        out.setdefault(case.target, TargetTraffic(case.target)).add(traffic)
    return out


def diagnose(cases: Iterable[CaseResult], matmul_targets: Iterable[str] = (),
             thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[PerformanceTrap, ...]:
    """Every performance trap the cases' counted traffic supports, per target in case order."""
    matmul = set(matmul_targets)
    found: list[PerformanceTrap] = []
    for target, counted in collect(cases).items():
        for judge in (re_reading, uncoalesced_access):
            finding = judge(counted, thresholds)
            if finding is not None:
                found.append(finding)
        if target in matmul:
            finding = no_tensor_cores(counted)
            if finding is not None:
                found.append(finding)
    return tuple(found)


def re_reading(counted: TargetTraffic, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    needed_all = sum(counted.needed.values())
    worst: tuple[float, str] | None = None
    for name, loaded in counted.loaded.items():
        needed = counted.needed.get(name, 0)
        if not needed:
            continue
        reads = loaded / needed
        if reads >= thresholds.rereads and loaded - needed >= thresholds.reread_share * needed_all:
            if worst is None or reads > worst[0]:
                worst = (reads, name)
    if worst is None:
        return None
    reads, name = worst
    loaded_all = sum(counted.loaded.values())
    message = (f"each program loads the same bytes of `{name}` {reads:.1f} times: "
               f"{_bytes(counted.loaded[name])} loaded for the {_bytes(counted.needed[name])} its programs need; "
               f"in all it loads {loaded_all / needed_all:.1f}x the bytes it needs, {_bytes(loaded_all)} for "
               f"{_bytes(needed_all)} ({_cases(counted)})")
    return PerformanceTrap(trap_ids.RE_READING, counted.target, message, {
        "reads": round(reads, 3), "loaded_bytes": float(loaded_all), "needed_bytes": float(needed_all),
        "ratio": round(loaded_all / needed_all, 3)})


def uncoalesced_access(counted: TargetTraffic,
                       thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    requests, sectors, fewest = counted.total("requests"), counted.total("sectors"), counted.total("min_sectors")
    if requests < thresholds.min_requests or not fewest or sectors < thresholds.sectors_per_needed * fewest:
        return None
    ratio = sectors / fewest
    message = (f"a warp's 32 lanes touch {sectors / requests:.1f} sectors of 32 bytes per request where "
               f"{fewest / requests:.1f} would hold their bytes: {ratio:.1f}x the memory transactions "
               f"({sectors} sectors for {fewest}, {requests} requests; {_cases(counted)})")
    return PerformanceTrap(trap_ids.UNCOALESCED_ACCESS, counted.target, message, {
        "ratio": round(ratio, 3), "sectors": float(sectors), "min_sectors": float(fewest),
        "requests": float(requests)})


def no_tensor_cores(counted: TargetTraffic) -> PerformanceTrap | None:
    if counted.dots or not counted.launches:
        return None
    message = (f"no tl.dot ran in {counted.launches} launch(es) of {', '.join(counted.kernels)}: the tile "
               f"products run as multiply-adds on the CUDA cores, not on the tensor cores ({_cases(counted)})")
    return PerformanceTrap(trap_ids.NO_TENSOR_CORES, counted.target, message,
                           {"dots": 0.0, "launches": float(counted.launches)})


def _cases(counted: TargetTraffic) -> str:
    return f"counted on {counted.cases} case{'s' * (counted.cases != 1)} of {counted.target}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
