"""kernel-grader: grades Triton kernel assignments and names the trap behind each failure.

`from grader import check; check("fused_layers.ipynb")` runs the public cases from a notebook cell
(see grader.operations.interactive). Importing `grader` imports nothing heavy: torch and the rest load
when `check` is called.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.results import GradeResult

__all__ = ["check"]


def check(submission: str | os.PathLike[str], assignment: str | None = None, *, target: str | None = None,
          backend: str = "auto", seed: int | None = None, assignments: str | os.PathLike[str] | None = None,
          show: bool = True) -> GradeResult:
    """Run the public cases on a submission (.py or .ipynb), show the report, return the GradeResult."""
    from grader.operations.interactive import check as run

    return run(submission, assignment, target=target, backend=backend, seed=seed, assignments=assignments,
               show=show)
