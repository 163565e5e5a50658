"""Why a kernel is slow, measured: performance traps named from Nsight Compute counters (pure).

A cuda grade judges them from its profiled replays (grader/running/timing/profiled_replay.py; `judge_profiles` here;
docs/performance.md, "Why slow, on the GPU"). The evidence is a student's profiled launches of one case
(grader/evidence/kernel_profiles.py `KernelProfile`s, ncu run with `--clock-control none`) next to the reference's
launches of the same case, plus the static facts of the compiled kernels where known. Every trap is named only when
the student is measurably slower than the reference (`Thresholds.slower`): a kernel within ~10% of the reference gets
none, whatever its counters.

- `serial-grid`: fewer programs than the GPU has SMs where the reference launches at least that many.
- `uncoalesced-access`: global sectors per request well above the reference's and above twice the 4 sectors
  of a coalesced float32 warp (the references' 128-bit loads touch 16).
- `re-reading`: DRAM bytes read at least 2.5x the reference's (non-matmul targets).
- `launch-bound` (measured): a row walked in slivers, at least 12x the reference's global load requests for the
  data (non-matmul targets): tiny blocks, or loops over tiny chunks, each program issuing many small loads.
- `low-arithmetic-intensity`: a matmul moving several times the reference's DRAM bytes for the same flops.
- `low-occupancy`: achieved occupancy far below the reference's (not named with `serial-grid`, its cause).
- `no-tensor-cores`: a matmul whose tensor pipe is idle (or, unmeasured, whose SASS has no mma/wgmma) where
  the reference's is busy.
- `register-spills`: the compiled kernel spills registers to local memory and the reference spills fewer.

Findings are `PerformanceTrap`s with `basis = "measured"`. `reconcile` merges them with the CPU's predictions
(grader/judging/performance_traps.py): for a target the GPU measured, the GPU's verdict stands and each
prediction it contradicts becomes a note saying what was measured instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from grader import trap_ids
from grader.evidence import kernel_profiles as ncu
from grader.evidence.kernel_profiles import CaseProfile, KernelProfile, StaticFacts
from grader.results import PerformanceResult, PerformanceTrap

MEASURED = "measured"
COALESCED_SECTORS = 4.0  # sectors of one request of 32 lanes reading consecutive float32 (128 bytes)


@dataclass(frozen=True)
class Thresholds:
    """When the counters name a trap. Each number is set against the H200 runs of issue 28 (TRITON_FACTS.md,
    "Added 2026-12-02"): the references, and the slow variants each trap is meant for."""

    slower: float = 1.1  # student time / reference time below this: no trap (matmul timing spreads +-6.5%)
    sectors_ratio: float = 1.5  # uncoalesced: sectors per request over the reference's (measured 32 vs 16)
    sectors_floor: float = 2 * COALESCED_SECTORS  # ... and at least this many per request
    min_requests: float = 1000.0  # fewer requests than this say nothing about a pattern
    rereads: float = 2.5  # re-reading: DRAM bytes read over the reference's (three passes: 803 vs 268 MB)
    traffic_ratio: float = 4.0  # low-arithmetic-intensity: matmul DRAM bytes over the reference's (9.0 vs 0.35 GB)
    occupancy_ratio: float = 0.6  # low-occupancy: achieved occupancy below this share of the reference's
    occupancy_gap: float = 20.0  # ... and at least this many points below it (43% vs 95%)
    sms: int = 132  # serial-grid: an H200's SMs; fewer programs than this leave SMs idle
    tensor_idle: float = 5.0  # no-tensor-cores: tensor pipe active below this % (16x16x16 tl.dot tiles: 9%)
    tensor_busy: float = 20.0  # ... where the reference's is at least this % (tl.dot: 81%)
    # launch-bound: global load requests over the reference's. Chunks of 16-32 elements looping over a row:
    # 16x-128x (H200/H100 recordings: tiny_chunks_looping 32x, row_stats_tiny_block 16x, correct_welford 21-85x,
    # correct_chunked_two_pass 27-128x); full-warp scalar loads over one or two passes: 6x-8x (correct_three_pass,
    # correct_lane_online, which are 1.6-2.0x the reference's time and name nothing).
    requests_ratio: float = 12.0


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Side:
    """What one side (the student's or the reference's) ran for a case: its profiled launches, the static
    facts of its compiled kernel where known, and its timed median where the case was timed (otherwise
    ncu's durations, summed, are the time)."""

    profiles: tuple[KernelProfile, ...]
    static: StaticFacts | None = None
    time_s: float | None = None


@dataclass(frozen=True)
class Totals:
    """A side's launches of one case, summed (traffic) or weighted by each launch's duration (percentages);
    grid and block are those of its longest launch."""

    launches: int
    kernels: tuple[str, ...]
    time_s: float
    dram_read: float
    dram_write: float
    load_requests: float
    load_sectors: float
    store_requests: float
    store_sectors: float
    occupancy: float | None
    tensor_pipe: float | None
    programs: int
    threads: int
    registers: int
    spills: int | None
    tensor_instructions: bool | None

    @classmethod
    def of(cls, side: Side) -> Totals:
        profiles = side.profiles
        longest = max(profiles, key=lambda p: p.time_ns, default=None)
        measured_time = sum(p.time_ns for p in profiles) * 1e-9
        return cls(
            launches=len(profiles),
            kernels=tuple(dict.fromkeys(p.kernel for p in profiles)),
            time_s=side.time_s if side.time_s is not None else measured_time,
            dram_read=_sum(profiles, ncu.DRAM_READ), dram_write=_sum(profiles, ncu.DRAM_WRITE),
            load_requests=_sum(profiles, ncu.LOAD_REQUESTS), load_sectors=_sum(profiles, ncu.LOAD_SECTORS),
            store_requests=_sum(profiles, ncu.STORE_REQUESTS), store_sectors=_sum(profiles, ncu.STORE_SECTORS),
            occupancy=_weighted(profiles, ncu.OCCUPANCY), tensor_pipe=_weighted(profiles, ncu.TENSOR_PIPE),
            programs=longest.programs if longest else 0, threads=longest.threads if longest else 0,
            registers=max((int(p.get(ncu.REGISTERS)) for p in profiles), default=0),
            spills=side.static.spills if side.static else None,
            tensor_instructions=side.static.tensor_cores if side.static else None,
        )

    @property
    def dram_bytes(self) -> float:
        return self.dram_read + self.dram_write


def _sum(profiles: Sequence[KernelProfile], name: str) -> float:
    return sum(p.get(name) for p in profiles)


def _weighted(profiles: Sequence[KernelProfile], name: str) -> float | None:
    """The duration-weighted mean of a percentage over the launches that have it (None: none has it)."""
    having = [p for p in profiles if name in p.metrics]
    if not having:
        return None
    weight = sum(p.time_ns for p in having)
    if weight <= 0:
        return sum(p.metrics[name] for p in having) / len(having)
    return sum(p.metrics[name] * p.time_ns for p in having) / weight


@dataclass(frozen=True)
class Comparison:
    """One target's case, student against reference."""

    target: str
    case_id: str
    student: Totals
    reference: Totals
    matmul: bool = False
    flops: float = 0.0  # the case's floating-point operations, where known (matmul: 2 M N K)

    @property
    def time_ratio(self) -> float:
        """Student time / reference time; 0 where either is unknown."""
        return time_ratio(self.student.time_s, self.reference.time_s)


def time_ratio(student: float, reference: float) -> float:
    """Pure: the student's time over the reference's (any one unit); 0 where either is unknown (not positive)."""
    return student / reference if student > 0 and reference > 0 else 0.0


def timed_ratio(result: PerformanceResult) -> float:
    """Pure: a performance case's student median over the reference's; 0 where either was not measured."""
    if result.student is None or result.reference is None:
        return 0.0
    return time_ratio(result.student.median_ms, result.reference.median_ms)


def compare(target: str, student: Side, reference: Side, case_id: str = "", matmul: bool = False,
            flops: float = 0.0) -> Comparison:
    return Comparison(target, case_id, Totals.of(student), Totals.of(reference), matmul, flops)


def diagnose(comparison: Comparison, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[PerformanceTrap, ...]:
    """Every trap the counters support for one target's case, or none where the student is not measurably
    slower than the reference (or either side's time is unknown)."""
    if comparison.time_ratio < thresholds.slower:
        return ()
    found: list[PerformanceTrap | None] = []
    serial = serial_grid(comparison, thresholds)
    found.append(serial)
    found.append(uncoalesced_access(comparison, thresholds))
    if comparison.matmul:
        found.append(low_arithmetic_intensity(comparison, thresholds))
        found.append(no_tensor_cores(comparison, thresholds))
    else:
        rereads = re_reading(comparison, thresholds)
        found.append(rereads)
        if rereads is None:  # more bytes need more requests: re-reading is the cause
            found.append(slivers(comparison, thresholds))
    if serial is None:  # a grid of one program has one SM's warps at most: the grid is the cause
        found.append(low_occupancy(comparison, thresholds))
    found.append(register_spills(comparison))
    return tuple(f for f in found if f is not None)


def serial_grid(c: Comparison, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    s, r = c.student, c.reference
    if not s.programs or s.programs >= thresholds.sms or r.programs < thresholds.sms:
        return None
    busy = "one SM" if s.programs == 1 else f"{s.programs} SMs"
    message = (f"a grid of {s.programs} program{'s' * (s.programs != 1)} keeps {busy} of the GPU's "
               f"{thresholds.sms} busy where the reference launches {r.programs:,}: {_slower(c)}")
    return _trap(trap_ids.SERIAL_GRID, c, message, programs=s.programs, reference_programs=r.programs)


def uncoalesced_access(c: Comparison, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    worst: tuple[float, str, float, float, float] | None = None
    for kind, s_req, s_sec, r_req, r_sec in (
            ("load", c.student.load_requests, c.student.load_sectors,
             c.reference.load_requests, c.reference.load_sectors),
            ("store", c.student.store_requests, c.student.store_sectors,
             c.reference.store_requests, c.reference.store_sectors)):
        if s_req < thresholds.min_requests:
            continue
        per = s_sec / s_req
        ref = r_sec / r_req if r_req else COALESCED_SECTORS
        if per >= thresholds.sectors_floor and per >= thresholds.sectors_ratio * ref and (
                worst is None or per / ref > worst[0] / worst[2]):
            worst = (per, kind, ref, s_sec, r_sec)
    if worst is None:
        return None
    per, kind, ref, sectors, ref_sectors = worst
    message = (f"each warp's global {kind}s touch {per:.0f} sectors of 32 bytes per request where the "
               f"reference's touch {ref:.0f} (32 lanes reading consecutive float32 need {COALESCED_SECTORS:.0f}, 16 "
               f"with 128-bit loads): "
               f"in all {sectors / ref_sectors if ref_sectors else 0:.1f}x the sectors the reference's {kind}s touch "
               f"({sectors / 1e6:,.1f} M against {ref_sectors / 1e6:,.1f} M); {_slower(c)}")
    return _trap(trap_ids.UNCOALESCED_ACCESS, c, message, sectors_per_request=per,
                 reference_sectors_per_request=ref, sectors=sectors, reference_sectors=ref_sectors)


def re_reading(c: Comparison, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    s, r = c.student.dram_read, c.reference.dram_read
    if not r or s < thresholds.rereads * r:
        return None
    message = (f"the kernel reads {_bytes(s)} from DRAM where the reference reads {_bytes(r)}: {s / r:.1f}x the "
               f"bytes, so the same data comes from memory again and again; {_slower(c)}")
    return _trap(trap_ids.RE_READING, c, message, dram_read=s, reference_dram_read=r, ratio=s / r)


def slivers(c: Comparison, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    """`launch-bound`, measured: many times the reference's load requests for the same data (a serial grid is named
    on its own)."""
    s, r = c.student, c.reference
    if s.load_requests < thresholds.min_requests or not r.load_requests or (
            s.load_requests < thresholds.requests_ratio * r.load_requests) or serial_grid(c, thresholds):
        return None
    ratio = s.load_requests / r.load_requests
    per = 32 * s.load_sectors / s.load_requests  # bytes a request touches, in 32-byte sectors
    reference_per = 32 * r.load_sectors / r.load_requests
    message = (f"the kernel issues {ratio:.0f}x the reference's global load requests ({s.load_requests / 1e6:,.1f} M "
               f"against {r.load_requests / 1e6:,.1f} M), each touching {per:.0f} bytes where the reference's touch "
               f"{reference_per:.0f}: its programs walk their rows in slivers (a block much smaller than the row, or "
               f"a loop over tiny chunks), waiting on one small load after another; blocks of 1024 or more elements "
               f"per load (or the whole row) do the same work in far fewer requests; {_slower(c)}")
    return _trap(trap_ids.LAUNCH_BOUND, c, message, load_requests=s.load_requests,
                 reference_load_requests=r.load_requests, ratio=ratio, bytes_per_request=per,
                 reference_bytes_per_request=reference_per)


def low_arithmetic_intensity(c: Comparison,
                             thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    s, r = c.student.dram_bytes, c.reference.dram_bytes
    if not r or s < thresholds.traffic_ratio * r:
        return None
    intensity = ""
    numbers: dict[str, float] = {}
    if c.flops > 0:
        numbers = {"intensity": c.flops / s, "reference_intensity": c.flops / r}
        intensity = f" ({c.flops / s:.0f} flops per byte against the reference's {c.flops / r:.0f})"
    message = (f"the matrix product moves {_bytes(s)} through DRAM for the same flops as the reference's "
               f"{_bytes(r)}: {s / r:.0f}x the bytes{intensity}, so small tiles reload A and B from memory "
               f"for every few multiply-adds; {_slower(c)}")
    return _trap(trap_ids.LOW_ARITHMETIC_INTENSITY, c, message, dram_bytes=s, reference_dram_bytes=r,
                 ratio=s / r, **numbers)


def low_occupancy(c: Comparison, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    s, r = c.student.occupancy, c.reference.occupancy
    if s is None or r is None:
        return None
    if s >= thresholds.occupancy_ratio * r or r - s < thresholds.occupancy_gap:
        return None
    threads = c.student.threads
    if threads and threads <= 32:
        cause = f"each program is one warp of {threads} threads, and an SM holds a limited number of programs"
    else:
        cause = (f"each program has {threads} threads using {c.student.registers} registers each, "
                 f"which limits how many fit on an SM")
    message = (f"achieved occupancy {s:.0f}% of the SM's warps where the reference reaches {r:.0f}%: {cause}, so "
               f"too few warps are in flight to hide memory latency; {_slower(c)}")
    return _trap(trap_ids.LOW_OCCUPANCY, c, message, occupancy=s, reference_occupancy=r, threads=threads,
                 registers=c.student.registers)


def no_tensor_cores(c: Comparison, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> PerformanceTrap | None:
    s, r = c.student, c.reference
    reference_uses = (r.tensor_pipe is not None and r.tensor_pipe >= thresholds.tensor_busy) or (
        r.tensor_pipe is None and bool(r.tensor_instructions))
    if not reference_uses:
        return None
    if s.tensor_pipe is not None:  # measured: the counter decides, whatever the source or the SASS say
        if s.tensor_pipe >= thresholds.tensor_idle:
            return None
        reference = f"{r.tensor_pipe:.0f}%" if r.tensor_pipe is not None else "busy (mma in its SASS)"
        message = (f"the tensor pipe was {s.tensor_pipe:.1f}% active where the reference's was {reference}: "
                   f"the products ran as multiply-adds on the CUDA cores; {_slower(c)}")
        return _trap(trap_ids.NO_TENSOR_CORES, c, message, tensor_pipe=s.tensor_pipe,
                     reference_tensor_pipe=r.tensor_pipe or 0.0)
    if s.tensor_instructions is False:
        message = (f"the compiled kernel has no mma / wgmma instruction where the reference's has: the "
                   f"products run as multiply-adds on the CUDA cores; {_slower(c)}")
        return _trap(trap_ids.NO_TENSOR_CORES, c, message, tensor_instructions=0.0)
    return None


def register_spills(c: Comparison) -> PerformanceTrap | None:
    spills, reference = c.student.spills, c.reference.spills or 0
    if not spills or spills <= reference:
        return None
    message = (f"the compiled kernel spills {spills} registers to local memory (it uses {c.student.registers} per "
               f"thread; the reference spills {reference}): every spilled value is a round trip to memory; "
               f"{_slower(c)}")
    return _trap(trap_ids.REGISTER_SPILLS, c, message, spills=spills, reference_spills=reference,
                 registers=c.student.registers)


def _trap(trap: str, c: Comparison, message: str, **numbers: float) -> PerformanceTrap:
    case = f" (case {c.case_id})" if c.case_id else ""
    rounded = {k: round(float(v), 3) for k, v in numbers.items()}
    return PerformanceTrap(trap, c.target, message + case, {"time_ratio": round(c.time_ratio, 3), **rounded},
                           basis=MEASURED)


def _slower(c: Comparison) -> str:
    return (f"{c.time_ratio:.1f}x the reference's time ({c.student.time_s * 1e6:,.0f} us against "
            f"{c.reference.time_s * 1e6:,.0f} us)")


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 10 * size or unit == "GB" else f"{n / size:,.0f} {unit}"
    return f"{int(n)} B"


# Reconciling the CPU's predictions with the GPU's measurements.

# A prediction is confirmed by any of these measured traps (the CPU's launch-bound covers the one-program grid
# and tiny blocks that the GPU names serial-grid and low-occupancy; a matmul's re-reading is its low intensity).
CONFIRMED_BY: Mapping[str, frozenset[str]] = {
    trap_ids.LAUNCH_BOUND: frozenset({trap_ids.LAUNCH_BOUND, trap_ids.SERIAL_GRID, trap_ids.LOW_OCCUPANCY}),
    trap_ids.RE_READING: frozenset({trap_ids.RE_READING, trap_ids.LOW_ARITHMETIC_INTENSITY}),
}


@dataclass(frozen=True)
class Reconciled:
    traps: tuple[PerformanceTrap, ...]
    notes: tuple[str, ...] = ()


def reconcile(predicted: Iterable[PerformanceTrap], measured: Iterable[PerformanceTrap],
              comparisons: Mapping[str, Comparison], thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Reconciled:
    """The measured traps, plus the predictions of targets the GPU did not measure. For a measured target
    (`comparisons`: target -> its comparison) a prediction the GPU confirms gives way to the measured trap,
    and one it contradicts is dropped with a note naming what the GPU measured instead."""
    measured = tuple(measured)
    named = {(t.target, t.trap) for t in measured}
    kept: list[PerformanceTrap] = []
    notes: list[str] = []
    for guess in predicted:
        comparison = comparisons.get(guess.target)
        if comparison is None:
            kept.append(guess)
            continue
        if any((guess.target, trap) in named for trap in CONFIRMED_BY.get(guess.trap, {guess.trap})):
            continue
        notes.append(f"{guess.target}: the CPU predicted `{guess.trap}` but the GPU measured otherwise: "
                     f"{_contradiction(guess.trap, comparison, thresholds)}")
    return Reconciled((*measured, *kept), tuple(notes))


def _contradiction(trap: str, c: Comparison, thresholds: Thresholds) -> str:
    s, r = c.student, c.reference
    if c.time_ratio and c.time_ratio < thresholds.slower:
        return (f"it ran in {c.time_ratio:.2f}x the reference's time, within the {thresholds.slower - 1:.0%} "
                f"that names no trap")
    if trap == trap_ids.NO_TENSOR_CORES and s.tensor_pipe is not None:
        return (f"the tensor pipe was {s.tensor_pipe:.0f}% active (the reference's "
                f"{r.tensor_pipe or 0:.0f}%): Triton compiled the products onto the tensor cores (on sm_90 it "
                f"turns a broadcast-and-sum into MMA), so tl.dot is not what is missing")
    if trap == trap_ids.NO_TENSOR_CORES and s.tensor_instructions:
        return "the compiled kernel has mma / wgmma instructions: Triton put the products on the tensor cores"
    if trap == trap_ids.RE_READING:
        return (f"it read {_bytes(s.dram_read)} from DRAM against the reference's {_bytes(r.dram_read)}: the caches "
                f"(L1, L2) served the repeated reads")
    if trap == trap_ids.UNCOALESCED_ACCESS and s.load_requests:
        ref = f"{r.load_sectors / r.load_requests:.0f}" if r.load_requests else "?"
        return (f"its loads touched {s.load_sectors / s.load_requests:.0f} sectors per request against the "
                f"reference's {ref}")
    if trap == trap_ids.LAUNCH_BOUND:
        occupancy = f", achieved occupancy {s.occupancy:.0f}%" if s.occupancy is not None else ""
        return f"its longest launch ran {s.programs:,} programs of {s.threads} threads{occupancy}"
    return "no counter supports it"


# Judging a grade's profiled replays.


@dataclass(frozen=True)
class Measured:
    """What a cuda grade's profiles say: the traps (one per target and trap, from its slowest case), the comparison
    each target was judged on (for `reconcile`), and one line per reason a profile could not be read."""

    traps: tuple[PerformanceTrap, ...] = ()
    comparisons: Mapping[str, Comparison] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    counters: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)  # perf id -> side -> ...

    def attach(self, performance: Iterable[PerformanceResult]) -> tuple[PerformanceResult, ...]:
        """The performance results with their cases' counters (results.json, the report's roofline)."""
        return tuple(replace(p, counters=self.counters[p.perf_id]) if p.perf_id in self.counters else p
                     for p in performance)


def summarise(totals: Totals) -> dict[str, float]:
    """A side's counters for one case in a student's units (only those it has)."""
    out: dict[str, float] = {}
    if totals.launches:
        out.update(dram_bytes=totals.dram_bytes, programs=float(totals.programs), threads=float(totals.threads),
                   registers=float(totals.registers), launches=float(totals.launches))
        if totals.load_requests:
            out["sectors_per_load"] = round(totals.load_sectors / totals.load_requests, 2)
        if totals.occupancy is not None:
            out["occupancy_pct"] = round(totals.occupancy, 1)
        if totals.tensor_pipe is not None:
            out["tensor_pipe_pct"] = round(totals.tensor_pipe, 1)
    if totals.spills is not None:
        out["spills"] = float(totals.spills)
    return out


def counters_can_name_a_trap(result: PerformanceResult, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> bool:
    """Pure: whether reading a timed case's counters could name a trap (`diagnose` names none within
    `thresholds.slower` of the reference's time): not for a case that was not timed, or whose student ran within that
    of the reference timed beside it; yes where the reference's time is unknown."""
    if not result.timed or result.student is None:
        return False
    ratio = timed_ratio(result)
    return ratio == 0.0 or ratio >= thresholds.slower


def why_not_needed(result: PerformanceResult) -> str:
    """Pure: a case's words for counters not read because no trap could be named (`counters_can_name_a_trap` said
    so: the student and the reference were both timed)."""
    return f"{timed_ratio(result):.2f}x the reference's time"


def _not_needed_note(skipped: Mapping[str, str], thresholds: Thresholds) -> str:
    listed = ", ".join(f"{perf_id} ({why})" for perf_id, why in skipped.items())
    return (f"GPU counters: not read for {listed}: within {thresholds.slower - 1:.0%} of the reference's time no trap "
            "can be named, and this batch reads Nsight Compute's counters only where one could")


def judge_profiles(performance: Iterable[PerformanceResult], profiles: Mapping[str, CaseProfile],
                   matmul_targets: Iterable[str] = (),
                   thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Measured:
    """Every timed case with a profile, student against reference at the times the timing slot measured (not ncu's
    durations): its traps, where the student is measurably slower. Where the counters could not be read, the
    static facts of the compiled kernels still name what they can (register spills, no tensor-core
    instruction), and the reason is a note."""
    matmul = frozenset(matmul_targets)
    traps: dict[tuple[str, str], tuple[float, PerformanceTrap]] = {}
    comparisons: dict[str, Comparison] = {}
    notes: dict[str, None] = {}
    counters: dict[str, dict[str, dict[str, float]]] = {}
    skipped: dict[str, str] = {}  # perf id -> why its counters were not needed
    for result in performance:
        profile = profiles.get(result.perf_id)
        if profile is None or not result.timed or result.student is None:
            continue
        if profile.unmeasured:
            notes[f"GPU counters: {profile.unmeasured}"] = None
        if profile.not_needed:
            skipped[result.perf_id] = profile.not_needed
        if result.reference is None or not (profile.not_needed or (profile.student and profile.reference)):
            continue
        mine, theirs = profile.student, profile.reference
        flops = (result.student.tflops or 0.0) * 1e12 * result.student.median_ms * 1e-3
        # not needed: the times alone (no trap within reach of the reference), which still contradict a CPU guess
        comparison = compare(result.target,
                             Side(mine.launches if mine else (), mine.static if mine else None,
                                  result.student.median_ms * 1e-3),
                             Side(theirs.launches if theirs else (), theirs.static if theirs else None,
                                  result.reference.median_ms * 1e-3),
                             case_id=result.perf_id, matmul=result.target in matmul, flops=flops)
        if not profile.not_needed:
            counters[result.perf_id] = {"student": summarise(comparison.student),
                                        "reference": summarise(comparison.reference)}
        known = comparisons.get(result.target)
        if known is None or comparison.time_ratio > known.time_ratio:
            comparisons[result.target] = comparison
        for trap in diagnose(comparison, thresholds):
            held = traps.get((trap.target, trap.trap))
            if held is None or comparison.time_ratio > held[0]:
                traps[(trap.target, trap.trap)] = (comparison.time_ratio, trap)
    if skipped:
        notes[_not_needed_note(skipped, thresholds)] = None
    return Measured(tuple(t for _, t in traps.values()), comparisons, tuple(notes), counters)
