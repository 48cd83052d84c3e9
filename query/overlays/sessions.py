"""Session overlays: an agent's uncommitted edits, searchable beside the snapshot without touching it.

The store is `<data_dir>/overlays/overlays.sqlite`, one of the server's two writable stores (query.overlays).
Edits are skipped, chunked and screened for secrets by `indexer.prepare`, as committed blobs are, then
embedded; paths a session touched (edited or deleted) are shadowed inside the query, so a deleted file
never keeps answering with its committed version. Sessions idle longer than SESSION_IDLE_SECONDS are swept.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from indexer.embed import Embedder, embed_text
from indexer.errors import BlobdexError
from indexer.ignore import skip_for_path, validate_path
from indexer.languages import language_for
from indexer.prepare import BlobEntry, prepare
from query.overlays import open_store

SESSION_IDLE_SECONDS = 24 * 3600
MAX_FILES_PER_SYNC = 200
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")


class OverlayError(BlobdexError):
    """A sync or session request that cannot be honoured; the message says what to change."""


class SessionNotFound(OverlayError):
    status = 404


@dataclass(frozen=True, kw_only=True)
class OverlayChunk:
    repo: str
    path: str
    blob_id: str
    chunk_index: int
    symbol: str
    kind: str
    lang: str
    line_start: int
    line_end: int
    text: str


def git_blob_id(data: bytes) -> str:
    """The id git would give these bytes: overlay content keeps git's identity too."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def _overlay_chunks(repo: str, path: str, blob_id: str, lang: str, entry: BlobEntry) -> list[OverlayChunk]:
    return [
        OverlayChunk(
            repo=repo,
            path=path,
            blob_id=blob_id,
            chunk_index=c.index,
            symbol=c.symbol,
            kind=c.kind,
            lang=lang,
            line_start=c.line_start,
            line_end=c.line_end,
            text=c.text,
        )
        for c in entry.chunks
    ]


@dataclass(frozen=True, kw_only=True)
class SessionSync:
    """sync_workspace's answer: what one sync of a session's edits stored."""

    session_id: str
    repo: str
    files: int
    deleted: int
    chunks: int
    secrets_held_back: int
    skipped: dict  # path -> why it was not chunked

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class SessionStatus:
    """session_status's answer: the session's age, idle time, chunk count and the files it touched."""

    session_id: str
    created: float
    idle_seconds: float
    expires_in_seconds: float
    chunks: int
    files: tuple[dict, ...]  # {"repo", "path", "deleted", "skip"}

    def to_dict(self) -> dict:
        return {**asdict(self), "files": list(self.files)}


class OverlayStore:
    def __init__(self, data_dir: Path, idle_seconds: float = SESSION_IDLE_SECONDS):
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self.db = open_store(
            data_dir,
            "overlays.sqlite",
            """
            CREATE TABLE IF NOT EXISTS session (org TEXT, session_id TEXT, created REAL, touched REAL,
                                                PRIMARY KEY (org, session_id));
            CREATE TABLE IF NOT EXISTS touched (org TEXT, session_id TEXT, repo TEXT, path TEXT, deleted INTEGER,
                                                blob_id TEXT, skip TEXT, PRIMARY KEY (org, session_id, repo, path));
            CREATE TABLE IF NOT EXISTS chunk (org TEXT, session_id TEXT, repo TEXT, path TEXT, blob_id TEXT,
                                              chunk_index INTEGER, symbol TEXT, kind TEXT, lang TEXT,
                                              line_start INTEGER, line_end INTEGER, text TEXT, vector BLOB);
            CREATE INDEX IF NOT EXISTS chunk_session ON chunk (org, session_id);
        """,
        )

    def sweep(self, now: float | None = None) -> int:
        """Drop sessions idle for longer than the limit; returns how many."""
        cutoff = (now or time.time()) - self.idle_seconds
        with self._lock, self.db:
            stale = self.db.execute("SELECT org, session_id FROM session WHERE touched < ?", [cutoff]).fetchall()
            for org, sid in stale:
                self._drop(org, sid)
        return len(stale)

    def _drop(self, org: str, session_id: str) -> None:
        for table in ("chunk", "touched", "session"):
            self.db.execute(f"DELETE FROM {table} WHERE org = ? AND session_id = ?", [org, session_id])

    @staticmethod
    def check_id(session_id: str) -> str:
        if not SESSION_ID_RE.match(session_id or ""):
            raise OverlayError(f"invalid session_id {session_id!r}: use 1-100 letters, digits, '.', '_', ':' or '-'")
        return session_id

    def sync(
        self,
        org: str,
        session_id: str,
        repo: str,
        files: dict[str, str],
        deleted: list[str],
        embedder: Embedder,
        max_bytes: int,
    ) -> SessionSync:
        """Record edits (path -> full new content) and deletions of one repo in a session."""
        self.check_id(session_id)
        if len(files) + len(deleted) > MAX_FILES_PER_SYNC:
            raise OverlayError(f"{len(files) + len(deleted)} paths in one sync; send at most {MAX_FILES_PER_SYNC}")
        clean_files = {self._path(p): content for p, content in files.items()}
        clean_deleted = [self._path(p) for p in deleted]
        rows, touched, held_back, skipped = [], [], 0, {}
        for path, content in clean_files.items():
            data = content.encode("utf-8")
            blob_id = git_blob_id(data)
            lang = language_for(path)
            by_path = skip_for_path(path)
            entry = None if by_path is not None else prepare(data, lang, max_bytes, facts=False)
            skip = by_path.value if by_path is not None else entry.skip
            if skip is not None:
                skipped[path] = skip
                touched.append((path, 0, blob_id, skip))
                continue
            held_back += entry.secrets_held_back
            rows += _overlay_chunks(repo, path, blob_id, entry.lang or lang, entry)
            touched.append((path, 0, blob_id, None))
        touched += [(path, 1, None, None) for path in clean_deleted]
        vectors = embedder.embed([embed_text(r.symbol, r.text) for r in rows]) if rows else []
        now = time.time()
        with self._lock, self.db:
            self.db.execute(
                "INSERT INTO session VALUES (?, ?, ?, ?) ON CONFLICT (org, session_id) "
                "DO UPDATE SET touched = excluded.touched",
                [org, session_id, now, now],
            )
            for path, is_deleted, blob_id, skip in touched:
                self.db.execute(
                    "DELETE FROM chunk WHERE org = ? AND session_id = ? AND repo = ? AND path = ?",
                    [org, session_id, repo, path],
                )
                self.db.execute(
                    "INSERT OR REPLACE INTO touched VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [org, session_id, repo, path, is_deleted, blob_id, skip],
                )
            self.db.executemany(
                "INSERT INTO chunk VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        org,
                        session_id,
                        r.repo,
                        r.path,
                        r.blob_id,
                        r.chunk_index,
                        r.symbol,
                        r.kind,
                        r.lang,
                        r.line_start,
                        r.line_end,
                        r.text,
                        np.asarray(v, dtype=np.float32).tobytes(),
                    )
                    for r, v in zip(rows, vectors)
                ],
            )
        return SessionSync(
            session_id=session_id,
            repo=repo,
            files=len(clean_files),
            deleted=len(clean_deleted),
            chunks=len(rows),
            secrets_held_back=held_back,
            skipped=skipped,
        )

    @staticmethod
    def _path(path: str) -> str:
        clean = validate_path(path.encode("utf-8", "surrogateescape"))
        if clean is None:
            raise OverlayError(f"invalid path {path!r}: give a repo-relative path without '..' or '.git'")
        return clean

    def touch(self, org: str, session_id: str) -> bool:
        with self._lock, self.db:
            cur = self.db.execute(
                "UPDATE session SET touched = ? WHERE org = ? AND session_id = ?", [time.time(), org, session_id]
            )
        return cur.rowcount > 0

    def shadowed(self, org: str, session_id: str) -> set[tuple[str, str]]:
        """(repo, path) pairs whose committed chunks the session hides: everything it edited or deleted."""
        rows = self.db.execute("SELECT repo, path FROM touched WHERE org = ? AND session_id = ?", [org, session_id])
        return {(r, p) for r, p in rows}

    def chunks(self, org: str, session_id: str) -> tuple[list[OverlayChunk], np.ndarray]:
        rows = self.db.execute(
            "SELECT repo, path, blob_id, chunk_index, symbol, kind, lang, line_start, line_end, "
            "text, vector FROM chunk WHERE org = ? AND session_id = ? ORDER BY rowid",
            [org, session_id],
        ).fetchall()
        chunks = [
            OverlayChunk(
                repo=r[0],
                path=r[1],
                blob_id=r[2],
                chunk_index=r[3],
                symbol=r[4],
                kind=r[5],
                lang=r[6],
                line_start=r[7],
                line_end=r[8],
                text=r[9],
            )
            for r in rows
        ]
        vectors = np.stack([np.frombuffer(r[10], dtype=np.float32) for r in rows]) if rows else np.zeros((0, 0))
        return chunks, vectors

    def status(self, org: str, session_id: str) -> SessionStatus:
        self.check_id(session_id)
        row = self.db.execute(
            "SELECT created, touched FROM session WHERE org = ? AND session_id = ?", [org, session_id]
        ).fetchone()
        if row is None:
            raise SessionNotFound(
                f"no session {session_id!r}: ⟦sync⟧ (idle sessions are removed after {self.idle_seconds / 3600:g} h)"
            )
        files = self.db.execute(
            "SELECT repo, path, deleted, skip FROM touched WHERE org = ? AND session_id = ? ORDER BY repo, path",
            [org, session_id],
        ).fetchall()
        count = self.db.execute(
            "SELECT count(*) FROM chunk WHERE org = ? AND session_id = ?", [org, session_id]
        ).fetchone()[0]
        return SessionStatus(
            session_id=session_id,
            created=row[0],
            idle_seconds=round(time.time() - row[1], 1),
            expires_in_seconds=round(self.idle_seconds - (time.time() - row[1]), 1),
            chunks=count,
            files=tuple({"repo": r, "path": p, "deleted": bool(d), "skip": s} for r, p, d, s in files),
        )

    def end(self, org: str, session_id: str) -> bool:
        self.check_id(session_id)
        with self._lock, self.db:
            existed = (
                self.db.execute("SELECT 1 FROM session WHERE org = ? AND session_id = ?", [org, session_id]).fetchone()
                is not None
            )
            self._drop(org, session_id)
        return existed
