"""grader/running/worker/kernel_host.py: a submission's kernels built from data, in a process that runs none of its
Python. The AST checks refuse what a kernel must not reach; a real worker builds a file's kernels, launches them
(interpreter) and never runs a line of the module."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from grader.authoring.spec import load_assignment
from grader.running import protocol
from grader.running.bundle import build_bundle
from grader.running.processes.client import Worker, WorkerOptions
from grader.running.worker import kernel_host
from grader.running.worker.kernel_host import KernelRefused, build_module, decode_global

ROOT = Path(__file__).resolve().parents[3]

HEADER = "import math\nimport triton\nimport triton.language as tl\n\n"


def bundle_of(kernel: str, values: dict | None = None) -> protocol.KernelBundle:
    """A bundle of one kernel `k` (source below HEADER), with these module-level values."""
    source = HEADER + textwrap.dedent(kernel)
    report = {"defs": [{"name": "k", "line": source.splitlines().index(
        next(line for line in source.splitlines() if line.startswith("def k("))) + 1, "options": {}}],
        "symbols": {"k": {"def": "k", "tuned": [], "wrapped": False}},
        "globals": {"tl": {"module": "triton.language"}, "triton": {"module": "triton"}, "math": {"module": "math"},
                    "k": {"kernel": "k"}, **(values or {})}}
    return build_bundle(source, "student.py", report)


def refusal(kernel: str, values: dict | None = None) -> str:
    _, why = build_module(bundle_of(kernel, values))
    return why.get("k", "")


def test_a_plain_kernel_builds_with_its_constants() -> None:
    module, why = build_module(bundle_of('''\
        def k(x_ptr, n, BLOCK: tl.constexpr = 16):
            offs = tl.arange(0, BLOCK) * SCALE_I
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) * SCALE + math.pi + tl.math.erf(1.0), mask=offs < n)
        ''', {"SCALE": 0.5, "SCALE_I": {"constexpr": 1}, "UNUSED": {"unsupported": "Thing"}}))
    assert why == {}
    assert type(module.k).__name__ in ("JITFunction", "InterpretedFunction")
    assert module.SCALE == 0.5 and module.SCALE_I.value == 1


@pytest.mark.parametrize(("kernel", "words"), [
    ("def k(x):\n    triton.runtime.jit.os.system('true')\n", "triton.runtime"),
    ("def k(x):\n    tl.core.builtins.exec('1')\n", "module builtins"),
    ("def k(x):\n    y = x.__class__\n", "underscore"),
    ("def k(x):\n    import os\n", "import"),
    ("def k(x):\n    y = getattr(x, '__dict__')\n", "literal attribute name"),
    ("def k(x, name):\n    y = getattr(x, name)\n", "literal attribute name"),
    ("def k(x):\n    global Y\n", "global"),
    ("def k(x):\n    f = lambda: 1\n", "lambda"),
    ("def k(x):\n    y = __builtins__\n", "underscore"),
    ("def k(x, n=triton.testing.do_bench):\n    pass\n", "triton.testing"),
])
def test_what_a_kernel_must_not_reach_is_refused_with_its_line(kernel: str, words: str) -> None:
    why = refusal(kernel)
    assert words in why and "student.py, line" in why, why


def test_a_kernel_that_needs_a_value_that_is_not_data_is_refused_by_name() -> None:
    why = refusal("def k(x):\n    tl.store(x, CONFIG)\n", {"CONFIG": {"unsupported": "Config"}})
    assert "CONFIG" in why and "a Config" in why and "tl.constexpr" in why, why


@pytest.mark.parametrize(("encoded", "words"), [
    ({"module": "os"}, "module os"),
    ({"object": "os.system"}, "os.system"),
    ({"object": "triton.runtime.jit.os.system"}, "not something a kernel can use"),
    ({"kernel": "nowhere"}, "did not find"),
    ({"lambda": 1}, "did not arrive as data"),
])
def test_values_that_would_reach_outside_the_kernels_do_not_decode(encoded, words) -> None:
    with pytest.raises(KernelRefused, match=words):
        decode_global(encoded, {}, "NAME")


def test_untrusted_import_paths_are_dropped(monkeypatch, tmp_path) -> None:
    import sys

    monkeypatch.setattr(sys, "path", [str(tmp_path), "", sys.prefix + "/lib", "/checkout"])
    kernel_host.forget_untrusted_paths(("/checkout",))
    assert sys.path == [sys.prefix + "/lib", "/checkout"]


@pytest.mark.slow
def test_a_worker_builds_the_kernels_and_runs_none_of_the_module(tmp_path: Path) -> None:
    """The reference's kernels plus module-level code that would leave a mark, patch Triton's launch path and
    poison a constant: the host runs the kernel right, and nothing of the module ran there."""
    mark = tmp_path / "module-code-ran"
    text = (ROOT / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8") + textwrap.dedent(f'''
        open({str(mark)!r}, "a").write("ran\\n")
        triton.runtime.KernelInterface.__getitem__ = lambda self, grid: (lambda *a, **k: None)
        ''')
    submission = tmp_path / "fused_layers.py"
    submission.write_text(text, encoding="utf-8")
    assignment = load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")
    options = WorkerOptions(backend="interpreter", import_timeout_s=60)
    names = list(assignment.required_symbols)
    worker = Worker(submission, names, options)
    host = None
    try:
        loaded = worker.start()
        assert loaded.ok and mark.read_text() == "ran\n"  # the submission's worker imported it
        bundle = build_bundle(text, submission.name, loaded.kernels)
        host = Worker(submission, names, options, bundle=bundle)
        built = host.start()
        assert built.ok and built.digest == bundle.digest and built.unavailable == {}, built
        assert built.symbols["layernorm_forward_kernel"]["kind"] == "kernel"
        assert built.symbols["layernorm"]["kind"] == "missing"  # wrappers are not in a kernel host
        x = torch.randn(3, 20)
        gamma, beta, out = torch.randn(20), torch.randn(20), torch.full((3, 20), float("nan"))
        views = [{"storage": i, "shape": list(t.shape), "stride": list(t.stride()), "offset": 0}
                 for i, t in enumerate((x, gamma, beta, out))]
        launched = host.request(protocol.Launch(
            kernel="layernorm_forward_kernel", storages=(x, gamma, beta, out), views=tuple(views),
            args=({"view": 0}, {"view": 1}, {"view": 2}, {"view": 3}, 3, 20, 20, 1e-5), meta={"BLOCK_N": 32},
            grid=("M",)), 60, "launch")
        assert launched.ok, launched
        got = launched.storages[3]
        assert torch.allclose(got, torch.nn.functional.layer_norm(x, (20,), gamma, beta), atol=1e-5)
        assert mark.read_text() == "ran\n"  # once: by the submission's worker, never by the host
        altered = protocol.KernelBundle(**{**bundle.__dict__, "source": bundle.source.replace("tl.sqrt", "tl.exp")})
        host.close()
        host = Worker(submission, names, options, bundle=altered)
        refused = host.start()
        assert not refused.ok and "digest" in refused.failure.message
    finally:
        worker.close()
        if host is not None:
            host.close()


def test_a_plain_helper_a_kernel_calls_is_built_and_checked_like_the_kernel() -> None:
    source = HEADER + textwrap.dedent('''\
        def _gelu(x):
            return x * 0.5 * (1.0 + tl.math.erf(x * 0.7071067811865476))


        def _leaky(x):
            return x.__class__


        def k(x_ptr):
            tl.store(x_ptr, _gelu(tl.load(x_ptr)))


        def bad(x_ptr):
            tl.store(x_ptr, _leaky(tl.load(x_ptr)))
        ''')
    lines = source.splitlines()

    def line_of(name: str) -> int:
        return lines.index(next(line for line in lines if line.startswith(f"def {name}("))) + 1

    report = {"defs": [{"name": "k", "line": line_of("k"), "options": {}},
                       {"name": "bad", "line": line_of("bad"), "options": {}},
                       {"name": "_gelu", "line": line_of("_gelu"), "options": {}, "plain": True},
                       {"name": "_leaky", "line": line_of("_leaky"), "options": {}, "plain": True}],
              "symbols": {"k": {"def": "k"}, "bad": {"def": "bad"}},
              "globals": {"tl": {"module": "triton.language"}, "_gelu": {"function": "_gelu"},
                          "_leaky": {"function": "_leaky"}}}
    module, why = build_module(build_bundle(source, "student.py", report))
    assert "k" not in why and callable(module._gelu) and not hasattr(module._gelu, "run")  # a function, not a kernel
    assert module.k.fn.__globals__["_gelu"] is module._gelu
    assert "underscore" in why["bad"]  # through the helper it calls
