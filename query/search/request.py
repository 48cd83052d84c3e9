"""What a search is asked and what it answers: the request and hit records, the checks every surface's request
passes (validate, check_org), and the rows a request may see (row_mask)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import pathspec
import re2

from indexer.errors import BlobdexError
from query import MAX_LIMIT
from query.query_text import MAX_QUERY_CHARS, cut, cut_note
from query.reader import SnapshotReader

MODES = ("hybrid", "vector", "bm25")
KINDS = frozenset({"code", "doc", "function", "method", "class", "definition", "module", "section", "text"})


class SearchError(BlobdexError):
    """A search request that cannot be run as given; the message says how to fix it."""


class NotIndexed(SearchError):
    """A filter names a repo, language or ref the index does not hold (not found, as a file that is not there)."""

    status = 404


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
    # The chunk's whole text: an overlay hit's always; a snapshot hit's where the facade reads it for an answer
    # that shows whole chunks (the compatibility contracts), else None.
    text: str | None = field(default=None, repr=False)
    # The exact cosine between the query and the chunk, whichever signal found it (a BM25-only hit has
    # its real similarity, not 0): what every surface's score thresholds (query.search.thresholds) and the
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


def globs(patterns: tuple[str, ...], what: str) -> pathspec.PathSpec | None:
    """Gitignore-style globs as one matcher (None for no patterns); SearchError naming `what` for a bad one."""
    if not patterns:
        return None
    try:
        return pathspec.PathSpec.from_lines("gitignore", patterns)
    except Exception as exc:
        raise SearchError(
            f"bad {what} glob in {list(patterns)!r}: {exc}; use gitignore syntax such as 'src/**/*.py' or 'tests/'"
        ) from exc


def ref_names(ref: str) -> set[str]:
    """The full names a ref the caller gives may stand for: itself, a branch, a tag."""
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
        raise NotIndexed(f"unknown repo {unknown[0]!r} in org {req.org!r}; indexed repos: {_listing(known)}")
    if req.langs:
        langs = set(reader.languages(req.org))
        langs |= {c.lang for c in overlay.chunks} if overlay else set()
        unknown = [x for x in req.langs if x.lower() not in langs]
        if unknown:
            raise NotIndexed(
                f"no chunk in language {unknown[0]!r} is indexed in org {req.org!r}; "
                f"indexed languages: {_listing(langs)}"
            )
    if req.ref:
        scope = [r for r in states if not req.repos or r.name in req.repos]
        refs = {x.ref for r in scope for x in r.refs}
        if not refs & ref_names(req.ref):
            where = f"repo {', '.join(map(repr, dict.fromkeys(req.repos)))}" if req.repos else f"org {req.org!r}"
            raise NotIndexed(f"ref {req.ref!r} is not indexed in {where}; indexed refs: {_listing(refs)}")


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
    # the org's rows, worked out once a snapshot (a pass over every row's code), copied as callers narrow it
    mask = reader.cached(f"org:{req.org}", lambda: col["org"] == req.org).copy()
    if req.repos:
        mask &= col["repo"].isin(req.repos)
    if req.langs:
        mask &= col["lang"].isin([x.lower() for x in req.langs])
    if req.kind in ("code", "doc"):
        mask &= col["category"] == req.kind
    elif req.kind:
        mask &= col["kind"] == req.kind
    include, ignore = globs(req.paths, "path"), globs(req.ignore, "ignore")
    drop = re2.compile(req.ignore_re) if req.ignore_re else None  # a facade's pattern: linear time, RE2
    if include or ignore or drop:  # each path the allowed rows hold is matched once, not each row
        candidates = np.flatnonzero(mask)
        codes, at = np.unique(col["path"].codes[candidates], return_inverse=True)
        verdict = np.fromiter(
            (
                (include is None or include.match_file(p))
                and not (ignore and ignore.match_file(p))
                and not (drop and drop.search(p))
                for p in col["path"].values[codes]
            ),
            dtype=bool,
            count=len(codes),
        )
        mask[candidates] = verdict[at]
    if req.ref:
        names = frozenset(ref_names(req.ref))
        mask &= reader.cached(f"ref:{sorted(names)}", lambda: reader.ref_rows(names))
    return mask
