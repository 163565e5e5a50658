"""The one jinja2 environment every view of grader/publishing/ renders with (a grade's reports, the class
report, the similarity page): templates from grader/publishing/templates/, HTML autoescaped, undefined
names an error, and the filters the templates share (`md`, `fence`, `num`, `value`, `counted`)."""

from __future__ import annotations

import jinja2

from grader.publishing.plurals import counted
from grader.publishing.safe_text import md_fence, md_inline


def template_environment() -> jinja2.Environment:
    """The one jinja2 environment of every view (student reports, class report): autoescaped HTML."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("grader.publishing", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=False),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["md"] = md_inline
    env.filters["fence"] = md_fence
    env.filters["num"] = lambda x: f"{x:g}"
    env.filters["value"] = lambda x: f"{x:.7g}" if isinstance(x, float) else str(x)
    env.filters["counted"] = counted  # {{ n | counted('case') }}: "1 case", "2 cases"
    return env
