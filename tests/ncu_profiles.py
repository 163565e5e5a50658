"""Nsight Compute `--csv --print-units base` output for the kernels of issue 28, built from the H200 runs
(TRITON_FACTS.md, "Added 2026-12-02", and issue 28's table). A number the runs did not report is derived
from the shape (requests = bytes / bytes per request) or marked `# assumed`.

Row kernels: row_mean_var on 8192 x 8192 float32 (268,435,456 bytes), one program per row unless said.
Matmuls: fused_linear_gelu at M = N = K = 4096, tf32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from grader.evidence import kernel_profiles as ncu

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
UNITS = {
    ncu.DRAM_READ: "byte", ncu.DRAM_WRITE: "byte", ncu.LOAD_REQUESTS: "request", ncu.LOAD_SECTORS: "sector",
    ncu.STORE_REQUESTS: "request", ncu.STORE_SECTORS: "sector", ncu.OCCUPANCY: "%", ncu.TENSOR_PIPE: "%",
    ncu.GRID_SIZE: "", ncu.BLOCK_SIZE: "", ncu.REGISTERS: "register/thread", ncu.DURATION: "nsecond",
    ncu.DRAM_THROUGHPUT: "%", ncu.SM_THROUGHPUT: "%",
}
ROW_BYTES = 8192 * 8192 * 4
FLOPS_4096 = 2 * 4096**3


@dataclass(frozen=True)
class Run:
    """One profiled launch, as the numbers a run showed."""

    kernel: str
    time_us: float
    grid: tuple[int, int, int]
    block: int
    dram_read: float
    dram_write: float
    dram_pct: float
    occupancy: float
    loads: tuple[float, float] = (0, 0)  # (requests, sectors)
    stores: tuple[float, float] = (0, 0)
    tensor_pipe: float | None = None
    registers: int = 32
    sm_pct: float = 20.0  # assumed
    extra: Mapping[str, str] = field(default_factory=dict)  # metric -> raw value text

    def metrics(self) -> dict[str, float | None]:
        return {
            ncu.DRAM_READ: self.dram_read, ncu.DRAM_WRITE: self.dram_write,
            ncu.LOAD_REQUESTS: self.loads[0], ncu.LOAD_SECTORS: self.loads[1],
            ncu.STORE_REQUESTS: self.stores[0], ncu.STORE_SECTORS: self.stores[1],
            ncu.OCCUPANCY: self.occupancy, ncu.TENSOR_PIPE: self.tensor_pipe,
            ncu.GRID_SIZE: self.grid[0] * self.grid[1] * self.grid[2], ncu.BLOCK_SIZE: self.block,
            ncu.REGISTERS: self.registers, ncu.DURATION: self.time_us * 1000,
            ncu.DRAM_THROUGHPUT: self.dram_pct, ncu.SM_THROUGHPUT: self.sm_pct,
        }


def _value(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def csv_text(*runs: Run, preamble: bool = True, first_id: int = 0) -> str:
    """ncu's stdout for these launches: the program's output and ncu's ==PROF== lines, then the CSV."""
    lines = ["==PROF== Connected to process 40213 (/usr/bin/python3.12)",
             "row_mean_var: ok", "==PROF== Profiling \"row_mean_var_kernel\" - 0: 0%....50%....100% - 9 passes",
             "==PROF== Disconnected from process 40213"] if preamble else []
    lines.append(HEADER)
    for n, run in enumerate(runs, start=first_id):
        grid = f"({run.grid[0]}, {run.grid[1]}, {run.grid[2]})"
        values = {k: _value(v) for k, v in run.metrics().items()} | dict(run.extra)
        for name in sorted(values):
            cells = [str(n), "40213", "python3.12", "127.0.0.1", run.kernel, "1", "7", f"({run.block}, 1, 1)",
                     grid, "0", "9.0", "Command line profiler metrics", name, UNITS.get(name, ""), values[name]]
            lines.append(",".join(f'"{c}"' for c in cells))
    return "\n".join(lines) + "\n"


def _row(kernel: str, time_us: float, read: float, dram_pct: float, occupancy: float, sectors_per_request: float,
         block: int = 256, grid: int = 8192, bytes_per_request: float = 512.0) -> Run:
    requests = read / bytes_per_request
    return Run(kernel, time_us, (grid, 1, 1), block, read, 2 * 8192 * 4, dram_pct, occupancy,
               loads=(requests, requests * sectors_per_request), stores=(2 * 8192, 2 * 8192))


# Row kernels (8192 x 8192 float32). The reference's 128-bit loads: 512 bytes, 16 sectors per warp request.
ROW_REFERENCE = _row("row_mean_var_kernel", 61, ROW_BYTES, 92.0, 95.0, 16)
ROW_CLOSE = _row("row_mean_var_kernel", 64, ROW_BYTES, 88.0, 94.0, 16, block=128)  # assumed: num_warps 4, +5%
# Each lane walks its own 32-column segment: 32 lanes x 4 bytes a request, each lane its own sector.
ROW_SEGMENTS = _row("row_mean_var_kernel", 281, 271_000_000, 20.0, 90.0, 32, bytes_per_request=128)  # read: assumed
ROW_ONE_WARP = _row("row_mean_var_kernel", 167, ROW_BYTES, 34.0, 43.0, 2, block=32, bytes_per_request=64)
ROW_THREE_PASSES = _row("row_mean_var_kernel", 187, 803_000_000, 90.0, 94.0, 16)  # time: assumed (3 x 61 us + 2%)
ROW_SERIAL = _row("row_mean_var_kernel", 16_005, ROW_BYTES, 0.7, 6.2, 16, block=128, grid=1)  # occupancy: assumed

# Matmuls (4096^3 tf32): 64 MB written either way.
MM_WRITE = 4096 * 4096 * 4


def _mm(kernel: str, time_us: float, dram_mb: float, tensor: float, grid: int, block: int, occupancy: float,
        registers: int = 168) -> Run:
    read = dram_mb * 1e6 - MM_WRITE
    return Run(kernel, time_us, (grid, 1, 1), block, read, MM_WRITE, 40.0, occupancy,
               loads=(read / 512, read / 32), stores=(MM_WRITE / 512, MM_WRITE / 32), tensor_pipe=tensor,
               registers=registers)


# grids and occupancies assumed from the tiles: 128x256 tiles, 8 warps, one program per SM for shared memory.
MM_REFERENCE = _mm("fused_linear_gelu_kernel", 397, 348, 81.0, 512, 256, 12.4)
MM_BROADCAST = _mm("fused_linear_gelu_kernel", 982, 809, 30.0, 16384, 128, 24.0)  # 32x32 tiles, BLOCK_K 8
MM_TINY_TILES = _mm("fused_linear_gelu_kernel", 4634, 9010, 9.0, 65536, 32, 47.0, registers=64)  # 16x16x16, 1 warp
# Illustrative (not measured): a k-loop of outer products on the CUDA cores, and 256x256x64 tiles that spill.
MM_OUTER_PRODUCTS = _mm("fused_linear_gelu_kernel", 3900, 420, 0.0, 4096, 128, 40.0)
MM_SPILLING = _mm("fused_linear_gelu_kernel", 610, 300, 52.0, 256, 128, 6.0, registers=255)
