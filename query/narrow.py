"""Which rows can match a grep pattern, before RE2 reads any text: the trigrams every match must contain, read
from the pattern's parse (as Google's codesearch does), looked up in each part's trigram index.

A pattern is read with Python's own parser (`re._parser`) after RE2 has accepted it. Where the two syntaxes
differ, Python either refuses the pattern (`\\pL`, `\\Q…\\E`, `\\z`, `(?U)`, `\\x{…}`: then nothing is narrowed)
or reads less into it than RE2 does (`a{,3}` is a repeat to Python, literal text to RE2), which only lets more
rows through. POSIX classes (`[[:alpha:]]`) are the exception, read by Python as a class and literal brackets:
a pattern that holds one is not narrowed.

What a pattern needs is a `Need`: trigrams that must all be there, and alternations of which one branch must be.
None: any text can match (`.*`, `\\w+`, a literal shorter than three characters), and every row is read.
"""

from __future__ import annotations

import re
import warnings
from re import _constants as sre  # the parser's opcodes
from re import _parser
from typing import NamedTuple

import numpy as np

from indexer.snapshot.grams import BLOCK, Grams, fold, trigrams


class Need(NamedTuple):
    grams: frozenset[int]  # every one of these
    anyof: tuple[tuple["Need", ...], ...]  # and, from each of these, one branch


def need_of(pattern: str, literal: bool = False) -> Need | None:
    """What any match of `pattern` contains (None: nothing can be said)."""
    if literal:
        return _need(_grams(pattern), ())
    if "[:" in pattern:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set" and the like: the pattern is RE2's, not ours
            return _sequence(_parser.parse(pattern))
    except (re.error, RecursionError, OverflowError, ValueError):
        return None


def _need(grams, anyof) -> Need | None:
    return Need(frozenset(grams), tuple(anyof)) if grams or anyof else None


def _grams(text: str) -> set[int]:
    """The trigrams of literal text, folded as the index folds text. Case-folding is character by character, and
    characters RE2 takes as one letter told case-insensitively (k, K and the Kelvin sign K) fold alike, so a text
    that matches the literal either way holds each of these trigrams."""
    return set(trigrams(fold(text)).tolist())


MAX_TEXTS = 64  # the literal texts a run of text and alternations of text is read as, at most


def _sequence(items) -> Need | None:
    grams: set[int] = set()
    anyof: list[tuple[Need, ...]] = []
    # The texts the run of literal text since the last other item may be: one, or, through alternations of
    # literal text, each branch joined to the text either side (`(is_a|is_b)_k0` needs the trigrams of
    # `is_a_k0` or of `is_b_k0`, `d_k` among them; read apart, only those of `is_`, `_k0` and a branch were
    # needed, and grep at 10M read ten times the rows).
    texts: list[str] = [""]

    def flush():
        if len(texts) == 1:
            grams.update(_grams(texts[0]))
        else:
            branches = [_need(_grams(t), ()) for t in texts]
            if all(b is not None for b in branches):
                anyof.append(tuple(branches))
        texts[:] = [""]

    for op, av in _flat(items):
        if op is sre.LITERAL:
            texts[:] = [t + chr(av) for t in texts]
        elif op is sre.AT:  # zero width: the characters either side still stand side by side
            continue
        elif op is sre.BRANCH and (words := _words(av[1])) is not None and len(texts) * len(words) <= MAX_TEXTS:
            texts[:] = [t + w for t in texts for w in words]
        else:
            flush()
            if op is sre.BRANCH:
                branches = [_sequence(b) for b in av[1]]
                if all(b is not None for b in branches):
                    anyof.append(tuple(branches))
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[0] >= 1:
                inner = _sequence(av[2])
                if inner is not None:
                    grams.update(inner.grams)
                    anyof.extend(inner.anyof)
    flush()
    return _need(grams, anyof)


def _words(branches) -> list[str] | None:
    """The texts of an alternation whose every branch is literal text, or None."""
    words = []
    for branch in branches:
        items = list(_flat(branch))
        if not all(op is sre.LITERAL for op, _ in items):
            return None
        words.append("".join(chr(av) for _, av in items))
    return words


def _flat(items):
    """The items of a sequence with its groups opened: a group's text stands where the group does."""
    for op, av in items:
        if op is sre.SUBPATTERN:
            yield from _flat(av[-1])
        else:
            yield op, av


def candidates(parts, offsets: np.ndarray, need: Need | None, allowed: np.ndarray) -> np.ndarray:
    """The positions `allowed` (a mask of them) lets through that the parts' trigram indexes let through, sorted;
    a part without one lets its every allowed row through. Part by part, without an array the size of the
    snapshot: at 10M rows, making and filtering those was about half of a selective grep's 50 ms."""
    if need is None:
        return np.flatnonzero(allowed)
    wanted = np.fromiter(sorted(need.grams), dtype=np.uint32, count=len(need.grams))
    found = []
    for part, start in zip(parts, offsets.tolist()):
        if part.grams is None:
            local = np.arange(len(part))
        else:
            blocks = _blocks(part.grams, need, wanted)
            if blocks is None:
                continue
            local = (np.flatnonzero(blocks)[:, None] * BLOCK + np.arange(BLOCK)).ravel()
            local = local[local < len(part)]
        at = start + local
        found.append(at[allowed[at]])
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _blocks(grams: Grams, need: Need, wanted: np.ndarray | None = None) -> np.ndarray | None:
    """Which blocks of a part hold everything `need` asks for (`wanted`: its trigrams, sorted); None: none do,
    known before a block array is made where the part lacks one of the trigrams (most parts, for most
    patterns)."""
    if wanted is None:
        wanted = np.fromiter(sorted(need.grams), dtype=np.uint32, count=len(need.grams))
    starts, ends = grams.spans(wanted)
    if (ends == starts).any():
        return None
    found = np.ones(grams.count, dtype=bool)
    for i in np.argsort(ends - starts, kind="stable").tolist():  # the rarest first: most blocks drop out at once
        found &= grams.blocks(int(starts[i]), int(ends[i]))
        if not found.any():
            return None
    for branches in need.anyof:
        either = np.zeros(grams.count, dtype=bool)
        for branch in branches:
            held = _blocks(grams, branch)
            if held is not None:
                either |= held
        found &= either
        if not found.any():
            return None
    return found
