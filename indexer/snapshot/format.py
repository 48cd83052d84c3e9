"""The format's version history, the names of its files and folders, where they live under a data dir, and the
error a snapshot that cannot be read raises. The layout itself is drawn in indexer/snapshot/__init__.py."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from pathlib import Path

from indexer.errors import BlobdexError

# 1: initial layout.
# 2: files gain `held_back`: the line spans and kinds of chunks held back as credentials (never their text).
# 3: parts. A snapshot names immutable per-repo parts that later snapshots share, a run writes only the paths
#    that changed, and the lexical index shares its unchanged segment files; no Lance table (query processes
#    map chunks.arrow, which format 2 already wrote beside it).
#    Later, without a new version (a reader of 3 that predates it finds nothing missing): history parts, listed
#    per repo in `history` only when it has some, and the snapshot's commits index (history/); then in parts
#    grams.arrow (grep's trigram index), chunk_text.parquet (DuckDB's chunks) and codes.arrow, and in snapshots
#    codebook.faiss (approximate search). A part without them is read whole, left out of DuckDB's `chunks`
#    (graph.sql says how many), and scored exactly.
FORMAT_VERSION = 3
READABLE_FORMATS = (1, 2, 3)  # a format-1 snapshot lacks `held_back`: readers take it as empty

MANIFEST = "manifest.json"
CURRENT = "CURRENT"
SNAPSHOTS_DIR = "snapshots"
PARTS_DIR = "parts"
PART_INFO = "part.json"
# A part's coupling facts that only an org's edges read (indexer/build/edges.py), beside part.json, which keeps of
# its edge inputs only PART_INPUTS: what a run reads of every repo of an org (call resolution's). Together in
# part.json they were 98 KB a repo and 1.1 s of every cron run at 923 repos, nine tenths of it these facts. A
# part written before has them all in part.json and no EDGE_FACTS.
EDGE_FACTS = "edge_facts.json"
PART_INPUTS = frozenset({"packages", "java", "declared", "reach"})
PATHS = "paths"
CHUNKS_ARROW = "chunks.arrow"
CHUNK_TEXT = "chunk_text"  # a part's rows without vectors, as Parquet: graph.sql's `chunks` (DuckDB reads no IPC)
CARD = "card.parquet"
LEXICAL_DIR = "lexical"
HISTORY_INFO = "history.json"  # a history part's own part.json (indexer/build/history.py)
COMMIT_VECTORS = "commit_vectors.parquet"  # a history part's vectors of its commits, row for row
HISTORY_DIR = "history"  # a snapshot's commits index, beside lexical/
GRAPH_DIR = "graph"
GRAPH_VIEWS = "graph.sql"
# Where a format-1/2 snapshot kept what a part holds now.
VECTORS_DIR = "vectors"
CHUNKS_TABLE = "chunks"
CARDS = "cards.parquet"


class SnapshotError(BlobdexError):
    """A snapshot cannot be read or served; the message says which and what to do."""


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_snapshot_id() -> str:
    # Sortable by time; the random tail keeps two builds in one second apart. Parts are named the same way.
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + secrets.token_hex(3)


def snapshots_dir(data_dir: Path) -> Path:
    return data_dir / SNAPSHOTS_DIR


def parts_dir(data_dir: Path) -> Path:
    return data_dir / PARTS_DIR


def data_dir_of(snapshot_dir: Path) -> Path:
    """The data dir a snapshot directory (`<data_dir>/snapshots/<id>`) lives in."""
    return snapshot_dir.parent.parent


def graph_path(snapshot_dir: Path, table: str) -> Path:
    """A graph table of a format-1/2 snapshot, or the edges of any snapshot."""
    return snapshot_dir / GRAPH_DIR / f"{table}.parquet"
