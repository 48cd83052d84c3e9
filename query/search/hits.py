"""A ranked candidate as a Hit: where its chunk lies (a snapshot row or a session overlay's chunk), the lines of
it that best match the query (snippet), its fused score and its signals."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from indexer.tokenize import tokens
from query.query_text import STOPWORDS
from query.reader import SnapshotReader
from query.search.request import Hit, Overlay, SearchRequest, Signals, ref_names

SNIPPET_LINES = 10


@functools.lru_cache(maxsize=32)  # every hit of a page asks, and a long text takes milliseconds to tokenize
def _query_words(query: str) -> frozenset[str]:
    return frozenset(tokens(query)) - STOPWORDS


def snippet(text: str, line_start: int, query: str) -> tuple[str, int, int]:
    """The SNIPPET_LINES lines of a chunk that share the most words with the query."""
    lines = text.split("\n")
    if len(lines) <= SNIPPET_LINES:
        return text, line_start, line_start + len(lines) - 1
    words = _query_words(query)
    # A line holds a query word's token only if its lower case holds the word (less a singular's "y": a
    # token of "policies" is "policy"): the other lines score 0 without being tokenized, most of them.
    keys = tuple(w[:-1] if w.endswith("y") else w for w in words)
    scores = [len(words.intersection(tokens(line))) if _holds(line.lower(), keys) else 0 for line in lines]
    window = [sum(scores[i : i + SNIPPET_LINES]) for i in range(len(lines) - SNIPPET_LINES + 1)]
    best = int(np.argmax(window)) if max(window) > 0 else 0
    return "\n".join(lines[best : best + SNIPPET_LINES]), line_start + best, line_start + best + SNIPPET_LINES - 1


def _holds(text: str, keys: tuple[str, ...]) -> bool:
    return any(k in text for k in keys)


def overlay_hit(overlay: Overlay, index: int, signals: dict, req: SearchRequest) -> Hit:
    """The overlay's chunk `index` as a hit; `signals` is its fused entry (rrf), consumed."""
    c = overlay.chunks[index]
    text, start, end = snippet(c.text, c.line_start, req.query)
    score, sim = signals.pop("score"), signals.pop("similarity")
    return Hit(
        org=req.org,
        repo=c.repo,
        ref=f"session:{overlay.session_id}",
        commit_id="",
        path=c.path,
        blob_id=c.blob_id,
        chunk_index=c.chunk_index,
        symbol=c.symbol,
        kind=c.kind,
        lang=c.lang,
        line_start=c.line_start,
        line_end=c.line_end,
        snippet=text,
        score=round(score, 6),
        signals=Signals(**signals, snippet_lines=(start, end)),
        uncommitted=True,
        text=c.text,
        similarity=sim,
    )


def snapshot_hit(reader: SnapshotReader, row: int, signals: dict, req: SearchRequest, snippets: bool = True) -> Hit:
    """The snapshot's `row` as a hit, at the ref the request names (else its first); `signals` is consumed.
    Without `snippets` the hit's snippet is empty and its lines the chunk's (`with_snippet` adds it later)."""
    r = reader.row(row)
    refs = r["refs"]
    ref = next((x for x in refs if req.ref and x in ref_names(req.ref)), refs[0])
    text, start, end = (
        snippet(r["text"], r["line_start"], req.query) if snippets else ("", r["line_start"], r["line_end"])
    )
    score, sim = signals.pop("score"), signals.pop("similarity")
    return replace(
        chunk_hit(reader, row, r, ref),
        snippet=text,
        score=round(score, 6),
        signals=Signals(**signals, snippet_lines=(start, end)),
        similarity=sim,
    )


def with_snippet(reader: SnapshotReader, hit: Hit, query: str) -> Hit:
    """A snapshot hit made without its snippet, with it: file localization ranks a few hundred chunks and shows
    three of a few files (tokenizing every candidate's lines took 80% of a route at 100k chunks)."""
    text, start, end = snippet(reader.row(hit.row)["text"], hit.line_start, query)
    return replace(hit, snippet=text, signals=replace(hit.signals, snippet_lines=(start, end)))


def chunk_hit(reader: SnapshotReader, row: int, r: dict, ref: str | None = None) -> Hit:
    """Where a snapshot row lies, as a Hit without a query (no snippet, no score); `r` is reader.row(row)."""
    ref = ref or r["refs"][0]
    return Hit(
        org=r["org"],
        repo=r["repo"],
        ref=ref,
        commit_id=reader.commit_of.get((r["org"], r["repo"], ref), ""),
        path=r["path"],
        blob_id=r["blob_id"],
        chunk_index=r["chunk_index"],
        symbol=r["symbol"],
        kind=r["kind"],
        lang=r["lang"],
        line_start=r["line_start"],
        line_end=r["line_end"],
        snippet="",
        score=0.0,
        row=row,
    )
