"""Reading assignment.toml (grader/authoring/spec_reader.py): a missing file or bad TOML is a SpecError
naming the file (and the line), and SpecReader names the dotted key of every problem in a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.authoring.spec import load_assignment
from grader.authoring.spec_reader import SpecError, SpecReader, read_spec
from tests.authoring.test_spec import VALID, edited, spec_error


def test_invalid_toml_names_file_and_line(tmp_path: Path) -> None:
    err = spec_error(tmp_path, edited("[kernels.copy_kernel]", "[kernels.copy_kernel"))
    assert "not valid TOML" in err.problem
    line = VALID.splitlines().index("[kernels.copy_kernel]") + 1
    assert f"line {line}" in str(err)


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="file not found") as info:
        load_assignment(tmp_path / "assignment.toml")
    assert str(tmp_path) in str(info.value)


def test_read_spec_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        read_spec(tmp_path / "assignment.toml")
    assert str(caught.value) == f"{tmp_path / 'assignment.toml'}: file not found"


def test_the_reader_names_the_dotted_key_of_each_problem() -> None:
    path = Path("course/assignments/a/assignment.toml")
    top = SpecReader(path, {"n": 3, "flag": True, "names": ["a", 1], "kind": "odd", "kernels": {"k": {"x": 1},
                                                                                            "bad": 2}}, "")

    def problem(call) -> str:
        with pytest.raises(SpecError) as info:
            call()
        assert info.value.path == path
        return str(info.value)

    assert top.get("n", int) == 3 and top.get("missing", str, "d") == "d"
    assert problem(lambda: top.get("missing", str)) == f"{path}: [missing] is required"
    assert problem(lambda: top.get("n", str)) == f"{path}: [n] must be a string, got int 3"
    assert problem(lambda: top.get("flag", (int, float))) == (
        f"{path}: [flag] must be an integer or a number, got a boolean")
    assert problem(lambda: top.strings("names")) == f"{path}: [names] must be a list of strings"
    assert top.strings("missing", ("x",)) == ("x",)
    assert problem(lambda: top.choice("kind", ("even",))) == f"{path}: [kind] must be one of even; got 'odd'"
    assert problem(lambda: top.subs("kernels")) == f"{path}: [kernels.bad] must be a table"
    kernel = SpecReader(path, {"k": {"x": 1}}, "kernels").sub("k")
    assert kernel.key == "kernels.k" and kernel.get("x", int) == 1
    assert problem(lambda: kernel.reject_unknown({"y"})) == f"{path}: [kernels.k.x] unknown key (allowed: y)"
