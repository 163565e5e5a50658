"""`grader new-assignment ID`: a new assignment that validates and passes its selftest as written.

The scaffold is a small, complete assignment: a row-sum kernel (`row_sum_kernel`, one program per row),
its oracle (torch's float64 sum), one assignment trap with its trap function (the last column dropped by
an off-by-one mask), one public and one hidden case, the reference solution, the student's template and
assignment text, and one mutant that proves the trap. It is written into the three folders of the course
(grader.authoring.spec), split by who may see them:

    assignments/<id>/        assignment.toml, oracles.py    the contract the grader needs
    reference/<id>/          reference.py, mutants.toml     course staff only
    student_template/<id>/   <id>.py, README.md             what students start from

An author replaces the problem piece by piece and runs `grader selftest --assignment ID` after each step
(docs/writing-an-assignment.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from grader.authoring.course_layout import REFERENCE_DIR, REFERENCE_FILE, TEMPLATE_DIR

ASSIGNMENTS = "assignments"
ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")  # a folder name and a Python module name


class ScaffoldError(Exception):
    """The scaffold cannot be written; the message is for the author."""


def write_scaffold(root: Path, assignment_id: str) -> list[Path]:
    """Write the assignment into the course whose assignments folder is `root` (refusing to touch an existing
    folder of that id in any of the three); return the three folders written."""
    if not ID_PATTERN.match(assignment_id):
        raise ScaffoldError(f"assignment id {assignment_id!r} must be lower case letters, digits and _, "
                            "starting with a letter (it names the folder and the submission file)")
    files = {_placed(rel, Path(root)): text for rel, text in scaffold_files(assignment_id).items()}
    folders = list(dict.fromkeys(path.parent for path in files))
    for folder in folders:
        if folder.exists():
            raise ScaffoldError(f"{folder} already exists; choose another id or remove it")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folders


def _placed(relative: str, root: Path) -> Path:
    """Where a course-relative path goes when the assignments folder is `root` (whatever its name)."""
    top, rest = relative.split("/", 1)
    return root / rest if top == ASSIGNMENTS else root.parent / relative


def scaffold_files(assignment_id: str) -> dict[str, str]:
    """Pure: path relative to the course folder -> text, for every file of the scaffold."""
    def fill(text: str) -> str:
        return text.replace("__ID__", assignment_id)

    return {
        f"{ASSIGNMENTS}/{assignment_id}/assignment.toml": fill(SPEC),
        f"{ASSIGNMENTS}/{assignment_id}/oracles.py": fill(ORACLES),
        f"{REFERENCE_DIR}/{assignment_id}/{REFERENCE_FILE}": fill(REFERENCE),
        f"{REFERENCE_DIR}/{assignment_id}/mutants.toml": fill(MUTANTS),
        f"{TEMPLATE_DIR}/{assignment_id}/{assignment_id}.py": fill(TEMPLATE),
        f"{TEMPLATE_DIR}/{assignment_id}/README.md": fill(README),
    }


SPEC = '''# Assignment `__ID__` (written by `grader new-assignment`): a row-sum kernel to start from. Replace the
# contract, the cases and the traps with your own; after each step `grader margins --assignment __ID__` (every case
# decides every trap by the bug, not by the draw of its inputs) and `grader selftest --assignment __ID__ --seeds 3`
# (every mutant named, with the same score at every seed): docs/writing-an-assignment.md, sections 6 and 7.
# The reference solution and the mutants are in reference/__ID__/, the template in student_template/__ID__/.

[assignment]
id = "__ID__"
title = "Row sums: one program per row"
module = "oracles.py"
submission_file = "__ID__.py"
chapter = "Reductions"
call_timeout_s = 15
import_timeout_s = 60

# ---------------------------------------------------------------------------------- tolerances
# A float32 sum of N values ~ N(0, 1) against float64: off by ~log2(N) ulps of sum(|x|) (tree sum), at
# most ~3e-5 absolute for N <= 100; the trap (a whole value missing) is off by ~1.
[tolerances.sum.interpreter.float32]
atol = 1e-4
rtol = 1e-5
why = "float32 tree sum of <= 100 N(0, 1) values: <= 7 ulps of sum(|x|) <= 80, i.e. < 4e-5 absolute."
[tolerances.sum.cuda.float32]
atol = 1e-4
rtol = 1e-5
why = "The same tree sum on a GPU: no tensor cores, no approximate functions."

# ---------------------------------------------------------------------------------- the contract
[kernels.row_sum_kernel]
params = ["x_ptr", "out_ptr", "M", "N", "stride_xm", "BLOCK_N"]
constexprs = ["BLOCK_N"]
grid = ["M"]
problem = "row_sum"
description = "out[row] = sum(x[row, :]), one program per row holding the whole row (BLOCK_N >= N)"

# ---------------------------------------------------------------------------------- traps
[traps.last-column-dropped]
title = "Last column left out of the sum"
explanation = "The mask `cols < N - 1` leaves the row's last element out: each sum is short by x[row, N - 1]."
exposed_by = "Any row: the sum misses exactly its last element."
fix = "mask = cols < N"

# ---------------------------------------------------------------------------------- cases
[[cases]]
id = "kernel-basic"
target = "row_sum_kernel"
description = "4 rows of 10"
dims = { M = 4, N = 10 }
meta = { BLOCK_N = 16 }
tolerance = "sum"
points = 1
visibility = "public"
exposes = ["last-column-dropped"]

[[cases]]
id = "kernel-prime"
target = "row_sum_kernel"
description = "7 rows of 37 (prime N)"
dims = { M = 7, N = 37 }
meta = { BLOCK_N = 64 }
tolerance = "sum"
points = 1
visibility = "hidden"
exposes = ["last-column-dropped", "oob-read"]
'''

ORACLES = '''"""Oracles and trap signatures for `__ID__`: row sums.

The oracle is torch's float64 sum of each row. Each trap function predicts what one mistake outputs on
the same inputs; the grader names the trap when the student's output matches that prediction.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.oracles import Case, In, InputMaker, Out, Problem, Signature, Stride


def row_sum_inputs(case: Case, maker: InputMaker) -> dict[str, Any]:
    return {"x": maker.normal(case.dims["M"], case.dims["N"])}


def row_sum_expected(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {"out": inputs["x"].double().sum(dim=-1)}


def row_sum_kernel_args(inputs: dict[str, Any]) -> dict[str, Any]:
    m, n = inputs["x"].shape
    return {"x_ptr": In("x"), "out_ptr": Out("out", (m,)), "M": m, "N": n, "stride_xm": Stride("x_ptr", 0)}


def trap_last_column_dropped(inputs: dict[str, Any]) -> Signature:
    """Each row summed without its last element (mask cols < N - 1)."""
    return Signature({"out": inputs["x"].double()[:, :-1].sum(dim=-1)})


PROBLEMS = {
    "row_sum": Problem(
        name="row_sum",
        make_inputs=row_sum_inputs,
        expected=row_sum_expected,
        kernel_args=row_sum_kernel_args,
        traps={"last-column-dropped": trap_last_column_dropped},
    ),
}
'''

_KERNEL_HEAD = '''import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(
    x_ptr,  # pointer to the input, shape (M, N), column stride 1
    out_ptr,  # pointer to the output, shape (M,)
    M,  # number of rows
    N,  # number of columns: the length summed over
    stride_xm,  # elements between consecutive rows of x
    BLOCK_N: tl.constexpr,  # a power of two >= N: one program holds a whole row
):
    """out[row] = sum(x[row, :]); grid = (M,)."""
'''

REFERENCE = '''"""Reference solution for the ``__ID__`` assignment: ``row_sum_kernel``, one program per row."""

''' + _KERNEL_HEAD + '''    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))
'''

TEMPLATE = '''"""Your submission for the ``__ID__`` assignment: ``row_sum_kernel``, one program per row.

Keep the name and the parameter order exactly as given: the grader launches your kernel directly, with
its own block sizes, strides and grid. Replace ``pass`` with your code. See README.md.
"""

''' + _KERNEL_HEAD + '''    pass
'''

README = '''# `__ID__`: row sums

Write `row_sum_kernel` in `__ID__.py`: program `row` (grid `(M,)`) sums row `row` of `x` (shape `(M, N)`,
row stride `stride_xm`, column stride 1) into `out[row]`. `BLOCK_N` is a power of two `>= N`: mask the
lanes past the row's end.

Check your work on the public cases:

    grader check __ID__.py
'''

MUTANTS = """# Mutants of the __ID__ reference: one student mistake each, as exact edits of the reference
# (grader/authoring/mutants.py). Review one: grader mutant ID --assignment __ID__ --diff

[[mutant]]
id = "last_column_dropped"
traps = ["last-column-dropped"]
mistake = "off-by-one mask: the last column of every row is left out of the sum"
edits = [
  { find = 'mask = cols < N', replace = 'mask = cols < N - 1' },
]
"""
