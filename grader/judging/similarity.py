"""Similarity across a class (pure): which pairs of submissions share code beyond the template and the sources
the course allows, ranked, with the shared regions. Informational: it changes no score.

How (docs/similarity.md says why):

1. Each file is read as Python tokens (`normalise`): comments, blank lines, docstrings and trailing commas are
   dropped; every name the student chose (variables, functions, parameters) becomes the same token `V`, numbers
   `N`, strings `S`; keywords, operators, builtins, the modules `tl`, `triton`, `torch` and attribute names
   (`tl.load`, `x.stride`) stay. Renaming variables, deleting comments or reformatting changes nothing.
2. The token stream is fingerprinted with copydetect's winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003:
   the hashes of every run of K tokens, of which the smallest in each window of W is kept), so any run of at least
   K + W - 1 shared tokens is found, wherever it sits in either file: reordered functions match as before. The
   k-gram hashes are ours (`kgram_hashes`: a polynomial hash of stable token hashes), not copydetect's, which
   uses Python's `hash()`, salted per process: the same class would get other fingerprints, and other scores,
   on every run.
3. Fingerprints of the template and of the allowed sources (every run of K tokens in them) are removed from every
   file. Fingerprints that more than `common_share` of the class has are the class's idioms (MOSS does the same),
   but only where a pair shares them in a short run: inside a run of at least LONG_RUN of the pair's own tokens
   (`_long`: the template's code between shared code does not break a run) they count, so a solution that many
   students copied is not read as an idiom.
4. Each pair's score is the share of their own tokens (those not in the template or allowed sources) that their
   common fingerprints cover in runs of at least MIN_RUN tokens (about two statements; a shorter match is everyday
   code), both files together: 1.0 is one file contained in the other. Two files that are the same bytes, or the
   same tokens (step 1), with at least MIN_RUN own tokens each score 1.0 (`Pair.match` says which). Pairs with no
   such run are not listed.
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
from functools import cached_property

import numpy as np

K = 20  # tokens per fingerprinted run (about one statement): shorter runs are everyday code in any solution
WINDOW = 6  # winnowing window: every shared run of K + WINDOW - 1 = 25 tokens is guaranteed to be found
COMMON_SHARE = 0.3  # a fingerprint more than this share of the class has (at least COMMON_MIN files) is an idiom
COMMON_MIN = 4
MIN_RUN = 40  # shared runs shorter than this many tokens (two statements) count for nothing in a score
# a pair's shared run of at least this many own tokens (about ten statements) is never an idiom, however common:
# 1.6 times the longest run two independent solutions of this course share (124 own tokens, attention's launch
# arguments; docs/similarity.md)
LONG_RUN = 200
FLAG = 0.5  # a pair at or above this score is flagged for a look (docs/similarity.md: how it was chosen)
IDENTICAL = "identical"  # Pair.match: the same bytes
SAME_TOKENS = "same tokens"  # Pair.match: the same once read as tokens (names, comments, layout aside)

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
            if tok.type == tokenize.OP and tok.string in ")]}" and values and values[-1] == ",":
                values.pop()  # a trailing comma (what a formatter adds or takes away) does not matter
                lines.pop()
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
    prints: Mapping[int, tuple[int, ...]]  # fingerprints of its own code (the template's and allowed ones removed)
    own: int  # tokens not covered by the template's or allowed sources' k-grams
    idioms: frozenset[int] = frozenset()  # those of `prints` that more than `common_share` of the class has
    # per token: covered by a k-gram of the template or the allowed sources
    discounted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), compare=False, repr=False)

    @cached_property
    def line_numbers(self) -> np.ndarray:
        """The line of every token, as an array."""
        return np.asarray(self.tokens.lines, dtype=np.int64)

    @cached_property
    def starts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`prints` as arrays, one entry per occurrence: the hash, where its k-gram starts, whether it is an idiom."""
        hashes = np.array([h for h, ps in self.prints.items() for _ in ps], dtype=np.int64)
        positions = np.array([p for ps in self.prints.values() for p in ps], dtype=np.int64)
        return hashes, positions, np.isin(hashes, np.fromiter(self.idioms, dtype=np.int64, count=len(self.idioms)))

    @cached_property
    def unique_hashes(self) -> np.ndarray:
        return np.fromiter(self.prints, dtype=np.int64, count=len(self.prints))

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
    match: str = ""  # IDENTICAL or SAME_TOKENS: the two files are one (score 1.0), else ""

    @property
    def flagged(self) -> bool:
        return self.score >= FLAG


@dataclass(frozen=True)
class Comparison:
    """A class compared: its documents, the pairs ranked (highest score first), and what was discounted."""

    documents: Mapping[str, Document]
    pairs: tuple[Pair, ...]
    discounted: tuple[str, ...]  # the template and allowed sources' names
    common: int  # fingerprints that are idioms of the class (discounted where a pair shares them in short runs)
    unreadable: tuple[str, ...] = field(default_factory=tuple)  # files that did not tokenize to the end

    @property
    def flagged(self) -> tuple[Pair, ...]:
        return tuple(p for p in self.pairs if p.flagged)


def _covered(positions: Sequence[int] | np.ndarray, k: int, length: int, min_run: int = 0) -> np.ndarray:
    """Tokens covered by the k-grams starting at `positions`, keeping only runs of at least `min_run` tokens."""
    starts = np.asarray(positions, dtype=np.int64)
    steps = (np.bincount(starts, minlength=length + 1)[:length + 1]
             - np.bincount(np.minimum(starts + k, length), minlength=length + 1)[:length + 1])
    mask = np.cumsum(steps[:length]) > 0
    if min_run > k and mask.any():
        edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.view(np.int8), [0]))))
        for start, end in zip(edges[::2], edges[1::2], strict=True):
            if end - start < min_run:
                mask[start:end] = False
    return mask


def _lines_in(document: Document, mask: np.ndarray) -> int:
    """How many lines of `document` the tokens of `mask` sit on."""
    lines = document.line_numbers[mask]
    return int(lines.size and 1 + np.count_nonzero(np.diff(lines)))  # token lines never decrease


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
        in_boiler = _covered([i for i, h in enumerate(every) if h in boiler], k, len(tokens.values))
        prints = {h: p for h, p in fingerprints(encoded, k, window).items() if h not in boiler}
        prepared[name] = (tokens, prints, in_boiler)
    counts = Counter(h for _, prints, _ in prepared.values() for h in prints)
    limit = max(COMMON_MIN, math.ceil(common_share * len(prepared)))
    common = {h for h, n in counts.items() if n > limit}
    documents = {name: Document(name, submissions[name], tokens, prints, len(tokens.values) - int(in_boiler.sum()),
                                frozenset(common.intersection(prints)), in_boiler)
                 for name, (tokens, prints, in_boiler) in prepared.items()}
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


def _match(a: Document, b: Document) -> str:
    """IDENTICAL or SAME_TOKENS where the two files are one and each has MIN_RUN own tokens (beyond the template
    and the allowed sources: two untouched templates are not a copy), else ""."""
    if min(a.own, b.own) < MIN_RUN:
        return ""
    if a.source == b.source:
        return IDENTICAL
    return SAME_TOKENS if a.tokens.values == b.tokens.values else ""


def _pair(a: Document, b: Document, k: int, with_regions: bool) -> Pair | None:
    match = _match(a, b)
    if match:  # one file: every fingerprint and every own token is shared, however the template cuts it
        a_hashes, a_positions, _ = a.starts
        mask = _covered(a_positions, k, len(a.tokens.values))  # b's tokens are a's, position for position
        regions = _regions(a, b, list(zip(a_positions.tolist(), a_hashes.tolist(), strict=True)), k) \
            if with_regions else ()
        return Pair(a.name, b.name, 1.0, 1.0, 1.0, _lines_in(a, mask), _lines_in(b, mask), regions, match)
    shared = np.intersect1d(a.unique_hashes, b.unique_hashes, assume_unique=True)
    if not shared.size:
        return None
    a_hashes, a_positions, a_idiom = a.starts
    b_hashes, b_positions, b_idiom = b.starts
    a_in, b_in = np.isin(a_hashes, shared), np.isin(b_hashes, shared)
    if (a_idiom & a_in).any():  # an idiom counts only inside a long run of own code, in both files
        a_long = _long(a, a_positions[a_in], k)[a_positions]
        b_long = _long(b, b_positions[b_in], k)[b_positions]
        both = np.intersect1d(a_hashes[a_in & a_idiom & a_long], b_hashes[b_in & b_idiom & b_long])
        a_in &= ~a_idiom | (a_long & np.isin(a_hashes, both))
        b_in &= ~b_idiom | (b_long & np.isin(b_hashes, both))
    a_mask = _covered(a_positions[a_in], k, len(a.tokens.values), MIN_RUN)
    b_mask = _covered(b_positions[b_in], k, len(b.tokens.values), MIN_RUN)
    a_shared, b_shared = int(a_mask.sum()), int(b_mask.sum())
    if not a_shared or not b_shared:
        return None  # nothing but short runs in common: everyday code
    own_a, own_b = max(a.own, 1), max(b.own, 1)
    score = min(1.0, (a_shared + b_shared) / (own_a + own_b))
    regions = (_regions(a, b, list(zip(a_positions[a_in].tolist(), a_hashes[a_in].tolist(), strict=True)), k)
               if with_regions else ())
    return Pair(a.name, b.name, round(score, 4), round(min(1.0, a_shared / own_a), 4),
                round(min(1.0, b_shared / own_b), 4), _lines_in(a, a_mask), _lines_in(b, b_mask), regions)


def _long(document: Document, positions: np.ndarray, k: int) -> np.ndarray:
    """Per token of `document`: inside a run of shared code (the k-grams starting at `positions`) that holds at
    least LONG_RUN of its own tokens. The template's and allowed sources' code between shared code does not break
    a run (a copy of a filled-in template is one run), nor does it count towards LONG_RUN."""
    cover = _covered(positions, k, len(document.tokens.values))
    own = cover & ~document.discounted
    joined = cover | document.discounted
    out = np.zeros(len(cover), dtype=bool)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], joined.view(np.int8), [0]))))
    for start, end in zip(edges[::2], edges[1::2], strict=True):
        if int(own[start:end].sum()) >= LONG_RUN:
            out[start:end] = cover[start:end]
    return out


def _regions(a: Document, b: Document, a_starts: Sequence[tuple[int, int]], k: int) -> tuple[Region, ...]:
    """Runs of shared tokens in `a` (the fingerprints `a_starts`, (position, hash), less than K apart joined),
    each with the span of `b` its fingerprints came from, as line ranges."""
    starts = sorted(a_starts)
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
