"""The ids of the generic traps: the ones the grader itself detects, for any assignment.

Their texts (title, explanation, fix) are in grader/authoring/generic_traps.toml; the ids here and
the tables there are the same set (tests/test_trap_ids.py). Assignment-specific traps are not here:
each assignment declares its own in its assignment.toml. Ids are stable: they go into results.json.
"""

from __future__ import annotations

# memory
OOB_READ = "oob-read"
OOB_WRITE = "oob-write"
UNWRITTEN_OUTPUT = "unwritten-output"
WRITES_INPUT = "writes-input"
MEMORY_FAULT = "memory-fault"  # a GPU fault (illegal or misaligned address) nothing could name oob-read/oob-write
# what a wrapper computes with
NOT_FUSED = "not-fused"
# running at all
NOT_PYTHON_SOURCE = "not-python-source"
COMPILE_ERROR = "compile-error"
RUNTIME_ERROR = "runtime-error"
INTERPRETER_UNSUPPORTED = "interpreter-unsupported"
TIMEOUT = "timeout"
CRASH = "crash"
OUT_OF_MEMORY = "out-of-memory"
IMPORT_FAILS = "import-fails"
MISSING_SYMBOL = "missing-symbol"
WRONG_SIGNATURE = "wrong-signature"
GPU_INCOMPATIBLE = "gpu-incompatible"
FALSE_HINT = "false-hint"
BAD_OUTPUT = "bad-output"
# wrong values no assignment trap explains
NONDETERMINISTIC = "nondeterministic"
PRECISION = "precision"
UNKNOWN = "unknown"
# defeating the checks
TAMPERING = "tampering"
KERNEL_NEEDS_MODULE_CODE = "kernel-needs-module-code"  # a kernel that cannot be built from data (kernel_host)
# a timed run refused (grader/judging/performance.py): never a time, never points
FASTER_THAN_HARDWARE = "faster-than-hardware"
TIMED_OUTPUT_CHANGED = "timed-output-changed"
# why it may be slow: performance traps, informational (grader/judging/performance_traps.py)
RE_READING = "re-reading"
UNCOALESCED_ACCESS = "uncoalesced-access"
NO_TENSOR_CORES = "no-tensor-cores"
LAUNCH_BOUND = "launch-bound"
# ... measured on a GPU only (grader/judging/gpu_performance_traps.py, from a cuda grade's profiled replays)
LOW_OCCUPANCY = "low-occupancy"
SERIAL_GRID = "serial-grid"
REGISTER_SPILLS = "register-spills"
LOW_ARITHMETIC_INTENSITY = "low-arithmetic-intensity"

# what an instructor must look at whatever the score: work or timings a submission forged
FLAGGED = frozenset({TAMPERING, FASTER_THAN_HARDWARE, TIMED_OUTPUT_CHANGED})

PERFORMANCE = frozenset({RE_READING, UNCOALESCED_ACCESS, NO_TENSOR_CORES, LAUNCH_BOUND, LOW_OCCUPANCY, SERIAL_GRID,
                         REGISTER_SPILLS, LOW_ARITHMETIC_INTENSITY})

GENERIC = frozenset({
    OOB_READ, OOB_WRITE, UNWRITTEN_OUTPUT, WRITES_INPUT, NOT_FUSED, COMPILE_ERROR, RUNTIME_ERROR, TIMEOUT,
    CRASH, IMPORT_FAILS, MISSING_SYMBOL, WRONG_SIGNATURE, GPU_INCOMPATIBLE, BAD_OUTPUT, NONDETERMINISTIC,
    PRECISION, UNKNOWN, TAMPERING, OUT_OF_MEMORY, INTERPRETER_UNSUPPORTED, FALSE_HINT, MEMORY_FAULT, NOT_PYTHON_SOURCE,
    KERNEL_NEEDS_MODULE_CODE, FASTER_THAN_HARDWARE, TIMED_OUTPUT_CHANGED,
}) | PERFORMANCE
