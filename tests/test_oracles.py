"""grader/oracles.py: the one surface an assignment's oracle module imports; its names stay."""

from __future__ import annotations

import grader.oracles as oracles
from grader.authoring import inputs, problem, spec
from tests.conftest import ROOT


def test_the_public_names_are_the_grader_s_own() -> None:
    assert sorted(oracles.__all__) == sorted(["KINDS", "Baseline", "Case", "In", "InputMaker", "KernelArg", "Out",
                                              "Problem", "Signature", "Stride", "TrapFunction"])
    assert oracles.InputMaker is inputs.InputMaker and oracles.KINDS is inputs.KINDS
    assert oracles.Problem is problem.Problem and oracles.Signature is problem.Signature
    assert oracles.Case is spec.Case


def test_every_shipped_oracle_module_imports_only_this_surface_of_the_grader() -> None:
    for path in sorted((ROOT / "assignments").glob("*/oracles.py")):
        imports = [line for line in path.read_text(encoding="utf-8").splitlines()
                   if line.startswith(("from grader", "import grader"))]
        assert imports and all(line.startswith("from grader.oracles import") for line in imports), (path, imports)
