"""What Nsight Compute and the compiler say about a kernel, as plain values: one profiled launch
(`KernelProfile`, parsed from ncu's CSV by grader.running.profiling.ncu) and the static facts of its compiled code
(`StaticFacts`). grader.judging.gpu_performance_traps judges them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# The counters asked for, one name each (Nsight Compute's metric names; `ncu --query-metrics` lists them).
# All of them were read by ncu 2025.3.1 on the H200 for Triton kernels (TRITON_FACTS.md, "Added 2026-12-02").
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
LOAD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"  # global load instructions, per warp
LOAD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"  # 32-byte sectors they touched
STORE_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
STORE_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"  # achieved occupancy, % of the SM's warps
# The tensor pipe's busy share. Uncertain on Hopper: "hmma" names the warp-level MMA pipe; the H200 run
# showed 81% for a tl.dot matmul (compiled to wgmma) and 30% for a broadcast-sum, so wgmma is counted there,
# but NVIDIA's docs do not say so for sm_90 and a newer ncu may split the pipe (check `--query-metrics`).
TENSOR_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
GRID_SIZE = "launch__grid_size"  # programs (thread blocks) in the launch, all axes multiplied
BLOCK_SIZE = "launch__block_size"  # threads per program (num_warps x 32 for Triton)
REGISTERS = "launch__registers_per_thread"
DURATION = "gpu__time_duration.sum"
DRAM_THROUGHPUT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"

# What a grade asks ncu for: the counters the judge reads (gpu_performance_traps) and the report shows. The two
# throughput breakdowns above are not asked for (nothing reads them, and a breakdown costs ncu replay passes
# inside the exclusive slot, which a class's grades take one at a time); recorded CSV may still carry them.
METRICS = (DRAM_READ, DRAM_WRITE, LOAD_REQUESTS, LOAD_SECTORS, STORE_REQUESTS, STORE_SECTORS, OCCUPANCY,
           TENSOR_PIPE, GRID_SIZE, BLOCK_SIZE, REGISTERS, DURATION)


@dataclass(frozen=True)
class KernelProfile:
    """One profiled kernel launch. `metrics`: name -> value in ncu's base units (bytes, nanoseconds, percent,
    counts); a counter ncu could not read ("n/a") is absent."""

    launch_id: int
    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    metrics: Mapping[str, float] = field(default_factory=dict)

    def get(self, name: str, default: float = 0.0) -> float:
        return self.metrics.get(name, default)

    @property
    def programs(self) -> int:
        """Programs (thread blocks) of the launch: ncu's launch__grid_size, else the Grid Size column."""
        if GRID_SIZE in self.metrics:
            return int(self.metrics[GRID_SIZE])
        return _product(self.grid)

    @property
    def threads(self) -> int:
        """Threads per program: ncu's launch__block_size, else the Block Size column."""
        if BLOCK_SIZE in self.metrics:
            return int(self.metrics[BLOCK_SIZE])
        return _product(self.block)

    @property
    def time_ns(self) -> float:
        return self.get(DURATION)


def _product(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out if values else 0


@dataclass(frozen=True)
class StaticFacts:
    """What the compiled kernel says without running it."""

    tensor_cores: bool
    vector_loads: bool
    registers: int
    spills: int


# Static facts of a compiled Triton kernel, read in the worker that compiled it (pure): `kernel.asm["ptx"]` /
# `["sass"]`, `kernel.n_regs`, `kernel.n_spills`.
_TENSOR_CORE = re.compile(r"\bwgmma\.|\bmma\.sync\b|\bmma\.|\bH(?:G)?MMA\b")  # PTX wgmma/mma; SASS HMMA/HGMMA
_VECTOR_LOAD = re.compile(r"\bld\.global(?:\.[\w:]+)*?\.v4\.|\bLDG\.E(?:\.\w+)*?\.128\b")  # PTX / SASS 128-bit


def uses_tensor_cores(assembly: str) -> bool:
    """Whether PTX or SASS text holds a tensor-core instruction (wgmma / mma; HGMMA / HMMA)."""
    return bool(_TENSOR_CORE.search(assembly))


def vectorised_loads(assembly: str) -> bool:
    """Whether PTX or SASS text holds a 128-bit global load (ld.global.v4 / LDG.E.128): four float32 per lane."""
    return bool(_VECTOR_LOAD.search(assembly))


def static_facts(assembly: str, n_regs: int, n_spills: int) -> StaticFacts:
    return StaticFacts(uses_tensor_cores(assembly), vectorised_loads(assembly), int(n_regs), int(n_spills))


@dataclass(frozen=True)
class SideProfile:
    """One side's (the student's or the reference's) profiled run of one timed case: its kernel launches in launch
    order (empty where the counters could not be read) and what the compiler says of each kernel it launched."""

    launches: tuple[KernelProfile, ...] = ()
    kernels: Mapping[str, StaticFacts] = field(default_factory=dict)

    @property
    def static(self) -> StaticFacts | None:
        """The kernels' facts together: the most registers and spills, any tensor-core or 128-bit load."""
        if not self.kernels:
            return None
        facts = list(self.kernels.values())
        return StaticFacts(any(f.tensor_cores for f in facts), any(f.vector_loads for f in facts),
                           max(f.registers for f in facts), max(f.spills for f in facts))

    def to_dict(self) -> dict[str, Any]:
        return {"launches": [{"launch_id": p.launch_id, "kernel": p.kernel, "grid": list(p.grid),
                              "block": list(p.block), "metrics": dict(p.metrics)} for p in self.launches],
                "kernels": {name: asdict(f) for name, f in self.kernels.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SideProfile:
        """Raises KeyError, TypeError or ValueError on anything but the shape `to_dict` writes."""
        launches = tuple(KernelProfile(int(p["launch_id"]), str(p["kernel"]), tuple(int(v) for v in p["grid"]),
                                       tuple(int(v) for v in p["block"]),
                                       {str(k): float(v) for k, v in dict(p["metrics"]).items()})
                         for p in data.get("launches", ()))
        kernels = {str(name): StaticFacts(bool(f["tensor_cores"]), bool(f["vector_loads"]), int(f["registers"]),
                                          int(f["spills"])) for name, f in dict(data.get("kernels", {})).items()}
        return cls(launches, kernels)


@dataclass(frozen=True)
class CaseProfile:
    """What profiling found for one timed case: both sides' profiles (None where a side could not be profiled) and,
    where the counters could not be read (ncu missing or refused), why, in one line. `not_needed`: the counters were
    not read because no trap could be named from them (the case ran within reach of the reference's time: a class
    batch profiles only the cases counters can explain), in one line."""

    perf_id: str
    target: str
    student: SideProfile | None = None
    reference: SideProfile | None = None
    unmeasured: str = ""
    not_needed: str = ""

    @property
    def measured(self) -> bool:
        return bool(self.student and self.student.launches and self.reference and self.reference.launches)
