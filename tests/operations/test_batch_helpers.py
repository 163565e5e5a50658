"""grader/operations/batch_helpers.py: what a local batch starts once for all its grades (the child template; on CUDA
the shared zygote of the reference's workers), only where it pays, each one off by its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.operations import batch_helpers
from grader.running.processes.shared_zygote import ADDRESS_VARIABLE


def test_nothing_for_one_grade_off_linux_or_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert batch_helpers.start_helpers(1, ["cuda"], {}) == batch_helpers.BatchHelpers()  # one grade gains nothing
    monkeypatch.setenv(batch_helpers.TEMPLATE_VARIABLE, "0")
    monkeypatch.setenv(batch_helpers.SHARED_ZYGOTE_VARIABLE, "0")
    assert batch_helpers.start_helpers(2, ["cuda"], {}) == batch_helpers.BatchHelpers()
    monkeypatch.delenv(batch_helpers.TEMPLATE_VARIABLE)
    monkeypatch.delenv(batch_helpers.SHARED_ZYGOTE_VARIABLE)
    monkeypatch.setattr(batch_helpers.sys, "platform", "darwin")
    assert batch_helpers.start_helpers(2, ["cuda"], {}) == batch_helpers.BatchHelpers()


def test_a_cuda_batch_tells_its_children_where_the_shared_zygote_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference workers of a CUDA batch's grades fork from one zygote (grader.running.processes.shared_zygote):
    started with the batch, its address in every child's environment, gone with the batch."""
    monkeypatch.setenv(batch_helpers.TEMPLATE_VARIABLE, "0")
    assert batch_helpers.start_helpers(2, ["interpreter", "interpreter"], {}).shared_zygote is None
    helpers = batch_helpers.start_helpers(2, ["cuda", "cuda"], {})
    try:
        assert helpers.template is None and helpers.shared_zygote is not None
        address = helpers.environment()[ADDRESS_VARIABLE]
        assert Path(address).is_socket()
    finally:
        helpers.close()
    assert not Path(address).exists() and helpers.environment() == {}


def test_an_interpreter_batch_gets_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    helpers = batch_helpers.start_helpers(2, ["interpreter", "interpreter"], {"PATH": "/usr/bin:/bin"})
    try:
        assert helpers.template is not None and helpers.shared_zygote is None and helpers.environment() == {}
    finally:
        helpers.close()
    assert helpers.template is None
