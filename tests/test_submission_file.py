"""What a submitted file is (grader/submission_file.py): renamed copies fit their assignment, and files that
are not Python source are named for what they are. Pure, fast; the end-to-end runs are in
tests/e2e/test_submission_files_e2e.py."""

from __future__ import annotations

import json
import zlib

import pytest

from grader.submission_file import binary_kind, fit, name_candidates, notebook_problem, source_problem

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(13) + zlib.compress(b"\x00" * 10)


@pytest.mark.parametrize("name", [
    "Copy of fused_layers.py", "fused_layers (1).py", "fused_layers(2).py", "fused_layers_final.py",
    "fused_layers-final.py", "fused_layers_v2.py", "fused_layers-2.py", "fused_layers_3.py",
    "fused_layers - Copy.py", "fused_layers - Copy (2).py", "fused_layers copy.py", "fused_layers copy 2.py",
    "Copy of fused_layers (1).py", "fused_layers_final (1).py", "Fused_Layers.py", "fused_layers_FINAL_v3.py",
    "fused_layers_submission.py",
])
def test_renamed_copies_fit_their_assignment(name: str) -> None:
    found = fit(name, "fused_layers.py")
    assert found is not None and found.renamed, name
    assert found.note(name).startswith(f"{name} was graded as fused_layers.py: ")


@pytest.mark.parametrize("name", ["softmax_final.ipynb", "Copy of softmax.ipynb", "softmax (1).ipynb"])
def test_renamed_notebooks_fit_their_assignment(name: str) -> None:
    found = fit(name, "softmax.py")
    assert found is not None and found.renamed


def test_the_assignments_own_names_are_no_rename() -> None:
    for name in ("fused_layers.py", "fused_layers.ipynb"):
        found = fit(name, "fused_layers.py")
        assert found is not None and not found.renamed and found.note(name) == ""


@pytest.mark.parametrize("name", [
    "softmax.py", "layers.py", "fused.py", "fused_layers.txt", "fused_layers.py.png", "my_fused_layers.py",
    "fused_layersx.py", "fused_layers_helper_test.py", ".py", "fused_layers",
])
def test_other_names_do_not_fit(name: str) -> None:
    assert fit(name, "fused_layers.py") is None, name


def test_a_stem_ending_like_a_decoration_is_matched_before_it_is_peeled() -> None:
    assert name_candidates("lab_2 (1)") == ["lab_2 (1)", "lab_2", "lab"]
    first, second = fit("lab_2 (1).py", "lab_2.py"), fit("lab_2 (1).py", "lab.py")
    assert first is not None and first.renamed and second is not None and second.renamed
    own = fit("lab_2.py", "lab_2.py")
    assert own is not None and not own.renamed  # and discovery prefers an exact name (test_cli)


def test_decorations_are_whole_words() -> None:
    assert name_candidates("softmax_finalize") == ["softmax_finalize"]
    assert name_candidates("newton") == ["newton"]
    assert name_candidates("Copy of x (1)_final") == ["copy of x (1)_final", "x (1)_final", "x (1)", "x"]


@pytest.mark.parametrize(("data", "what"), [
    (PNG, "a PNG image"),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF", "a JPEG image"),
    (b"%PDF-1.7\n", "a PDF document"),
    (b"PK\x03\x04\x14\x00", "a zip archive"),
    (b"\x7fELF\x02\x01", "a compiled program"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "a WebP image"),
    (b"\xff\xfei\x00m\x00p\x00", "a UTF-16 text file"),
])
def test_binary_files_are_named_for_what_they_are(data: bytes, what: str) -> None:
    assert what in binary_kind(data)
    problem = source_problem(data, "fused_layers.py")
    assert problem.startswith(f"fused_layers.py is not a Python source file: it starts with the bytes of {what}")
    assert "\n" not in problem
    assert notebook_problem(data, "x.ipynb").startswith("x.ipynb is not a notebook: it starts with the bytes of")


def test_nul_bytes_and_bad_encodings() -> None:
    assert "holds NUL bytes (the first at byte 6)" in source_problem(b"x = 1\n\x00\x01", "f.py")
    latin = "x = 'caf\u00e9'\n".encode("latin-1")
    assert "not text in UTF-8: byte 0xe9 at offset 8" in source_problem(latin, "f.py")
    assert source_problem(b"# -*- coding: latin-1 -*-\n" + latin, "f.py") == ""  # it says how to read it
    assert "declares the encoding 'klingon'" in source_problem(b"# -*- coding: klingon -*-\nx = 1\n", "f.py")
    ascii_declared = source_problem(b"# coding: ascii\n" + latin, "f.py")
    assert "not text in ascii, the encoding it declares: byte 0xe9" in ascii_declared
    assert "not UTF-8 text (byte 0xe9 at offset 8)" in notebook_problem(latin, "n.ipynb")


def test_pages_and_notebooks_saved_as_python() -> None:
    assert "a web page (HTML)" in source_problem(b"\n<!DOCTYPE html>\n<html><body>", "f.py")
    notebook = json.dumps({"cells": [], "nbformat": 4}).encode()
    assert "a Jupyter notebook saved under a .py name" in source_problem(notebook, "f.py")


@pytest.mark.parametrize("text", [
    "", "import triton\n", "\ufeffx = 1\n", "x = {'a': 1}\n", "def f(:\n", "{1, 2}\n", "print('caf\u00e9')\n",
])
def test_python_text_is_source_even_with_a_syntax_error(text: str) -> None:
    assert source_problem(text.encode("utf-8"), "f.py") == ""  # a SyntaxError is the import's to report


def test_a_file_that_defines_nothing_is_told_what_to_define() -> None:
    from grader.submission_file import defines_nothing, has_code

    assert not has_code("") and not has_code("# only a comment\n\n") and not has_code('"""doc"""\npass\n')
    assert has_code("import triton\n") and has_code("def f(:\n")  # a syntax error is reported elsewhere
    empty = defines_nothing("softmax.py", "\n# TODO\n", ["softmax_kernel", "online_softmax_kernel", "softmax"])
    assert empty.startswith("softmax.py is empty: it defines nothing. It must define `softmax_kernel`, "
                            "`online_softmax_kernel` and `softmax`")
    assert "student template" in empty
    other = defines_nothing("softmax.py", "import numpy\nprint('hello')\n", ["softmax"])
    assert other.startswith("softmax.py defines none of the names this assignment requires") and "`softmax`" in other
    assert "is empty" not in defines_nothing("softmax.ipynb", None, ["softmax"])
