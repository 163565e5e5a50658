"""grader/backends.py: the backend as one typed value: parsed once (a name it does not know is refused, naming the
known ones), `auto` resolved by what the machine has, and read back from what a file holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from grader.backends import AUTO, BACKENDS, Backend, detect_backend, likely_backend, parse_backend


def test_a_backend_is_parsed_once_and_reads_as_its_name() -> None:
    assert parse_backend("cuda") is Backend.CUDA and parse_backend("interpreter") is Backend.INTERPRETER
    with pytest.raises(ValueError, match=r"unknown backend 'rocm' \(known: interpreter, cuda\)"):
        parse_backend("rocm")
    assert BACKENDS == ("interpreter", "cuda")
    assert str(Backend.CUDA) == f"{Backend.CUDA}" == "cuda" and json.dumps({"b": Backend.CUDA}) == '{"b": "cuda"}'
    assert Backend("interpreter") is Backend.INTERPRETER  # what a results file or a manifest holds reads back


def test_what_each_backend_means() -> None:
    assert Backend.CUDA.on_gpu and not Backend.INTERPRETER.on_gpu
    assert (Backend.CUDA.device, Backend.INTERPRETER.device) == ("cuda", "cpu")
    assert Backend.INTERPRETER.counts_traffic and not Backend.CUDA.counts_traffic


def test_auto_is_what_the_machine_has() -> None:
    expected = Backend.CUDA if torch.cuda.is_available() else Backend.INTERPRETER
    assert detect_backend(AUTO) is expected and detect_backend("interpreter") is Backend.INTERPRETER
    assert likely_backend(AUTO) is (Backend.CUDA if Path("/dev/nvidiactl").exists() else Backend.INTERPRETER)
    assert likely_backend("cuda") is Backend.CUDA
