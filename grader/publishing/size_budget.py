"""Every report stays under a size budget: `render_capped` renders with the most detail that fits, stepping
down through DETAIL_LEVELS (full; shorter messages and no maps; no messages and no comparisons), and as a
last resort cuts the text at a line, closing a Markdown code block the cut left open, so the result is
always well-formed."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

MAX_MESSAGE_CHARS = 3000


@dataclass(frozen=True)
class Detail:
    """How much a rendering shows; the budget steps down through DETAIL_LEVELS."""

    message_chars: int
    maps: bool
    comparisons: bool


DETAIL_LEVELS = (Detail(MAX_MESSAGE_CHARS, True, True), Detail(400, False, True), Detail(0, False, False))


def render_capped(render_at: Callable[[Detail], str], max_chars: int | None) -> str:
    """What `render_at(detail)` gives at the most detail that fits in max_chars; the last resort cuts the text."""
    text = ""
    for detail in DETAIL_LEVELS:
        text = render_at(detail)
        if max_chars is None or len(text) <= max_chars:
            return text
    assert max_chars is not None
    marker = "\n[report cut to its size limit]\n"
    cut = text[: max(0, max_chars - len(marker))]
    cut = cut[: cut.rfind("\n") + 1]  # whole lines
    closing = open_fence(cut)
    while closing and len(cut) + len(closing) + 1 + len(marker) > max_chars:
        cut = cut[: cut.rfind("\n", 0, len(cut) - 1) + 1]  # room for the fence that closes the open block
        closing = open_fence(cut)
    return cut + (closing + "\n" if closing else "") + marker


_FENCE = re.compile(r"^`{3,}")


def open_fence(markdown: str) -> str:
    """The fence that closes a Markdown code block left open at the end of `markdown` ("" when none is): a
    report cut to its size must not swallow what follows into a code block."""
    fence = ""
    for line in markdown.splitlines():
        stripped = line.strip()
        if not fence and _FENCE.match(stripped):
            fence = re.match(r"^`+", stripped).group(0)  # type: ignore[union-attr]
        elif fence and re.fullmatch(r"`+", stripped) and len(stripped) >= len(fence):
            fence = ""
    return fence
