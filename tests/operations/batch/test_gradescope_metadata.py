"""grader/operations/batch/gradescope_metadata.py: Gradescope's submission_metadata.yml, read with PyYAML:
symbol keys, quoting, pairs, what is not a submitter."""

from __future__ import annotations

from grader.operations.batch import (
    read_gradescope_metadata,
)
from tests.operations.batch.helpers import METADATA  # noqa: F401


def test_gradescope_metadata_reader() -> None:
    meta = read_gradescope_metadata(METADATA)
    assert meta["submission_101"] == [{"name": "Ada Lovelace", "sid": "100", "email": "ada@example.edu"}]
    assert [p["name"] for p in meta["submission_102"]] == ["Pair One", "Pair O'Two"]
    assert [p["sid"] for p in meta["submission_102"]] == ["200", "201"]
    assert meta["submission_103"] == [{"name": '=HYPERLINK("x")'}]
