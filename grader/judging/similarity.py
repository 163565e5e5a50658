"""Similarity across a class (pure): which pairs of submissions share code beyond the template and the sources
the course allows, ranked, with the shared regions. Informational: it changes no score.

How (docs/similarity.md says why):

1. Each file is read as Python tokens (`normalise`): comments, blank lines and docstrings are dropped; every name
   the student chose (variables, functions, parameters) becomes the same token `V`, numbers `N`, strings `S`;
   keywords, operators, builtins, the modules `tl`, `triton`, `torch` and attribute names (`tl.load`, `x.stride`)
   stay. Renaming variables or deleting comments changes nothing.
2. The token stream is fingerprinted with copydetect's winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003:
   the hashes of every run of K tokens, of which the smallest in each window of W is kept), so any run of at least
   K + W - 1 shared tokens is found, wherever it sits in either file: reordered functions match as before. The
   k-gram hashes are ours (`kgram_hashes`: a polynomial hash of stable token hashes), not copydetect's, which
   uses Python's `hash()`, salted per process: the same class would get other fingerprints, and other scores,
   on every run.
3. Fingerprints of the template and of the allowed sources (every run of K tokens in them) are removed, and so are
   those that more than `common_share` of the class has (idioms every solution writes: MOSS does the same).
4. Each pair's score is the share of their own tokens (those left after step 3) that their common fingerprints
   cover in runs of at least MIN_RUN tokens (about two statements; a shorter match is everyday code), both files
   together: 1.0 is one file contained in the other. Pairs with no such run are not listed.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import keyword
import math
import tokenize
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

K = 20  # tokens per fingerprinted run (about one statement): shorter runs are everyday code in any solution
WINDOW = 6  # winnowing window: every shared run of K + WINDOW - 1 = 25 tokens is guaranteed to be found
COMMON_SHARE = 0.3  # a fingerprint more than this share of the class has (at least COMMON_MIN files) is an idiom
COMMON_MIN = 4
MIN_RUN = 40  # shared runs shorter than this many tokens (two statements) count for nothing in a score
FLAG = 0.5  # a pair at or above this score is flagged for a look (docs/similarity.md: how it was chosen)

KEPT_NAMES = frozenset({"tl", "triton", "torch", "math", "libdevice", "np", "numpy", "self"})
_BUILTINS = frozenset(dir(builtins))
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER, tokenize.TYPE_COMMENT}


@dataclass(frozen=True)
class Tokens:
    """A file as normalised tokens, each with the line it starts on."""

    values: tuple[str, ...]
    lines: tuple[int, ...]
    ok: bool = True  # False: the file did not tokenize to the end (what was read is kept)


def normalise(source: str) -> Tokens:
    """The file's tokens with the student's own names, numbers and strings made alike (module docstring)."""
    values: list[str] = []
    lines: list[int] = []
    previous = tokenize.NEWLINE  # a docstring is a string that is a whole statement
    pending: tuple[str, int] | None = None
    ok = True
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in _SKIPPED:
                continue
            if pending is not None:
                if tok.type == tokenize.NEWLINE:  # a docstring: it and its line end are dropped
                    pending = None
                    previous = tok.type
                    continue
                values.append(pending[0])  # not a docstring after all: a string that starts an expression
                lines.append(pending[1])
                pending = None
            if tok.type == tokenize.STRING and previous == tokenize.NEWLINE:
                pending = ("S", tok.start[0])
                previous = tok.type
                continue
            values.append(_token(tok, values))
            lines.append(tok.start[0])
            previous = tok.type
    except (tokenize.TokenError, IndentationError, SyntaxError):
        ok = False
    return Tokens(tuple(values), tuple(lines), ok)


def _token(tok: tokenize.TokenInfo, before: Sequence[str]) -> str:
    if tok.type == tokenize.NAME:
        name = tok.string
        if keyword.iskeyword(name) or keyword.issoftkeyword(name) or name in _BUILTINS or name in KEPT_NAMES:
            return name
        return name if before and before[-1] == "." else "V"
    if tok.type == tokenize.NUMBER:
        return "N"
    if tok.type in (tokenize.STRING, getattr(tokenize, "FSTRING_START", -1)):
        return "S"
    if tok.type == tokenize.NEWLINE:
        return ";"
    return tok.string


class Vocabulary:
    """A stable 63-bit number per token (the same in every run and every process: blake2b of its text)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def encode(self, tokens: Tokens) -> np.ndarray:
        out = np.empty(len(tokens.values), dtype=np.uint64)
        for i, value in enumerate(tokens.values):
            number = self._ids.get(value)
            if number is None:
                digest = hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest()
                number = self._ids[value] = int.from_bytes(digest, "little") >> 1
            out[i] = number
        return out


_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def kgram_hashes(encoded: np.ndarray, k: int) -> np.ndarray:
    """The hash of every run of `k` tokens (int64, deterministic): a polynomial of the token numbers modulo 2^64,
    finished with splitmix64's mixer so the smallest hashes (winnowing keeps those) fall anywhere."""
    if len(encoded) < k:
        return np.array([], dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(encoded, k)
    powers = np.array([pow(int(_MULTIPLIER), k - 1 - j, 1 << 64) for j in range(k)], dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = (windows * powers).sum(axis=1, dtype=np.uint64)
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return (h >> np.uint64(1)).astype(np.int64)


def fingerprints(encoded: np.ndarray, k: int = K, window: int = WINDOW) -> dict[int, tuple[int, ...]]:
    """Winnowed k-gram hashes of a file's token numbers: hash -> the token positions where its k-gram starts."""
    from copydetect.utils import winnow  # copydetect imports matplotlib: only when a comparison runs

    hashes = kgram_hashes(encoded, k)
    if not len(hashes):
        return {}
    selected, positions = winnow(hashes, window, remove_duplicates=False)
    out: dict[int, list[int]] = {}
    for value, position in zip(selected.tolist(), positions.tolist(), strict=True):
        out.setdefault(value, []).append(position)
    return {h: tuple(p) for h, p in out.items()}


@dataclass(frozen=True)
class Document:
    """One submission prepared for comparison."""

    name: str
    source: str
    tokens: Tokens
    prints: Mapping[int, tuple[int, ...]]  # fingerprints of its own code (template, allowed, common removed)
    own: int  # tokens not covered by the template's or allowed sources' k-grams

    @property
    def lines(self) -> list[str]:
        return self.source.splitlines()


@dataclass(frozen=True)
class Region:
    """Shared code: lines `a_lines` of the pair's first file match lines `b_lines` of its second (1-based,
    inclusive)."""

    a_lines: tuple[int, int]
    b_lines: tuple[int, int]
    tokens: int  # shared tokens in the first file's span


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    score: float  # shared own tokens of both / own tokens of both (0..1)
    share_a: float  # of a's own tokens, the share b has too
    share_b: float
    shared_lines_a: int
    shared_lines_b: int
    regions: tuple[Region, ...] = ()

    @property
    def flagged(self) -> bool:
        return self.score >= FLAG


@dataclass(frozen=True)
class Comparison:
    """A class compared: its documents, the pairs ranked (highest score first), and what was discounted."""

    documents: Mapping[str, Document]
    pairs: tuple[Pair, ...]
    discounted: tuple[str, ...]  # the template and allowed sources' names
    common: int  # fingerprints dropped as idioms of the class
    unreadable: tuple[str, ...] = field(default_factory=tuple)  # files that did not tokenize to the end

    @property
    def flagged(self) -> tuple[Pair, ...]:
        return tuple(p for p in self.pairs if p.flagged)


def _covered(positions: Sequence[int], k: int, length: int, min_run: int = 0) -> np.ndarray:
    """Tokens covered by the k-grams starting at `positions`, keeping only runs of at least `min_run` tokens."""
    mask = np.zeros(length, dtype=bool)
    for p in positions:
        mask[p:p + k] = True
    if min_run > k and mask.any():
        edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.view(np.int8), [0]))))
        for start, end in zip(edges[::2], edges[1::2], strict=True):
            if end - start < min_run:
                mask[start:end] = False
    return mask


def compare(submissions: Mapping[str, str], discount: Mapping[str, str] | None = None, *, k: int = K,
            window: int = WINDOW, common_share: float = COMMON_SHARE, regions_for: int = 100) -> Comparison:
    """Pure: every pair of `submissions` (name -> source) ranked by how much code they share beyond the
    `discount` sources (name -> source: the template, allowed code). Regions (side by side lines) are worked out
    for the `regions_for` highest pairs (what similarity.html shows)."""
    discount = discount or {}
    vocabulary = Vocabulary()
    boiler: set[int] = set()
    for text in discount.values():
        boiler.update(kgram_hashes(vocabulary.encode(normalise(text)), k).tolist())
    prepared = {}
    for name, source in submissions.items():
        tokens = normalise(source)
        encoded = vocabulary.encode(tokens)
        every = kgram_hashes(encoded, k).tolist()
        in_boiler = [i for i, h in enumerate(every) if h in boiler]
        own = len(tokens.values) - int(_covered(in_boiler, k, len(tokens.values)).sum())
        prints = {h: p for h, p in fingerprints(encoded, k, window).items() if h not in boiler}
        prepared[name] = (tokens, prints, own)
    counts = Counter(h for _, prints, _ in prepared.values() for h in prints)
    limit = max(COMMON_MIN, math.ceil(common_share * len(prepared)))
    common = {h for h, n in counts.items() if n > limit}
    documents = {name: Document(name, submissions[name], tokens, {h: p for h, p in prints.items() if h not in common},
                                own)
                 for name, (tokens, prints, own) in prepared.items()}
    names = sorted(documents)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pair = _pair(documents[a], documents[b], k, with_regions=False)
            if pair is not None:
                pairs.append(pair)
    pairs.sort(key=lambda p: (-p.score, p.a, p.b))
    detailed = tuple(_pair(documents[p.a], documents[p.b], k, with_regions=True) or p if n < regions_for else p
                     for n, p in enumerate(pairs))
    return Comparison(documents, detailed, tuple(discount), len(common),
                      tuple(name for name, d in documents.items() if not d.tokens.ok))


def _pair(a: Document, b: Document, k: int, with_regions: bool) -> Pair | None:
    shared = a.prints.keys() & b.prints.keys()
    if not shared:
        return None
    a_positions = [p for h in shared for p in a.prints[h]]
    b_positions = [p for h in shared for p in b.prints[h]]
    a_mask = _covered(a_positions, k, len(a.tokens.values), MIN_RUN)
    b_mask = _covered(b_positions, k, len(b.tokens.values), MIN_RUN)
    a_shared, b_shared = int(a_mask.sum()), int(b_mask.sum())
    if not a_shared or not b_shared:
        return None  # nothing but short runs in common: everyday code
    own = max(a.own, 1) + max(b.own, 1)
    score = min(1.0, (a_shared + b_shared) / own)
    a_lines = {a.tokens.lines[i] for i in np.flatnonzero(a_mask)}
    b_lines = {b.tokens.lines[i] for i in np.flatnonzero(b_mask)}
    regions = _regions(a, b, shared, k) if with_regions else ()
    return Pair(a.name, b.name, round(score, 4), round(min(1.0, a_shared / max(a.own, 1)), 4),
                round(min(1.0, b_shared / max(b.own, 1)), 4), len(a_lines), len(b_lines), regions)


def _regions(a: Document, b: Document, shared: set[int], k: int) -> tuple[Region, ...]:
    """Runs of shared tokens in `a` (fingerprints less than K apart joined), each with the span of `b` its
    fingerprints came from, as line ranges."""
    starts = sorted((p, h) for h in shared for p in a.prints[h])
    runs: list[list[tuple[int, int]]] = []
    for position, value in starts:
        if runs and position - runs[-1][-1][0] <= k:
            runs[-1].append((position, value))
        else:
            runs.append([(position, value)])
    out = []
    for run in runs:
        a_first, a_last = run[0][0], run[-1][0] + k - 1
        b_starts: list[int] = []
        for _, value in run:  # where code repeats in b, the occurrence nearest the one before
            options = b.prints[value]
            b_starts.append(min(options, key=lambda p: abs(p - b_starts[-1])) if b_starts else options[0])
        b_first, b_last = min(b_starts), max(b_starts) + k - 1
        a_last = min(a_last, len(a.tokens.lines) - 1)
        b_last = min(b_last, len(b.tokens.lines) - 1)
        if a_last - a_first + 1 >= MIN_RUN:  # what the score counts
            out.append(Region((a.tokens.lines[a_first], a.tokens.lines[a_last]),
                              (b.tokens.lines[b_first], b.tokens.lines[b_last]), a_last - a_first + 1))
    return tuple(out)
