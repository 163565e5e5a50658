"""A class with planted copies, for the similarity tests: the softmax reference and its three correct variants
are four solutions written independently from the same template; copies of two of them are disguised the ways
students disguise copies (local variables renamed and comments dropped; functions reordered)."""

from __future__ import annotations

import ast
import io
import tokenize

from tests.conftest import ROOT

INDEPENDENT = {
    "ann": ROOT / "reference" / "softmax" / "reference.py",
    "bob": ROOT / "reference" / "softmax" / "variants" / "correct_exp2.py",
    "cat": ROOT / "reference" / "softmax" / "variants" / "correct_three_pass.py",
    "dan": ROOT / "reference" / "softmax" / "variants" / "correct_lane_online.py",
}
TEMPLATE = ROOT / "student_template" / "softmax" / "softmax.py"


def renamed(source: str) -> str:
    """Every local variable renamed (parameters and the contract's names kept, or the copy would not grade) and
    every comment dropped."""
    tree = ast.parse(source)
    params = {a.arg for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for a in f.args.args}
    functions = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    mapping = {name: f"my_{name.lower()}_{len(name)}" for name in stored - params - functions}
    out, previous = [], ""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            tok = tok._replace(string="")
        elif tok.type == tokenize.NAME and tok.string in mapping and previous != ".":
            tok = tok._replace(string=mapping[tok.string])
        previous = tok.string
        out.append((tok.type, tok.string))
    return tokenize.untokenize(out)


def reordered(source: str) -> str:
    """The module's top-level functions in reverse order (imports and globals first, as before)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    starts = [(f.decorator_list[0].lineno if f.decorator_list else f.lineno) - 1 for f in functions]
    head = "".join(lines[:starts[0]])
    chunks = ["".join(lines[start:f.end_lineno]) for start, f in zip(starts, functions, strict=True)]
    return head + "\n\n".join(reversed(chunks)) + "\n"


def planted_class() -> dict[str, str]:
    """name -> source: the four independent solutions, `eve` (bob renamed) and `fay` (cat reordered)."""
    texts = {name: path.read_text(encoding="utf-8") for name, path in INDEPENDENT.items()}
    texts["eve"] = renamed(texts["bob"])
    texts["fay"] = reordered(texts["cat"])
    return texts
