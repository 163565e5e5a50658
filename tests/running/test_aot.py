"""grader/running/aot.py without compiling: the Triton signature the contract gives each kernel (pointers,
floats, integers, constexprs) and the block sizes the GPU battery would launch it with. (The sm_90
compile check itself runs in every interpreter grade: tests/test_cli.py, tests/e2e/.)"""

from __future__ import annotations

from grader.authoring.spec import KernelSpec, load_assignment
from grader.running.aot import GPU_ARCH, gpu_dtype, gpu_meta, kernel_signature
from tests.conftest import ROOT


def test_kernel_signature() -> None:
    spec = KernelSpec("k", ("x_ptr", "out_ptr", "N", "eps", "BLOCK"), ("BLOCK",), ("N",), "p", float_params=("eps",))
    assert kernel_signature(spec) == {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "i32", "eps": "fp32",
                                      "BLOCK": "constexpr"}
    assert GPU_ARCH == 90
    # a float16 case's kernel is compiled with pointers to float16 (tl.dot then takes its float16 path)
    assert kernel_signature(spec, "float16")["x_ptr"] == "*fp16" and kernel_signature(spec, "float16")["eps"] == "fp32"


def test_the_compile_check_takes_the_first_gpu_case_dtype() -> None:
    softmax = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    assert gpu_dtype(softmax, "softmax_kernel") == "float32"
    assert gpu_dtype(load_assignment(ROOT / "assignments" / "attention" / "assignment.toml"),
                     "attention_kernel") == "float16"


def test_gpu_meta_is_the_first_gpu_case_of_the_kernel() -> None:
    assignment = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    first = next(c for c in assignment.cases_for("cuda") if c.target == "softmax_kernel")
    assert gpu_meta(assignment, "softmax_kernel") == dict(first.meta)
    assert gpu_meta(assignment, "no_such_kernel") is None


def test_a_check_that_cannot_compile_is_there_all_the_same() -> None:
    """Nothing compiled (the file does not import): one failed zero-point check per kernel, saying why, so the
    result has the same tests as any other."""
    from grader.running.aot import NOT_RUN, check_title, compiled_kernels, not_compiled

    assignment = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    checks = not_compiled(assignment, "Not compiled: the submission does not import.")
    assert [c.title for c in checks] == [check_title(spec.name) for spec, _ in compiled_kernels(assignment)]
    assert [c.target for c in checks] == ["softmax_kernel", "online_softmax_kernel"]
    for check in checks:
        assert (check.max_score, check.score, check.passed, check.visibility) == (0.0, 0.0, False, "public")
        assert check.evidence == {"compile": NOT_RUN} and check.message.endswith("does not import.")


def test_an_import_that_never_finished_is_not_imported_again() -> None:
    """The cases' import of the file timed out: every kernel's check fails at once, saying so, with no worker."""
    from grader.running.aot import NOT_RUN, compiled_kernels, import_never_finishes

    assignment = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")
    checks = import_never_finishes(assignment, "loop.py")
    assert [c.target for c in checks] == [spec.name for spec, _ in compiled_kernels(assignment)]
    for check in checks:
        assert not check.passed and check.evidence == {"compile": NOT_RUN} and check.traps == ()
        assert check.message == ("Not compiled: importing loop.py does not finish (its cases say why), so no kernel "
                                 "of it could be compiled.")


def test_the_compile_check_says_which_triton_gave_its_verdict() -> None:
    import triton

    from grader.running.aot import triton_version

    assert triton_version() == triton.__version__  # this machine's: the grading GPU's may differ
