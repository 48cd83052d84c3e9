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


def _sequence(items) -> Need | None:
    grams: set[int] = set()
    anyof: list[tuple[Need, ...]] = []
    run: list[str] = []

    def flush():
        if run:
            grams.update(_grams("".join(run)))
            run.clear()

    for op, av in _flat(items):
        if op is sre.LITERAL:
            run.append(chr(av))
        elif op is sre.AT:  # zero width: the characters either side still stand side by side
            continue
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


def _flat(items):
    """The items of a sequence with its groups opened: a group's text stands where the group does."""
    for op, av in items:
        if op is sre.SUBPATTERN:
            yield from _flat(av[-1])
        else:
            yield op, av


def candidates(parts, offsets: np.ndarray, need: Need | None, rows: np.ndarray) -> np.ndarray:
    """The positions among `rows` (sorted) that the parts' trigram indexes let through; a part without one lets
    every row through."""
    if need is None or not len(rows):
        return rows
    keep = np.zeros(int(offsets[-1]), dtype=bool)
    for part, start in zip(parts, offsets):
        if part.grams is None:
            keep[start : start + len(part)] = True
            continue
        blocks = np.flatnonzero(_blocks(part.grams, need))
        local = (blocks[:, None] * BLOCK + np.arange(BLOCK)).ravel()
        keep[start + local[local < len(part)]] = True
    return rows[keep[rows]]


def _blocks(grams: Grams, need: Need) -> np.ndarray:
    """Which blocks of a part hold everything `need` asks for."""
    found = np.ones(grams.count, dtype=bool)
    starts, ends = grams.spans(np.fromiter(sorted(need.grams), dtype=np.uint32, count=len(need.grams)))
    for i in np.argsort(ends - starts, kind="stable").tolist():  # the rarest first: most blocks drop out at once
        found &= grams.blocks(int(starts[i]), int(ends[i]))
        if not found.any():
            return found
    for branches in need.anyof:
        either = np.zeros(grams.count, dtype=bool)
        for branch in branches:
            either |= _blocks(grams, branch)
        found &= either
    return found
