"""Gradescope's `submission_metadata.yml` (its "export submissions" layout): who submitted each folder.
Read with a real YAML parser (PyYAML's safe loader); tags Gradescope's Ruby side may write are read as
the plain mappings, lists and strings under them."""

from __future__ import annotations

from typing import Any

import yaml

from grader.operations.batch.folder import BatchError

GRADESCOPE_METADATA = "submission_metadata.yml"

PERSON_KEYS = ("name", "sid", "email")  # what of a submitter the gradebook keeps


class _Loader(yaml.SafeLoader):
    """The safe loader, with any tag (`!ruby/object:...`) read as the node beneath it."""


def _untagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # a ScalarNode here


_Loader.add_multi_constructor("!", _untagged)


def read_gradescope_metadata(text: str) -> dict[str, list[dict[str, str]]]:
    """The submitters of each submission folder in Gradescope's `submission_metadata.yml`:

        submission_123:
          :submitters:
          - :name: Jane Doe
            :sid: '100'
            :email: jane@example.edu
          :created_at: 2026-01-01 10:00:00.000000000 Z

    Ruby-style symbol keys (`:name`) and plain ones both work; a folder without submitters has none."""
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        raise BatchError(f"{GRADESCOPE_METADATA} is not valid YAML: {exc}") from None
    out: dict[str, list[dict[str, str]]] = {}
    for folder, entry in (data.items() if isinstance(data, dict) else ()):
        fields = {str(k).lstrip(":"): v for k, v in entry.items()} if isinstance(entry, dict) else {}
        submitters = fields.get("submitters")
        people = []
        for person in submitters if isinstance(submitters, list) else ():
            if isinstance(person, dict):
                known = {str(k).lstrip(":"): v for k, v in person.items()}
                people.append({k: str(known[k]) for k in PERSON_KEYS if known.get(k) not in (None, "")})
        out[str(folder)] = people
    return out
