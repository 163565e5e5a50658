"""The command line, the top layer: parse (`parser`), build one request, hand it to grader.operations, print
(`grading`, `course`); `main(argv) -> int` and the console script's `entry_point` (`main`). May import every layer
below it; nothing imports it."""

from grader.cli.main import entry_point, main
from grader.cli.parser import build_parser

__all__ = ["build_parser", "entry_point", "main"]
