"""grader/running/timing/kernel_source.py: a submission's kernels without the rest of its file (what a timer
worker loads): kernels and constants kept, every other statement dropped."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grader.running.timing.kernel_source import kernels_only

ROOT = Path(__file__).resolve().parents[3]


HOSTILE = textwrap.dedent('''\
    """A submission that tampers with timing at import."""
    import os
    import math
    import triton
    import triton.language as tl
    import triton.testing
    from triton.language.extra import libdevice

    triton.testing.do_bench = lambda *a, **k: 0.001
    SCALE = 1 / math.sqrt(2.0)
    BLOCK: tl.constexpr = tl.constexpr(128)
    erf = tl.math.erf
    EVIL = os.system("true")
    CONFIGS = [triton.Config({"BLOCK": 64}, num_warps=4)]


    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.jit(do_not_specialize=["n"])
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, erf(tl.load(x_ptr + offs, mask=offs < n) * SCALE), mask=offs < n)


    @triton.jit
    def bad_default(x_ptr, n=os.getpid()):
        pass


    def wrapper(x):
        return x
    ''')


def test_kernels_only_keeps_kernels_and_constants_and_nothing_else() -> None:
    reduced = kernels_only(HOSTILE)
    assert reduced.kernels == ("scale_kernel",)
    text = reduced.text
    assert "do_bench" not in text and "os.system" not in text and "def wrapper" not in text
    assert "import os" not in text and "CONFIGS" not in text and "autotune" not in text
    for kept in ("SCALE = 1 / math.sqrt(2.0)", "BLOCK: tl.constexpr = tl.constexpr(128)", "erf = tl.math.erf",
                 "from triton.language.extra import libdevice", "def scale_kernel("):
        assert kept in text, kept
    assert '@__grader_triton.jit(do_not_specialize=["n"])' in text or "do_not_specialize=['n']" in text
    # line numbers still match the student's file
    assert text.splitlines().index("def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):") == \
        HOSTILE.splitlines().index("def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):")
    dropped = dict(reduced.dropped)
    assert any("bad_default" in what and "not a constant" in what for what in dropped.values())


def test_the_reduced_module_runs_no_student_statement(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = HOSTILE.replace('os.system("true")', f'open({str(marker)!r}, "w")')
    namespace: dict[str, object] = {}
    path = tmp_path / "kernels.py"
    path.write_text(kernels_only(source).text, encoding="utf-8")
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the reduced module only
    assert not marker.exists()
    assert "scale_kernel" in namespace and "wrapper" not in namespace


@pytest.mark.parametrize("relative", ["reference/fused_layers/reference.py", "reference/softmax/reference.py"])
def test_reference_kernels_survive_the_reduction(relative: str) -> None:
    source = (ROOT / relative).read_text(encoding="utf-8")
    reduced = kernels_only(source)
    assert reduced.kernels and len(reduced.text.splitlines()) == len(source.splitlines())
    compile(reduced.text, relative, "exec")


# ------------------------------------------------------------------------------------------ planning


