"""grader/running/bundle.py: a submission's kernels as data, cut from the grader's own copy of the file."""

from __future__ import annotations

import dataclasses
import textwrap

from grader.running.bundle import build_bundle, wrapped_symbols
from grader.running.protocol import KernelBundle, kernel_bundle_digest

SOURCE = textwrap.dedent('''\
    """A submission whose module does things at import."""
    import os
    import triton
    import triton.language as tl

    EVIL = os.system("true")
    BLOCK = tl.constexpr(128)


    @triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit(do_not_specialize=["n"])
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


    if True:
        @triton.jit
        def helper(x):
            return x * 2


    def wrapper(x):
        return x
    ''')

REPORT = {
    "defs": [{"name": "scale_kernel", "line": 10, "options": {"do_not_specialize": ["n"]}},
             {"name": "helper", "line": 18, "options": {}},
             {"name": "wrapper", "line": 99, "options": {}}],  # not where the worker says: left out
    "symbols": {"scale_kernel": {"def": "scale_kernel", "tuned": ["BLOCK"], "wrapped": True},
                "helper": {"def": "helper", "tuned": [], "wrapped": False}},
    "globals": {"BLOCK": {"constexpr": 128}, "EVIL": 0, "os": {"module": "os"}},
    "constexpr_annotated": [],
}


def test_the_bundle_holds_each_kernel_def_at_its_line_and_nothing_else() -> None:
    bundle = build_bundle(SOURCE, "submission.py", REPORT)
    lines = bundle.source.splitlines()
    assert len(lines) == len(SOURCE.splitlines())
    assert lines[11] == "def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):"  # line 12, as in the file
    assert lines[18] == "def helper(x):"  # dedented out of its `if` block, on its own line
    text = bundle.source
    for absent in ("os.system", "import", "autotune", "@triton.jit", "def wrapper", "EVIL", "if True"):
        assert absent not in text, absent
    assert [d["name"] for d in bundle.defs] == ["scale_kernel", "helper"]
    assert bundle.defs[0]["options"] == {"do_not_specialize": ["n"]}
    assert bundle.values["BLOCK"] == {"constexpr": 128} and bundle.filename == "submission.py"
    assert wrapped_symbols(bundle) == {"scale_kernel": ("BLOCK",)}


def test_the_digest_covers_every_field() -> None:
    bundle = build_bundle(SOURCE, "submission.py", REPORT)
    assert bundle.digest == kernel_bundle_digest(bundle)
    for change in ({"source": bundle.source + "\n"}, {"values": {**bundle.values, "BLOCK": 64}},
                   {"symbols": {}}, {"future_annotations": True}):
        assert kernel_bundle_digest(dataclasses.replace(bundle, **change)) != bundle.digest, change


def test_future_annotations_are_kept_as_the_file_has_them() -> None:
    source = "from __future__ import annotations\n" + SOURCE
    report = {**REPORT, "defs": [{"name": "scale_kernel", "line": 11, "options": {}}]}
    assert build_bundle(source, "s.py", report).future_annotations
    assert not build_bundle(SOURCE, "s.py", REPORT).future_annotations


def test_a_report_that_is_not_data_builds_an_empty_bundle() -> None:
    bundle = build_bundle(SOURCE, "s.py", {"defs": "nonsense", "symbols": [], "globals": 3})
    assert isinstance(bundle, KernelBundle)
    assert bundle.defs == () and bundle.symbols == {} and bundle.values == {} and not bundle.source.strip()
