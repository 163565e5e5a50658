"""grader/running/worker/errors.py: an exception described for the grader with the submission's own frames only
(never the grader's), its cause chain and root; a syntax error at its line; a hostile __str__ survived; and which
CUDA errors leave the device unusable."""

from __future__ import annotations

from pathlib import Path

from grader.running.worker.errors import describe_exception, is_fatal_device_error


def raise_from(path: Path, source: str, call: str) -> BaseException:
    scope: dict[str, object] = {}
    exec(compile(source, str(path), "exec"), scope)  # noqa: S102 - the test's own "submission"
    try:
        eval(call, scope)  # noqa: S307
    except BaseException as exc:  # noqa: BLE001 - whatever the submission raised
        return exc
    raise AssertionError("it did not raise")


def test_only_the_submissions_frames_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "softmax.py"
    source = "def inner():\n    return {}['k']\n\ndef softmax():\n    try:\n        inner()\n" \
             "    except KeyError as exc:\n        raise ValueError('bad row') from exc\n"
    error = describe_exception(raise_from(path, source, "softmax()"), str(path))
    assert (error.type, error.message, error.root_type, error.root_message) == ("ValueError", "bad row", "KeyError",
                                                                               "'k'")
    assert error.chain == ("builtins.ValueError", "builtins.KeyError")
    assert {frame.line for frame in error.frames} == {2, 6, 8}  # the file's lines, not this test's
    assert all(frame.function in ("softmax", "inner") for frame in error.frames)


def test_a_syntax_error_is_at_its_line_and_a_hostile_str_is_survived(tmp_path: Path) -> None:
    path = tmp_path / "softmax.py"
    try:
        compile("def f(:\n", str(path), "exec")
    except SyntaxError as exc:
        error = describe_exception(exc, str(path))
    assert [(f.line, f.function) for f in error.frames] == [(1, "<module>")] and error.frames[0].code == "def f(:"

    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe_exception(Hostile(), str(path)).message == "<unprintable exception>"


def test_which_device_errors_are_fatal() -> None:
    assert is_fatal_device_error(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert is_fatal_device_error(RuntimeError("Triton Error [CUDA]: misaligned address"))
    assert not is_fatal_device_error(ValueError("x must be 2-D"))
