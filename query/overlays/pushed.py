"""Pushed chunks: content a client chunked itself and sent over an HTTP contract (Lucos, the Codebase
Index Protocol). Durable across restarts, kept beside the snapshots in `<data_dir>/overlays/`, and
scoped by (org, space): a space is one contract's namespace, e.g. `lucos` or `cip:<user>`.

A chunk's vector is reused whenever the same chunk_hash was embedded before in that space, so
re-uploads cost nothing; text that holds credential material is refused, never stored.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from indexer.embed import Embedder, embed_text
from indexer.secrets import credential_kind
from query.overlays.sessions import OverlayChunk
from query.overlays import open_store


@dataclass(frozen=True, kw_only=True)
class PushedChunk:
    repo: str
    chunk_id: str
    chunk_hash: str
    path: str
    lang: str
    symbol: str
    line_start: int
    line_end: int
    content: str
    source_type: str = "code"


class PushedStore:
    def __init__(self, data_dir):
        self._lock = threading.Lock()
        self.db = open_store(
            data_dir,
            "pushed.sqlite",
            """
            CREATE TABLE IF NOT EXISTS chunk (org TEXT, space TEXT, repo TEXT, chunk_id TEXT, chunk_hash TEXT,
                path TEXT, lang TEXT, symbol TEXT, line_start INTEGER, line_end INTEGER, content TEXT,
                source_type TEXT, vector BLOB, updated REAL, PRIMARY KEY (org, space, repo, chunk_id));
            CREATE INDEX IF NOT EXISTS chunk_hash ON chunk (org, space, chunk_hash);
            CREATE TABLE IF NOT EXISTS state (org TEXT, space TEXT, repo TEXT, key TEXT, value TEXT,
                PRIMARY KEY (org, space, repo, key));
        """,
        )

    def upsert(self, org: str, space: str, chunks: list[PushedChunk], embedder: Embedder) -> dict:
        """Store chunks by (repo, chunk_id). Unchanged ones (same hash) are skipped; credential material fails."""
        counts = {"indexed": 0, "skipped": 0, "failed": 0}
        fresh: list[PushedChunk] = []
        reuse: dict[str, bytes] = {}
        with self._lock:
            for c in chunks:
                if credential_kind(c.content) is not None:
                    counts["failed"] += 1
                    continue
                row = self.db.execute(
                    "SELECT chunk_hash FROM chunk WHERE org=? AND space=? AND repo=? AND chunk_id=?",
                    [org, space, c.repo, c.chunk_id],
                ).fetchone()
                if row is not None and row[0] == c.chunk_hash:
                    counts["skipped"] += 1
                    continue
                same = self.db.execute(
                    "SELECT vector FROM chunk WHERE org=? AND space=? AND chunk_hash=? LIMIT 1",
                    [org, space, c.chunk_hash],
                ).fetchone()
                if same is not None:
                    reuse[c.chunk_hash] = same[0]
                fresh.append(c)
        need = [c for c in fresh if c.chunk_hash not in reuse]
        vectors = embedder.embed([embed_text(c.symbol, c.content) for c in need]) if need else []
        for c, v in zip(need, vectors):
            reuse[c.chunk_hash] = np.asarray(v, dtype=np.float32).tobytes()
        now = time.time()
        with self._lock, self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO chunk VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        org,
                        space,
                        c.repo,
                        c.chunk_id,
                        c.chunk_hash,
                        c.path,
                        c.lang,
                        c.symbol,
                        c.line_start,
                        c.line_end,
                        c.content,
                        c.source_type,
                        reuse[c.chunk_hash],
                        now,
                    )
                    for c in fresh
                ],
            )
        counts["indexed"] = len(fresh)
        return counts

    def delete_ids(self, org: str, space: str, repo: str, chunk_ids: list[str]) -> int:
        with self._lock, self.db:
            return sum(
                self.db.execute(
                    "DELETE FROM chunk WHERE org=? AND space=? AND repo=? AND chunk_id=?", [org, space, repo, cid]
                ).rowcount
                for cid in chunk_ids
            )

    def delete_paths(self, org: str, space: str, repo: str, paths: list[str]) -> int:
        with self._lock, self.db:
            return sum(
                self.db.execute(
                    "DELETE FROM chunk WHERE org=? AND space=? AND repo=? AND path=?", [org, space, repo, p]
                ).rowcount
                for p in paths
            )

    def replace_paths(self, org: str, space: str, chunks: list[PushedChunk]) -> None:
        """Drop every stored chunk of the (repo, path)s these chunks belong to (upsert by file)."""
        keys = {(c.repo, c.path) for c in chunks}
        with self._lock, self.db:
            for repo, path in keys:
                self.db.execute(
                    "DELETE FROM chunk WHERE org=? AND space=? AND repo=? AND path=?", [org, space, repo, path]
                )

    def overlay(
        self, org: str, space: str, repos: tuple[str, ...] = ()
    ) -> tuple[list[OverlayChunk], np.ndarray, list[dict]]:
        """The space's chunks as overlay chunks (with vectors) plus their pushed metadata, in one order."""
        query = (
            "SELECT repo, path, chunk_hash, chunk_id, symbol, lang, line_start, line_end, content, vector, "
            "source_type FROM chunk WHERE org=? AND space=?"
        )
        args: list = [org, space]
        if repos:
            query += f" AND repo IN ({','.join('?' * len(repos))})"
            args += list(repos)
        rows = self.db.execute(query + " ORDER BY repo, path, line_start", args).fetchall()
        chunks = [
            OverlayChunk(
                repo=r[0],
                path=r[1],
                blob_id=r[2].removeprefix("sha256:")[:40],
                chunk_index=i,
                symbol=r[4] or "",
                kind="pushed",
                lang=r[5] or "text",
                line_start=r[6],
                line_end=r[7],
                text=r[8],
            )
            for i, r in enumerate(rows)
        ]
        vectors = np.stack([np.frombuffer(r[9], dtype=np.float32) for r in rows]) if rows else np.zeros((0, 0))
        meta = [{"chunk_id": r[3], "chunk_hash": r[2], "source_type": r[10]} for r in rows]
        return chunks, vectors, meta

    def stats(self, org: str, space: str, repo: str) -> dict:
        row = self.db.execute(
            "SELECT count(*), count(DISTINCT path), max(updated) FROM chunk WHERE org=? AND space=? AND repo=?",
            [org, space, repo],
        ).fetchone()
        return {"chunks": row[0], "files": row[1], "updated": row[2]}

    def paths(self, org: str, space: str, repo: str) -> set[str]:
        return {
            r[0]
            for r in self.db.execute(
                "SELECT DISTINCT path FROM chunk WHERE org=? AND space=? AND repo=?", [org, space, repo]
            )
        }

    def get_state(self, org: str, space: str, repo: str, key: str) -> str | None:
        row = self.db.execute(
            "SELECT value FROM state WHERE org=? AND space=? AND repo=? AND key=?", [org, space, repo, key]
        ).fetchone()
        return row[0] if row else None

    def keys(self, org: str, space: str, prefix: str) -> list[tuple[str, str]]:
        """(repo, key) of every state entry whose key starts with `prefix`."""
        return self.db.execute(
            "SELECT repo, key FROM state WHERE org=? AND space=? AND substr(key, 1, ?) = ?",
            [org, space, len(prefix), prefix],
        ).fetchall()

    def set_state(self, org: str, space: str, repo: str, key: str, value: str) -> None:
        with self._lock, self.db:
            self.db.execute("INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?, ?)", [org, space, repo, key, value])
