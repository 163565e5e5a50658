"""grader/evidence/observation.py: the raw facts of one case."""

from __future__ import annotations

from grader import trap_ids
from grader.evidence.observation import Finding, Observation


def test_an_observation_starts_empty() -> None:
    empty = Observation()
    assert empty.trap is None and empty.message == "" and not empty.outputs and not empty.guard_findings
    assert Finding(trap_ids.TIMEOUT, "no answer").trap == "timeout"
