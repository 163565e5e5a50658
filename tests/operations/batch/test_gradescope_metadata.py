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


def test_ruby_tags_plain_keys_and_broken_yaml() -> None:
    import pytest

    from grader.operations.batch.folder import BatchError

    tagged = (
        "submission_7: !ruby/hash:ActiveSupport::HashWithIndifferentAccess\n"
        "  submitters:\n"
        "  - !ruby/object:Submitter\n"
        "    name: Grace Hopper\n"
        "    sid: 300\n"
        "  - :name:\n"  # a submitter with no name: nothing kept for it
        "submission_8: {}\n"
    )
    meta = read_gradescope_metadata(tagged)
    assert meta == {"submission_7": [{"name": "Grace Hopper", "sid": "300"}, {}], "submission_8": []}
    assert read_gradescope_metadata("") == {}
    with pytest.raises(BatchError, match="submission_metadata.yml is not valid YAML"):
        read_gradescope_metadata("submission_1:\n  :submitters: [unclosed\n")
