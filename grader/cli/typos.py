"""A mistyped command line, answered with help: the parser class of `grader` and its subcommands (CommandParser).

An option a subcommand does not know is reported by that subcommand, with its own usage (argparse leaves it to the
top-level parser, whose usage lists the subcommands), and the nearest option it has is suggested ("did you mean
--assignment?"); an unknown subcommand, or any other value outside its choices, gets the nearest choice. The same
on every Python from 3.10: argparse suggests nothing before 3.14, and from 3.14 only where asked (its own
suggestion is never added to ours). Suggestions come from difflib."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # a negative number is a value, never an option


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The known word closest to `word` (difflib's ratio at least 0.6), or None."""
    matches = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(pairs: Sequence[tuple[str, str]], message: str = "") -> str:
    """"did you mean --assignment?" for one (typed, suggested) pair that the error's `message` names already; else
    each suggestion names what was typed ("did you mean --assignment (for --assignement)?")."""
    if not pairs:
        return ""
    if len(pairs) == 1 and pairs[0][0] in message.split():
        return f"did you mean {pairs[0][1]}?"
    return "did you mean " + ", ".join(f"{suggested} (for {typed})" for typed, suggested in pairs) + "?"


def option_typos(tokens: Iterable[str], known: Sequence[str]) -> list[tuple[str, str]]:
    """(typed, nearest known option) for each token that looks like an option, is not one of `known` (nor a prefix
    of one, which argparse accepts) and has a near known option. Stops at "--" (what follows is never an option)."""
    out = []
    for token in tokens:
        if token == "--":
            break
        if not token.startswith("-") or token == "-" or _NUMBER.match(token):
            continue
        typed = token.split("=", 1)[0]
        if any(option.startswith(typed) for option in known):
            continue
        suggestion = nearest(typed, known)
        if suggestion is not None and (typed, suggestion) not in out:
            out.append((typed, suggestion))
    return out


class CommandParser(argparse.ArgumentParser):
    """`grader`'s parser (and, through add_subparsers, each subcommand's): its errors suggest what was meant."""

    _given: tuple[str, ...] = ()

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("parser_class", SubcommandParser)
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._given = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """argparse's error (this parser's usage, exit code 2), with the nearest option for any it does not know."""
        hint = did_you_mean(option_typos(self._own_tokens(), self._option_names()), message)
        super().error(f"{message}; {hint}" if hint and "did you mean" not in message else message)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value outside `choices` (an unknown subcommand, `--backend cdua`): the nearest choice, if one is near."""
        choices = action.choices
        if (choices is not None and isinstance(value, str) and value not in choices
                and all(isinstance(c, str) for c in choices)):
            names = list(choices)
            suggestion = nearest(value, names)
            hint = f"; did you mean {suggestion!r}?" if suggestion else ""
            listed = ", ".join(repr(c) for c in names)
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from {listed})")
        super()._check_value(action, value)

    def _option_names(self) -> list[str]:
        return list(self._option_string_actions)

    def _own_tokens(self) -> tuple[str, ...]:
        """The tokens this parser reads itself: for the top level, those before the subcommand's name."""
        commands = {name for action in self._actions if isinstance(action, argparse._SubParsersAction)
                    for name in action.choices}
        for i, token in enumerate(self._given):
            if token in commands:
                return self._given[:i]
        return self._given


class SubcommandParser(CommandParser):
    """A subcommand's parser: what it does not recognise is an error here, shown with this subcommand's usage."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras
