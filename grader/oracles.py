"""What an assignment's `oracles.py` imports: the one public surface for writing oracles.

    from grader.oracles import Baseline, Case, In, InputMaker, Out, Problem, Signature, Stride

An oracle module defines `PROBLEMS: dict[str, Problem]` (see docs/writing-an-assignment.md). Everything
else in `grader` may move between releases; these names stay.
"""

from grader.authoring.inputs import KINDS, InputMaker
from grader.authoring.problem import Baseline, In, KernelArg, Out, Problem, Signature, Stride, TrapFunction
from grader.authoring.spec import Case

__all__ = ["KINDS", "Baseline", "Case", "In", "InputMaker", "KernelArg", "Out", "Problem", "Signature", "Stride",
           "TrapFunction"]
