"""A shard: one of `count` query processes that split a snapshot's repositories between them (query.front fans a
request out to every shard and merges their answers into what one server over the whole snapshot answers).

A shard follows CURRENT as a server does (query.live) and opens only its repos' parts: its vectors, rows and
definitions. The lexical index it opens whole, so BM25 scores every shard's rows with the snapshot's own
statistics and scores from different shards compare as one server's would. A repo belongs to shard
crc32("org/repo") mod count: stable from snapshot to snapshot, so a publish moves no repo between shards.

A shard names a row by the position one server over the whole snapshot gives it (query.reader numbers every part's
rows, part after part; a part's row count is in its part.json, so a shard numbers the parts it does not open
without opening them): merged by score, with equal scores in that order, the shards' rankings are that server's.
A hit also carries the row's id (its clip: kept by later snapshots while the chunk lives). A caller that asks
about a snapshot the shard no longer holds gets ShardMismatch."""

from __future__ import annotations

import functools
import itertools
import threading
import zlib
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np

from indexer.errors import BlobdexError
from indexer.snapshot import Manifest, data_dir_of, parts_dir, read_part_info, snapshots_dir
from query.browse import definitions_at
from query.grep import GrepMatch, matching
from query.live import LiveSnapshot
from query.reader import SnapshotReader
from query.route_task import RepoRoute, located, repo_routes
from query.search import (
    BESIDE,
    CANDIDATES,
    Hit,
    SearchRequest,
    chunk_hit,
    defining_files,
    lexical_hits,
    named_rows,
    row_mask,
    similarity,
    snapshot_hit,
    vector_ranks,
)

# What a shard answers (the front's calls): no other attribute of a Shard is asked over Ray.
ANSWERS = (
    "snapshot",
    "languages",
    "files",
    "chunk",
    "rank",
    "hits",
    "grep",
    "defining",
    "route",
    "located",
    "definitions",
)
HELD_SNAPSHOTS = 2  # readers a shard keeps: the live one, and the one the front pinned before a swap


class ShardMismatch(BlobdexError):
    """A shard was asked about a snapshot it does not hold (it swapped meanwhile, or has not synced it yet)."""

    status = 503


def owner(org: str, repo: str, count: int) -> int:
    """The shard that holds a repo, of `count`."""
    return zlib.crc32(f"{org}/{repo}".encode()) % count


def owned(index: int, count: int):
    """The Select (query.reader) of shard `index` of `count`: the repos of a manifest it opens."""

    def select(manifest: Manifest) -> set[tuple[str, str]]:
        return {(r.org, r.name) for r in manifest.repos if owner(r.org, r.name, count) == index}

    return select


class Shard:
    """The answers one shard gives (query.front asks them; query.shard_serve carries them over Ray Serve)."""

    def __init__(self, data_dir: Path, index: int, count: int, model_ids: tuple[str, ...], exact: bool = False):
        if not 0 <= index < count:
            raise ValueError(f"shard {index} of {count}: a shard's index runs from 0 to count - 1")
        self.index, self.count = index, count
        self.live = LiveSnapshot(Path(data_dir), lambda: model_ids, exact=exact, select=owned(index, count))
        self._held: OrderedDict[str, SnapshotReader] = OrderedDict()
        self._holding = threading.Lock()

    def reader(self, snapshot_id: str | None = None) -> SnapshotReader:
        """The live snapshot (None), or the one named, which this shard serves or served a moment ago."""
        live = self.live.reader()
        with self._holding:  # Ray Serve runs a replica's calls in threads
            self._held[live.snapshot_id] = live
            self._held.move_to_end(live.snapshot_id)
            while len(self._held) > HELD_SNAPSHOTS:
                self._held.popitem(last=False)
            held = self._held.get(snapshot_id) if snapshot_id is not None else live
        if held is not None:
            return held
        if (snapshots_dir(self.live.data_dir) / snapshot_id).is_dir():  # kept, not held (a restarted replica)
            older = SnapshotReader(self.live.data_dir, snapshot_id, exact=self.live.exact, select=self.live.select)
            with self._holding:
                self._held[snapshot_id] = older
                self._held.move_to_end(snapshot_id, last=False)  # the first to go
            return older
        raise ShardMismatch(
            f"shard {self.index} of {self.count} serves snapshot {live.snapshot_id}, not {snapshot_id}: "
            f"ask again (the shards are swapping to a new snapshot)"
        )

    def snapshot(self) -> str:
        return self.reader().snapshot_id

    def languages(self, snapshot_id: str, org: str) -> frozenset[str]:
        return self.reader(snapshot_id).languages(org)

    def files(self, snapshot_id: str, org: str) -> frozenset[tuple[str, str]]:
        return self.reader(snapshot_id).files(org)

    def chunk(self, snapshot_id: str, org: str, row_id: int) -> tuple[Hit, str] | None:
        """The row with id `row_id` as a hit without a query (its `row`: the id) and its text, if this shard holds
        it in `org`."""
        reader = self.reader(snapshot_id)
        position = int(reader.positions([row_id])[0])
        row = reader.row(position) if position >= 0 else None
        if row is None or row["org"] != org:
            return None
        return replace(chunk_hit(reader, position, row), row=row_id), row["text"]

    def rank(
        self,
        snapshot_id: str | None,
        req: SearchRequest,
        queries: np.ndarray | None,
        depth: int = CANDIDATES,
        shadowed: list[tuple[str, str]] = (),
    ) -> dict:
        """This shard's part of every signal for a validated request, rows by their positions in the whole
        snapshot: its `depth` best by vector and by BM25 as (row, score), the rows defining each name the query
        spells (query.search.named_rows), and the exact cosine of each of them (`queries`: the query's vectors;
        None for BM25 alone, and every cosine 0). `shadowed`: the (repo, path) a session's edits replace."""
        reader = self.reader(snapshot_id)
        mask = row_mask(req, reader)
        for repo, path in shadowed:
            mask[reader.rows_at(req.org, repo, path)] = False
        lexical = BESIDE.submit(lexical_hits, reader, req, mask, depth) if req.mode != "vector" else None
        vec = vector_ranks(reader, queries, mask, depth) if queries is not None else []
        lex = lexical.result() if lexical is not None else []
        named = named_rows(reader, req, mask) if req.mode == "hybrid" else {}
        rows = sorted({r for r, _ in vec} | {r for r, _, _ in lex} | {r for d in named.values() for r, _, _ in d or ()})
        cosines = similarity(reader, None, rows, queries) if queries is not None and rows else [0.0] * len(rows)
        at = dict(zip(rows, _whole(reader, rows).tolist()))
        return {
            "snapshot_id": reader.snapshot_id,
            "vector": [(at[r], score) for r, score in vec],
            "bm25": [(at[r], score, place) for r, score, place in lex],  # merged by (score, place)
            "named": {n: d and [(at[r], repo, path) for r, repo, path in d] for n, d in named.items()},
            "similarity": {at[r]: c for r, c in zip(rows, cosines)},
        }

    def grep(
        self, snapshot_id: str, pattern: str, org: str, after: tuple[int, int] | None, count: int, kw: dict
    ) -> list[tuple[tuple[int, int], GrepMatch]]:
        """This shard's first `count` grep matches from `after` (a (row, line) in the whole snapshot), each with
        its (row, line) there (query.grep.matching; `kw`: its filters)."""
        reader = self.reader(snapshot_id)
        found = matching(reader, pattern, org, after=_own_from(reader, after) if after else None, **kw)
        out = []
        for (row, offset), match in itertools.islice(found, count):
            out.append(((int(_whole(reader, [row])[0]), offset), match))
        return out

    def defining(self, snapshot_id: str, req: SearchRequest, words: list[str]) -> dict[str, set[tuple[str, str]]]:
        """The (repo, path) of this shard's files that define each word, among the rows the request may see."""
        reader = self.reader(snapshot_id)
        mask = row_mask(req, reader)
        return {w: defining_files(reader, [r for r in reader.symbol_rows.get(w, ()) if mask[r]]) for w in words}

    def route(
        self, snapshot_id: str, req: SearchRequest, vector: np.ndarray, lexical: list[tuple[int, float]]
    ) -> list[RepoRoute]:
        """route_task's scores of this shard's repos (query.route_task.repo_routes), given the org's BM25 ranking
        merged over every shard; evidence rows by their positions in the whole snapshot."""
        reader = self.reader(snapshot_id)
        own = _own(reader, [row for row, _ in lexical]).tolist()
        routes, _ = repo_routes(reader, req, vector, row_mask(req, reader), list(zip(own, (s for _, s in lexical))))
        rows = [e["row"] for r in routes for e in r.evidence]
        at = dict(zip(rows, _whole(reader, rows).tolist()))
        for r in routes:
            r.evidence = [{**e, "row": at[e["row"]]} for e in r.evidence]
        return routes

    def definitions(self, snapshot_id: str, org: str, repo: str, path: str, blob_id: str) -> dict[int, str]:
        return definitions_at(self.reader(snapshot_id), org, repo, path, blob_id)

    def located(self, snapshot_id: str, evidence: list[tuple[int, float]]) -> list[dict]:
        """Where each piece of a route's evidence (row in the whole snapshot, relevance) lies."""
        reader = self.reader(snapshot_id)
        own = _own(reader, [row for row, _ in evidence]).tolist()
        return [{**located(reader, mine, relevance), "row": row} for mine, (row, relevance) in zip(own, evidence)]

    def hits(self, snapshot_id: str, req: SearchRequest, wanted: list[tuple[int, dict]]) -> list[Hit]:
        """The rows `wanted` as (position in the whole snapshot, fused signals) as hits with their snippets and
        whole texts, in that order; a hit's `row` is the row's id."""
        reader = self.reader(snapshot_id)
        out, positions = [], _own(reader, [w for w, _ in wanted])
        reader.will_read(positions[positions >= 0])
        for (where, signals), position in zip(wanted, positions.tolist()):
            if position < 0:
                raise ShardMismatch(f"shard {self.index} of {self.count} holds no row at {where}: ask again")
            hit = snapshot_hit(reader, position, dict(signals), req)
            out.append(replace(hit, row=reader.row_id(position), text=reader.row(position)["text"]))
        return out


def _own_from(reader: SnapshotReader, after: tuple[int, int]) -> tuple[int, int]:
    """A grep page's start (row, line) in the whole snapshot as the reader's own: the first row it holds there or
    after, and the line only where it holds that very row."""
    row, line = after
    starts = _starts(reader)
    part = int(np.searchsorted(starts, row, side="right")) - 1
    if part < 0:
        return 0, 0
    local = row - int(starts[part]) + int(reader.offsets[part])
    end = int(reader.offsets[part + 1])
    return (local, line) if local < end else (end, 0)


def _starts(reader: SnapshotReader) -> np.ndarray:
    """Where each part the reader opened starts in the whole snapshot's numbering (query.reader: every part of
    every repo, in the manifest's order), from the row counts in the parts' part.json."""

    def load() -> np.ndarray:
        root = parts_dir(data_dir_of(reader.path))
        at, start = {}, 0
        for repo in reader.manifest.repos:
            for part_id in repo.parts:
                at[part_id], start = start, start + _rows_of(root / part_id)
        return np.asarray([at[p.key] for p in reader.parts], dtype=np.int64)

    return reader.cached("shard:starts", load)


@functools.lru_cache(maxsize=1 << 16)
def _rows_of(part: Path) -> int:
    """A part's row count, from its part.json: read once (a part never changes), not at every snapshot opened."""
    return read_part_info(part).rows


def _whole(reader: SnapshotReader, rows) -> np.ndarray:
    """The reader's positions as the whole snapshot numbers them."""
    rows = np.asarray(rows, dtype=np.int64)
    part = np.searchsorted(reader.offsets, rows, side="right") - 1
    return rows - reader.offsets[part] + _starts(reader)[part]


def _own(reader: SnapshotReader, rows) -> np.ndarray:
    """Positions in the whole snapshot as the reader's own; -1 for a row of a part it did not open."""
    rows, starts = np.asarray(rows, dtype=np.int64), _starts(reader)
    part = np.searchsorted(starts, rows, side="right") - 1
    local = rows - starts[np.maximum(part, 0)] + reader.offsets[np.maximum(part, 0)]
    inside = (part >= 0) & (local < reader.offsets[np.maximum(part, 0) + 1])
    return np.where(inside, local, -1)
