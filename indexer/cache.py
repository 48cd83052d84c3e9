"""Content-addressed caches: what a blob chunks into (by blob_id) and vectors (by text hash and model).

Both are pure functions of their key, so entries are never invalidated, only added; this is
what makes a re-run cost nothing and a new commit cost only its new blobs.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from indexer.chunk import CHUNKER_VERSION, Chunk
from indexer.extract import EXTRACTOR_VERSION
from indexer.ignore import POLICY_VERSION

LOOKUP_BATCH = 500  # sqlite's default host-parameter limit is 999


@dataclass(frozen=True)
class BlobEntry:
    """What one blob (read as one language) yields: a skip reason, or its chunks."""

    size: int
    skip: str | None
    fallback: str | None  # `parse_timeout` when tree-sitter gave up and line windows were used
    secrets_held_back: int
    chunks: tuple[Chunk, ...]
    sha256: str | None = None  # of the bytes: what clients that hash files compare against
    facts: dict | None = None  # extract.Facts.to_json()
    syntax_error: bool = False  # parsed with errors: chunks and facts are what could be recovered
    held_back: tuple[tuple[int, int, str], ...] = ()  # (line_start, line_end, kind) of each chunk held back


def text_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Cache:
    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(directory / "cache.sqlite"))
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS blob (key TEXT PRIMARY KEY, entry BLOB NOT NULL);
            CREATE TABLE IF NOT EXISTS vector (model TEXT NOT NULL, text_id TEXT NOT NULL,
                                               vector BLOB NOT NULL, PRIMARY KEY (model, text_id));
        """)

    def close(self) -> None:
        self.db.close()

    @staticmethod
    def blob_key(blob_id: str, lang: str, max_bytes: int) -> str:
        # Everything the entry depends on besides the bytes themselves.
        return f"{blob_id}:{lang}:p{POLICY_VERSION}:c{CHUNKER_VERSION}:x{EXTRACTOR_VERSION}:m{max_bytes}"

    def get_blobs(self, keys: list[str]) -> dict[str, BlobEntry]:
        found = {}
        for i in range(0, len(keys), LOOKUP_BATCH):
            batch = keys[i:i + LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            for key, raw in self.db.execute(f"SELECT key, entry FROM blob WHERE key IN ({marks})", batch):
                data = json.loads(zlib.decompress(raw))
                data["chunks"] = tuple(Chunk(**c) for c in data["chunks"])
                data["held_back"] = tuple(tuple(h) for h in data.get("held_back", ()))
                found[key] = BlobEntry(**data)
        return found

    def put_blobs(self, entries: dict[str, BlobEntry]) -> None:
        rows = [(k, zlib.compress(json.dumps(asdict(e)).encode("utf-8"))) for k, e in entries.items()]
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO blob VALUES (?, ?)", rows)

    def get_vectors(self, model: str, ids: list[str], dim: int) -> dict[str, np.ndarray]:
        found = {}
        for i in range(0, len(ids), LOOKUP_BATCH):
            batch = ids[i:i + LOOKUP_BATCH]
            marks = ",".join("?" * len(batch))
            rows = self.db.execute(f"SELECT text_id, vector FROM vector WHERE model = ? AND text_id IN ({marks})",
                                   [model, *batch])
            for tid, raw in rows:
                vec = np.frombuffer(raw, dtype=np.float32)
                if vec.shape[0] == dim:
                    found[tid] = vec
        return found

    def put_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        rows = [(model, tid, np.asarray(v, dtype=np.float32).tobytes()) for tid, v in vectors.items()]
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO vector VALUES (?, ?, ?)", rows)

    def count_vectors(self, model: str) -> int:
        return self.db.execute("SELECT count(*) FROM vector WHERE model = ?", [model]).fetchone()[0]
