"""What an assignment's oracle module provides: one `Problem` per computation, registered by name.

An assignment module defines `PROBLEMS: dict[str, Problem]`. A problem builds the logical inputs of
one case, the float64 oracle outputs, how those inputs bind to a kernel's parameters or to a
wrapper's arguments, and its trap signatures ("mutant oracles": what the output would be under one
named mistake). Everything here runs in the grader's own process; nothing touches student code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class In:
    """Pass the logical input tensor `name` (placed in a guarded buffer); `transpose` passes `.T`."""

    name: str
    transpose: bool = False


@dataclass(frozen=True)
class Out:
    """An output buffer the grader allocates, poisons and guards, compared as output `name`.

    `like` names a pointer parameter whose row stride the output must share (e.g. LayerNorm's `out`
    has the same row stride as `x`).
    """

    name: str
    shape: tuple[int, ...]
    like: str | None = None
    dtype: torch.dtype = torch.float32


@dataclass(frozen=True)
class Stride:
    """The stride (in elements) along `dim` of the tensor bound to pointer parameter `param`."""

    param: str
    dim: int


KernelArg = In | Out | Stride | int | float


@dataclass(frozen=True)
class Signature:
    """A trap's predicted outputs. Positions in `undefined` (e.g. values that would come from an
    out-of-bounds read) are not compared."""

    outputs: Mapping[str, torch.Tensor]
    undefined: Mapping[str, torch.Tensor] = field(default_factory=dict)
    # Positions where the mistake can produce any value, NaN included (e.g. sqrt of a negative
    # variance): not compared, and NaN there is explained by the trap rather than an OOB read.
    unconstrained: Mapping[str, torch.Tensor] = field(default_factory=dict)
    # Extra absolute tolerance per element, for mistakes whose float32 result can only be bounded
    # (e.g. catastrophic cancellation): the student's value must lie within this band.
    slack: Mapping[str, torch.Tensor] = field(default_factory=dict)
    # With a slack band, the student's output must also stray this far from the correct oracle
    # somewhere, so that an unrelated small error is not mistaken for this trap.
    min_deviation: float = 0.0
    # A property of the outputs instead of predicted values, for mistakes whose float32 result cannot
    # be predicted but can be recognised (e.g. LayerNorm without eps gives unit-variance rows).
    predicate: Callable[[Mapping[str, torch.Tensor]], bool] | None = None


TrapFunction = Callable[[Mapping[str, Any]], Mapping[str, torch.Tensor] | Signature | list[Signature] | None]


@dataclass(frozen=True)
class Baseline:
    """How a problem is timed against torch eager, and what one run of it costs (for performance cases).

    - `run(inputs)`: torch eager on the logical inputs (tensors already on the GPU), e.g.
      `F.layer_norm(...)`. It returns a tensor or a tuple whose items are the outputs named, in order,
      by `outputs`; the student's output at the timed size is checked against them.
    - `bytes_moved(dims)`: bytes a kernel must read and write at least (memory-bound problems: the
      report gives achieved bandwidth as a share of the device's measured copy bandwidth), or None.
    - `flops(dims)`: floating-point operations of one run (compute-bound problems: TFLOP/s), or None.
    - `tf32`: time torch with `torch.backends.cuda.matmul.allow_tf32 = True` (fair when tl.dot on
      float32 uses tf32 too).
    """

    label: str
    run: Callable[[Mapping[str, Any]], Any]
    outputs: tuple[str, ...] = ("out",)
    bytes_moved: Callable[[Mapping[str, int]], int] | None = None
    flops: Callable[[Mapping[str, int]], int] | None = None
    tf32: bool = False


@dataclass(frozen=True)
class Problem:
    """One computation of an assignment, shared by the kernel and the wrapper that compute it.

    - `make_inputs(case, maker)`: logical inputs by name (CPU tensors in the case's dtype, scalars).
    - `expected(inputs)`: the oracle outputs by name, float64.
    - `kernel_args(inputs)`: kernel parameter name -> In / Out / Stride / scalar (constexprs excluded).
    - `call_args(inputs)`: wrapper (positional args, keyword args); tensors as `In` references.
    - `traps`: trap id -> signature function; it returns a Signature (or a list of alternatives, or
      a plain dict of outputs), or None where the trap does not apply to the inputs. Trap functions
      also receive `inputs["_row_strides"]`: the row stride (elements) of each input as placed,
      `inputs["_strides"]`: all of its strides (a tensor of more than two dimensions, a swapped layout), and
      `inputs["_launches"]`: the launches that computed the outputs, each `{"kernel", "grid", "meta"}`
      with `meta` the values of the kernel's constexpr parameters (block sizes): for a kernel case the
      grader's own launch (the case's meta), for a wrapper case each launch of its launch record.
    - `baseline`: torch eager and the bytes/flops of one run, for `[[performance]]` cases.
    - `output_dtypes(inputs)`: each output's dtype by name, where they differ from the case's dtype (an
      attention kernel on float16 inputs writes its output in float16 and its log-sum-exp in float32); by
      default every output is in the case's dtype.
    """

    name: str
    make_inputs: Callable[..., dict[str, Any]]
    expected: Callable[[Mapping[str, Any]], dict[str, torch.Tensor]]
    kernel_args: Callable[[Mapping[str, Any]], dict[str, KernelArg]] | None = None
    call_args: Callable[[Mapping[str, Any]], tuple[list[Any], dict[str, Any]]] | None = None
    traps: Mapping[str, TrapFunction] = field(default_factory=dict)
    baseline: Baseline | None = None  # torch eager and the cost model, for performance cases
    output_dtypes: Callable[[Mapping[str, Any]], Mapping[str, torch.dtype]] | None = None

    def dtypes_of_outputs(self, inputs: Mapping[str, Any], names: Iterable[str],
                          case_dtype: str) -> dict[str, torch.dtype]:
        """The dtype each named output must have: `output_dtypes`' word, else the case's dtype."""
        declared = dict(self.output_dtypes(inputs)) if self.output_dtypes is not None else {}
        return {name: declared.get(name, getattr(torch, case_dtype)) for name in names}
