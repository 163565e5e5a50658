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
- `launch-bound`: a wrapper (it picks its grid, blocks and launches; a kernel case runs the grader's)
  whose work sits in too few programs or launches to keep a GPU busy: tiny blocks looping (each load or
  store covers fewer elements than a program has threads, many times per program), one program for the
  whole tensor (a grid of one in every case, its program storing block after block), or many launches
  per call. Shape-relative facts only: the battery's cases are small, so a small grid alone says nothing.

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
    # launch-bound (wrappers only):
    program_threads: int = 128  # tiny blocks: fewer elements per load/store than a program's threads
    # (Triton's default num_warps = 4, x 32 lanes; the references' loops use blocks of >= 1024)
    loop_calls: float = 8.0  # ... and at least this many loads and stores per program (a loop)
    serial_stores: float = 4.0  # one program: stores per program, where every case ran a grid of one
    many_launches: float = 4.0  # launches per wrapper call (each costs a few microseconds of launch)
    sms: int = 132  # an H200's streaming multiprocessors: a grid of one keeps one of them busy


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class CaseLoop:
    """One case's loads and stores per program and the block elements each covered (masked included)."""

    case_id: str
    calls: int
    block_lanes: int
    programs: int
    bytes: int

    @classmethod
    def of(cls, case_id: str, traffic: Sequence[Mapping[str, Any]]) -> CaseLoop:
        sides = [dict(launch.get(side, {})) for launch in traffic for side in ("load", "store")]
        return cls(case_id, sum(int(s.get("calls", 0)) for s in sides),
                   sum(int(s.get("block_lanes", 0)) for s in sides),
                   sum(int(launch.get("programs", 0)) for launch in traffic),
                   sum(int(s.get("bytes", 0)) for s in sides))

    @property
    def block(self) -> float:
        return self.block_lanes / self.calls if self.calls else 0.0

    @property
    def per_program(self) -> float:
        return self.calls / self.programs if self.programs else 0.0


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
    programs: int = 0
    runs: int = 0  # runs of the kernels (an autotuned launch runs once per config): programs / runs = grid
    one_program_cases: int = 0  # cases whose every run was a grid of one program
    loops: list[CaseLoop] = field(default_factory=list)  # per case: how its programs loop

    def add(self, traffic: Sequence[Mapping[str, Any]], case_id: str = "") -> None:
        self.cases += 1
        self.loops.append(CaseLoop.of(case_id, traffic))
        self.one_program_cases += all(int(launch.get("programs", 0)) <= max(int(launch.get("runs", 1)), 1)
                                      for launch in traffic)
        for launch in traffic:
            self.launches += 1
            self.programs += int(launch.get("programs", 0))
            self.runs += max(int(launch.get("runs", 1)), 1)
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

    def per_program(self, key: str, side: str | None = None) -> float:
        count = self.total(key) if side is None else self.sides[side].get(key, 0)
        return count / self.programs if self.programs else 0.0


def collect(cases: Iterable[CaseResult]) -> dict[str, TargetTraffic]:
    """Per target, the summed traffic of its cases that passed and were counted (in case order)."""
    out: dict[str, TargetTraffic] = {}
    for case in cases:
        traffic = case.evidence.get("traffic")
        if not case.passed or not isinstance(traffic, list) or not traffic:
            continue
        out.setdefault(case.target, TargetTraffic(case.target)).add(traffic, case.case_id)
    return out


def diagnose(cases: Iterable[CaseResult], matmul_targets: Iterable[str] = (),
             thresholds: Thresholds = DEFAULT_THRESHOLDS,
             wrapper_targets: Iterable[str] = ()) -> tuple[PerformanceTrap, ...]:
    """Every performance trap the cases' counted traffic supports, per target in case order.
    `wrapper_targets`: the targets that choose their own launches (launch-bound is judged on them)."""
    matmul, wrappers = set(matmul_targets), set(wrapper_targets)
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
        if target in wrappers:
            finding = launch_bound(counted, thresholds)
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


def launch_bound(counted: TargetTraffic, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    """Too little work per program or per launch: the first of one program for the whole tensor (the
    worst: one SM of the GPU), tiny blocks looping, many launches per call that the counts show. Tiny
    blocks are judged per case (the case whose programs loop most), so a target's short rows, held in one
    small block each, dilute nothing."""
    if not counted.programs or not counted.total("calls"):
        return None
    stores = counted.per_program("calls", "store")
    launches = counted.launches / counted.cases
    numbers = {"stores_per_program": round(stores, 2), "launches_per_call": round(launches, 2),
               "programs_per_run": round(counted.programs / counted.runs, 2)}
    if counted.one_program_cases == counted.cases and stores >= thresholds.serial_stores:
        message = (f"one program for the whole tensor: every case ran a grid of one program, which stored "
                   f"{stores:.0f} blocks one after the other; the work would spread over as many programs "
                   f"(an H200 has {thresholds.sms} SMs, this keeps one busy) ({_cases(counted)})")
        return PerformanceTrap(trap_ids.LAUNCH_BOUND, counted.target, message, numbers)
    tiny = [loop for loop in counted.loops
            if loop.calls and loop.block < thresholds.program_threads and loop.per_program >= thresholds.loop_calls]
    if tiny:
        worst = max(tiny, key=lambda loop: loop.per_program)
        message = (f"tiny blocks looping: in case `{worst.case_id}` each program ran {worst.per_program:.0f} loads "
                   f"and stores one after the other, each covering {worst.block:.0f} elements (fewer than the "
                   f"{thresholds.program_threads} threads of a 4-warp program) and {_bytes(worst.bytes / worst.calls)} "
                   f"on average: a GPU needs kilobytes in flight per program to hide memory latency "
                   f"({_cases(counted)})")
        return PerformanceTrap(trap_ids.LAUNCH_BOUND, counted.target, message, {
            **numbers, "block": round(worst.block, 1), "calls_per_program": round(worst.per_program, 2)})
    if launches >= thresholds.many_launches:
        message = (f"many launches for little work: {launches:.1f} kernel launches per call, "
                   f"{_bytes(counted.total('bytes') / counted.launches)} moved per launch; each launch costs "
                   f"microseconds before any work starts ({_cases(counted)})")
        return PerformanceTrap(trap_ids.LAUNCH_BOUND, counted.target, message, numbers)
    return None


def _cases(counted: TargetTraffic) -> str:
    return f"counted on {counted.cases} case{'s' * (counted.cases != 1)} of {counted.target}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
