"""What a submitted file is, before any of it runs: which assignment its name fits, and whether it is
Python source at all. Pure functions of a name or of bytes; the callers read the file.

Names. Browsers, Colab and students rename files: `Copy of fused_layers.py` (Colab, Google Drive),
`fused_layers (1).py` (a second download), `fused_layers - Copy.py` (Windows), `fused_layers copy.py`
(macOS), `fused_layers_final.py`, `fused_layers-2.py`, `softmax_v2.ipynb`. `name_candidates` peels those
decorations off one at a time, so a name fits an assignment when any stage of the peeling is the
assignment's file stem (compared without case): `lab_2 (1).py` fits `lab_2.py` before `_2` is peeled.

Contents. A PNG, a PDF, a zip or a Word file saved under a `.py` name, a file with NUL bytes, one that is
not text in its declared encoding, an HTML page (a browser's "Save as" of a GitHub page) or a notebook
saved as `.py`: `source_problem` says, in one sentence, what the file is instead. A `.ipynb` must be a
notebook (JSON with a `cells` list); grader.operations.notebook reads it. A file that defines none of the names
the assignment requires (empty, only comments, or another file altogether): `defines_nothing` says so and
names what it must define.
"""

from __future__ import annotations

import ast
import codecs
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

PYTHON_SUFFIX = ".py"
NOTEBOOK_SUFFIX = ".ipynb"
SUFFIXES = (PYTHON_SUFFIX, NOTEBOOK_SUFFIX)

# Peeled one at a time from the stem, outermost first; each is a whole decoration, never part of a word.
_DECORATIONS = (
    re.compile(r"^copy of\s+", re.IGNORECASE),  # Colab, Google Drive
    re.compile(r"\s*\(\d+\)$"),  # "x (1)": a browser's second download
    re.compile(r"\s*-\s*copy(\s*\(\d+\))?$", re.IGNORECASE),  # Windows: "x - Copy", "x - Copy (2)"
    re.compile(r"\s+copy(\s+\d+)?$", re.IGNORECASE),  # macOS: "x copy", "x copy 2"
    re.compile(r"[\s_.-]+(final|submission|submit|done|solution|solved|fixed|working|new|latest|updated|"
               r"edited|old|backup|draft|mine|v\d+|\d+)$", re.IGNORECASE),  # "x_final", "x-2", "x_v2"
)

# Leading bytes of formats students upload by mistake, and what to call them.
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a zip archive (or a Word, Excel or other Office document)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Office document (Word, Excel)"),
    (b"{\\rtf", "a rich-text (RTF) document"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "a compiled program (ELF)"),
    (b"MZ", "a Windows program"),
    (b"\xff\xfe", "a UTF-16 text file"),
    (b"\xfe\xff", "a UTF-16 text file"),
)
_WEBP = (b"RIFF", b"WEBP")
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")  # PEP 263


@dataclass(frozen=True)
class NameFit:
    """How a submitted file's name fits an assignment's submission file."""

    submission_file: str  # the assignment's file name, e.g. fused_layers.py
    renamed: bool  # the name fits only once decorations are peeled off (`Copy of ...`, `(1)`, `_final`)

    def note(self, name: str) -> str:
        """The line a report carries for a renamed file ('' when the name is the assignment's own)."""
        if not self.renamed:
            return ""
        return (f"{name} was graded as {self.submission_file}: its name looks like a renamed copy of "
                f"{self.submission_file} (a download or an edited copy). Submit it as {self.submission_file}.")


def split_name(name: str) -> tuple[str, str]:
    """(stem, suffix) with the suffix lower-cased when it is .py or .ipynb; ('', '') for any other file."""
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix
    return "", ""


def name_candidates(stem: str) -> list[str]:
    """The stem, then each stage of peeling its decorations off (outermost first), lower-cased, distinct."""
    seen = [stem.strip().lower()]
    current = seen[0]
    while True:
        for pattern in _DECORATIONS:
            peeled = pattern.sub("", current, count=1).strip()
            if peeled and peeled != current:
                current = peeled
                seen.append(current)
                break
        else:
            return list(dict.fromkeys(seen))


def fit(name: str, submission_file: str) -> NameFit | None:
    """Does the file `name` (a .py or a notebook) fit the assignment whose file is `submission_file`?"""
    stem, suffix = split_name(name)
    wanted = split_name(submission_file)[0].lower()
    if not suffix or not wanted:
        return None
    candidates = name_candidates(stem)
    if wanted not in candidates:
        return None
    exact = candidates[0] == wanted and stem == split_name(submission_file)[0]
    return NameFit(submission_file, renamed=not exact)


# ------------------------------------------------------------------------------------------- contents


def source_problem(data: bytes, name: str) -> str:
    """'' when `data` can be Python source; else one sentence naming the file and what it is instead."""
    what = binary_kind(data)
    if what:
        return f"{name} is not a Python source file: it starts with the bytes of {what}."
    if b"\x00" in data:
        return (f"{name} is not a Python source file: it holds NUL bytes (the first at byte {data.index(0)}), "
                "so it is a binary file, not text.")
    encoding, problem = _decode_problem(data)
    if problem:
        return f"{name} is not a Python source file: {problem}."
    text = data.decode(encoding, errors="replace").lstrip("\ufeff").lstrip()
    lowered = text[:200].lower()
    if lowered.startswith(("<!doctype html", "<html")):
        return (f"{name} is not a Python source file: it is a web page (HTML), e.g. a page saved from the "
                "browser; download the raw file instead.")
    if text.startswith("{") and _is_notebook_json(text):
        return (f"{name} is not a Python source file: it is a Jupyter notebook saved under a .py name; submit "
                "it with the .ipynb extension, or export it as a Python file.")
    return ""


def notebook_problem(data: bytes, name: str) -> str:
    """'' when `data` can be a notebook as far as its bytes go (JSON is read by grader.operations.notebook);
    else one sentence: a binary file, or text that is not UTF-8."""
    what = binary_kind(data)
    if what:
        return f"{name} is not a notebook: it starts with the bytes of {what}."
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{name} is not a notebook: it is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})."
    return ""


def binary_kind(data: bytes) -> str:
    """What a known binary format's leading bytes say the file is ('' when none matches)."""
    for signature, what in _SIGNATURES:
        if data.startswith(signature):
            return what
    if data[:4] == _WEBP[0] and data[8:12] == _WEBP[1]:
        return "a WebP image"
    return ""


def _decode_problem(data: bytes) -> tuple[str, str]:
    """(the encoding Python would read the file in, '' or why it cannot be read as text): UTF-8 unless one
    of the first two lines declares another (PEP 263)."""
    encoding = "utf-8"
    for line in data.split(b"\n", 2)[:2]:
        declared = _CODING.match(line.decode("latin-1"))
        if declared:
            encoding = declared.group(1)
            break
        if line.strip() and not line.lstrip().startswith(b"#"):
            break  # a declaration only counts before the first line of code
    try:
        codecs.lookup(encoding)
    except LookupError:
        return "utf-8", f"it declares the encoding {encoding!r}, which Python does not know"
    try:
        codecs.decode(data, encoding)
    except UnicodeDecodeError as exc:
        byte = data[exc.start]
        label = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else f"{encoding}, the encoding it declares"
        return encoding, (f"it is not text in {label}: byte 0x{byte:02x} at offset {exc.start} cannot be "
                          "decoded; save it as UTF-8 text")
    return encoding, ""


def _is_notebook_json(text: str) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("cells"), list)


def has_code(text: str) -> bool:
    """Does the source do anything: a statement other than a docstring or `pass` (comments do not count)? A file
    that does not parse has code (its syntax error is reported elsewhere)."""
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):
        return True
    return any(not isinstance(node, ast.Pass)
               and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body)


def defines_nothing(name: str, text: str | None, required: Sequence[str]) -> str:
    """The note for a file that defines none of the `required` names (the caller knows that it does not): an
    empty one (`text` without code) is told it is empty, any is told what it must define. `text` None: not
    known (a notebook)."""
    names = [f"`{n}`" for n in required]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    head = (f"{name} is empty: it defines nothing" if text is not None and not has_code(text)
            else f"{name} defines none of the names this assignment requires (is it the right file?)")
    return (f"{head}. It must define {listed}, spelled exactly so and with the contract's parameters; the student "
            "template has each of them to start from.")
