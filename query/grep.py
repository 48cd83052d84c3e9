"""grep over the indexed text of a snapshot: RE2 (linear time, no backtracking) or a literal, over the rows the
parts' trigram indexes let through (query/narrow.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import re2

from indexer.errors import BlobdexError
from query.narrow import candidates, need_of
from query.reader import SnapshotReader, text_of
from query.search import SearchRequest, row_mask, validate

MAX_MATCHES = 500
MAX_LINE_CHARS = 300
MAX_PATTERN_CHARS = 1000


class GrepError(BlobdexError):
    """A pattern that cannot be compiled or a request out of range; the message says how to fix it."""


@dataclass(frozen=True, kw_only=True)
class GrepMatch:
    org: str
    repo: str
    ref: str
    path: str
    blob_id: str
    line: int
    text: str


def compile_pattern(pattern: str, literal: bool = False, ignore_case: bool = False):
    """A grep pattern as RE2 reads it (the page marks matches with the same object); GrepError if it is bad."""
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False
    try:
        return re2.compile(re2.escape(pattern) if literal else pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise GrepError(
            f"bad regular expression {pattern!r}: {reason}; RE2 has no backreferences or lookaround, or ⟦literal⟧"
        ) from exc


def grep(
    reader: SnapshotReader,
    pattern: str,
    org: str = "default",
    repos: tuple[str, ...] = (),
    paths: tuple[str, ...] = (),
    ref: str | None = None,
    limit: int = 100,
    literal: bool = False,
    ignore_case: bool = False,
    after: tuple[int, int] | None = None,
) -> tuple[list[GrepMatch], tuple[int, int] | None]:
    """Matching lines (the first `limit` from `after`, a (row position, line offset) a page ended at), and
    where the next page starts (None: nothing is left)."""
    check_limit(limit)
    matches = []
    for where, match in matching(reader, pattern, org, repos, paths, ref, literal, ignore_case, after):
        if len(matches) == limit:
            return matches, where
        matches.append(match)
    return matches, None


def check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_MATCHES:
        raise GrepError(f"limit {limit} is out of range: use 1 to {MAX_MATCHES}")


def matching(
    reader: SnapshotReader,
    pattern: str,
    org: str,
    repos: tuple[str, ...] = (),
    paths: tuple[str, ...] = (),
    ref: str | None = None,
    literal: bool = False,
    ignore_case: bool = False,
    after: tuple[int, int] | None = None,
) -> Iterator[tuple[tuple[int, int], GrepMatch]]:
    """Every matching line from `after` on, in row order, with its (row position, line offset)."""
    if not pattern:
        raise GrepError("the pattern is empty: give a regular expression (RE2 syntax), or ⟦literal⟧")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise GrepError(f"the pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}")
    compiled = compile_pattern(pattern, literal, ignore_case)
    req = SearchRequest(query="grep", org=org, repos=repos, paths=paths, ref=ref)
    validate(req, reader)
    mask = row_mask(req, reader)
    texts = reader.rows.column("text")
    first_row, first_line = after or (0, 0)
    rows = candidates(reader.parts, reader.offsets, need_of(pattern, literal), mask)
    for row in rows[np.searchsorted(rows, first_row) :]:
        text = text_of(texts[int(row)])
        if not compiled.search(text):
            continue
        r = reader.row(int(row))
        skip = first_line if row == first_row else 0
        for offset, line in enumerate(text.split("\n")):
            if offset < skip or not compiled.search(line):
                continue
            match = GrepMatch(
                org=r["org"],
                repo=r["repo"],
                ref=r["refs"][0],
                path=r["path"],
                blob_id=r["blob_id"],
                line=r["line_start"] + offset,
                text=line[:MAX_LINE_CHARS],
            )
            yield (int(row), offset), match
