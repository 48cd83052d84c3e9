"""Content-addressed caches: what a blob chunks into (by blob_id) and vectors (by text hash and model).

Both are pure functions of their key, so entries are never invalidated, only added; this is
what makes a re-run cost nothing and a new commit cost only its new blobs. Each entry is checked when read (a blob
entry by zlib's own checksum, a vector by the crc32 stored after its bytes): a damaged entry reads as missing and
is computed again, never published.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sqlite3
import zlib
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from indexer.chunk import Chunk
from indexer.prepare import BlobEntry
from indexer.snapshot import unit_length
from indexer.versions import TOOLS, ToolVersions

log = logging.getLogger(__name__)

LOOKUP_BATCH = 500  # sqlite's default host-parameter limit is 999
# What sqlite says when the file's bytes are damaged (not when it is busy or the disk is full).
CORRUPT_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
# A vector entry is its float32 bytes, then the crc32 of those bytes (4 bytes, little-endian). Entries written
# before the checksum are the bytes alone: taken only when finite and of unit length, as every model writes them.
VECTOR_CHECK_BYTES = 4


def text_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def vector_entry(vector: np.ndarray) -> bytes:
    """A vector as the cache stores it: its float32 bytes and their crc32."""
    data = np.asarray(vector, dtype=np.float32).tobytes()
    return data + zlib.crc32(data).to_bytes(VECTOR_CHECK_BYTES, "little")


def read_vector_entry(raw: bytes, dim: int) -> np.ndarray | None:
    """The vector an entry holds, or None when it is not one of `dim` floats or its bytes are damaged."""
    if len(raw) == 4 * dim + VECTOR_CHECK_BYTES:
        data, check = raw[:-VECTOR_CHECK_BYTES], raw[-VECTOR_CHECK_BYTES:]
        intact = zlib.crc32(data).to_bytes(VECTOR_CHECK_BYTES, "little") == check
        return np.frombuffer(data, dtype=np.float32) if intact else None
    if len(raw) == 4 * dim:  # written before the checksum
        vector = np.frombuffer(raw, dtype=np.float32)
        return vector if unit_length(vector)[0] else None
    return None


def _corrupt(exc: Exception) -> bool:
    # sqlite reports extended codes (SQLITE_CORRUPT_INDEX is 779): the primary code is the low byte.
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in CORRUPT_CODES


def _repairing(method):
    """Run a cache method; when sqlite finds the file damaged, move it aside, start a fresh cache and run the
    method once more. Safe because every entry is a pure function of its key: a lost one is recomputed. (A damaged
    entry inside intact pages costs only that entry: the readers below skip it.)"""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            if not _corrupt(exc):
                raise
            self._start_fresh(exc)
            return method(self, *args, **kwargs)

    return wrapper


class Cache:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "cache.sqlite"
        self.moved_aside: str | None = None  # one sentence when a damaged cache was replaced this run
        self.damaged_entries = 0  # entries read back damaged this run (and computed again)
        try:
            self.db = self._connect()
        except sqlite3.DatabaseError as exc:
            if not _corrupt(exc):
                raise
            self._start_fresh(exc)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path))
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript("""
                CREATE TABLE IF NOT EXISTS blob (key TEXT PRIMARY KEY, entry BLOB NOT NULL);
                CREATE TABLE IF NOT EXISTS vector (model TEXT NOT NULL, text_id TEXT NOT NULL,
                                                   vector BLOB NOT NULL, PRIMARY KEY (model, text_id));
            """)
        except BaseException:
            db.close()
            raise
        return db

    def _start_fresh(self, exc: Exception) -> None:
        """Move the damaged file (and its WAL) aside, keeping it for inspection, and open an empty cache."""
        if getattr(self, "db", None) is not None:
            self.db.close()
        aside = self.path.with_name(f"{self.path.name}.corrupt-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}")
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{self.path}{suffix}").exists():
                os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
        self.moved_aside = (
            f"the cache {str(self.path)!r} was damaged ({exc}): moved it aside to {str(aside)!r} "
            f"and started a fresh one, so this run recomputes what it lacks"
        )
        log.warning("%s", self.moved_aside)
        self.db = self._connect()

    def close(self) -> None:
        self.db.close()

    def _damaged(self, entry: str, exc: Exception | None = None) -> None:
        self.damaged_entries += 1
        log.warning("cache entry %s is damaged%s: it is computed again", entry, f" ({exc})" if exc else "")

    @staticmethod
    def blob_key(blob_id: str, lang: str, max_bytes: int, tools: ToolVersions = TOOLS) -> str:
        # Everything the entry depends on besides the bytes themselves.
        return f"{blob_id}:{lang}:{tools.blob_tag()}:m{max_bytes}"

    @_repairing
    def forget_other_versions(self) -> int:
        """Delete blob entries made under other tool versions, overwriting their bytes: nothing reads them
        again, and an entry from before a policy change may hold what the policy now holds back (policy 1
        stored the body of a private key)."""
        current = f"%:{TOOLS.blob_tag()}:%"
        self.db.execute("PRAGMA secure_delete=ON")
        with self.db:
            return self.db.execute("DELETE FROM blob WHERE key NOT LIKE ?", [current]).rowcount

    @_repairing
    def get_blobs(self, keys: list[str]) -> dict[str, BlobEntry]:
        found = {}
        for i in range(0, len(keys), LOOKUP_BATCH):
            batch = keys[i : i + LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            for key, raw in self.db.execute(f"SELECT key, entry FROM blob WHERE key IN ({marks})", batch):
                try:
                    data = json.loads(zlib.decompress(raw))
                    data["chunks"] = tuple(Chunk(**c) for c in data["chunks"])
                    data["held_back"] = tuple(tuple(h) for h in data.get("held_back", ()))
                    found[key] = BlobEntry(**data)
                except (zlib.error, ValueError, TypeError, KeyError, AttributeError) as exc:
                    # zlib's adler32 catches flipped bytes; what it lets through fails to parse. Either way the
                    # blob is chunked again and its entry replaced.
                    self._damaged(f"blob entry {key}", exc)
        return found

    @_repairing
    def put_blobs(self, entries: dict[str, BlobEntry]) -> None:
        rows = [(k, zlib.compress(json.dumps(asdict(e)).encode("utf-8"))) for k, e in entries.items()]
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO blob VALUES (?, ?)", rows)

    @_repairing
    def get_vectors(self, model: str, ids: list[str], dim: int) -> dict[str, np.ndarray]:
        found = {}
        for i in range(0, len(ids), LOOKUP_BATCH):
            batch = ids[i : i + LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            rows = self.db.execute(
                f"SELECT text_id, vector FROM vector WHERE model = ? AND text_id IN ({marks})", [model, *batch]
            )
            for tid, raw in rows:
                vector = read_vector_entry(raw, dim)
                if vector is not None:
                    found[tid] = vector
                elif len(raw) in (4 * dim, 4 * dim + VECTOR_CHECK_BYTES):  # else: another dim, not damage
                    self._damaged(f"vector {model}/{tid}")
        return found

    @_repairing
    def put_vectors(self, model: str, vectors: dict[str, np.ndarray], keep_existing: bool = False) -> None:
        """Store vectors by text id; `keep_existing`: vectors read back from a snapshot, which fill gaps and never
        overwrite what the model computed, and are taken only when finite and of unit length (a snapshot's bytes
        may be damaged; verify and the unchanged run's check apply the same rule)."""
        if keep_existing and vectors:
            good = dict(zip(vectors, unit_length(np.stack([np.asarray(v, np.float32) for v in vectors.values()]))))
            for tid in (tid for tid, ok in good.items() if not ok):
                self._damaged(f"vector {model}/{tid} read back from a snapshot")
            vectors = {tid: v for tid, v in vectors.items() if good[tid]}
        rows = [(model, tid, vector_entry(v)) for tid, v in vectors.items()]
        verb = "INSERT OR IGNORE" if keep_existing else "INSERT OR REPLACE"
        with self.db:
            self.db.executemany(f"{verb} INTO vector VALUES (?, ?, ?)", rows)

    @_repairing
    def vector_ids(self, model: str, ids: list[str]) -> set[str]:
        """Which of `ids` have a vector under `model`, without reading the vectors."""
        found = set()
        for i in range(0, len(ids), LOOKUP_BATCH):
            batch = ids[i : i + LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            rows = self.db.execute(
                f"SELECT text_id FROM vector WHERE model = ? AND text_id IN ({marks})", [model, *batch]
            )
            found.update(tid for (tid,) in rows)
        return found

    @_repairing
    def count_vectors(self, model: str) -> int:
        return self.db.execute("SELECT count(*) FROM vector WHERE model = ?", [model]).fetchone()[0]
