"""The rankings a search fuses: vector search (exact, or the approximate index's candidates rescored exactly:
query.approximate), BM25, the definitions a query names and a session overlay's own chunks; then weighted
reciprocal-rank fusion (rrf, the one implementation) and the similarity every score threshold reads."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import tantivy

from indexer.embed import Embedder, embed_text
from indexer.languages import category
from indexer.tokenize import tokens
from query.query_text import STOPWORDS, named_definitions, passages
from query.reader import GATHER_SHARE, SnapshotReader
from query.search.request import Overlay, SearchRequest, globs

RRF_K = 60  # Cormack, Clarke & Buettcher 2009
# Each signal's share of the fused chunk score (weighted RRF); an overlay's lexical list counts as
# bm25. Measured on the CodeSearchNet judgements (`blobdex eval codesearchnet`, NDCG over languages):
# bm25 at 1.0 0.799, 0.75 0.800, 0.5 0.798. File ranking (query.localize) fuses per-signal file
# rankings instead, unweighted.
WEIGHTS = {"vector": 1.0, "bm25": 0.75, "symbol": 1.0}
CANDIDATES = 100  # per signal, before fusion
MAX_LEXICAL_FETCH = 20_000  # BM25 hits read to find `depth` that pass the filters, at most
# A name defined in more files than this (`Type`, `String`, `get` on every value type) says which
# definition is meant no better than a prose word, so it adds no symbol-list entries. With the named-
# definition bonus shared among the defining files (query.localize), measured with `blobdex eval
# commits` (hybrid file MRR): pflag 0.779 -> 0.796, commander.js 0.837 -> 0.846, five others unchanged.
MAX_DEFINING_FILES = 3
SYMBOL_BOOST = 2.0  # a query word that names the symbol counts more than one in its body
PATH_BOOST = 1.5
COMPOUND_BOOST = 3.0


class OverlayKey(NamedTuple):
    """A ranked candidate from a session overlay (its index there); a snapshot candidate is its row, an int."""

    index: int


# Threads a search runs a signal on beside its own (query.search.rank, query.shard): a few requests at a time.
BESIDE = ThreadPoolExecutor(max_workers=4, thread_name_prefix="signal")


@functools.lru_cache(maxsize=32)  # route_task asks again through file localization, an eval once per mode
def query_vectors(embedder: Embedder, text: str) -> np.ndarray:
    """The query's vectors, one row per passage (one row for a text that fits the model); read-only."""
    parts = passages(text, embedder.fits)
    vectors = np.asarray(embedder.embed([embed_text("", p) for p in parts]), dtype=np.float32)
    vectors.flags.writeable = False  # shared by every caller that asks the same text
    return vectors


def cosines(matrix: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Each row's best cosine over the query's passages (vectors are unit length)."""
    return (matrix @ queries.T).max(axis=1) if len(matrix) else np.zeros(0, dtype=np.float32)


def row_cosines(reader: SnapshotReader, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """`cosines` of the snapshot's `rows`: most of the rows are scored in place, a few gathered first."""
    if len(rows) * GATHER_SHARE >= len(reader.vectors):
        return reader.vectors.cosines(queries)[rows]
    return cosines(reader.vectors[rows], queries)


def vector_ranks(
    reader: SnapshotReader, vector: np.ndarray, mask: np.ndarray, depth: int = CANDIDATES
) -> list[tuple[int, float]]:
    return top_ranks(*scored_rows(reader, vector, mask), depth)


def scored_rows(reader: SnapshotReader, queries: np.ndarray, mask: np.ndarray, pool: int | None = None):
    """(rows, their cosines), rows sorted: every allowed row, or, where the snapshot's approximate index answers
    (query.approximate), the `pool` it finds nearest each passage (its codebook's RESCORE unless given) and the
    allowed rows it holds no codes of."""
    approximate = reader.approximate
    if approximate is None or not approximate.asked(int(np.count_nonzero(mask))):
        allowed = np.flatnonzero(mask)
        return allowed, row_cosines(reader, allowed, queries)
    near = approximate.candidates(queries, mask, pool)
    rest, rest_scores = reader.vectors.scored(queries, mask & ~approximate.covered)  # in place, part by part
    rows = np.concatenate([near, rest])
    scores = np.concatenate([cosines(reader.vectors[near], queries), rest_scores])
    order = np.argsort(rows, kind="stable")
    return rows[order], scores[order]


def top_ranks(rows: np.ndarray, scores: np.ndarray, depth: int = CANDIDATES) -> list[tuple[int, float]]:
    """The `depth` best (row, score) of `rows` scored `scores`, best first."""
    if not len(rows):
        return []
    k = min(depth, len(rows))
    top = np.argpartition(-scores, k - 1)[:k]
    # Equal scores in row order, also where they straddle the cut (argpartition keeps any of them): so the shards'
    # rankings merged (query.front) are this one.
    last = scores[top].min()
    if np.count_nonzero(scores == last) > np.count_nonzero(scores[top] == last):
        above = np.flatnonzero(scores > last)
        top = np.concatenate([above, np.flatnonzero(scores == last)[: k - len(above)]])
    top = top[np.lexsort((rows[top], -scores[top]))]
    return [(int(rows[i]), float(scores[i])) for i in top]


def lexical_query(reader: SnapshotReader, text: str, org: str, repos: tuple[str, ...]) -> tantivy.Query | None:
    """BM25 over content, symbol and path; org and repos are required terms, never pasted-in strings. The org
    is required only where the snapshot holds another: a query of terms alone lets Tantivy skip the blocks
    that cannot reach the top (block-max WAND), which a required term stops (at 1M chunks, a common query's
    BM25 took 30-40 ms with the org required and 8-15 ms without: the same ranking, each score less the org
    term's constant)."""
    Q, Occur, schema = tantivy.Query, tantivy.Occur, reader.schema
    # Tokenized as the snapshot was (a server may be upgraded before the next index run).
    version = reader.manifest.tokenizer_version
    words = list(dict.fromkeys(t for t in tokens(text, version) if t not in STOPWORDS))
    if not words:
        return None
    # A compound identifier spelled whole (`get_terminal_size`) is stronger evidence than its parts.
    compounds = {t for t in words if tokens(t, version) != [t]}
    should = []
    for w in words:
        boost = COMPOUND_BOOST if w in compounds else 1.0
        should.append((Occur.Should, Q.boost_query(Q.term_query(schema, "content", w), boost)))
        should.append((Occur.Should, Q.boost_query(Q.term_query(schema, "symbol", w), SYMBOL_BOOST * boost)))
        should.append((Occur.Should, Q.boost_query(Q.term_query(schema, "path", w), PATH_BOOST * boost)))
    flat = not repos and all(r.org == org for r in reader.manifest.repos)
    held = reader.selected  # a shard's repos (query.shard): the others' documents are never its answer
    if flat and held is None:
        return Q.boolean_query(should)
    must = [(Occur.Must, Q.boolean_query(should))]
    if not flat:
        must.append((Occur.Must, Q.term_query(schema, "org", org)))
    if repos:
        must.append((Occur.Must, Q.term_set_query(schema, "repo", list(repos))))
    if held is not None:  # scored 0: every score stays the one a reader of the whole snapshot gives
        names = sorted(name for o, name in held if o == org)
        must.append((Occur.Must, Q.boost_query(Q.term_set_query(schema, "repo", names), 0.0)))
    return Q.boolean_query(must)


def lexical_ranks(
    reader: SnapshotReader, req: SearchRequest, mask: np.ndarray, depth: int = CANDIDATES
) -> list[tuple[int, float]]:
    """BM25's best `depth` allowed rows as (row, score), best first (lexical_hits)."""
    return [(row, score) for row, score, _ in lexical_hits(reader, req, mask, depth)]


def lexical_hits(
    reader: SnapshotReader, req: SearchRequest, mask: np.ndarray, depth: int = CANDIDATES
) -> list[tuple[int, float, int]]:
    """BM25's best `depth` allowed rows as (row, score, place), in Tantivy's order: by score, equal scores by the
    document's place in the index (segment, then document; `place` packs both). Tantivy's best n are the first n
    of that order, and every reader of the snapshot's lexical index, a shard too, sees the same places, so
    shards' lists merged by (score, place) are one reader's (query.front). The fetch widens only until `depth`
    rows pass the filters other than org and repo, or every hit is seen. (It also widened while the last row
    fetched tied the last kept one, to order ties by row: at 3M chunks of repeated texts that was a second,
    four times larger search for most queries, 37 ms of BM25 a query.)"""
    query = lexical_query(reader, req.query, req.org, req.repos)
    if query is None:
        return []
    fetch = depth
    while True:
        result = reader.searcher.search(query, fetch, count=False)  # counting every match: 15% of a BM25 query at 10M
        ranked = []
        ids = reader.searcher.fast_field_values("row", [address for _, address in result.hits])
        for (score, address), row in zip(result.hits, reader.positions(ids).tolist()):
            if row >= 0 and mask[row]:
                ranked.append((row, float(score), address.segment_ord << 32 | address.doc))
        if len(ranked) >= depth or len(result.hits) < fetch or fetch >= MAX_LEXICAL_FETCH:
            return ranked[:depth]
        fetch *= 4


def defining_files(reader: SnapshotReader, rows: list[int]) -> set[tuple[str, str]]:
    return {(reader.col["repo"][r], reader.col["path"][r]) for r in rows}


def symbol_ranks(
    reader: SnapshotReader,
    req: SearchRequest,
    mask: np.ndarray,
    lex: list[tuple[int, float]],
    vec: list[tuple[int, float]],
    depth: int,
) -> list[tuple[int, float]]:
    """Definitions whose name the query spells out (`make_context`, `Command.make_context`).

    People and agents paste identifiers; the definition should outrank its callers, which
    BM25 scores alike and vectors may not favour. Ties are broken by the other signals.
    """
    return definition_ranks(named_rows(reader, req, mask), lex, vec, depth)


Defined = dict[str, list[tuple[int, str, str]] | None]  # name -> its defining (row, repo, path), or None: too many


def named_rows(reader: SnapshotReader, req: SearchRequest, mask: np.ndarray) -> Defined:
    """For each definition name the query spells, the allowed rows defining it as (row, repo, path); None
    where they lie in more than MAX_DEFINING_FILES files (the name then says nothing, whoever else defines it)."""
    found: Defined = {}
    for name in named_definitions(req.query):
        rows = [r for r in reader.symbol_rows.get(name, ()) if mask[r]]
        if len(defining_files(reader, rows)) > MAX_DEFINING_FILES:
            found[name] = None
        else:
            found[name] = [(r, reader.col["repo"][r], reader.col["path"][r]) for r in rows]
    return found


def definition_ranks(
    found: Defined,
    lex: list[tuple[int, float]],
    vec: list[tuple[int, float]],
    depth: int,
) -> list[tuple[int, float]]:
    """The symbol signal of named_rows' answer (one reader's, or every shard's merged: query.front), the names
    defined in at most MAX_DEFINING_FILES files, ordered by the other signals."""
    rows = set()
    for defined in found.values():
        if defined is not None and len({(repo, path) for _, repo, path in defined}) <= MAX_DEFINING_FILES:
            rows.update(r for r, _, _ in defined)
    if not rows:
        return []
    lex_rank = {r: i for i, (r, _) in enumerate(lex)}
    vec_rank = {r: i for i, (r, _) in enumerate(vec)}
    ordered = sorted(rows, key=lambda r: (lex_rank.get(r, len(lex)), vec_rank.get(r, len(vec)), r))
    return [(r, 1.0) for r in ordered[:depth]]


def _kind_ok(wanted: str | None, lang: str, kind: str) -> bool:
    if wanted in ("code", "doc"):
        return category(lang) == wanted
    return wanted is None or kind == wanted


def overlay_ranks(overlay: Overlay, req: SearchRequest, vector: np.ndarray | None, vec: list) -> tuple[list, list]:
    """The session's chunks that pass the filters, as (key, score) lists: vectors merged with the
    snapshot's by cosine (comparable), and a lexical list of their own (query words matched)."""
    include, ignore = globs(req.paths, "path"), globs(req.ignore, "ignore")
    keep = []
    for i, c in enumerate(overlay.chunks):
        if (req.repos and c.repo not in req.repos) or (req.langs and c.lang not in req.langs):
            continue
        if not _kind_ok(req.kind, c.lang, c.kind):
            continue
        if (include and not include.match_file(c.path)) or (ignore and ignore.match_file(c.path)):
            continue
        keep.append(i)
    if not keep:
        return vec, []
    merged = vec
    if vector is not None:  # None: BM25 alone
        scores = cosines(overlay.vectors[keep], vector)
        merged = sorted(vec + [(OverlayKey(i), float(sc)) for i, sc in zip(keep, scores)], key=lambda x: -x[1])
        merged = merged[:CANDIDATES]
    words = set(tokens(req.query)) - STOPWORDS
    lexical = []
    for i in keep:
        c = overlay.chunks[i]
        found = words & set(tokens(f"{c.symbol} {c.path} {c.text}"))
        if found:
            lexical.append((OverlayKey(i), float(len(found))))
    lexical.sort(key=lambda x: -x[1])
    return merged, lexical


def similarity(reader: SnapshotReader | None, overlay: Overlay | None, keys: list, vector: np.ndarray) -> list[float]:
    """The exact cosine between the query vector and each key's chunk (a snapshot row, or an OverlayKey in
    the overlay), from the vectors already held: the one similarity every score threshold reads."""
    rows = [k for k in keys if not isinstance(k, OverlayKey)]
    held = [k.index for k in keys if isinstance(k, OverlayKey)]
    by_row = dict(zip(rows, cosines(reader.vectors[rows], vector).tolist())) if rows else {}
    by_index = dict(zip(held, cosines(overlay.vectors[held], vector).tolist())) if held else {}
    return [by_index[k.index] if isinstance(k, OverlayKey) else by_row[k] for k in keys]


def rrf(rankings: list[tuple[str, float, list]], signals: tuple[str, ...] = ()) -> dict:
    """Weighted reciprocal-rank fusion, the one implementation (search, overlays, file ranking): each
    ranking is (signal, weight, [(key, score), ...] best first). Returns key -> {"score", "<signal>_rank",
    "<signal>_score"}, every signal named in `signals` present (None where it did not retrieve the key)."""
    fused: dict = {}
    for name, weight, ranked in rankings:
        for position, (key, score) in enumerate(ranked, 1):
            entry = fused.get(key)
            if entry is None:
                entry = fused[key] = {"score": 0.0, **{f"{s}_{f}": None for s in signals for f in ("rank", "score")}}
            entry["score"] += weight / (RRF_K + position)
            entry[f"{name}_rank"], entry[f"{name}_score"] = position, round(score, 4)
    return fused
