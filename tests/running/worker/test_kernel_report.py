"""grader/running/worker/kernel_report.py: a module's kernels and module-level values as plain data."""

from __future__ import annotations

import math
import textwrap
import types

import pytest
import torch
import triton
import triton.language as tl

from grader.running.worker.kernel_report import describe_kernels, encode_global


@pytest.mark.parametrize(("value", "encoded"), [
    (3, 3), (2.5, 2.5), (True, True), (None, None), ("fp32", "fp32"),
    (tl.constexpr(128), {"constexpr": 128}),
    (tl.float16, {"tl_dtype": "fp16"}),
    ((1, (2, tl.constexpr(3))), {"tuple": [1, {"tuple": [2, {"constexpr": 3}]}]}),
    (math, {"module": "math"}),
    (tl, {"module": "triton.language"}),
    (math.sqrt, {"object": "math.sqrt"}),
    (triton.cdiv, {"object": "triton.cdiv"}),
    (torch.zeros(3), {"unsupported": "Tensor"}),
    (object(), {"unsupported": "object"}),
    (lambda x: x, {"unsupported": "function"}),
    ("x" * 20_000, {"unsupported": "str (too long)"}),
])
def test_values_travel_as_data_or_only_by_their_type(value, encoded) -> None:
    assert encode_global(value) == encoded


def test_kernels_under_wrappers_and_every_value_are_reported(tmp_path) -> None:
    source = textwrap.dedent('''\
        import triton
        import triton.language as tl

        BLOCK = tl.constexpr(64)
        SCALE = 0.5


        @triton.jit
        def helper(x):
            return x * SCALE


        @triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=2)], key=["n"])
        @triton.jit(do_not_specialize=["n"])
        def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
            pass


        alias = scale_kernel


        class Thing:
            pass


        THING = Thing()
        ''')
    path = tmp_path / "submission.py"
    path.write_text(source, encoding="utf-8")
    module = types.ModuleType("submission")
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the test's own module
    report = describe_kernels(module)
    defs = {d["name"]: d for d in report["defs"]}
    assert set(defs) == {"helper", "scale_kernel"}
    assert defs["scale_kernel"]["line"] == 13 and defs["scale_kernel"]["options"]["do_not_specialize"] == ["n"]
    assert report["symbols"]["scale_kernel"] == {"def": "scale_kernel", "tuned": ["BLOCK"], "wrapped": True}
    assert report["symbols"]["alias"]["def"] == "scale_kernel"
    assert report["symbols"]["helper"] == {"def": "helper", "tuned": [], "wrapped": False}
    values = report["globals"]
    assert values["BLOCK"] == {"constexpr": 64} and values["SCALE"] == 0.5
    assert values["helper"] == {"kernel": "helper"} and values["alias"] == {"kernel": "scale_kernel"}
    assert values["THING"] == {"unsupported": "Thing"} and values["tl"] == {"module": "triton.language"}


def test_plain_helpers_a_kernel_calls_are_reported_and_no_other_function(tmp_path) -> None:
    source = textwrap.dedent('''\
        import triton
        import triton.language as tl


        def _inner(x):
            return x + 1


        def _twice(x):
            return _inner(x) * 2


        def wrapper(x):
            return x


        @triton.jit
        def k(x_ptr):
            tl.store(x_ptr, _twice(tl.load(x_ptr)))
        ''')
    path = tmp_path / "submission.py"
    path.write_text(source, encoding="utf-8")
    module = types.ModuleType("submission")
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the test's own module
    report = describe_kernels(module)
    plain = {d["name"]: d["line"] for d in report["defs"] if d.get("plain")}
    assert plain == {"_twice": 9, "_inner": 5}  # the helper and the helper it calls; never the wrapper
    assert report["globals"]["_twice"] == {"function": "_twice"} and report["globals"]["wrapper"] == {
        "unsupported": "function"}
