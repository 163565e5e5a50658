"""grader/operations/batch_helpers.py: what a local batch starts once for all its grades (the child template; where
sandboxes are isolated the zygote template; on CUDA the shared zygote of the reference's workers), only where it pays,
each one off by its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.operations import batch_helpers
from grader.running.processes.confinement import namespaces_available
from grader.running.processes.shared_zygote import ADDRESS_VARIABLE, TEMPLATE_ADDRESS_VARIABLE

OFF = (batch_helpers.TEMPLATE_VARIABLE, batch_helpers.SHARED_ZYGOTE_VARIABLE, batch_helpers.SANDBOX_TEMPLATE_VARIABLE)


def test_nothing_for_one_grade_off_linux_or_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert batch_helpers.start_helpers(1, ["cuda"], {}) == batch_helpers.BatchHelpers()  # one grade gains nothing
    for variable in OFF:
        monkeypatch.setenv(variable, "0")
    assert batch_helpers.start_helpers(2, ["cuda", "cuda"], {}) == batch_helpers.BatchHelpers()
    for variable in OFF:
        monkeypatch.delenv(variable)
    monkeypatch.setattr(batch_helpers.sys, "platform", "darwin")
    assert batch_helpers.start_helpers(2, ["cuda", "cuda"], {}) == batch_helpers.BatchHelpers()


def test_a_cuda_batch_tells_its_children_where_its_zygotes_listen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference workers of a CUDA batch's grades fork from one zygote (grader.running.processes.shared_zygote),
    their sandbox zygotes (where isolated) from the zygote template: both started with the batch, their addresses in
    every child's environment, gone with the batch."""
    monkeypatch.setenv(batch_helpers.TEMPLATE_VARIABLE, "0")
    helpers = batch_helpers.start_helpers(2, ["cuda", "cuda"], {})
    try:
        told = helpers.environment()
        assert helpers.template is None and helpers.shared_zygote is not None
        assert Path(told[ADDRESS_VARIABLE]).is_socket()
        if namespaces_available():
            assert helpers.zygote_template is not None and helpers.zygote_template.backend == "cuda"
            backend, _, address = told[TEMPLATE_ADDRESS_VARIABLE].partition(":")
            assert backend == "cuda" and Path(address).is_socket()
        else:
            assert helpers.zygote_template is None and TEMPLATE_ADDRESS_VARIABLE not in told
    finally:
        helpers.close()
    assert helpers.environment() == {} and not any(Path(a.partition(":")[2] or a).exists() for a in told.values())


def test_an_interpreter_batch_gets_no_shared_zygote_and_a_mixed_one_no_zygote_template(
        monkeypatch: pytest.MonkeyPatch) -> None:
    helpers = batch_helpers.start_helpers(2, ["interpreter", "interpreter"], {"PATH": "/usr/bin:/bin"})
    try:
        assert helpers.template is not None and helpers.shared_zygote is None
        assert (helpers.zygote_template is not None) == namespaces_available()
        assert (helpers.aot_template is not None) == namespaces_available()  # the GPU compile check's zygotes
        if namespaces_available():
            told = [pair.partition(":") for pair in helpers.environment()[TEMPLATE_ADDRESS_VARIABLE].split(",")]
            assert [backend for backend, _, _ in told] == ["interpreter", "aot"]
            assert all(Path(address).is_socket() for _, _, address in told)
    finally:
        helpers.close()
    assert helpers.template is None and helpers.zygote_template is None and helpers.aot_template is None
    monkeypatch.setenv(batch_helpers.TEMPLATE_VARIABLE, "0")
    mixed = batch_helpers.start_helpers(2, ["interpreter", "cuda"], {})
    try:  # Triton is imported for one flavour: a template forks zygotes of one backend only
        assert mixed.zygote_template is None and mixed.shared_zygote is not None
    finally:
        mixed.close()
