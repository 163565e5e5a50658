"""The one jinja2 environment (grader/publishing/jinja_environment.py): HTML templates autoescape and the
Markdown and text ones do not (they escape with the `md` filter), an undefined name is an error, not an
empty string, and the shared filters format as the templates expect."""

from __future__ import annotations

import jinja2
import pytest

from grader.publishing.jinja_environment import template_environment


def test_html_templates_autoescape_and_the_others_do_not() -> None:
    env = template_environment()
    assert {"report.html", "report.md.j2", "summary.txt.j2", "class_report.html", "similarity.html"} <= set(
        env.list_templates())
    assert [env.autoescape(name) for name in ("report.html", "class_report.html")] == [True, True]
    assert [env.autoescape(name) for name in ("report.md.j2", "summary.txt.j2")] == [False, False]
    assert env.from_string("{{ x }}").render(x="<b>") == "<b>"


def test_an_undefined_name_is_an_error() -> None:
    with pytest.raises(jinja2.UndefinedError):
        template_environment().from_string("{{ v.no_such_field }}").render(v={})


def test_blocks_leave_no_blank_lines() -> None:
    template = template_environment().from_string("  {% if x %}\nshown\n  {% endif %}\nend\n")
    assert template.render(x=True) == "shown\nend\n" and template.render(x=False) == "end\n"


def test_the_shared_filters() -> None:
    filters = template_environment().filters
    assert filters["md"]("a *b*\nc") == r"a \*b\* c"
    assert filters["fence"]("x ``` y") == "````"
    assert (filters["num"](2.0), filters["num"](2.5), filters["num"](1e-6)) == ("2", "2.5", "1e-06")
    assert (filters["value"](0.123456789), filters["value"](3), filters["value"]("nan")) == ("0.1234568", "3", "nan")
    assert template_environment().from_string("{{ 1 | counted('case') }}, {{ 2 | counted('case') }}").render() == (
        "1 case, 2 cases")
