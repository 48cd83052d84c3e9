"""Hybrid search over one snapshot: exact vector search and BM25, fused by reciprocal rank.

This module is the flow (`search`, `candidates`, `rank`, and `search_overlay` for chunks no snapshot holds) and
names everything callers import from `query.search`. Its parts:

- request.py: the SearchRequest and Hit records, the checks a request passes (validate, check_org) and the rows
  it may see (row_mask, globs);
- signals.py: the rankings (vector, BM25, named definitions, a session overlay's chunks), rrf and similarity;
- hits.py: a ranked candidate as a Hit, with its snippet;
- thresholds.py: min_score and min_score_diff, and the rule that a request passes one, not both.

What a query text says (passages, named definitions, stopwords) is query/query_text.py's.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from indexer.embed import Embedder, embed_text, vector_tier
from query import MAX_LIMIT
from query.reader import SnapshotReader
from query.rerank import RERANK_POOL
from query.search.hits import SNIPPET_LINES, chunk_hit, overlay_hit, snapshot_hit, snippet, with_snippet
from query.search.request import (
    HIT_FIELDS,
    KINDS,
    MODES,
    Hit,
    Overlay,
    SearchError,
    SearchRequest,
    Signals,
    check_org,
    check_query,
    globs,
    row_mask,
    validate,
)
from query.search.signals import (
    CANDIDATES,
    COMPOUND_BOOST,
    MAX_DEFINING_FILES,
    PATH_BOOST,
    RRF_K,
    SYMBOL_BOOST,
    WEIGHTS,
    OverlayKey,
    cosines,
    defining_files,
    definition_ranks,
    lexical_query,
    BESIDE,
    lexical_hits,
    lexical_ranks,
    named_rows,
    overlay_ranks,
    query_vectors,
    row_cosines,
    rrf,
    scored_rows,
    similarity,
    symbol_ranks,
    top_ranks,
    vector_ranks,
)
from query.search.thresholds import Thresholds, keep_similar, similarity_floor

__all__ = [
    "CANDIDATES",
    "COMPOUND_BOOST",
    "HIT_FIELDS",
    "KINDS",
    "MAX_DEFINING_FILES",
    "MAX_LIMIT",
    "MODES",
    "PATH_BOOST",
    "RRF_K",
    "SNIPPET_LINES",
    "SYMBOL_BOOST",
    "WEIGHTS",
    "Hit",
    "Overlay",
    "OverlayKey",
    "SearchError",
    "SearchRequest",
    "Signals",
    "Thresholds",
    "candidates",
    "check_org",
    "check_query",
    "chunk_hit",
    "cosines",
    "defining_files",
    "definition_ranks",
    "fuse",
    "globs",
    "keep_similar",
    "lexical_query",
    "lexical_hits",
    "lexical_ranks",
    "named_rows",
    "query_vectors",
    "rank",
    "reranked",
    "row_cosines",
    "row_mask",
    "rrf",
    "scored_rows",
    "search",
    "search_overlay",
    "similarity",
    "similarity_floor",
    "snippet",
    "top_ranks",
    "with_snippet",
    "validate",
]


def _tie(key: int | OverlayKey) -> tuple[int, str]:
    """Equal scores: a session's edit before a snapshot row, then by the key's digits as text (the order kept
    since keys were ("o", i) tuples and ints compared as strings)."""
    return (0, str(key.index)) if isinstance(key, OverlayKey) else (1, str(key))


def search(
    reader: SnapshotReader, embedder: Embedder, req: SearchRequest, overlay: Overlay | None = None, reranker=None
) -> list[Hit]:
    """The best `req.limit` chunks; a configured cross-encoder (query.rerank) reorders a hybrid head."""
    validate(req, reader, overlay)
    return candidates(reader, embedder, req, overlay, reranker, req.limit)


def candidates(
    reader: SnapshotReader,
    embedder: Embedder,
    req: SearchRequest,
    overlay: Overlay | None = None,
    reranker=None,
    limit: int | None = None,
    mask: np.ndarray | None = None,
    snippets: bool = True,
    known: dict[str, list] | None = None,
) -> list[Hit]:
    """The fused candidates as hits (every one, or the first `limit`), a hybrid head reranked when a
    reranker is given. `req` must have been validated; `mask` is its row_mask when the caller has it. Without
    `snippets`, snapshot hits have none (hits.with_snippet adds one). `known`: see `rank`."""
    rerank = reranker is not None and req.mode == "hybrid"
    best = rank(reader, embedder, req, overlay, mask=mask, known=known)
    if limit is not None:
        best = best[: max(limit, RERANK_POOL) if rerank else limit]
    reader.will_read([key for key, _ in best if not isinstance(key, OverlayKey)])
    hits = [
        overlay_hit(overlay, key.index, signals, req)
        if isinstance(key, OverlayKey)
        else snapshot_hit(reader, key, signals, req, snippets)
        for key, signals in best
    ]
    if rerank:

        def text_of(h: Hit) -> str:
            return embed_text(h.symbol, h.text if h.uncommitted else reader.row(h.row)["text"])

        hits = reranked(reranker, req.query, hits, text_of)
    return hits if limit is None else hits[:limit]


def reranked(reranker, query: str, hits: list[Hit], text_of) -> list[Hit]:
    """The hits in the cross-encoder's order, each it scored with its rerank_score (query.rerank)."""
    return [
        h if score is None else replace(h, signals=replace(h.signals, rerank_score=round(score, 4)))
        for h, score in reranker.rerank(query, hits, text_of)
    ]


def rank(
    reader: SnapshotReader,
    embedder: Embedder,
    req: SearchRequest,
    overlay: Overlay | None = None,
    depth: int = CANDIDATES,
    mask: np.ndarray | None = None,
    known: dict[str, list] | None = None,
) -> list[tuple[int | tuple, dict]]:
    """Every candidate in fused order as (a snapshot row or an OverlayKey, signals); `depth`
    candidates per signal. Evaluation asks for more depth than a page of results needs. `known`: the vector
    and bm25 rankings a caller already made of this request and mask at this depth (route_task scores every
    row itself; a second pass over a million vectors would cost what the first did)."""
    known = known or {}
    mask = row_mask(req, reader) if mask is None else mask.copy()  # shadowing must not touch the caller's
    if overlay is not None:
        # Shadowing happens before ranking: a path the session deleted has no chunks of its own
        # to outrank the committed ones, so filtering afterwards would keep returning them.
        for key in overlay.shadowed:
            mask[reader.rows_at(req.org, *key)] = False
    # BM25 alone reads no model: nothing is embedded and a hit's similarity is 0 (a query process that only
    # asks BM25 never loads the embedder).
    # BM25 runs beside the query's embedding and vector search (Tantivy and faiss let go of the GIL): at 3M
    # chunks a search's BM25 took 24 ms and its vector signal 20.
    asked = req.mode != "vector" and not known.get("bm25")
    lexical = BESIDE.submit(lexical_ranks, reader, req, mask, depth) if asked else None
    vector = query_vectors(embedder, req.query) if req.mode != "bm25" else None
    vec = known.get("vector") or vector_ranks(reader, vector, mask, depth) if vector is not None else []
    lex = lexical.result() if lexical is not None else known.get("bm25", []) if req.mode != "vector" else []
    sym = symbol_ranks(reader, req, mask, lex, vec, depth) if req.mode == "hybrid" else []
    extra = []
    if overlay is not None:
        vec, overlay_lex = overlay_ranks(overlay, req, vector, vec)
        extra = [("overlay_bm25", overlay_lex)] if req.mode != "vector" else []
    if vector is None:
        return fuse(vec, lex, sym, extra, None, None)
    sims = partial(similarity, reader, overlay, vector=vector)
    return fuse(vec, lex, sym, extra, sims, vector_tier(embedder.model_id))


def fuse(vec: list, lex: list, sym: list, extra: list, sims, tier: str | None) -> list[tuple[int | tuple, dict]]:
    """The signals' rankings fused (rrf), each candidate given its similarity (`sims(keys)`; 0 where no vector was
    asked) and its vectors' tier, in fused order: the one fusion of one reader's signals and of every shard's
    merged (query.front)."""
    rankings = [(name, WEIGHTS[name], ranked) for name, ranked in (("vector", vec), ("bm25", lex), ("symbol", sym))]
    rankings += [("bm25", WEIGHTS["bm25"], ranked) for _, ranked in extra]  # overlay keys never meet row keys
    fused = rrf(rankings, ("vector", "bm25", "symbol"))
    values = sims(list(fused)) if sims is not None else [0.0] * len(fused)
    for key, sim in zip(fused, values):
        fused[key]["similarity"], fused[key]["vector_tier"] = sim, tier
    return sorted(fused.items(), key=lambda kv: (-kv[1]["score"], _tie(kv[0])))


def search_overlay(embedder: Embedder, req: SearchRequest, overlay: Overlay) -> list[tuple[Hit, float]]:
    """Search only an overlay's chunks (content that no snapshot holds): (hit, cosine) pairs, fused order."""
    check_query(req)
    if not overlay.chunks:
        return []
    vector = query_vectors(embedder, req.query)
    vec, lex = overlay_ranks(overlay, req, vector, [])
    fused = rrf([("vector", 1.0, vec), ("bm25", 1.0, lex)], ("vector", "bm25"))
    for key, sim in zip(fused, similarity(None, overlay, list(fused), vector)):
        fused[key]["similarity"], fused[key]["vector_tier"] = sim, vector_tier(embedder.model_id)
    best = sorted(fused.items(), key=lambda kv: (-kv[1]["score"], _tie(kv[0])))[: req.limit]
    hits = [overlay_hit(overlay, key.index, signals, req) for key, signals in best]
    return [(h, h.similarity) for h in hits]
