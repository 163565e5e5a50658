"""grader/judging/similarity.py: normalised tokens (names, comments, docstrings, numbers do not matter; Triton's
API does), deterministic fingerprints, and a planted class: the disguised copies are the top pairs and flagged,
independent solutions from the same template are not, the template counts for nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from grader.judging.similarity import FLAG, Vocabulary, compare, fingerprints, kgram_hashes, normalise
from tests.conftest import ROOT
from tests.judging.planted import TEMPLATE, planted_class, renamed, reordered


def test_names_comments_and_docstrings_do_not_matter() -> None:
    one = '''def f(x_ptr, N):
    """Sum."""
    total = tl.load(x_ptr + 3)  # first
    return total
'''
    two = '''def g(a, M):
    # a comment
    acc = tl.load(a + 7)
    return acc
'''
    assert normalise(one).values == normalise(two).values
    assert "load" in normalise(one).values and "tl" in normalise(one).values  # the API stays
    assert normalise(one.replace("tl.load", "tl.store")).values != normalise(one).values
    assert normalise(one).lines[0] == 1 and normalise(one).ok
    assert not normalise("def f(:\n    x = (\n").ok  # read as far as it goes


def test_copies_in_disguise_keep_their_tokens() -> None:
    source = (ROOT / "reference" / "softmax" / "variants" / "correct_exp2.py").read_text(encoding="utf-8")
    assert normalise(renamed(source)).values == normalise(source).values
    assert renamed(source) != source and "my_" in renamed(source)
    assert sorted(normalise(reordered(source)).values) == sorted(normalise(source).values)


def test_fingerprints_are_the_same_in_every_process() -> None:
    """Python's hash() is salted per process: the fingerprints must not use it (the same class, the same scores)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]);"
            "from grader.judging.similarity import Vocabulary, kgram_hashes, normalise;"
            "print(json.dumps(kgram_hashes(Vocabulary().encode(normalise(open(sys.argv[2]).read())), 20)[:5]"
            ".tolist()))")
    path = str(ROOT / "reference" / "softmax" / "reference.py")
    runs = {subprocess.run([sys.executable, "-c", code, str(ROOT), path], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(runs) == 1 and len(json.loads(runs.pop())) == 5
    encoded = Vocabulary().encode(normalise(open(path, encoding="utf-8").read()))
    assert kgram_hashes(encoded, 20).tolist() == kgram_hashes(encoded.copy(), 20).tolist()
    assert fingerprints(encoded) == fingerprints(encoded)


def test_the_planted_copies_are_the_top_pairs_and_independent_work_is_not_flagged() -> None:
    comparison = compare(planted_class(), {"template": TEMPLATE.read_text(encoding="utf-8")})
    top = [{p.a, p.b} for p in comparison.pairs[:2]]
    assert top == [{"bob", "eve"}, {"cat", "fay"}] or top == [{"cat", "fay"}, {"bob", "eve"}]
    assert all(p.flagged and p.score >= 0.9 for p in comparison.pairs[:2])
    copies = ({"bob", "eve"}, {"cat", "fay"})
    independent = [p for p in comparison.pairs if {p.a, p.b} not in copies]
    assert independent and all(not p.flagged for p in independent)
    assert max(p.score for p in independent) < FLAG - 0.1, [(p.a, p.b, p.score) for p in independent]
    assert comparison.flagged == comparison.pairs[:2]
    bob_eve = comparison.pairs[[{p.a, p.b} for p in comparison.pairs].index({"bob", "eve"})]
    assert bob_eve.regions and bob_eve.shared_lines_a > 30  # the shared code, as line ranges of both files


def test_the_template_counts_for_nothing() -> None:
    template = TEMPLATE.read_text(encoding="utf-8")
    filled = planted_class()["ann"]
    untouched = {"u1": template, "u2": template + "\n# mine\n", "ann": filled}
    assert compare(untouched, {"template": template}).pairs == ()  # nothing shared beyond the template
    assert compare(untouched).pairs[0].score == 1.0  # without the discount, the two templates are one file


def test_a_class_of_60_in_seconds() -> None:
    """60 files of the size of fused_layers' reference (250 lines), each with its own names: compared in a few
    seconds (docs/similarity.md has the number from benchmarks/similarity_class.py)."""
    source = (ROOT / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")
    files = {f"s{n:02d}": renamed(source).replace("my_", f"s{n}_") for n in range(60)}
    started = time.perf_counter()
    comparison = compare(files)
    elapsed = time.perf_counter() - started
    assert len(comparison.documents) == 60 and elapsed < 30, elapsed
