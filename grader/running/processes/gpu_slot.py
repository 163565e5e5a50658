"""One GPU shared by several grades: correctness work shares it, timing has it alone.

A reader-writer lock over files (fcntl.flock), so it holds across the processes of a batch and across
batches on one machine: correctness requests take the GPU `shared()`; a grade's timed phase takes it
`exclusive()` and waits for the shared holders to finish. A turnstile keeps a stream of shared
holders from starving the timing: once a timed phase waits, no new shared holder enters.

The lock files live in GRADER_GPU_LOCK_DIR (default: a folder under the system's temporary folder),
one pair per GPU, named by the GPU's UUID (CUDA_VISIBLE_DEVICES renumbers devices; UUIDs do not). Beside them,
the moment the last exclusive holder let go (the system's monotonic clock): `exclusive()` yields how long ago that
was, so a timed phase that follows another closely knows the GPU's clocks are still up.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from grader.running.phases import traced

LOCK_DIR_VARIABLE = "GRADER_GPU_LOCK_DIR"


def lock_dir() -> Path:
    folder = Path(os.environ.get(LOCK_DIR_VARIABLE) or Path(tempfile.gettempdir()) / "kernel-grader-gpu-locks")
    folder.mkdir(parents=True, exist_ok=True, mode=0o777)
    return folder


def gpu_name() -> str:
    """The current CUDA device's UUID (stable across CUDA_VISIBLE_DEVICES), else its index."""
    import torch

    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return str(uuid) if uuid else f"index-{index}"


class GpuSlot:
    def __init__(self, name: str, folder: Path | None = None) -> None:
        folder = folder or lock_dir()
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        self.main = folder / f"gpu-{safe}.lock"
        self.turnstile = folder / f"gpu-{safe}.turnstile"
        self.released = folder / f"gpu-{safe}.released"

    @contextmanager
    def shared(self) -> Iterator[None]:
        with _locked(self.turnstile, fcntl.LOCK_EX):
            main = _open(self.main)
            fcntl.flock(main, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)
            os.close(main)

    @contextmanager
    def exclusive(self) -> Iterator[float]:
        """The GPU alone; yields the seconds since the last exclusive holder let go (inf: never, or unreadable).
        Traced ($GRADER_PHASE_TRACE): `gpu-slot/drain`, first in line and waiting for the shared holders' requests to
        end (no other grade's GPU work starts meanwhile: the GPU idles while they finish), and `gpu-slot/exclusive`,
        the hold (benchmarks/class_phases.slot_use)."""
        with _locked(self.turnstile, fcntl.LOCK_EX), ExitStack() as held:
            with traced("gpu-slot/drain"):
                held.enter_context(_locked(self.main, fcntl.LOCK_EX))
            try:
                with traced("gpu-slot/exclusive"):
                    yield _seconds_since(self.released)
            finally:
                _write_now(self.released)  # before the main lock goes: the next holder reads this moment


def _seconds_since(path: Path) -> float:
    try:
        then = float(path.read_text())
    except (OSError, ValueError):
        return float("inf")
    age = time.monotonic() - then
    return age if age >= 0 else float("inf")  # a moment in the future: written before this boot


def _write_now(path: Path) -> None:
    """Best effort (only the slot's holder writes it): a lost moment costs the next holder a full spin-up."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            os.write(fd, repr(time.monotonic()).encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


@contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    fd = _open(path)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
