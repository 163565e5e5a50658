"""Student text made safe for a report (grader/publishing/safe_text.py): escapes and control characters
stripped, cut to a size; Markdown escaped, and fenced with a fence the text cannot close."""

from __future__ import annotations

from grader.publishing.safe_text import clean, md_fence, md_inline


def test_clean_strips_terminal_escapes_and_cuts() -> None:
    assert clean("a\x1b[1;31mb\x1b[0m\tc\r\nd\x00e") == "ab\tc\nde"
    assert clean("x" * 50, 10) == "x" * 10 + " ... [40 more characters cut]"
    assert clean("x" * 50, 0) == "[50 characters cut]"
    assert md_fence("a ```` b") == "`````"
    assert md_fence("plain") == "```"


def test_md_inline_folds_newlines_and_escapes_markdown_and_html() -> None:
    assert md_inline("a\n  b\tc") == "a b c"
    assert md_inline("<b>*x*_y_</b>") == r"\<b\>\*x\*\_y\_\</b\>"
    assert md_inline("[link](x) | `code` ~ & \\") == r"\[link\](x) \| \`code\` \~ \& \\"
