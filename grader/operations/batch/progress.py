"""What a batch prints while it grades: a one-line bar with an ETA on a terminal, one line per
submission otherwise."""

from __future__ import annotations

import time
from typing import IO


class Progress:
    """A one-line bar with ETA when `stream` is a terminal; one plain line per submission otherwise."""

    def __init__(self, stream: IO[str], total: int, interactive: bool | None = None) -> None:
        self.stream = stream
        self.total = total
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        self.interactive = stream.isatty() if interactive is None else interactive
        self._drawn = False

    def line(self, text: str) -> None:
        if self.interactive and self._drawn:
            self.stream.write("\r\x1b[2K")
        self.stream.write(text + "\n")
        if self.interactive:
            self._draw()
        self.stream.flush()

    def advance(self, text: str, failed: bool = False) -> None:
        self.done += 1
        self.failed += int(failed)
        if self.interactive:
            if failed:
                self.line(text)
            else:
                self._draw()
        else:
            self.line(f"[{self.done:>{len(str(self.total))}}/{self.total}] {text}")

    def eta_s(self) -> float | None:
        if not self.done:
            return None
        return (time.monotonic() - self.started) / self.done * (self.total - self.done)

    def _draw(self) -> None:
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        eta = self.eta_s()
        eta_text = "--" if eta is None else duration(eta)
        failed = f"  {self.failed} failed" if self.failed else ""
        self.stream.write(f"\r\x1b[2K[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}  "
                          f"ETA {eta_text}{failed}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.interactive and self._drawn:
            self.stream.write("\n")
            self.stream.flush()

def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
