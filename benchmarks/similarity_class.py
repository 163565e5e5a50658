"""Benchmark: `grader similarity` on a class of 60, and the planted copies it must rank first.

    python benchmarks/similarity_class.py [--students 60] [--out DIR]

The class: the softmax reference and its three correct variants (four solutions written independently from the
same template), a copy of one with its local variables renamed and its comments dropped, a copy of another with
its functions reordered, and as many more students as `--students` asks for, each a fused_layers-sized file
(the fused_layers reference, every local variable renamed its own way, so no two are byte-identical). Runs the
real command (`grader similarity FOLDER --assignment softmax --out DIR`) and prints its wall time, the time of
the comparison itself (also with no fingerprint discounted as an idiom, so that the fillers' 1,400 pairs all
share code: the worst case), and the top pairs with their scores; exits 1 when the planted copies are not the top
two pairs or an independent pair is flagged.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.cli import main  # noqa: E402
from grader.judging.similarity import compare  # noqa: E402
from tests.judging.planted import TEMPLATE, planted_class, renamed  # noqa: E402


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=60)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    texts = planted_class()
    filler = (ROOT / "reference" / "fused_layers" / "reference.py").read_text(encoding="utf-8")
    for n in range(max(0, args.students - len(texts))):
        texts[f"z{n:02d}"] = renamed(filler).replace("my_", f"z{n}_")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        for name, text in texts.items():
            (folder / f"{name}.py").write_text(text, encoding="utf-8")
        out = args.out or Path(tmp) / "out"
        started = time.perf_counter()
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["--assignments", str(ROOT / "assignments"), "similarity", str(folder), "--assignment",
                         "softmax", "--out", str(out)])
        wall = time.perf_counter() - started
    started = time.perf_counter()
    comparison = compare(texts, {"template": TEMPLATE.read_text(encoding="utf-8")})
    alone = time.perf_counter() - started
    started = time.perf_counter()
    every = compare(texts, {"template": TEMPLATE.read_text(encoding="utf-8")}, common_share=2.0)
    heavy = time.perf_counter() - started
    print(f"{len(texts)} files, {sum(len(t.splitlines()) for t in texts.values())} lines: `grader similarity` "
          f"{wall:.2f} s (exit {code}); the comparison alone {alone:.2f} s ({len(comparison.pairs)} pairs); "
          f"with no fingerprint discounted as an idiom {heavy:.2f} s ({len(every.pairs)} pairs, shared regions "
          "worked out for the top 100)")
    for p in comparison.pairs[:6]:
        print(f"  {p.score:.2f}  {p.a} {p.b}{'  flagged' if p.flagged else ''}")
    planted = [{"bob", "eve"}, {"cat", "fay"}]
    top = [{p.a, p.b} for p in comparison.pairs[:2]]
    independent = [p for p in comparison.pairs if {p.a, p.b} not in planted
                   and {p.a, p.b} <= {"ann", "bob", "cat", "dan", "eve", "fay"}]
    worst = max((p.score for p in independent), default=0.0)
    print(f"planted copies on top: {sorted(map(sorted, top)) == sorted(map(sorted, planted))}; "
          f"highest independent pair {worst:.2f} (flag at 0.5)")
    ok = code == 0 and sorted(map(sorted, top)) == sorted(map(sorted, planted)) and not any(p.flagged
                                                                                           for p in independent)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main_())
