"""Different outputs on identical inputs are diagnosed as `nondeterministic`.

The interpreter runs programs in order, so a race cannot be staged on the CPU; a wrapper that feeds
fresh randomness into its launch shows the same symptom (two runs of one case disagree bit for bit).
"""

from __future__ import annotations

import pytest

from grader.evidence.observation import Observation
from grader.judging.judge import judge_case

pytestmark = pytest.mark.slow

RANDOM_EPS = "x, weight, bias, out, M, N, x.stride(0), eps + __import__('random').random(),"


def test_wrapper_with_fresh_randomness_is_nondeterministic(planted, grade_text) -> None:
    source = planted("x, weight, bias, out, M, N, x.stride(0), eps,", RANDOM_EPS)
    graded = grade_text(source)
    failed = [t for t in graded.tests_for("layernorm") if t["status"] == "failed"]
    assert len(failed) >= 3  # every case whose output depends on eps (not the near-constant one)
    assert all("nondeterministic" in t["tags"] and t["score"] == 0 for t in failed), [t["tags"] for t in failed]
    # the kernel itself is deterministic: its cases pass
    assert all(t["status"] == "passed" for t in graded.tests_for("layernorm_forward_kernel"))


def test_judge_names_nondeterminism_from_the_observation() -> None:
    import torch

    from grader.authoring.discovery import assignments_root, find_assignment

    assignment = find_assignment("fused_layers", assignments_root())
    case = assignment.case("stats-basic")
    tol = assignment.tolerances[case.tolerance].lookup("interpreter", "float32")
    expected = {"mean": torch.zeros(5, dtype=torch.float64), "var": torch.ones(5, dtype=torch.float64)}
    wrong = {"mean": torch.full((5,), 0.5), "var": torch.ones(5)}
    observation = Observation(outputs=wrong, nondeterministic=("mean",), guard_findings=())
    result = judge_case(case=case, assignment=assignment, inputs={"x": torch.zeros(5, 10)}, expected=expected,
                        observation=observation, tolerance=tol, traps={}, elapsed_s=0.0)
    assert not result.passed
    assert "nondeterministic" in result.traps
    assert "differed between two runs" in result.message
