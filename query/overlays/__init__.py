"""The server's only writable stores: session overlays (a client's uncommitted files) and pushed indexes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

OVERLAYS_DIR = "overlays"  # under the data dir, beside the snapshots it never touches


def open_store(data_dir: Path, name: str, schema: str) -> sqlite3.Connection:
    """One store's sqlite file under <data_dir>/overlays/, in WAL mode (readers never wait for a writer), its
    tables created if missing. Shared by the server's threads: each store serializes its writes with a lock."""
    directory = Path(data_dir) / OVERLAYS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(directory / name), check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(schema)
    return db
