"""grader/running/cases/battery.py: one case run end to end in a real worker on Triton's interpreter: the reference
passes with no trap, a file without the target is `missing-symbol` without starting anything twice, and a buggy
kernel is judged on what it did (the probes and the judge at work; whole grades: tests/e2e/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader import trap_ids
from grader.authoring.spec import load_assignment
from grader.running.cases.battery import Battery
from tests.conftest import ROOT, corpus_mutant

SOFTMAX = load_assignment(ROOT / "assignments" / "softmax" / "assignment.toml")


def battery_for(text: str, tmp_path: Path) -> Battery:
    submission = tmp_path / "softmax.py"
    submission.write_text(text, encoding="utf-8")
    return Battery(SOFTMAX, submission, "interpreter", 3)


@pytest.mark.slow
def test_the_reference_passes_and_a_missing_target_is_named(tmp_path: Path) -> None:
    reference = (ROOT / "reference" / "softmax" / "reference.py").read_text(encoding="utf-8")
    battery = battery_for(reference.replace("def softmax(", "def renamed_softmax("), tmp_path)
    try:
        kernel = battery.run_case(SOFTMAX.case("kernel-basic"))
        wrapper = battery.run_case(SOFTMAX.case("softmax-basic"))
        phases = battery.phases()
    finally:
        battery.close()
    assert kernel.passed and kernel.traps == (), kernel.message
    assert not wrapper.passed and wrapper.traps == (trap_ids.MISSING_SYMBOL,)
    assert "does not define `softmax`" in wrapper.message
    assert phases["correctness"] > 0 and "start-up" in phases


@pytest.mark.slow
def test_a_buggy_kernel_is_judged_on_what_it_did(tmp_path: Path) -> None:
    _, text = corpus_mutant("store_mask_off_by_one", "softmax")
    battery = battery_for(text, tmp_path)
    try:
        graded = battery.run_case(SOFTMAX.case("kernel-basic"))
    finally:
        battery.close()
    assert not graded.passed and graded.traps == (trap_ids.OOB_WRITE,), (graded.traps, graded.message)
