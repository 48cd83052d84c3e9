"""The query facade: every operation the surfaces (MCP, HTTP, the compatibility APIs, the CLI) expose,
over one live snapshot (query.live), the embedders of its vectors and a reranker, one clip store (query.clips)
and the session and pushed stores, with the same semantics on each. Every search of every surface runs here
(search, search_page, localize, search_top, search_pushed), so request checks, score thresholds
(query.search.thresholds) and a configured reranker apply the same way whichever door a request came through;
a surface parses its contract's request and renders the answer.

A snapshot's vectors are the configured model's, or its static tier's while a fast-first run backfills
(indexer/build/__init__.py): a query is embedded by the model of the snapshot it searches (`embedder_for`). Sessions
and pushed chunks are stored with the configured model's vectors, and searched beside a static-tier
snapshot with their texts embedded by it, a table lookup (`in_tier`)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, replace
from itertools import groupby
from operator import itemgetter

from indexer import runs
from indexer.config import Config
from indexer.embed import Embedder, configured_embedder, embed_text, fast_variant, model_id_for
from indexer.errors import BlobdexError
from indexer.snapshot import Manifest, SnapshotError, current_id, open_manifest, read_graph
from query.blame import Blame, blame
from query.browse import FilePage, Folder, Outline, definitions_at, folder, list_files, outline
from query.clips import ClipStore
from query.expand_context import context, references
from query.diff import DiffPage, diff
from query.get_file import FileText, blob_lines, get_file
from query.grep import GrepMatch, grep
from query import history
from query.live import LiveSnapshot
from query.localize import localize
from query.reader import SnapshotReader
from query.route_task import RepoRoute, route
from query.route_task import prepare as route_prepare
from query.overlays.sessions import OverlayError, OverlayStore, SessionNotFound, SessionStatus, SessionSync
from query.overlays.pushed import PushedStore
from query.cursor import CursorError
from query.cursor import decode as cursor_decode
from query.cursor import encode as cursor_encode
from query.search import (
    Hit,
    Overlay,
    SearchRequest,
    Thresholds,
    candidates,
    check_org,
    chunk_hit,
    search_overlay,
    validate,
)
from query.sql import run as run_sql
from query.status import RepoStatus, held_back, repo_status, vector_status
from indexer.secrets import triggered

log = logging.getLogger(__name__)

SWEEP_EVERY_SECONDS = 60.0  # idle sessions are swept at most this often
MAX_DEPTH = 1000  # how deep pages reach into one ranking: past it, a narrower query serves better


class ChunkNotFound(BlobdexError):
    status = 404


@dataclass(frozen=True, kw_only=True)
class ChunkText:
    """A chunk read back by its hit id: where it lies (a Hit without the query's score), and its whole text."""

    id: int
    hit: Hit
    text: str
    snapshot_id: str  # the snapshot it was read from

    def to_dict(self) -> dict:
        where = {k: v for k, v in self.hit.to_dict().items() if k not in ("snippet", "score", "signals")}
        return {"id": self.id, **where, "text": self.text, "snapshot_id": self.snapshot_id}


@dataclass(frozen=True, kw_only=True)
class SearchPage:
    """A page of search hits as (id, hit), the filters the request named and the notes of the thresholds applied
    (as `name=value`, which search_code and /v1 list), and the next page's cursor."""

    snapshot_id: str
    hits: list[tuple[int, Hit]]
    filters: list[str]
    applied: list[str]
    next_cursor: str | None


@dataclass(frozen=True, kw_only=True)
class TopHits:
    """A contract search's answer (search_top): the hits over the threshold, each with its chunk's text, and
    what the threshold saw: how many hits it was given, its floor and the best similarity (None without one)."""

    snapshot_id: str
    hits: list[Hit]
    candidates: int
    floor: float | None
    best: float | None


@dataclass(frozen=True, kw_only=True)
class PushedHits:
    """A search of pushed chunks (search_pushed): the hits, each with its chunk's text, and the metadata the
    client pushed with each chunk (query.overlays.pushed), listed by a pushed hit's chunk_index."""

    hits: list[Hit]
    meta: list[dict]


@dataclass(frozen=True, kw_only=True)
class GrepPage:
    """A page of grep matches and the next page's cursor (None: the last page)."""

    snapshot_id: str
    matches: list[GrepMatch]
    next_cursor: str | None


@dataclass(frozen=True, kw_only=True)
class IndexStatus:
    """list_repos' answer (and /v1/status): CURRENT's snapshot, the one being served (they differ while one is refused),
    the model queries are embedded with, the vectors (tier and backlog: query.status.vector_status), and
    each repo's status."""

    snapshot_id: str | None
    serving: str | None
    model: str
    vectors: dict | None
    repos: tuple[RepoStatus, ...]
    last_run: dict | None = None  # the newest index run in the history (indexer.runs.summary)

    def to_dict(self) -> dict:
        return {**asdict(self), "repos": [r.to_dict() for r in self.repos]}


class Service:
    def __init__(self, cfg: Config, embedder: Embedder | None = None, prepare: bool = False):
        """`prepare`: a long-lived server's, which loads what routes read of each snapshot it opens, in a
        thread, so that no request after a start or a swap waits for it (route_task.prepare)."""
        self.cfg = cfg
        self._embedder = embedder
        self._fast: Embedder | None = None  # the configured model's static tier, loaded when a snapshot has it
        self._reranker = None
        self.live = LiveSnapshot(
            cfg.data_dir, self.model_ids, exact=cfg.exact_search, prepare=route_prepare if prepare else None
        )
        self._lock = threading.Lock()  # the stores: opened in a moment
        self._loading = threading.Lock()  # the embedder and the reranker: loading one takes seconds, and a
        # session call must not wait behind it
        self._clips = ClipStore()
        self._overlays: OverlayStore | None = None
        self._pushed: PushedStore | None = None
        self._swept = 0.0

    # -- what every operation reads ------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """The configured model: what session and pushed chunks are stored with."""
        with self._loading:
            if self._embedder is None:
                self._embedder = configured_embedder(self.cfg)
            return self._embedder

    def embedder_for(self, reader: SnapshotReader) -> Embedder:
        """The model of the snapshot's vectors, which its queries are embedded with (LiveSnapshot serves
        only the model_ids())."""
        if reader.manifest.model_id == self.model_id():
            return self.embedder
        with self._loading:
            if self._fast is None:
                self._fast = configured_embedder(self.cfg, fast_variant(self.cfg.model))
            return self._fast

    def in_tier(self, embedder: Embedder, chunks: list, vectors):
        """Stored overlay vectors (the configured model's) as `embedder` sees them: unchanged for that model,
        the chunks' texts embedded again for the static tier (a lookup per word piece)."""
        if embedder.model_id == self.model_id() or not chunks:
            return vectors
        return embedder.embed([embed_text(c.symbol, c.text) for c in chunks])

    @property
    def reranker(self):
        """The configured cross-encoder (loaded on first use), or None when `reranker` is unset."""
        with self._loading:
            if self._reranker is None and self.cfg.reranker:
                from query.rerank import load_reranker

                self._reranker = load_reranker(self.cfg.reranker)
            return self._reranker

    def warm(self) -> None:
        """Open the live snapshot and load the embedder now (`blobdex mcp` does it in a thread while it answers
        `initialize`); a request that needs either meanwhile waits for it. A failure is logged here and
        raised again, in its own words, by the first request that needs what failed."""
        try:
            self.embedder_for(self.reader())
        except BlobdexError as exc:
            log.error("%s", exc)

    def model_id(self) -> str:
        """The configured model's id."""
        return self._embedder.model_id if self._embedder else model_id_for(self.cfg.model)

    def model_ids(self) -> tuple[str, ...]:
        """The models whose snapshots this process serves: the configured one, then its static tier (which a
        fast-first run publishes first) where it has one. A test's own embedder has none."""
        if self._embedder is not None and self._embedder.model_id != model_id_for(self.cfg.model):
            return (self._embedder.model_id,)
        fast = fast_variant(self.cfg.model)
        return (self.model_id(),) + ((model_id_for(fast),) if fast else ())

    def reader(self) -> SnapshotReader:
        """The live snapshot (query.live): CURRENT's, or the one still served while CURRENT's is refused."""
        return self.live.reader()

    # -- operations --------------------------------------------------------------------
    def check_org(self, org: str) -> None:
        """An org a person names (the CLI's --org) must hold indexed repos (see search.check_org)."""
        check_org(self.reader(), org)

    def search(self, req: SearchRequest, session_id: str | None = None) -> tuple[str, list[tuple[int, Hit]]]:
        reader = self.reader()
        hits = self._ranked(reader, req, self._session(req.org, session_id), req.limit)
        return reader.snapshot_id, [(self._clip(reader, h), h) for h in hits]

    def _session(self, org: str, session_id: str | None) -> Overlay | None:
        return self._overlay(org, session_id) if session_id else None

    def _ranked(self, reader: SnapshotReader, req: SearchRequest, overlay: Overlay | None, depth: int) -> list[Hit]:
        """The first `depth` hits of the ranking, an overlay's chunks (a session's, a client's pushed ones) included:
        the one way every search of a snapshot runs, reranked where a reranker is configured."""
        validate(req, reader, overlay)  # before the model loads: bad input answers at once
        embedder, reranker = self._models(reader, req)
        if overlay is not None and embedder is not None:
            overlay = replace(overlay, vectors=self.in_tier(embedder, overlay.chunks, overlay.vectors))
        return candidates(reader, embedder, req, overlay, reranker, depth)

    def search_page(
        self,
        req: SearchRequest,
        session_id: str | None = None,
        cursor: str | None = None,
        min_score: float | None = None,
        min_score_diff: float | None = None,
    ) -> SearchPage:
        """One page of search_code's answer (MCP and /v1): the hits after `cursor`, the score thresholds applied
        to the whole ranking (so min_score_diff means the same on every page), and the cursor of the next page."""
        thresholds = request_thresholds(
            req, min_score, min_score_diff
        )  # before anything is read: bad input answers at once
        reader = self.reader()
        asked = {**asdict(req), "session_id": session_id, "min_score": min_score, "min_score_diff": min_score_diff}
        offset = cursor_decode(cursor, "search", reader.snapshot_id, asked) or 0
        if not isinstance(offset, int) or offset < 0 or offset >= MAX_DEPTH:
            raise CursorError("that cursor's position is not one a search page gives: ask again without a cursor")
        depth = min(offset + req.limit, MAX_DEPTH)
        ranked = self._ranked(reader, req, self._session(req.org, session_id), depth + 1)  # one more: a next page?
        kept, applied = thresholds.keep([(None, h) for h in ranked])
        page = [h for _, h in kept[offset:depth]]
        more = len(kept) > depth and depth < MAX_DEPTH
        return SearchPage(
            snapshot_id=reader.snapshot_id,
            hits=[(self._clip(reader, h), h) for h in page],
            filters=applied_filters(req, session_id),
            applied=applied,
            next_cursor=cursor_encode("search", reader.snapshot_id, asked, depth) if more else None,
        )

    def localize(
        self, req: SearchRequest, min_score: float | None = None, min_score_diff: float | None = None
    ) -> tuple[str, list]:
        """Files ranked for a task (query.localize). A file has no one similarity, so no score threshold applies
        to it; thresholds are still checked as search_page checks them, so a request that names them is refused
        the same whichever grouping it asks."""
        request_thresholds(req, min_score, min_score_diff)
        reader = self.reader()
        validate(req, reader)  # before the model loads, as search does (localize checks again, cheaply)
        embedder, reranker = self._models(reader, req)
        return reader.snapshot_id, localize(reader, embedder, req, reranker)

    def search_top(
        self, req: SearchRequest, min_score: float | None = None, min_score_diff: float | None = None
    ) -> TopHits:
        """The first `req.limit` hits, then a threshold over those alone: a compatibility contract's search
        (codesearch: "top_k candidates, then drop what scores under the floor"), whose answer shows whole chunks."""
        thresholds = request_thresholds(req, min_score, min_score_diff)
        reader = self.reader()  # one snapshot for the search and the texts its hits show
        hits = self._ranked(reader, req, None, req.limit)
        floor = thresholds.floor(hits)
        kept = hits if floor is None else [h for h in hits if h.similarity >= floor]
        return TopHits(
            snapshot_id=reader.snapshot_id,
            hits=_with_text(reader, kept),
            candidates=len(hits),
            floor=floor,
            best=max((h.similarity for h in hits), default=None),
        )

    def search_pushed(self, req: SearchRequest, space: str, beside_snapshot: bool = True) -> PushedHits:
        """A search of the chunks a client pushed into `space` (query.overlays.pushed): beside the live snapshot,
        the client's pushed and removed paths shadowing the committed ones (CIP), or alone (a Lucos workspace, and
        a repo no snapshot holds), with the configured model's vectors as they were stored."""
        store = self.pushed
        chunks, vectors, meta = store.overlay(req.org, space, req.repos)
        reader = self.reader() if beside_snapshot else None
        known = {r.name for r in reader.manifest.repos if r.org == req.org} if reader else set()
        if reader is None or any(r not in known for r in req.repos):
            overlay = Overlay(session_id=space, shadowed=frozenset(), chunks=chunks, vectors=vectors)
            return PushedHits(hits=[h for h, _ in search_overlay(self.embedder, req, overlay)], meta=meta)
        shadowed = {(c.repo, c.path) for c in chunks}
        shadowed |= {(repo, key.removeprefix("shadow:")) for repo, key in store.keys(req.org, space, "shadow:")}
        overlay = Overlay(session_id=space, shadowed=frozenset(shadowed), chunks=chunks, vectors=vectors)
        return PushedHits(hits=_with_text(reader, self._ranked(reader, req, overlay, req.limit)), meta=meta)

    def committed_files(self, org: str, repo: str) -> dict[str, set[str]]:
        """path -> the sha256 of each version of the file the live snapshot indexed for the repo (every ref): what
        a client that syncs by content hash (CIP) need not push."""
        import pyarrow.compute as pc

        files = read_graph(self.reader().path, "files", columns=["org", "repo", "path", "sha256"])
        files = files.filter(pc.and_(pc.equal(files["org"], org), pc.equal(files["repo"], repo)))
        out: dict[str, set[str]] = {}
        for path, digest in zip(files.column("path").to_pylist(), files.column("sha256").to_pylist()):
            out.setdefault(path, set()).add(digest)
        return out

    def _models(self, reader: SnapshotReader, req: SearchRequest):
        """The embedder and reranker a request needs: none for BM25 alone, which never loads a model."""
        if req.mode == "bm25":
            return None, None
        return self.embedder_for(reader), self.reranker

    def _clip(self, reader: SnapshotReader, hit: Hit) -> int:
        """A hit's id: its snapshot row's id, which every later snapshot keeps while the chunk lives (so the id
        reads back after a restart or a publish); a session's hit, which no snapshot holds, gets a negative id
        this process remembers."""
        if not hit.uncommitted:
            return reader.row_id(hit.row)
        key = (hit.ref, hit.repo, hit.path, hit.blob_id, hit.chunk_index)
        return -self._clips.add(hit.org, key, (hit, hit.text, reader.snapshot_id))

    def get_chunk(self, org: str, clip: int) -> ChunkText:
        if clip < 0:
            found = self._clips.get(-clip, org)
            if found is None:
                raise ChunkNotFound(
                    f"no chunk with id {clip}: a negative id is a session hit this server remembers for a while; "
                    f"⟦search_again⟧ with the session"
                )
            hit, text, snapshot_id = found
            return ChunkText(id=clip, hit=hit, text=text, snapshot_id=snapshot_id)
        reader = self.reader()
        position = int(reader.positions([clip])[0])
        row = reader.row(position) if position >= 0 else None
        if row is None or row["org"] != org:
            raise ChunkNotFound(
                f"no chunk with id {clip} in snapshot {reader.snapshot_id}: ids come from search results, and a "
                f"chunk's id ends when its file changes; ⟦search_again⟧"
            )
        return ChunkText(
            id=clip, hit=chunk_hit(reader, position, row), text=row["text"], snapshot_id=reader.snapshot_id
        )

    # -- session overlays --------------------------------------------------------------
    @property
    def overlays(self) -> OverlayStore:
        with self._lock:
            if self._overlays is None:
                self._overlays = OverlayStore(self.cfg.data_dir, self.cfg.session_idle_hours * 3600)
            store = self._overlays
        if time.monotonic() - self._swept > SWEEP_EVERY_SECONDS:
            self._swept = time.monotonic()
            store.sweep()
        return store

    @property
    def pushed(self) -> PushedStore:
        with self._lock:
            if self._pushed is None:
                self._pushed = PushedStore(self.cfg.data_dir)
            return self._pushed

    def _overlay(self, org: str, session_id: str) -> Overlay:
        store = self.overlays
        store.check_id(session_id)
        if not store.touch(org, session_id):
            raise SessionNotFound(f"no session {session_id!r}: ⟦sync⟧ (idle sessions expire)")
        chunks, vectors = store.chunks(org, session_id)
        return Overlay(
            session_id=session_id, shadowed=frozenset(store.shadowed(org, session_id)), chunks=chunks, vectors=vectors
        )

    def sync_workspace(
        self, org: str, session_id: str, repo: str, files: dict[str, str], deleted: list[str]
    ) -> SessionSync:
        known = {r.name for r in self.reader().manifest.repos if r.org == org}
        if repo not in known:
            raise OverlayError(
                f"unknown repo {repo!r} in org {org!r}; indexed repos: {', '.join(sorted(known)) or 'none'}"
            )
        return self.overlays.sync(org, session_id, repo, files, deleted, self.embedder, self.cfg.max_blob_bytes)

    def session_status(self, org: str, session_id: str) -> SessionStatus:
        return self.overlays.status(org, session_id)

    def end_session(self, org: str, session_id: str) -> bool:
        return self.overlays.end(org, session_id)

    def grep(self, org: str, pattern: str, cursor: str | None = None, **kw) -> GrepPage:
        """One page of grep's matches: those after `cursor`, and the cursor of the next page."""
        reader = self.reader()
        asked = {"org": org, "pattern": pattern, **kw}
        start = cursor_decode(cursor, "grep", reader.snapshot_id, asked)
        position = isinstance(start, list) and len(start) == 2 and all(type(x) is int and x >= 0 for x in start)
        if start is not None and not position:  # (row position, line offset), as a page ended
            raise CursorError("that cursor's position is not one a grep page gives: ask again without a cursor")
        matches, after = self._grepped(reader, pattern, org, tuple(start) if start else None, kw)
        next_cursor = cursor_encode("grep", reader.snapshot_id, asked, list(after)) if after else None
        return GrepPage(snapshot_id=reader.snapshot_id, matches=matches, next_cursor=next_cursor)

    def _grepped(self, reader: SnapshotReader, pattern: str, org: str, after: tuple | None, kw: dict) -> tuple:
        return grep(reader, pattern, org, after=after, **kw)  # a sharded front asks its shards (query.front)

    def get_file(
        self, org: str, repo: str, path: str, ref: str | None = None, start: int | None = None, end: int | None = None
    ) -> FileText:
        """A file's lines at `ref`; without one, at the commit that was indexed (see indexed_ref), so the
        lines of a search hit read back exactly as the hit shows them."""
        if ref:
            return get_file(self.cfg.data_dir, repo, path, ref, org, start, end, self.cfg.releases)
        name, commit_id = indexed_ref(self.cfg, self._manifest(), org, repo)
        found = get_file(self.cfg.data_dir, repo, path, commit_id or name, org, start, end, self.cfg.releases)
        return replace(found, ref=name) if commit_id else found

    def search_commits(self, org: str, query: str = "", cursor: str | None = None, **filters) -> history.CommitPage:
        """Commits by message, changed paths and hunks, and the messages' vectors, which are the configured
        model's (query.history.search_commits: filters and order)."""
        return history.search_commits(
            self.reader(), org, query, cursor=cursor, embedder=lambda: self.embedder, **filters
        )

    def log(self, org: str, repo: str, path: str | None = None, ref: str | None = None, **page) -> history.CommitPage:
        """The commits that touched `path` (query.history.log); `page`: limit, cursor."""
        return history.log(self.reader(), org, repo, path, ref, **page)

    def blame(
        self, org: str, repo: str, path: str, ref: str | None = None, start: int | None = None, end: int | None = None
    ) -> Blame:
        """Each line's last commit, for the lines get_file would answer (the indexed commit without a ref)."""
        file = self.get_file(org, repo, path, ref, start, end)
        reader = self.reader()
        return blame(self.cfg.data_dir, file, history.history_of(reader).graph(org, repo), reader.snapshot_id)

    def diff(self, org: str, repo: str, base: str, head: str, path: str | None = None, **page) -> DiffPage:
        """The change between two refs or commits (query.diff); `page`: limit, cursor."""
        return diff(self.cfg.data_dir, org, repo, base, head, path, **page)

    def _manifest(self) -> Manifest | None:
        """The served snapshot's manifest; before one is opened (the CLI's get-file needs no vectors), the
        live one's, read alone. None when nothing readable is published: get_file then needs no snapshot."""
        if self.live.serving is not None:
            return self.reader().manifest
        try:
            return open_manifest(self.cfg.data_dir)[1] if current_id(self.cfg.data_dir) else None
        except SnapshotError as exc:
            log.warning("reading files at their configured refs: %s", exc)
            return None

    def list_files(
        self,
        org: str,
        repo: str,
        path_glob: str | None = None,
        ref: str | None = None,
        cursor: str | None = None,
        limit: int = 200,
    ) -> FilePage:
        return list_files(self.cfg.data_dir, self.reader(), org, repo, path_glob, ref, cursor, limit)

    def folder(self, org: str, repo: str, path: str = "", ref: str | None = None) -> Folder:
        return folder(self.cfg.data_dir, self.reader(), org, repo, path, ref)

    def outline(self, org: str, repo: str, path: str, ref: str | None = None) -> Outline:
        return outline(self.cfg.data_dir, self.reader(), org, repo, path, ref)

    def file_definitions(self, org: str, repo: str, path: str, blob_id: str) -> dict[int, str]:
        return definitions_at(self.reader(), org, repo, path, blob_id)

    def route(self, org: str, task: str, limit: int = 5) -> tuple[str, list[RepoRoute]]:
        reader = self.reader()
        return reader.snapshot_id, route(reader, self.embedder_for(reader), task, org, limit)

    def context(self, org: str, symbol: str | None = None, repo: str | None = None, **asked) -> dict:
        """expand_context's data: of symbol (and repo), or of repo, path and line; name_only, cursor, limit of its
        callers (query.expand_context)."""
        return context(self.cfg.data_dir, symbol, org, repo, self._snapshot_id(), **asked)

    def references(self, org: str, **asked) -> dict:
        """The callers alone (`blobdex references`, /v1/references): symbol (and repo), or repo, path and line;
        name_only, cursor, limit."""
        return references(self.cfg.data_dir, org, snapshot_id=self._snapshot_id(), **asked)

    def _snapshot_id(self) -> str | None:
        """The served snapshot's id; before one is opened (the CLI reads Parquet tables, no vectors), None:
        the table readers then open CURRENT's themselves."""
        return self.reader().snapshot_id if self.live.serving is not None else None

    def held_back(self, org: str | None, repo: str | None, lines: bool = False) -> tuple[str, list[dict]]:
        """Where the live snapshot held chunks back as credentials (never their text). `lines`: each row also
        gets `lines`, the lines that triggered with their kind and fingerprint (what a `[[release]]` names), read
        from the mirror as get_file reads it; for the operator's CLI only, never an HTTP or MCP answer."""
        snapshot_id, rows = held_back(self.cfg, org, repo)
        if lines:
            for where, group in groupby(rows, key=itemgetter("org", "repo", "commit_id", "path")):
                text = blob_lines(self.cfg.data_dir, *where)
                for row in group:
                    found = triggered(text, row["line_start"], min(row["line_end"], len(text))) if text else []
                    row["lines"] = [{"line": n, "kind": k, "fingerprint": f} for n, k, f in found]
        return snapshot_id, rows

    def sql(self, query: str) -> tuple[str, list[str], list[tuple]]:
        """(snapshot_id, columns, rows) of one read-only SQL query over the live snapshot's tables."""
        return run_sql(self.cfg.data_dir, query)

    def repos(self, org: str) -> tuple[str | None, list[RepoStatus]]:
        return repo_status(self.cfg, org, self._serving_manifest())

    def status(self, org: str) -> IndexStatus:
        # A server follows CURRENT here too: a status polled while a backfill finishes must name the model's
        # snapshot once it is published, not the static tier it served before. The CLI opens no snapshot.
        reader = self.reader() if self.live.serving is not None else None
        serving = reader.manifest if reader else None
        snapshot_id, rows = repo_status(self.cfg, org, serving)
        vectors = vector_status(self.cfg, serving)
        last = runs.last(self.cfg.data_dir)
        return IndexStatus(
            snapshot_id=snapshot_id,
            serving=reader.snapshot_id if reader else None,
            model=vectors["model"] if vectors else self.model_id(),
            vectors=vectors,
            repos=tuple(rows),
            last_run=runs.summary(last, org) if last else None,
        )

    def _serving_manifest(self) -> Manifest | None:
        serving = self.live.serving
        return serving.manifest if serving is not None else None


def request_thresholds(req: SearchRequest, min_score: float | None, min_score_diff: float | None) -> Thresholds:
    """A request's score threshold, refused (in one sentence on every surface) where it cannot apply."""
    thresholds = Thresholds(min_score=min_score, min_score_diff=min_score_diff)
    thresholds.check(req.mode)
    return thresholds


def applied_filters(req: SearchRequest, session_id: str | None) -> list[str]:
    """The filters a request named, as a search page lists them applied (`repos=['api']`, `session=s1`)."""
    named = (
        ("repos", list(req.repos)),
        ("lang", list(req.langs)),
        ("paths", list(req.paths)),
        ("ignore", list(req.ignore)),
        ("kind", req.kind),
        ("ref", req.ref),
        ("session", session_id),
    )
    return [f"{name}={value}" for name, value in named if value]


def _with_text(reader: SnapshotReader, hits: list[Hit]) -> list[Hit]:
    """The hits, each holding its chunk's whole text (an overlay hit holds it already)."""
    return [h if h.text is not None else replace(h, text=reader.row(h.row)["text"]) for h in hits]


def indexed_ref(cfg: Config, manifest: Manifest | None, org: str, repo: str) -> tuple[str | None, str | None]:
    """(ref, commit_id) that get_file reads when no ref is given: the first ref the snapshot indexed, at
    the commit it indexed (the mirror may have moved on since); else the first configured ref (a repo
    added after the last run), commit unknown; else (None, None), the mirror's HEAD. HEAD is the last
    resort because a repo configured with another ref was never indexed at HEAD, and HEAD may dangle."""
    state = manifest.repo(org, repo) if manifest else None
    if state and state.refs:
        return state.refs[0].ref, state.refs[0].commit_id
    spec = cfg.repo(repo, org)
    return (spec.refs[0] if spec and spec.refs else None), None
