"""On a CUDA machine: a cuda grade replays its timed cases once under Nsight Compute and names why a correct kernel
is slow from the counters (skipped without a GPU; run by `bash .ci/gpu`).

The softmax reference names nothing and gets its counters and % of speed of light; the project's slow mutants
(mutants.toml's `performance_traps_cuda`) keep full marks and get their measured trap, with its numbers. Where ncu
is missing or refused on the machine, the grade says so in one note and these tests skip, printing the note.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from grader.authoring.mutants import load_mutants
from grader.cli import main

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def grade_softmax(source: str, tmp_path: Path, repo_root: Path) -> dict:
    submission = tmp_path / "softmax.py"
    submission.write_text(source, encoding="utf-8")
    out = tmp_path / "out"
    code = main(["--assignments", str(repo_root / "assignments"), "grade", str(submission), "--assignment", "softmax",
                 "--out", str(out), "--seed", "3", "--backend", "cuda"])
    assert code == 0
    return json.loads((out / "grade.json").read_text(encoding="utf-8"))


def counters_or_skip(grade: dict) -> dict:
    perf = next(p for p in grade["performance"] if p["perf_id"] == "perf-softmax")
    print(json.dumps({"perf": perf["perf_id"], "status": perf["status"], "counters": perf.get("counters"),
                      "speed_of_light": (perf.get("student") or {}).get("pct_of_speed_of_light"),
                      "traps": grade["performance_traps"], "notes": grade["notes"]}, indent=1))
    assert perf["status"] == "timed"
    unmeasured = [n for n in grade["notes"] if n.startswith("GPU counters:")]
    if not perf.get("counters", {}).get("student", {}).get("dram_bytes"):
        pytest.skip(unmeasured[0] if unmeasured else "no counters and no note saying why")
    return perf


def test_reference_names_nothing_and_gets_its_counters(tmp_path, repo_root) -> None:
    grade = grade_softmax((repo_root / "reference" / "softmax" / "reference.py").read_text(), tmp_path, repo_root)
    perf = counters_or_skip(grade)
    assert grade["score"] == grade["max_score"]
    assert grade["performance_traps"] == []
    assert perf["student"]["pct_of_speed_of_light"] > 20
    mine, theirs = perf["counters"]["student"], perf["counters"]["reference"]
    assert 0.8 < mine["dram_bytes"] / theirs["dram_bytes"] < 1.25  # the same kernel moves the same bytes


SOFTMAX_SLOW = [m.id for m in load_mutants(Path(__file__).resolve().parents[2] / "reference" / "softmax")
                if m.measured("cuda")]


@pytest.mark.parametrize("mutant_id", SOFTMAX_SLOW)
def test_slow_mutant_is_named_from_the_counters(mutant_id, tmp_path, repo_root) -> None:
    """Each mutant with `performance_traps_cuda` gets exactly those, measured, with full marks (slow, not wrong)."""
    reference = (repo_root / "reference" / "softmax" / "reference.py").read_text(encoding="utf-8")
    mutant = next(m for m in load_mutants(repo_root / "reference" / "softmax") if m.id == mutant_id)
    grade = grade_softmax(mutant.source(reference), tmp_path, repo_root)
    counters_or_skip(grade)
    assert grade["score"] == grade["max_score"]
    measured = {t["trap"]: t for t in grade["performance_traps"] if t["basis"] == "measured"}
    assert set(measured) == set(mutant.measured("cuda")), grade["performance_traps"]
    assert all(t["numbers"]["time_ratio"] >= 1.1 for t in measured.values())
