"""Student-controlled text (messages, printed output, file names) made safe for a report: `clean` strips
terminal escapes and control characters and cuts to a size (the views call it); `md_inline` and `md_fence`
escape and fence text in Markdown (the templates' `md` and `fence` filters). HTML is autoescaped by
jinja2 (grader.publishing.jinja_environment)."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~])")


def clean(text: str, limit: int | None = None) -> str:
    """Student-controlled text made safe to print anywhere: no terminal escapes or control
    characters (newlines and tabs stay), at most `limit` characters."""
    text = _CONTROL.sub("", _ANSI.sub("", str(text)))
    if limit is None or len(text) <= limit:
        return text
    cut = len(text) - limit
    return text[:limit].rstrip() + f" ... [{cut} more characters cut]" if limit else f"[{cut} characters cut]"


def md_inline(text: str) -> str:
    """Text for one line of Markdown: newlines folded, Markdown and HTML characters escaped."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def md_fence(text: str) -> str:
    """A backtick fence longer than any backtick run in `text`, so the text cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)
