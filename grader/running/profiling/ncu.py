"""Nsight Compute (ncu): find the tool, build its command, parse its counters; and the static facts of a compiled
kernel. Everything past `profiler_command` is pure (text in, dataclasses out).

Groundwork for issue 28, not wired into the grade path yet (docs/performance.md, "GPU performance traps"): a
GPU session profiles one replay of a case's recorded launches, outside the timing slot, under
`ncu --clock-control none` (the GPU keeps its own clocks; nothing here changes clocks or resets the GPU), and
judges the profiles with grader/judging/gpu_performance_traps.py. Where ncu is refused (ERR_NVGPUCTRPERM: not
root, or `NVreg_RestrictProfilingToAdminUsers=1`), the static facts of the compiled kernel (`StaticFacts`:
tensor-core instructions, vector loads, registers, spills) still say something.
"""

from __future__ import annotations

import csv
import glob
import io
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from grader.evidence.kernel_profiles import (  # noqa: F401 - the static readers live beside the values
    METRICS,
    KernelProfile,
    StaticFacts,
    static_facts,
    uses_tensor_cores,
    vectorised_loads,
)

_CANDIDATES = ("/usr/local/cuda/bin/ncu",)
_GLOBS = ("/opt/nvidia/nsight-compute/*/ncu",)

# Only options that read counters: `--clock-control none` leaves the GPU's clocks as they are (ncu's default
# locks them to base), so a profile sees the clocks a timed run sees. No --reset, no --clock-control base.
PROFILER_ARGS = ("--clock-control", "none", "--csv", "--print-units", "base")

# ncu's units -> the factor to its base unit (bytes, nanoseconds); what `--print-units base` prints already.
_UNIT_SCALE = {
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
}
_HEADER = '"ID",'
_TRIPLE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def find_ncu() -> str | None:
    """The ncu executable: on PATH, in the CUDA toolkit, or in a standalone Nsight Compute install (the newest)."""
    found = shutil.which("ncu") or next((c for c in _CANDIDATES if Path(c).is_file()), None)
    if found:
        return found
    installed = sorted(p for pattern in _GLOBS for p in glob.glob(pattern) if Path(p).is_file())
    return installed[-1] if installed else None


def profiler_command(kernel_name: str, launch_count: int = 1, metrics: Sequence[str] = METRICS,
                     ncu: str | None = None) -> tuple[str, ...] | None:
    """The ncu command prefix that profiles the first `launch_count` launches of the kernel named exactly
    `kernel_name` (the program to run goes after it), or None where ncu is not installed."""
    found = ncu or find_ncu()
    if found is None:
        return None
    if launch_count < 1:
        raise ValueError(f"launch_count must be at least 1, not {launch_count}")
    return (found, *PROFILER_ARGS, "--metrics", ",".join(metrics),
            "--kernel-name", f"regex:^{re.escape(kernel_name)}$", "--launch-count", str(launch_count))


# At most this many launches of one run are profiled: each costs several replays of the kernel under the counters.
# A case puts at most 8 in the range (planned_launches.PROFILED_LAUNCHES_PER_CASE): eight cases' worth.
MAX_PROFILED_LAUNCHES = 64


def range_profiler_command(ncu: str | None = None, metrics: Sequence[str] = METRICS,
                           max_launches: int = MAX_PROFILED_LAUNCHES) -> tuple[str, ...] | None:
    """The ncu command prefix that profiles the launches a program makes between cudaProfilerStart and
    cudaProfilerStop (torch.cuda.profiler.start / stop), at most `max_launches` of them; None where ncu is not
    installed."""
    found = ncu or find_ncu()
    if found is None:
        return None
    return (found, "--profile-from-start", "off", *PROFILER_ARGS, "--metrics", ",".join(metrics),
            "--launch-count", str(max_launches))


def parse_number(text: str) -> float | None:
    """ncu's value text: thousands separators ("1,234.5"), or "n/a" / empty (None)."""
    cleaned = text.strip().replace(",", "")
    try:
        return float(cleaned)
    except ValueError:
        return None


def _triple(text: str) -> tuple[int, ...]:
    m = _TRIPLE.search(text or "")
    return tuple(int(g) for g in m.groups()) if m else ()


def parse_ncu_csv(text: str) -> tuple[KernelProfile, ...]:
    """Every kernel launch in ncu's `--csv` output, in launch order. The program's own output and ncu's
    `==PROF==` lines before the header are skipped; columns are found by name (ncu's releases add some)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(_HEADER)), None)
    if start is None:
        return ()
    rows = csv.DictReader(io.StringIO("\n".join(line for line in lines[start:] if line.startswith('"'))))
    launches: dict[tuple[str, str], dict[str, object]] = {}
    for row in rows:
        key = (row.get("ID") or "", row.get("Process ID") or "")
        if not key[0].isdigit():
            continue
        launch = launches.setdefault(key, {"kernel": row.get("Kernel Name") or "?",
                                           "grid": _triple(row.get("Grid Size") or ""),
                                           "block": _triple(row.get("Block Size") or ""), "metrics": {}})
        value = parse_number(row.get("Metric Value") or "")
        name = row.get("Metric Name") or ""
        if value is None or not name:
            continue
        metrics = launch["metrics"]
        assert isinstance(metrics, dict)
        metrics[name] = value * _UNIT_SCALE.get((row.get("Metric Unit") or "").strip(), 1.0)
    out = []
    for (launch_id, _pid), launch in launches.items():
        grid, block, metrics = launch["grid"], launch["block"], launch["metrics"]
        assert isinstance(grid, tuple) and isinstance(block, tuple) and isinstance(metrics, dict)
        out.append(KernelProfile(int(launch_id), str(launch["kernel"]), grid, block, dict(metrics)))
    return tuple(out)


# ncu's failures, by a piece of its output -> the one-line reason shown.
_FAILURES = (
    (re.compile(r"ERR_NVGPUCTRPERM|permission to access NVIDIA GPU Performance Counters", re.I),
     "Nsight Compute is not permitted to read the GPU's counters on this machine (ERR_NVGPUCTRPERM): it needs "
     "root, or the driver option NVreg_RestrictProfilingToAdminUsers=0; the static facts of the compiled "
     "kernel are used instead"),
    (re.compile(r"LibraryNotLoaded", re.I),
     "Nsight Compute could not load its injection library into the process (LibraryNotLoaded): the ncu "
     "release may not match the driver or the CUDA runtime the process loaded"),
    (re.compile(r"lock ?file|nsight-compute-lock", re.I),
     "Nsight Compute could not take its lock file (in /tmp, shared by every user's ncu): another user's ncu made "
     "it; the counters were not read"),
    (re.compile(r"No kernels were profiled", re.I),
     "Nsight Compute profiled no kernel: no launch matched the kernel name (or the process launched none)"),
)
NOT_INSTALLED = ("Nsight Compute (ncu) is not installed on this machine (looked on PATH, in /usr/local/cuda/bin "
                 "and /opt/nvidia/nsight-compute)")


def classify_failure(returncode: int | None, output: str, profiles_found: int = 0) -> str | None:
    """Why an ncu run gave no counters, in one line, or None when it gave some. `returncode` None: ncu was
    not found (or could not be started)."""
    if returncode is None:
        return NOT_INSTALLED
    for pattern, reason in _FAILURES:
        if pattern.search(output):
            return reason
    if profiles_found:
        return None
    errors = [line.strip() for line in output.splitlines() if line.lstrip().startswith("==ERROR==")]
    if errors:
        return f"Nsight Compute failed: {errors[0].removeprefix('==ERROR==').strip()}"
    return f"Nsight Compute gave no counters (exit code {returncode})"
