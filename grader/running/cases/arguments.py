"""Bind a target to a case's inputs and encode its arguments for the worker, for correctness cases
(grader.running.cases.battery) and performance cases (grader.running.timing.runner) alike.

The problem says what each parameter gets (`kernel_args`: parameter -> In / Out / Stride / scalar;
`call_args`: a wrapper's args and kwargs with tensors as `In`). A `Placement` says how the worker's
request refers to each buffer and what its strides are: the battery's guarded buffers
(`{"view": i}`), or `Contiguous` tensors for timing (`{"in": i, "T": transposed}`, `{"out": j}`).
Everything else (the parameter order, constexprs left out, a Stride read off the buffer bound to
its parameter) is here, once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from grader.authoring.problem import In, KernelArg, Out, Problem, Stride
from grader.authoring.spec import KernelSpec


class Placement(Protocol):
    """Where the buffers of one call are, as the worker's request names them."""

    def reference(self, ref: In | Out) -> Any:
        """The argument that stands for this buffer in the request."""
        ...

    def stride(self, ref: In | Out, dim: int) -> int:
        """The stride (in elements) along `dim` of this buffer, as the target sees it."""
        ...


def buffer_key(ref: In | Out) -> str:
    """One key per distinct buffer: an input and its transpose are two buffers."""
    if isinstance(ref, In):
        return f"in:{ref.name}:{'T' if ref.transpose else ''}"
    return f"out:{ref.name}"


# --------------------------------------------------------------------------- binding


def kernel_binding(problem: Problem, inputs: Mapping[str, Any]) -> dict[str, KernelArg]:
    """Kernel parameter -> In / Out / Stride / scalar, from the problem's `kernel_args`."""
    assert problem.kernel_args is not None, f"problem {problem.name} has no kernel binding"
    return problem.kernel_args(inputs)


def call_binding(problem: Problem, inputs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A wrapper's (args, kwargs), tensors as `In`, from the problem's `call_args`."""
    assert problem.call_args is not None, f"problem {problem.name} has no wrapper binding"
    return problem.call_args(inputs)


def kernel_buffers(binding: Mapping[str, Any]) -> list[In | Out]:
    """The buffers a kernel binding names, in binding order (repeats included)."""
    return [v for v in binding.values() if isinstance(v, (In, Out))]


def call_buffers(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[In]:
    """The inputs a wrapper call passes, args first, then kwargs (repeats included)."""
    return [v for v in list(args) + list(kwargs.values()) if isinstance(v, In)]


# --------------------------------------------------------------------------- encoding


def kernel_arguments(spec: KernelSpec, binding: Mapping[str, Any], placement: Placement) -> list[Any]:
    """The kernel's positional arguments in the contract's parameter order, constexprs left out (they
    go as launch meta-parameters): buffers as the placement names them, strides read off them."""
    args: list[Any] = []
    for param in spec.params:
        if param in spec.constexprs:
            continue
        value = binding[param]
        if isinstance(value, (In, Out)):
            args.append(placement.reference(value))
        elif isinstance(value, Stride):
            args.append(placement.stride(binding[value.param], value.dim))
        else:
            args.append(value)
    return args


def call_arguments(
    args: Sequence[Any], kwargs: Mapping[str, Any], placement: Placement
) -> tuple[list[Any], dict[str, Any]]:
    """A wrapper's (args, kwargs) with every `In` as the placement names it."""

    def wire(value: Any) -> Any:
        return placement.reference(value) if isinstance(value, In) else value

    return [wire(a) for a in args], {k: wire(v) for k, v in kwargs.items()}


# --------------------------------------------------------------------------- contiguous tensors (timing)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


class Contiguous:
    """Every input once, as a contiguous tensor (`{"in": i, "T": transpose}`); every kernel output a
    buffer the worker allocates (`{"out": j}`), no guards. Buffers are numbered in `buffers` order."""

    def __init__(self, inputs: Mapping[str, Any], buffers: Sequence[In | Out]) -> None:
        self.inputs = inputs
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self.outputs: list[dict[str, Any]] = []  # shape and dtype of each output buffer
        for ref in buffers:
            self.reference(ref)

    def reference(self, ref: In | Out) -> dict[str, Any]:
        if isinstance(ref, In):
            if ref.name not in self.input_names:
                self.input_names.append(ref.name)
            return {"in": self.input_names.index(ref.name), "T": ref.transpose}
        if ref.name not in self.output_names:
            self.output_names.append(ref.name)
            self.outputs.append({"shape": list(ref.shape), "dtype": str(ref.dtype).replace("torch.", "")})
        return {"out": self.output_names.index(ref.name)}

    def stride(self, ref: In | Out, dim: int) -> int:
        if isinstance(ref, Out):
            return contiguous_strides(ref.shape)[dim]
        strides = contiguous_strides(tuple(self.inputs[ref.name].shape))
        return (tuple(reversed(strides)) if ref.transpose else strides)[dim]

    def tensors(self) -> tuple[Any, ...]:
        """The inputs, in the order their references number them, each contiguous."""
        return tuple(self.inputs[n].contiguous() for n in self.input_names)
