"""Where a grade runs kernels: Triton's CPU interpreter or a CUDA GPU. One typed value for the whole grade path
(the command line parses it once; nothing compares strings). A `str` enum: it is written as its name wherever a
file holds it (results, specs, manifests) and reads back from it."""

from __future__ import annotations

import enum
from pathlib import Path

AUTO = "auto"  # what a command line may ask for: a GPU where one is usable, else the interpreter


class Backend(str, enum.Enum):
    INTERPRETER = "interpreter"
    CUDA = "cuda"

    def __str__(self) -> str:
        return self.value

    @property
    def on_gpu(self) -> bool:
        """Kernels run on a CUDA GPU: timed, memory-budgeted, sanitizable."""
        return self is Backend.CUDA

    @property
    def device(self) -> str:
        """The torch device a worker's tensors live on."""
        return "cuda" if self is Backend.CUDA else "cpu"

    @property
    def counts_traffic(self) -> bool:
        """The worker counts each launch's loads and stores (the interpreter's fence sees every access)."""
        return self is Backend.INTERPRETER


BACKENDS = tuple(b.value for b in Backend)


def parse_backend(text: str) -> Backend:
    """`interpreter` or `cuda` as a Backend; ValueError naming the known ones otherwise."""
    try:
        return Backend(text)
    except ValueError:
        raise ValueError(f"unknown backend {text!r} (known: {', '.join(BACKENDS)})") from None


def detect_backend(requested: str = AUTO) -> Backend:
    """The backend asked for, or for `auto` CUDA when a GPU is usable (torch says so), else the interpreter."""
    if requested != AUTO:
        return parse_backend(requested)
    import torch

    return Backend.CUDA if torch.cuda.is_available() else Backend.INTERPRETER


def likely_backend(requested: str = AUTO) -> Backend:
    """What `detect_backend` will most likely say, without importing torch (a GPU's device node is there): what the
    command line starts a submission's sandbox for while torch is still being imported."""
    if requested != AUTO:
        return parse_backend(requested)
    return Backend.CUDA if Path("/dev/nvidiactl").exists() else Backend.INTERPRETER
