"""Hybrid search over one snapshot: exact vector search and BM25, fused by reciprocal rank."""

from __future__ import annotations

import functools
from typing import NamedTuple
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pathspec
import re2
import tantivy

from indexer.embed import Embedder, embed_text, vector_tier
from indexer.errors import BlobdexError
from indexer.languages import category
from indexer.tokenize import tokens
from query import MAX_LIMIT
from query.reader import SnapshotReader
from query.query_text import MAX_QUERY_CHARS, STOPWORDS, cut, cut_note, named_definitions, passages
from query.rerank import RERANK_POOL

RRF_K = 60  # Cormack, Clarke & Buettcher 2009
# Each signal's share of the fused chunk score (weighted RRF); an overlay's lexical list counts as
# bm25. Measured on the CodeSearchNet judgements (`blobdex eval codesearchnet`, NDCG over languages):
# bm25 at 1.0 0.799, 0.75 0.800, 0.5 0.798. File ranking (query.localize) fuses per-signal file
# rankings instead, unweighted.
WEIGHTS = {"vector": 1.0, "bm25": 0.75, "symbol": 1.0}
CANDIDATES = 100  # per signal, before fusion
# Vector search scores every row in place when at least 1/GATHER_SHARE of them pass the filters: gathering
# the allowed rows first copies them (1.5 GB at 1M x 384), which costs more than the product it saves.
GATHER_SHARE = 4
# A name defined in more files than this (`Type`, `String`, `get` on every value type) says which
# definition is meant no better than a prose word, so it adds no symbol-list entries. With the named-
# definition bonus shared among the defining files (query.localize), measured with `blobdex eval
# commits` (hybrid file MRR): pflag 0.779 -> 0.796, commander.js 0.837 -> 0.846, five others unchanged.
MAX_DEFINING_FILES = 3
SNIPPET_LINES = 10
SYMBOL_BOOST = 2.0  # a query word that names the symbol counts more than one in its body
PATH_BOOST = 1.5
COMPOUND_BOOST = 3.0
MODES = ("hybrid", "vector", "bm25")
KINDS = frozenset({"code", "doc", "function", "method", "class", "definition", "module", "section", "text"})


class OverlayKey(NamedTuple):
    """A ranked candidate from a session overlay (its index there); a snapshot candidate is its row, an int."""

    index: int


def _tie(key: int | OverlayKey) -> tuple[int, str]:
    """Equal scores: a session's edit before a snapshot row, then by the key's digits as text (the order kept
    since keys were ("o", i) tuples and ints compared as strings)."""
    return (0, str(key.index)) if isinstance(key, OverlayKey) else (1, str(key))


class SearchError(BlobdexError):
    """A search request that cannot be run as given; the message says how to fix it."""


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    query: str
    org: str = "default"
    repos: tuple[str, ...] = ()
    langs: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()  # include globs (gitignore syntax); any match keeps a path
    ignore: tuple[str, ...] = ()  # exclude globs; any match drops a path
    kind: str | None = None  # code | doc | a chunk kind (function, class, ...)
    ref: str | None = None  # a branch, tag or full ref name
    limit: int = 10
    ignore_re: str | None = None  # drop paths this regex matches (built by a facade from its own pattern syntax)
    mode: str = "hybrid"  # hybrid | vector | bm25: single signals exist to measure what fusion adds
    cut_from: int = 0  # the text's length when it was longer than MAX_QUERY_CHARS and so cut; else 0

    def __post_init__(self):
        # Every surface builds its request here, so no ranking step ever reads more than the cap.
        if len(self.query) > MAX_QUERY_CHARS:
            query, cut_from = cut(self.query)
            object.__setattr__(self, "cut_from", cut_from)
            object.__setattr__(self, "query", query)

    @property
    def note(self) -> str | None:
        return cut_note(self.cut_from)


@dataclass(frozen=True, kw_only=True)
class Signals:
    """Why a hit ranked where it did: its place and score in each ranking that found it (None where that
    ranking did not), the lines its snippet shows, and the cross-encoder's score when one reordered it."""

    vector_rank: int | None = None
    vector_score: float | None = None  # cosine, rounded; only for the vector top CANDIDATES (Hit.similarity: all)
    bm25_rank: int | None = None
    bm25_score: float | None = None
    symbol_rank: int | None = None
    symbol_score: float | None = None
    snippet_lines: tuple[int, int] = (0, 0)
    rerank_score: float | None = None  # set only on hits a reranker scored
    # The vectors that scored it: "full" (the model's own) or "fast" (a static model's, served while a
    # fast-first run backfills); None when no vector search ran (BM25 alone).
    vector_tier: str | None = None

    def rank(self, signal: str) -> int | None:
        """The hit's place in one ranking: "vector", "bm25" or "symbol"."""
        return getattr(self, f"{signal}_rank")

    def to_dict(self) -> dict:
        d = {**asdict(self), "snippet_lines": list(self.snippet_lines)}
        if self.rerank_score is None:  # the JSON names it only where a reranker scored the hit
            del d["rerank_score"]
        return d


@dataclass(frozen=True, kw_only=True)
class Hit:
    org: str
    repo: str
    ref: str
    commit_id: str
    path: str
    blob_id: str
    chunk_index: int
    symbol: str
    kind: str
    lang: str
    line_start: int
    line_end: int
    snippet: str
    score: float
    signals: Signals = field(default_factory=Signals)
    uncommitted: bool = False  # from a session overlay, not from a commit
    row: int = -1  # the snapshot row; -1 for an overlay hit
    text: str | None = field(default=None, repr=False)  # an overlay hit's whole chunk
    # The exact cosine between the query and the chunk, whichever signal found it (a BM25-only hit has
    # its real similarity, not 0): what every surface's score thresholds (keep_similar) and the
    # compatibility contracts' `score` read. Not in to_dict: the JSON answers predate it.
    similarity: float = 0.0

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in HIT_FIELDS} | {"signals": self.signals.to_dict()}


# Hit's public fields, in the order its JSON lists them; row, text and similarity are internal.
HIT_FIELDS = (
    "org repo ref commit_id path blob_id chunk_index symbol kind lang line_start line_end snippet score signals "
    "uncommitted"
).split()


@dataclass(frozen=True, kw_only=True)
class Overlay:
    """A session's edits for one search: its chunks (with vectors) and the (repo, path) pairs it shadows."""

    session_id: str
    shadowed: frozenset
    chunks: list  # overlay.OverlayChunk
    vectors: np.ndarray


def _globs(patterns: tuple[str, ...], what: str) -> pathspec.PathSpec | None:
    if not patterns:
        return None
    try:
        return pathspec.PathSpec.from_lines("gitignore", patterns)
    except Exception as exc:
        raise SearchError(
            f"bad {what} glob in {list(patterns)!r}: {exc}; use gitignore syntax such as 'src/**/*.py' or 'tests/'"
        ) from exc


def _ref_names(ref: str) -> set[str]:
    return {ref, f"refs/heads/{ref}", f"refs/tags/{ref}"}


def _listing(values) -> str:
    return ", ".join(sorted(values)) or "none"


def check_query(req: SearchRequest) -> None:
    """The checks that need no snapshot: a query to run and a limit in range (validate, search_overlay)."""
    if not req.query or not req.query.strip():
        raise SearchError("the query is empty: describe what the code does, or name an identifier")
    if not 1 <= req.limit <= MAX_LIMIT:
        raise SearchError(f"limit {req.limit} is out of range: use 1 to {MAX_LIMIT}")


def validate(req: SearchRequest, reader: SnapshotReader, overlay: Overlay | None = None) -> None:
    """Reject what cannot be run as given, each filter value the same way: one sentence naming the values
    that would match (every surface calls this, so CLI, HTTP and MCP agree)."""
    check_query(req)
    if req.mode not in MODES:
        raise SearchError(f"unknown mode {req.mode!r}: use one of {', '.join(MODES)}")
    if req.kind is not None and req.kind not in KINDS:
        raise SearchError(f"unknown kind {req.kind!r}: use one of {', '.join(sorted(KINDS))}")
    states = [r for r in reader.manifest.repos if r.org == req.org]
    known = {r.name for r in states}
    unknown = [r for r in req.repos if r not in known]
    if unknown:
        raise SearchError(f"unknown repo {unknown[0]!r} in org {req.org!r}; indexed repos: {_listing(known)}")
    if req.langs:
        langs = set(reader.cached(f"langs:{req.org}", lambda: set(reader.col["lang"][reader.col["org"] == req.org])))
        langs |= {c.lang for c in overlay.chunks} if overlay else set()
        unknown = [x for x in req.langs if x.lower() not in langs]
        if unknown:
            raise SearchError(
                f"no chunk in language {unknown[0]!r} is indexed in org {req.org!r}; "
                f"indexed languages: {_listing(langs)}"
            )
    if req.ref:
        scope = [r for r in states if not req.repos or r.name in req.repos]
        refs = {x.ref for r in scope for x in r.refs}
        if not refs & _ref_names(req.ref):
            where = f"repo {', '.join(map(repr, req.repos))}" if req.repos else f"org {req.org!r}"
            raise SearchError(f"ref {req.ref!r} is not indexed in {where}; indexed refs: {_listing(refs)}")


def check_org(reader: SnapshotReader, org: str) -> None:
    """An org the caller names (the CLI's --org) must hold indexed repos. HTTP and MCP take the org from
    the token instead, where an org with nothing indexed yet (or only pushed chunks) is a valid tenant,
    and naming the other orgs would leak them: so this is not part of validate."""
    orgs = {r.org for r in reader.manifest.repos}
    if org not in orgs:
        raise SearchError(f"no repo is indexed in org {org!r}; orgs with indexed repos: {_listing(orgs)}")


def row_mask(req: SearchRequest, reader: SnapshotReader) -> np.ndarray:
    """Which rows a request may see: the org first, then every filter (a pre-filter for both signals)."""
    col = reader.col
    mask = col["org"] == req.org
    if req.repos:
        mask &= col["repo"].isin(req.repos)
    if req.langs:
        mask &= col["lang"].isin([x.lower() for x in req.langs])
    if req.kind in ("code", "doc"):
        mask &= col["category"] == req.kind
    elif req.kind:
        mask &= col["kind"] == req.kind
    include, ignore = _globs(req.paths, "path"), _globs(req.ignore, "ignore")
    drop = re2.compile(req.ignore_re) if req.ignore_re else None  # a facade's pattern: linear time, RE2
    if include or ignore or drop:
        candidates = np.flatnonzero(mask)
        verdict: dict[str, bool] = {}
        for i in candidates:
            p = col["path"][i]
            if p not in verdict:
                verdict[p] = (
                    (include is None or include.match_file(p))
                    and not (ignore and ignore.match_file(p))
                    and not (drop and drop.search(p))
                )
            mask[i] = verdict[p]
    if req.ref:
        names = frozenset(_ref_names(req.ref))
        mask &= reader.cached(f"ref:{sorted(names)}", lambda: reader.ref_rows(names))
    return mask


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


def _vector_ranks(
    reader: SnapshotReader, vector: np.ndarray, mask: np.ndarray, depth: int = CANDIDATES
) -> list[tuple[int, float]]:
    allowed = np.flatnonzero(mask)
    if not len(allowed):
        return []
    scores = row_cosines(reader, allowed, vector)
    k = min(depth, len(allowed))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(allowed[i]), float(scores[i])) for i in top]


def lexical_query(reader: SnapshotReader, text: str, org: str, repos: tuple[str, ...]) -> tantivy.Query | None:
    """BM25 over content, symbol and path; org and repos are required terms, never pasted-in strings."""
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
    must = [(Occur.Must, Q.term_query(schema, "org", org)), (Occur.Must, Q.boolean_query(should))]
    if repos:
        must.append((Occur.Must, Q.term_set_query(schema, "repo", list(repos))))
    return Q.boolean_query(must)


def lexical_ranks(
    reader: SnapshotReader, req: SearchRequest, mask: np.ndarray, depth: int = CANDIDATES
) -> list[tuple[int, float]]:
    query = lexical_query(reader, req.query, req.org, req.repos)
    if query is None:
        return []
    allowed = int(mask.sum())
    fetch = depth
    while True:
        result = reader.searcher.search(query, fetch)
        ranked = []
        ids = reader.searcher.fast_field_values("row", [address for _, address in result.hits])
        for (score, _), row in zip(result.hits, reader.positions(ids).tolist()):
            if row >= 0 and mask[row]:
                ranked.append((row, float(score)))
        # Filters other than org/repo are applied here; widen until enough survive or all are seen.
        if len(ranked) >= depth or len(result.hits) < fetch or fetch >= allowed * 4 or fetch >= 20000:
            return ranked[:depth]
        fetch *= 4


def defining_files(reader: SnapshotReader, rows: list[int]) -> set[tuple[str, str]]:
    return {(reader.col["repo"][r], reader.col["path"][r]) for r in rows}


def _symbol_ranks(
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
    rows = set()
    for name in named_definitions(req.query):
        found = [r for r in reader.symbol_rows.get(name, ()) if mask[r]]
        if len(defining_files(reader, found)) <= MAX_DEFINING_FILES:
            rows.update(found)
    if not rows:
        return []
    lex_rank = {r: i for i, (r, _) in enumerate(lex)}
    vec_rank = {r: i for i, (r, _) in enumerate(vec)}
    ordered = sorted(rows, key=lambda r: (lex_rank.get(r, len(lex)), vec_rank.get(r, len(vec)), r))
    return [(r, 1.0) for r in ordered[:depth]]


@functools.lru_cache(maxsize=32)  # every hit of a page asks, and a long text takes milliseconds to tokenize
def _query_words(query: str) -> frozenset[str]:
    return frozenset(tokens(query)) - STOPWORDS


def snippet(text: str, line_start: int, query: str) -> tuple[str, int, int]:
    """The SNIPPET_LINES lines of a chunk that share the most words with the query."""
    lines = text.split("\n")
    if len(lines) <= SNIPPET_LINES:
        return text, line_start, line_start + len(lines) - 1
    words = _query_words(query)
    scores = [len(words.intersection(tokens(line))) for line in lines]
    window = [sum(scores[i : i + SNIPPET_LINES]) for i in range(len(lines) - SNIPPET_LINES + 1)]
    best = int(np.argmax(window)) if max(window) > 0 else 0
    return "\n".join(lines[best : best + SNIPPET_LINES]), line_start + best, line_start + best + SNIPPET_LINES - 1


def _kind_ok(wanted: str | None, lang: str, kind: str) -> bool:
    if wanted in ("code", "doc"):
        return category(lang) == wanted
    return wanted is None or kind == wanted


def _overlay_ranks(overlay: Overlay, req: SearchRequest, vector: np.ndarray | None, vec: list) -> tuple[list, list]:
    """The session's chunks that pass the filters, as (key, score) lists: vectors merged with the
    snapshot's by cosine (comparable), and a lexical list of their own (query words matched)."""
    include, ignore = _globs(req.paths, "path"), _globs(req.ignore, "ignore")
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
) -> list[Hit]:
    """The fused candidates as hits (every one, or the first `limit`), a hybrid head reranked when a
    reranker is given. `req` must have been validated; `mask` is its row_mask when the caller has it."""
    rerank = reranker is not None and req.mode == "hybrid"
    best = rank(reader, embedder, req, overlay, mask=mask)
    if limit is not None:
        best = best[: max(limit, RERANK_POOL) if rerank else limit]
    hits = [
        _overlay_hit(overlay, key.index, signals, req)
        if isinstance(key, OverlayKey)
        else _hit(reader, key, signals, req)
        for key, signals in best
    ]
    if rerank:

        def text_of(h: Hit) -> str:
            return embed_text(h.symbol, h.text if h.uncommitted else reader.row(h.row)["text"])

        hits = [
            h if score is None else replace(h, signals=replace(h.signals, rerank_score=round(score, 4)))
            for h, score in reranker.rerank(req.query, hits, text_of)
        ]
    return hits if limit is None else hits[:limit]


def rank(
    reader: SnapshotReader,
    embedder: Embedder,
    req: SearchRequest,
    overlay: Overlay | None = None,
    depth: int = CANDIDATES,
    mask: np.ndarray | None = None,
) -> list[tuple[int | tuple, dict]]:
    """Every candidate in fused order as (a snapshot row or an OverlayKey, signals); `depth`
    candidates per signal. Evaluation asks for more depth than a page of results needs."""
    mask = row_mask(req, reader) if mask is None else mask.copy()  # shadowing must not touch the caller's
    if overlay is not None:
        # Shadowing happens before ranking: a path the session deleted has no chunks of its own
        # to outrank the committed ones, so filtering afterwards would keep returning them.
        for key in overlay.shadowed:
            mask[reader.rows_at(req.org, *key)] = False
    # BM25 alone reads no model: nothing is embedded and a hit's similarity is 0 (a query process that only
    # asks BM25 never loads the embedder).
    vector = query_vectors(embedder, req.query) if req.mode != "bm25" else None
    vec = _vector_ranks(reader, vector, mask, depth) if vector is not None else []
    lex = lexical_ranks(reader, req, mask, depth) if req.mode != "vector" else []
    sym = _symbol_ranks(reader, req, mask, lex, vec, depth) if req.mode == "hybrid" else []
    extra = []
    if overlay is not None:
        vec, overlay_lex = _overlay_ranks(overlay, req, vector, vec)
        extra = [("overlay_bm25", overlay_lex)] if req.mode != "vector" else []
    rankings = [(name, WEIGHTS[name], ranked) for name, ranked in (("vector", vec), ("bm25", lex), ("symbol", sym))]
    rankings += [("bm25", WEIGHTS["bm25"], ranked) for _, ranked in extra]  # overlay keys never meet row keys
    fused = rrf(rankings, ("vector", "bm25", "symbol"))
    sims = similarity(reader, overlay, list(fused), vector) if vector is not None else [0.0] * len(fused)
    tier = vector_tier(embedder.model_id) if vector is not None else None
    for key, sim in zip(fused, sims):
        fused[key]["similarity"], fused[key]["vector_tier"] = sim, tier
    return sorted(fused.items(), key=lambda kv: (-kv[1]["score"], _tie(kv[0])))


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


def search_overlay(embedder: Embedder, req: SearchRequest, overlay: Overlay) -> list[tuple[Hit, float]]:
    """Search only an overlay's chunks (content that no snapshot holds): (hit, cosine) pairs, fused order."""
    check_query(req)
    if not overlay.chunks:
        return []
    vector = query_vectors(embedder, req.query)
    vec, lex = _overlay_ranks(overlay, req, vector, [])
    fused = rrf([("vector", 1.0, vec), ("bm25", 1.0, lex)], ("vector", "bm25"))
    for key, sim in zip(fused, similarity(None, overlay, list(fused), vector)):
        fused[key]["similarity"], fused[key]["vector_tier"] = sim, vector_tier(embedder.model_id)
    best = sorted(fused.items(), key=lambda kv: (-kv[1]["score"], _tie(kv[0])))[: req.limit]
    hits = [_overlay_hit(overlay, key.index, signals, req) for key, signals in best]
    return [(h, h.similarity) for h in hits]


def _overlay_hit(overlay: Overlay, index: int, signals: dict, req: SearchRequest) -> Hit:
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


def _hit(reader: SnapshotReader, row: int, signals: dict, req: SearchRequest) -> Hit:
    r = reader.row(row)
    refs = r["refs"]
    ref = next((x for x in refs if req.ref and x in _ref_names(req.ref)), refs[0])
    text, start, end = snippet(r["text"], r["line_start"], req.query)
    score, sim = signals.pop("score"), signals.pop("similarity")
    return replace(
        chunk_hit(reader, row, r, ref),
        snippet=text,
        score=round(score, 6),
        signals=Signals(**signals, snippet_lines=(start, end)),
        similarity=sim,
    )


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


def similarity_floor(hits: list[Hit], min_score: float | None, min_score_diff: float | None) -> float | None:
    """The similarity a hit must reach under a surface's threshold, None without one: min_score itself, or
    min_score_diff below the best hit (never below 0, as the codesearch contract echoes it). Every surface
    (MCP, /v1, codesearch, CIP) filters on Hit.similarity through this, so a threshold means one thing."""
    if min_score is not None:
        return min_score
    if min_score_diff is not None and hits:
        return max(max(h.similarity for h in hits) - min_score_diff, 0.0)
    return None


def keep_similar(hits: list, min_score: float | None, min_score_diff: float | None) -> tuple[list, list[str]]:
    """Score thresholds over (id, Hit) pairs, as search_code and /v1/search apply them (similarity_floor;
    a surface passes one threshold, not both): returns what is kept and a note saying how many it dropped."""
    floor = similarity_floor([h for _, h in hits], min_score, min_score_diff)
    if floor is None:
        return hits, []
    kept = [(c, h) for c, h in hits if h.similarity >= floor]
    name, value = ("min_score", min_score) if min_score is not None else ("min_score_diff", min_score_diff)
    return kept, [f"{name}={value} dropped {len(hits) - len(kept)}"]
