"""Formats 1 and 2 kept chunks in a Lance table (format 2 also mapped a copy, chunks.arrow, which is read
instead where it exists). Lance is imported only here, and only for such a snapshot: the `legacy` extra
(pylance). The next `blobdex index` rewrites an old snapshot as format 3, after which nothing reads Lance."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from indexer.snapshot.format import CHUNKS_TABLE, VECTORS_DIR, SnapshotError


def read_lance_chunks(snapshot_dir: Path) -> pa.Table:
    """A format-1/2 snapshot's chunks as its Lance table holds them (format 2 mapped a copy, chunks.arrow)."""
    try:
        import lance
    except ImportError:
        raise SnapshotError(
            f"snapshot {str(snapshot_dir)!r} is of format 1 or 2 and keeps its chunks in a Lance table, which this "
            f"install cannot read: install the legacy extra (pip install 'blobdex[legacy]') to read it, or, when "
            f"every repo fetches, run 'blobdex index --full' to rewrite it as format 3 (a repo that cannot be "
            f"fetched is carried from it, so that run reads it too)"
        ) from None
    return lance.dataset(str(snapshot_dir / VECTORS_DIR / f"{CHUNKS_TABLE}.lance")).to_table()
