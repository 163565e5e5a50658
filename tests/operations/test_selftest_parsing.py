"""The selftest's bookkeeping: `# expect:` comment lines, what counts as a pass, the corpus's labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.mutants import load_mutants
from grader.authoring.spec import load_assignment
from grader.operations.selftest import (
    CaseVerdict,
    SeedVerdict,
    SelftestRow,
    TimedVerdict,
    corpus,
    expected_traps,
    format_table,
    selftest_seeds,
)


def mutant(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mutant.py"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("# expect: none", ()),
        ("# expect: oob-read", ("oob-read",)),
        ("# expect: bias-wrong-axis, oob-read", ("bias-wrong-axis", "oob-read")),
        ("#expect:timeout", ("timeout",)),
        ("#   expect:   crash   ", ("crash",)),
        ("# expect: a, , b ,", ("a", "b")),
        ("# mistake: no expectation here", None),
        ("# expected: oob-read", None),
    ],
)
def test_expect_line_forms(tmp_path: Path, line: str, expected) -> None:
    assert expected_traps(mutant(tmp_path, f"{line}\nimport torch\n")) == expected


def test_expect_among_the_leading_comments(tmp_path: Path) -> None:
    path = mutant(tmp_path, "# mistake: layernorm divides by N - 1\n\n# expect: unbiased-variance\nx = 1\n")
    assert expected_traps(path) == ("unbiased-variance",)


def test_expect_after_code_is_ignored(tmp_path: Path) -> None:
    assert expected_traps(mutant(tmp_path, '"""docstring"""\n# expect: oob-read\n')) is None
    assert expected_traps(mutant(tmp_path, "import torch\n# expect: oob-read\n")) is None
    assert expected_traps(mutant(tmp_path, "")) is None


def test_backend_specific_expectation_overrides(tmp_path: Path) -> None:
    path = mutant(tmp_path, "# expect-cuda: gpu-incompatible\n# expect: none\nimport torch\n")
    assert expected_traps(path) == ()
    assert expected_traps(path, "interpreter") == ()
    assert expected_traps(path, "cuda") == ("gpu-incompatible",)
    only_cuda = mutant(tmp_path, "# expect-cuda: compile-error\nimport torch\n")
    assert expected_traps(only_cuda, "interpreter") is None


def test_undecodable_bytes_do_not_break_parsing(tmp_path: Path) -> None:
    path = tmp_path / "mutant.py"
    path.write_bytes(b"# expect: crash\n\xff\xfe garbage\n")
    assert expected_traps(path) == ("crash",)


def row(expected: tuple[str, ...], diagnosed: tuple[str, ...], score: float = 0.0) -> SelftestRow:
    return SelftestRow("m.py", expected, diagnosed, score=score, max_score=40.0, seconds=1.0)


def test_row_ok_rules() -> None:
    assert row((), (), score=40.0).ok
    assert not row((), (), score=39.0).ok  # a correct submission must get full marks
    assert not row((), ("precision",), score=39.0).ok
    assert row(("a", "b"), ("b", "a")).ok  # order does not matter
    assert not row(("a",), ("a", "b")).ok  # an extra trap is a misdiagnosis
    assert not row(("a", "b"), ("a",)).ok


def test_format_table_flags_misses() -> None:
    text = format_table([row((), (), score=40.0), row(("oob-read",), ("unknown",))])
    lines = text.splitlines()
    assert lines[-4:] == ["1 of 2 as expected, 1 MISS", "MISS m.py:", "  not named: oob-read",
                          "  named but not expected: unknown (by the submission as a whole)"]
    assert any(line.startswith("m.py") and line.endswith("MISS") and "oob-read" in line and "unknown" in line
               for line in lines)


def test_corpus_is_the_reference_then_every_mutant(repo_root: Path) -> None:
    """Which traps each mutant names, and that they are known, is tested in tests/authoring/test_mutants.py."""
    assignment = load_assignment(repo_root / "assignments" / "fused_layers" / "assignment.toml")
    reference, *mutants = corpus(assignment)
    assert (reference.id, reference.kind, reference.traps, reference.edits) == ("reference", "reference", (), ())
    assert reference.origin == (repo_root / "reference" / "fused_layers" / "reference.py").resolve()
    assert tuple(mutants) == load_mutants(assignment.reference_dir)
    assert assignment.reference_dir == repo_root / "reference" / "fused_layers"


def test_seed_dependence_and_the_cases_behind_a_miss() -> None:
    steady = SelftestRow("m", ("a",), ("a",), 3.0, 5.0, 1.0, cases=(CaseVerdict("c1", 0.0, 2.0, ("a",)),),
                         seeds=(SeedVerdict(1, 3.0, ("a",)), SeedVerdict(2, 3.0, ("a",))))
    assert steady.ok and not steady.seed_dependent and steady.explain() == []
    moving = SelftestRow("m", ("a",), ("a",), 3.0, 5.0, 1.0, cases=steady.cases,
                         seeds=(SeedVerdict(1, 3.0, ("a",)), SeedVerdict(2, 5.0, ())))
    assert moving.seed_dependent and not moving.ok
    assert moving.explain() == ["depends on the seed: seed 1: 3 [a]; seed 2: 5 [none]", "cases: c1 0/2 [a]"]
    extra = SelftestRow("m", ("a",), ("a", "b"), 3.0, 5.0, 1.0,
                        cases=(CaseVerdict("c1", 0.0, 2.0, ("a", "b")), CaseVerdict("c2", 1.0, 1.0, ("b",))))
    assert extra.explain()[0] == "named but not expected: b (by c1, c2)"
    missing = SelftestRow("m", ("a",), (), 5.0, 5.0, 1.0)
    assert missing.explain() == ["not named: a"]
    lost = SelftestRow("m", (), (), 4.0, 5.0, 1.0, cases=(CaseVerdict("c2", 0.0, 1.0, ()),))
    assert lost.explain() == ["a correct submission lost points: 4/5", "cases: c2 0/1 [no trap]"]
    table = format_table([steady, moving]).splitlines()
    assert table[-4:] == ["1 of 2 as expected, 1 MISS", "MISS m:",
                          "  depends on the seed: seed 1: 3 [a]; seed 2: 5 [none]", "  cases: c1 0/2 [a]"]


def test_a_correct_kernel_earns_the_performance_points_its_speed_earns_but_every_case_must_be_timed() -> None:
    """A timed selftest: a correct variant under a speed threshold (attention's two-pass kernel, 0.45x) earns fewer
    performance points, which is no MISS; a correct variant whose performance case was not timed is one."""
    slow = SelftestRow("two_pass", (), (), 35.0, 35.0, 1.0,
                       timed=(TimedVerdict("perf-attention", "timed", 0.0, 2.0, 0.45),
                              TimedVerdict("perf-causal", "timed", 0.0, 0.0, 0.8)))
    assert slow.ok and slow.explain() == []
    assert format_table([slow]).splitlines()[2].endswith("ok  perf-attention 0.45x 0/2; perf-causal 0.80x")
    lost = SelftestRow("broadcast", (), (), 35.0, 35.0, 1.0,
                       timed=(TimedVerdict("perf-attention", "not-run", 0.0, 2.0, None, "a case failed"),))
    assert not lost.ok
    assert lost.explain() == ["a correct submission's performance case not timed: perf-attention not-run "
                              "(a case failed)"]
    mutant = SelftestRow("m", ("a",), ("a",), 3.0, 5.0, 1.0, timed=lost.timed)  # a mistake: not timed, rightly
    assert mutant.ok


def test_selftest_seeds() -> None:
    assert selftest_seeds(7, 1) == (7,)
    assert selftest_seeds(7, 3) == (7, 8, 9)
    with pytest.raises(ValueError):
        selftest_seeds(7, 0)
