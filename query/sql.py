"""`blobdex sql`: DuckDB over the live snapshot's tables, read-only and without file access."""

from __future__ import annotations

import re
from pathlib import Path

from indexer.errors import BlobdexError
from indexer.snapshot import HISTORY_SCHEMAS, TABLE_SCHEMAS, open_manifest, read_chunks, read_graph, read_history


class SqlError(BlobdexError):
    """The query cannot run: it is empty, or DuckDB refused it (then the message is DuckDB's own)."""


def connect(data_dir: Path):
    """(snapshot_id, an in-memory DuckDB with one table per graph and history table). DuckDB is imported here:
    every query process imports this module, few run SQL."""
    import duckdb

    path, manifest = open_manifest(data_dir)
    con = duckdb.connect(":memory:")
    for name in TABLE_SCHEMAS:
        con.register(name, read_graph(path, name))
    for name in HISTORY_SCHEMAS:
        con.register(name, read_history(path, manifest, name))
    return manifest.snapshot_id, con


def run(data_dir: Path, query: str) -> tuple[str, list[str], list[tuple]]:
    """(snapshot_id, column names, rows) of one query."""
    import duckdb

    snapshot_id, con = connect(data_dir)
    if re.search(r"\bchunks\b", query, re.IGNORECASE):  # loaded only when asked for: it holds all text
        path, _ = open_manifest(data_dir, snapshot_id)
        con.register("chunks", read_chunks(path, vectors=False))
    # Nothing a query says can read or write files, or switch this back on.
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    try:
        result = con.execute(query)
        if result is None:  # DuckDB's answer to text without a statement: empty, blank or only a comment
            raise SqlError("the SQL query is empty: pass one statement, e.g. 'SELECT count(*) FROM files'")
        columns = [d[0] for d in result.description] if result.description else []
        rows = result.fetchall() if result.description else []
    except duckdb.Error as exc:
        raise SqlError(f"query failed: {exc}") from exc
    return snapshot_id, columns, rows
