"""A count with its noun, singular for exactly one ("1 point", "0.5 points", "3 cases"): every count the terminal
and the reports print goes through `counted` (the templates as the `counted` filter)."""

from __future__ import annotations


def counted(number: float, noun: str, plural: str = "") -> str:
    """`number` (as `:g` writes it) and `noun`, or `plural` (default: noun + "s") unless the number is exactly 1."""
    return f"{number:g} {noun if number == 1 else plural or noun + 's'}"
