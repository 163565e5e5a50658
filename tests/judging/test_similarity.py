"""grader/judging/similarity.py: normalised tokens (names, comments, docstrings, numbers and layout do not matter;
Triton's API does), deterministic fingerprints, and planted classes: the disguised copies are the top pairs and
flagged, independent solutions from the same template are not, the template counts for nothing, and a copy stays
flagged however much of the class shares its code (identical files, and long shared runs, are never idioms)."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
import time
import tokenize

from grader.authoring.mutants import load_mutants
from grader.judging.similarity import (
    FLAG,
    IDENTICAL,
    SAME_TOKENS,
    Comparison,
    Pair,
    Vocabulary,
    compare,
    fingerprints,
    kgram_hashes,
    normalise,
)
from tests.conftest import ROOT
from tests.judging.planted import INDEPENDENT, TEMPLATE, planted_class, renamed, reordered

FUSED = ROOT / "reference" / "fused_layers"
FUSED_TEMPLATE = ROOT / "student_template" / "fused_layers" / "fused_layers.py"


def reformatted(source: str) -> str:
    """What a formatter does to a file: every line re-spaced, strings in single quotes, a trailing comma before
    every bracket that closes on a line of its own."""
    out: list[tuple[int, str]] = []
    previous = None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if (tok.type == tokenize.STRING and tok.string[:1] == '"' and tok.string[:3] != '"""'
                and "'" not in tok.string):
            tok = tok._replace(string="'" + tok.string[1:-1] + "'")
        if (tok.type == tokenize.OP and tok.string in ")]" and previous is not None and previous.type == tokenize.NL
                and out[-2][1] != ","):
            out.insert(len(out) - 1, (tokenize.OP, ","))
        out.append((tok.type, tok.string))
        previous = tok
    return tokenize.untokenize(out)


def with_a_statement(source: str) -> str:
    """One statement of the student's own before the file's second top-level function."""
    lines = source.splitlines(keepends=True)
    second = [n for n, line in enumerate(lines) if line.startswith("def ")][1]
    return "".join(lines[:second] + ["CHECKED = True\n\n\n"] + lines[second:])


def fused(name: str) -> str:
    """fused_layers' reference (`reference`) or one of its correct variants: edits of the reference, so most of
    their code is every one's, which makes it an idiom of a class they are in."""
    path = FUSED / "reference.py" if name == "reference" else FUSED / "variants" / f"{name}.py"
    return path.read_text(encoding="utf-8")


def pair_of(comparison: Comparison, a: str, b: str) -> Pair:
    return next(p for p in comparison.pairs if {p.a, p.b} == {a, b})


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


def test_reformatting_does_not_matter() -> None:
    """A formatter's work (spacing, quotes, trailing commas) leaves the tokens as they were."""
    source = fused("correct_welford")
    assert reformatted(source) != source and ",\n" in reformatted(source).replace(" ", "")
    assert normalise(reformatted(source)).values == normalise(source).values
    assert normalise("f(a, b,)\n").values == normalise("f(a, b)\n").values


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
    assert compare({**untouched, "u3": template}, {"template": template}).pairs == ()  # identical, yet no copy
    assert compare(untouched).pairs[0].score == 1.0  # without the discount, the two templates are one file


def test_three_identical_copies_in_a_class_of_six_are_flagged() -> None:
    """Three students hand in one file, in a class whose other three share most of its code: before, that code was
    an idiom of the class (more than 30% of it has it) and the copies scored 0.33, unflagged."""
    texts = {"ann": fused("reference"), "bob": fused("correct_autotune"), "cat": fused("correct_chunked_two_pass"),
             **dict.fromkeys(("dan", "eve", "fay"), fused("correct_welford"))}
    comparison = compare(texts, {"template": FUSED_TEMPLATE.read_text(encoding="utf-8")})
    assert comparison.common  # the copied code is the class's idiom
    copies = [pair_of(comparison, a, b) for a, b in itertools.combinations(("dan", "eve", "fay"), 2)]
    assert all((p.score, p.share_a, p.share_b, p.match) == (1.0, 1.0, 1.0, IDENTICAL) and p.flagged for p in copies)
    assert list(comparison.pairs[:3]) == sorted(copies, key=lambda p: (p.a, p.b))  # first, and the same every run
    assert copies[0].regions and copies[0].shared_lines_a > 100
    assert compare(texts, {"template": FUSED_TEMPLATE.read_text(encoding="utf-8")}).pairs == comparison.pairs


def test_two_identical_buggy_files_are_flagged() -> None:
    """Two students hand in one buggy file (a mutant of the reference: one mistake, the rest the reference's code,
    which the class shares): before, 0.10."""
    bug = next(m for m in load_mutants(FUSED) if m.id == "small_dot_blocks").source(fused("reference"))
    texts = {"ann": fused("reference"), "bob": fused("correct_autotune"), "cat": fused("correct_chunked_two_pass"),
             "dan": fused("correct_true_hints"), "eve": bug, "fay": bug}
    comparison = compare(texts, {"template": FUSED_TEMPLATE.read_text(encoding="utf-8")})
    pair = pair_of(comparison, "eve", "fay")
    assert (pair.score, pair.match, pair.flagged) == (1.0, IDENTICAL, True) and pair in comparison.pairs[:3]


def test_a_near_identical_copy_is_flagged_however_common_its_code() -> None:
    """A copy renamed, reformatted and given a statement of its own (not the same tokens: found by its long shared
    runs, which are never an idiom), in a class that shares most of its code: before, 0.33. Its tokens the same
    (renamed and reformatted only): 1.0, `same tokens`."""
    welford = fused("correct_welford")
    texts = {"ann": fused("reference"), "bob": fused("correct_autotune"), "cat": fused("correct_chunked_two_pass"),
             "dan": fused("correct_true_hints"), "gil": welford, "hal": with_a_statement(reformatted(renamed(welford)))}
    assert normalise(texts["hal"]).values != normalise(welford).values
    template = {"template": FUSED_TEMPLATE.read_text(encoding="utf-8")}
    comparison = compare(texts, template)
    pair = pair_of(comparison, "gil", "hal")
    assert comparison.common and pair.flagged and pair.score >= 0.95 and pair.match == "", pair
    texts["hal"] = reformatted(renamed(welford))
    pair = pair_of(compare(texts, template), "gil", "hal")
    assert (pair.score, pair.match, pair.flagged) == (1.0, SAME_TOKENS, True)


def test_independent_solutions_are_not_flagged_beside_copies() -> None:
    """Each assignment's reference and correct variants (written independently from its template) in a class with
    two copies of the reference: the copies are flagged, no two independent solutions are, and the idioms of the
    class (fingerprints most of it has, in short runs) still count for nothing."""
    classes = {"softmax": {n: p.read_text(encoding="utf-8") for n, p in INDEPENDENT.items()}}
    folder = ROOT / "reference" / "attention"
    classes["attention"] = {"ann": (folder / "reference.py").read_text(encoding="utf-8"),
                            **{p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("variants/*.py"))}}
    for assignment, texts in classes.items():
        texts = {**texts, "eve": texts["ann"], "fay": renamed(texts["ann"])}
        template = (ROOT / "student_template" / assignment / f"{assignment}.py").read_text(encoding="utf-8")
        comparison = compare(texts, {"template": template})
        copies = {frozenset(c) for c in itertools.combinations(("ann", "eve", "fay"), 2)}
        assert {frozenset((p.a, p.b)) for p in comparison.flagged} == copies, (assignment, comparison.flagged)
        independent = [p for p in comparison.pairs if frozenset((p.a, p.b)) not in copies]
        assert comparison.common and independent, assignment
        assert max(p.score for p in independent) < FLAG - 0.1, [(p.a, p.b, p.score) for p in independent]


def test_a_class_of_60_in_seconds() -> None:
    """60 files of the size of fused_layers' reference (250 lines), each with its own names: compared in a few
    seconds (docs/similarity.md has the number from benchmarks/similarity_class.py). Each is the reference
    renamed, so every pair is flagged (the same tokens) though every file has the class's code."""
    source = (ROOT / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")
    files = {f"s{n:02d}": renamed(source).replace("my_", f"s{n}_") for n in range(60)}
    started = time.perf_counter()
    comparison = compare(files)
    elapsed = time.perf_counter() - started
    assert len(comparison.documents) == 60 and elapsed < 30, elapsed
    assert len(comparison.flagged) == 60 * 59 // 2 and {p.match for p in comparison.pairs} == {SAME_TOKENS}
