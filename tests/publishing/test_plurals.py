"""grader/publishing/plurals.py: a count and its noun, singular for exactly one."""

from __future__ import annotations

import pytest

from grader.publishing.plurals import counted


@pytest.mark.parametrize(("number", "noun", "plural", "said"), [
    (1, "point", "", "1 point"), (1.0, "point", "", "1 point"), (0, "point", "", "0 points"),
    (0.5, "point", "", "0.5 points"), (27, "case", "", "27 cases"), (2, "error map", "", "2 error maps"),
    (1, "match", "matches", "1 match"), (3, "match", "matches", "3 matches"),
])
def test_one_is_singular_everything_else_plural(number: float, noun: str, plural: str, said: str) -> None:
    assert counted(number, noun, plural) == said
