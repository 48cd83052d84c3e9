"""The sharded front: one server over a snapshot whose repositories are split between shards (query.shard), which
answers as one server over the whole snapshot would.

A search is asked of every shard at once: each gives its part of every signal (its best rows by exact cosine and by
BM25, which every shard scores with the snapshot's statistics, and the rows defining each name the query spells)
with each row's exact cosine. The front merges each signal by score, counts a name's defining files over every
shard, fuses them as query.search does (query.search.fuse, the one fusion), and asks the owning shards for the hits
it answers. Rows are named by their positions in the whole snapshot (query.shard), so equal scores fall in one
server's order too: in exact mode the answer is that server's. (The approximate index is asked per shard, each over
its own rows: its candidates, rescored exactly, can differ from one server's as two approximate searches do.)

Every shard must answer from the same snapshot: the front asks them which they serve and refuses, in one sentence,
to mix two (they agree again a moment after a publish). A shard that does not answer fails the request with a 503
that names it: an answer without its repos would look whole and be wrong.

What reads no parts (files, history, the graph, SQL, status) the front answers from its own copy of the data dir,
as a server does. grep asks every shard for its first matches from the same place and keeps the first of them all.
File localization ranks the files of the merged chunks as one server does (query.localize.files_of), a name's
defining files counted over every shard. route_task asks each shard to score its own repos, which needs only their
rows and the org's BM25 ranking merged first, then chooses as one server does (query.route_task.chosen_routes).
A search beside a session's uncommitted edits (or a client's pushed chunks) sends every shard the paths they
shadow, and merges the session's own chunks at the front, as one server does."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from indexer.config import Config
from indexer.embed import Embedder, embed_text, vector_tier
from indexer.errors import BlobdexError
from indexer.snapshot import open_manifest, snapshots_dir
from query.rerank import RERANK_POOL
from query.search import (
    CANDIDATES,
    Hit,
    Overlay,
    OverlayKey,
    SearchRequest,
    definition_ranks,
    fuse,
    overlay_hit,
    overlay_ranks,
    query_vectors,
    reranked,
    similarity,
    validate,
)
from query.grep import check_limit
from query.localize import files_of, runner_repos
from query.query_text import named_definitions
from query.route_task import RepoRoute, chosen_routes, route_request
from query.service import ChunkNotFound, ChunkText, Service, request_thresholds
from query.shard import owner

GREP_LIMIT = 100  # query.grep.grep's default page
AGREE_SECONDS = 5.0  # how long the front waits for its shards to serve one snapshot after a publish
# How long the front trusts the snapshot its shards agreed on before asking again: a round to every shard (13 ms of
# a 58 ms search over Ray Serve here, with three shards) that a publish a second does not need.
AGREED_SECONDS = 1.0


class ShardDown(BlobdexError):
    """A shard did not answer: the request fails rather than answer without its repos."""

    status = 503


class LocalShards:
    """Shards in this process (query.shard.Shard objects), asked one after another: the tests' transport, which
    checks the merge without Ray; query.shard_serve carries the same calls over Ray Serve."""

    def __init__(self, shards: list):
        self.shards = shards

    def __len__(self) -> int:
        return len(self.shards)

    def ask(self, method: str, calls: dict[int, tuple]) -> dict[int, object]:
        """Each shard's answer to method(*args), for the {shard: args} given."""
        return {i: getattr(self.shards[i], method)(*args) for i, args in calls.items()}


class Catalog:
    """What the front knows of the snapshot its shards agree on, holding none of its parts: the manifest and the
    snapshot's directory (graph, history), and the languages and files of each org, asked of the shards once. It
    stands where a SnapshotReader stands for the operations that read no rows."""

    def __init__(self, data_dir: Path, snapshot_id: str, shards):
        self.path, self.manifest = open_manifest(data_dir, snapshot_id)
        self._shards = shards
        self._cache: dict[str, object] = {}

    @property
    def snapshot_id(self) -> str:
        return self.manifest.snapshot_id

    def cached(self, name: str, load):
        if name not in self._cache:
            self._cache[name] = load()
        return self._cache[name]

    def of_part(self, part_id: str, what: str, read):
        return self.cached(f"{what}:{part_id}", read)

    def _union(self, method: str, org: str) -> frozenset:
        asked = self._shards.ask(method, {i: (self.snapshot_id, org) for i in range(len(self._shards))})
        return frozenset(x for found in asked.values() for x in found)

    def languages(self, org: str) -> frozenset[str]:
        return self.cached(f"langs:{org}", lambda: self._union("languages", org))

    def files(self, org: str) -> frozenset[tuple[str, str]]:
        return self.cached(f"files:{org}", lambda: self._union("files", org))

    def files_where(self, org: str, name: str, keep) -> frozenset[tuple[str, str]]:
        return self.cached(f"{name}:{org}", lambda: frozenset(f for f in self.files(org) if keep(f[1])))

    def has_file(self, org: str, repo: str, path: str) -> bool:
        return (repo, path) in self.files(org)

    def repo_names(self, org: str) -> list[str]:
        return sorted(r.name for r in self.manifest.repos if r.org == org)


class FrontService(Service):
    """Service over shards: every search (search, search_page, search_top, localize: so /v1/search, MCP's
    search_code, the compatibility contracts' searches), grep, route and chunks by id from the shards; what reads no
    rows from the data dir, as Service does."""

    def __init__(self, cfg: Config, shards, embedder: Embedder | None = None):
        super().__init__(cfg, embedder)
        self.shards = shards
        self._catalog: Catalog | None = None
        self._agreed_at = 0.0
        self.live = _Agreed(self)  # what Service reads of the snapshot it serves (status, get_file's manifest)

    def reader(self) -> Catalog:  # type: ignore[override]
        """The snapshot every shard serves (waiting a moment for them to agree after a publish), asked again at most
        every AGREED_SECONDS: meanwhile requests are pinned to the one agreed, which a shard keeps serving after a
        swap (query.shard)."""
        agreed = self._catalog
        if agreed is not None and time.monotonic() - self._agreed_at < AGREED_SECONDS:
            return agreed
        deadline = time.monotonic() + AGREE_SECONDS
        while True:
            served = self.shards.ask("snapshot", {i: () for i in range(len(self.shards))})
            ids = set(served.values())
            here = len(ids) == 1 and (snapshots_dir(self.cfg.data_dir) / next(iter(ids))).is_dir()
            if here:
                break
            if time.monotonic() > deadline:
                listing = "; ".join(f"shard {i}: {s}" for i, s in sorted(served.items()))
                if len(ids) > 1:
                    raise ShardDown(f"the shards serve different snapshots ({listing}): ask again in a moment")
                raise ShardDown(f"this front has not synced the snapshot its shards serve ({listing}) yet: ask again")
            time.sleep(0.05)
        (snapshot_id,) = ids
        if agreed is None or agreed.snapshot_id != snapshot_id:
            agreed = self._catalog = Catalog(self.cfg.data_dir, snapshot_id, self.shards)
        self._agreed_at = time.monotonic()
        return agreed

    def _ranked(
        self, reader: Catalog, req: SearchRequest, overlay: Overlay | None, depth: int, reranker=False
    ) -> list[Hit]:
        """The first `depth` hits of the shards' merged ranking, reranked by the configured cross-encoder (or by
        `reranker` when one is given: None for none)."""
        validate(req, reader, overlay)
        embedder, configured = self._models(reader, req)
        if overlay is not None and embedder is not None:
            overlay = replace(overlay, vectors=self.in_tier(embedder, overlay.chunks, overlay.vectors))
        reranker = configured if reranker is False else reranker
        rerank = reranker is not None and req.mode == "hybrid"
        ranked, owners = self.rank(reader, embedder, req, overlay)
        best = ranked[: max(depth, RERANK_POOL) if rerank else depth]
        hits = self._hits(reader.snapshot_id, req, best, owners, overlay)
        if rerank:
            hits = reranked(reranker, req.query, hits, lambda h: embed_text(h.symbol, h.text))
        return hits[:depth]

    def rank(
        self, reader: Catalog, embedder: Embedder | None, req: SearchRequest, overlay: Overlay | None = None
    ) -> tuple[list[tuple[int | OverlayKey, dict]], dict[int, int]]:
        """Every candidate in fused order as (its position in the whole snapshot, or an OverlayKey, signals), as
        query.search.rank orders them over every shard's signals and a session's own chunks (the paths it shadows
        are left out by every shard); and the shard that holds each row."""
        queries = query_vectors(embedder, req.query) if embedder is not None else None
        shadowed = sorted(overlay.shadowed) if overlay is not None else []
        everyone = {i: (reader.snapshot_id, req, queries, CANDIDATES, shadowed) for i in range(len(self.shards))}
        answers = list(self.shards.ask("rank", everyone).values())
        vec = _merged([a["vector"] for a in answers])
        lex = _merged_bm25([a["bm25"] for a in answers])
        sym = definition_ranks(_named(answers), lex, vec, CANDIDATES) if req.mode == "hybrid" else []
        owners = {k: i for i, a in enumerate(answers) for k in a["similarity"]}
        extra = []
        if overlay is not None:
            vec, overlay_lex = overlay_ranks(overlay, req, queries, vec)
            extra = [("overlay_bm25", overlay_lex)] if req.mode != "vector" else []
        if queries is None:
            return fuse(vec, lex, sym, extra, None, None), owners
        cosines = {k: c for a in answers for k, c in a["similarity"].items()}

        def sims(keys: list) -> list[float]:
            held = [k.index for k in keys if isinstance(k, OverlayKey)]
            mine = dict(zip(held, similarity(None, overlay, [OverlayKey(i) for i in held], queries))) if held else {}
            return [mine[k.index] if isinstance(k, OverlayKey) else cosines[k] for k in keys]

        return fuse(vec, lex, sym, extra, sims, vector_tier(embedder.model_id)), owners

    def _hits(
        self, snapshot_id: str, req: SearchRequest, best: list, owner: dict, overlay: Overlay | None
    ) -> list[Hit]:
        """The ranked rows as hits, each read by the shard that holds it (one call a shard); a session's chunks
        from the overlay here."""
        calls: dict[int, tuple] = {}
        found = {}
        for key, signals in best:
            if isinstance(key, OverlayKey):
                found[key] = overlay_hit(overlay, key.index, dict(signals), req)
            else:
                calls.setdefault(owner[key], (snapshot_id, req, []))[2].append((key, signals))
        for shard, hits in self.shards.ask("hits", calls).items():
            found.update(zip((key for key, _ in calls[shard][2]), hits))  # in the order asked
        return [found[key] for key, _ in best]

    def _clip(self, reader: Catalog, hit: Hit) -> int:
        # a front's snapshot hit carries its row's id (query.shard); a session's is remembered here
        return super()._clip(reader, hit) if hit.uncommitted else hit.row

    def file_definitions(self, org: str, repo: str, path: str, blob_id: str) -> dict[int, str]:
        reader = self.reader()
        shard = owner(org, repo, len(self.shards))
        return self.shards.ask("definitions", {shard: (reader.snapshot_id, org, repo, path, blob_id)})[shard]

    def get_chunk(self, org: str, clip: int) -> ChunkText:
        if clip < 0:
            return super().get_chunk(org, clip)  # a session's: never a shard's
        reader = self.reader()
        asked = self.shards.ask("chunk", {i: (reader.snapshot_id, org, clip) for i in range(len(self.shards))})
        found = [a for a in asked.values() if a is not None]
        if not found:
            raise ChunkNotFound(
                f"no chunk with id {clip} in snapshot {reader.snapshot_id}: ids come from search results, and a "
                f"chunk's id ends when its file changes; ⟦search_again⟧"
            )
        hit, text = found[0]
        return ChunkText(id=clip, hit=hit, text=text, snapshot_id=reader.snapshot_id)

    def _grepped(self, reader: Catalog, pattern: str, org: str, after: tuple | None, kw: dict) -> tuple:
        """grep's page over every shard: each gives its first limit + 1 matches from `after` with their positions in
        the whole snapshot; the first `limit` of them all are the page, and the next one is where the next starts
        (so a cursor reads as one server's)."""
        limit, filters = kw.get("limit", GREP_LIMIT), {k: v for k, v in kw.items() if k != "limit"}
        check_limit(limit)
        everyone = {i: (reader.snapshot_id, pattern, org, after, limit + 1, filters) for i in range(len(self.shards))}
        found = sorted((x for answer in self.shards.ask("grep", everyone).values() for x in answer), key=lambda x: x[0])
        return [match for _, match in found[:limit]], found[limit][0] if len(found) > limit else None

    def localize(
        self, req: SearchRequest, min_score: float | None = None, min_score_diff: float | None = None
    ) -> tuple[str, list]:
        """Files ranked for a task (query.localize.files_of) over the shards' fused chunks."""
        request_thresholds(req, min_score, min_score_diff)
        reader = self.reader()
        validate(req, reader)
        embedder, reranker = self._models(reader, req)
        return reader.snapshot_id, self._files(reader, embedder, reranker, req)

    def _files(self, reader: Catalog, embedder: Embedder | None, reranker, req: SearchRequest) -> list:
        pool = self._ranked(reader, req, None, CANDIDATES * 3, reranker)  # every candidate: three signals' worth
        words = list(named_definitions(req.query)) if req.mode == "hybrid" else []
        everyone = {i: (reader.snapshot_id, req, words) for i in range(len(self.shards))}
        defined: dict[str, set] = {w: set() for w in words}
        for answer in self.shards.ask("defining", everyone).values() if words else ():
            for word, found in answer.items():
                defined[word] |= found
        return files_of(pool, req, defined.__getitem__, lambda: runner_repos(reader, req.org), reader, embedder)

    def route(self, org: str, task: str, limit: int = 5) -> tuple[str, list[RepoRoute]]:
        """route_task over the shards: each scores its own repos (query.route_task.repo_routes) given the org's BM25
        ranking merged from them all; the routes are then chosen as one server chooses them."""
        reader = self.reader()
        req = route_request(task, org, limit)
        validate(req, reader)
        embedder = self.embedder_for(reader)
        vector = query_vectors(embedder, req.query)
        sid, everyone = reader.snapshot_id, range(len(self.shards))
        bm25 = self.shards.ask("rank", {i: (sid, replace(req, mode="bm25"), None, CANDIDATES) for i in everyone})
        lexical = _merged_bm25([a["bm25"] for a in bm25.values()])
        scored = self.shards.ask("route", {i: (sid, req, vector, lexical) for i in everyone})
        routes = [r for found in scored.values() for r in found]
        if not routes:
            return sid, []
        files = lambda asked: self._files(reader, embedder, None, asked)  # noqa: E731
        chosen = chosen_routes(reader, embedder, req, routes, files, None)
        calls = {}
        for r in chosen:
            calls.setdefault(owner(r.org, r.repo, len(self.shards)), (sid, []))[1].extend(
                (e["row"], e["relevance"]) for e in r.evidence
            )
        where = {e["row"]: e for found in self.shards.ask("located", calls).values() for e in found}
        for r in chosen:
            r.evidence = [where[e["row"]] for e in r.evidence]
        return sid, chosen


class _Agreed:
    """The `live` a Service reads `serving` of, for a front: the catalog of the snapshot its shards last agreed on
    (None before the first request)."""

    def __init__(self, front: FrontService):
        self.front = front

    @property
    def serving(self) -> Catalog | None:
        return self.front._catalog


def _merged(lists: list[list[tuple[int, float]]], depth: int = CANDIDATES) -> list[tuple[int, float]]:
    """Shards' vector rankings as one: the best `depth` by score, equal scores in row order (top_ranks')."""
    return sorted((x for ranked in lists for x in ranked), key=lambda x: (-x[1], x[0]))[:depth]


def _merged_bm25(lists: list[list[tuple[int, float, int]]], depth: int = CANDIDATES) -> list[tuple[int, float]]:
    """Shards' BM25 rankings as one: the best `depth` by score, equal scores by their place in the lexical index
    (query.search.signals.lexical_hits), as one reader's."""
    merged = sorted((x for ranked in lists for x in ranked), key=lambda x: (-x[1], x[2]))[:depth]
    return [(row, score) for row, score, _ in merged]


def _named(answers: list[dict]) -> dict:
    """Each spelled name's defining rows over every shard; None (too many files) where any shard found too many."""
    merged: dict[str, list | None] = {}
    for a in answers:
        for name, defined in a["named"].items():
            if defined is None or merged.get(name, []) is None:
                merged[name] = None
            else:
                merged[name] = merged.get(name, []) + defined
    return merged
