"""The snapshot format: the one directory layout the indexer writes and the query server reads.

A snapshot is a manifest that names immutable **parts**, plus the few files that span every repo:

    <data_dir>/
      parts/<part_id>/      immutable once renamed into place; shared by every snapshot that lists it
        part.json           one repo's part: org, repo, the model its vectors are from, how many chunks, whether
                            it is a base (it holds every path of the repo) or a delta (the paths one run changed);
                            and the repo as a whole as of this part: its card text and its coupling facts
        paths.parquet       every path the part speaks for, a deleted one too, with per-path counts
        chunks.arrow        one row per (path, blob_id, chunk_index) at those paths: the refs that reach it, its
                            text and vector, and `row`, its id, stable for as long as the row lives. One Arrow IPC
                            record batch, which a query process maps: no copy, vectors a view of the file
        grams.arrow         its trigram index: the blocks of 16 rows that hold each trigram of the text (grep)
        chunk_text.parquet  the same rows without vectors, for DuckDB (graph.sql's `chunks`)
        files.parquet       one row per (ref, path): blob_id, lang, bytes, sha256, skip reason, chunks
        symbols … url_literals .parquet   structural facts at those paths (FACT_COLUMNS)
        card.parquet        the repo's card and its vector
      parts/<part_id>/      a history part (indexer/build/history.py), listed in a repo's `history`, not `parts`:
        history.json        org, repo, the heads it was read to, base or delta, the settings it was read with
        commits.parquet     one row per commit: parents, author, committer, times, the message (screened)
        commit_changes.parquet   one row per path a commit changed: old path, blobs, lines added and removed
        commit_vectors.parquet   the vector of each commit's message, row for row, by history.json's model_id
      snapshots/<snapshot_id>/
        manifest.json       what is inside, from which commits, built how; per repo the parts, oldest first
        lexical/            a Tantivy index over every live chunk row, keyed by `row`: the segment files the
                            previous snapshot's index already had are hard links to them, so a run writes only the
                            new segments and deletion files (Tantivy never rewrites a file in place)
        graph/edges.parquet cross-repo coupling edges with evidence (indexer/build/edges.py), computed from every
                            repo's coupling facts (part.json) at each publish
        history/            a Tantivy index of every listed commit (message, changed paths, hunks), linked
                            from the previous snapshot's and changed, as lexical/ is
        graph.sql           DuckDB views of the graph and history tables over the parts, for analysts
      CURRENT               names the live snapshot; replaced atomically, written last

A repo's parts are read in order: a row of one part is **superseded** when a later part of the same repo speaks
for its path (lists it in paths.parquet), so a one-line change writes one small delta part and the snapshot
references every other part as it was. Every reader of a snapshot goes through the functions below, which
apply that rule, so no caller sees a superseded row. A repo's history parts supersede nothing: a delta adds the
commits new since the part before it, and a run that finds history rewritten writes a base, listed alone.

A snapshot of format 1 or 2 keeps everything in its own directory (vectors/chunks.lance or chunks.arrow,
graph/*.parquet, cards.parquet) and reads as one part. `<data_dir>/backfill.json`, while a fast-tier snapshot
serves, says how many of its chunks still lack the configured model's vectors (indexer/runs.py).
"""

from __future__ import annotations

from indexer.snapshot.format import (
    CARD,
    CARDS,
    CHUNKS_ARROW,
    CHUNKS_TABLE,
    CHUNK_TEXT,
    CURRENT,
    FORMAT_VERSION,
    GRAPH_DIR,
    GRAPH_VIEWS,
    HISTORY_DIR,
    HISTORY_INFO,
    COMMIT_VECTORS,
    LEXICAL_DIR,
    MANIFEST,
    PARTS_DIR,
    PART_INFO,
    PART_INPUTS,
    EDGE_FACTS,
    PATHS,
    READABLE_FORMATS,
    SNAPSHOTS_DIR,
    SnapshotError,
    VECTORS_DIR,
    data_dir_of,
    graph_path,
    new_snapshot_id,
    now_iso,
    parts_dir,
    snapshots_dir,
)
from indexer.snapshot.schemas import (
    EDGES_SCHEMA,
    FACT_COLUMNS,
    FACT_KEY,
    FACT_KEY_FIELDS,
    FILES_SCHEMA,
    GRAPH_SCHEMAS,
    HISTORY_SCHEMAS,
    PART_FILES_SCHEMA,
    PART_TABLES,
    PATHS_SCHEMA,
    RESOLUTION_COLUMNS,
    TABLE_SCHEMAS,
    cards_schema,
    chunk_schema,
    history_lexical_schema,
    commit_vectors_schema,
    lexical_schema,
)
from indexer.snapshot.manifest import (
    HistoryInfo,
    Manifest,
    PartInfo,
    PartRef,
    RefState,
    RepoState,
    current_id,
    kept,
    open_manifest,
    published,
)
from indexer.snapshot.read import (
    UNIT_TOLERANCE,
    live,
    open_chunks_arrow,
    open_history_lexical,
    open_lexical,
    part_file,
    parts_of,
    read_cards,
    repo_parts,
    read_chunks,
    read_graph,
    read_history,
    read_history_info,
    read_commit_vectors,
    read_part_chunks,
    read_part_info,
    read_edge_facts,
    read_part_table,
    store_error,
    unit_length,
    vector_matrix,
    whole,
)
from indexer.snapshot.legacy import read_lance_chunks

__all__ = [
    "read_history_info",
    "read_history",
    "open_history_lexical",
    "history_lexical_schema",
    "commit_vectors_schema",
    "read_commit_vectors",
    "HistoryInfo",
    "HISTORY_SCHEMAS",
    "HISTORY_INFO",
    "COMMIT_VECTORS",
    "HISTORY_DIR",
    "CARD",
    "CARDS",
    "CHUNKS_ARROW",
    "CHUNK_TEXT",
    "CHUNKS_TABLE",
    "CURRENT",
    "EDGES_SCHEMA",
    "FACT_COLUMNS",
    "FACT_KEY",
    "FACT_KEY_FIELDS",
    "FILES_SCHEMA",
    "FORMAT_VERSION",
    "GRAPH_DIR",
    "GRAPH_SCHEMAS",
    "GRAPH_VIEWS",
    "LEXICAL_DIR",
    "MANIFEST",
    "Manifest",
    "PARTS_DIR",
    "PART_FILES_SCHEMA",
    "PART_INFO",
    "PART_INPUTS",
    "EDGE_FACTS",
    "PART_TABLES",
    "PATHS",
    "PATHS_SCHEMA",
    "PartInfo",
    "PartRef",
    "READABLE_FORMATS",
    "RESOLUTION_COLUMNS",
    "RefState",
    "RepoState",
    "SNAPSHOTS_DIR",
    "SnapshotError",
    "TABLE_SCHEMAS",
    "UNIT_TOLERANCE",
    "VECTORS_DIR",
    "cards_schema",
    "chunk_schema",
    "current_id",
    "data_dir_of",
    "graph_path",
    "kept",
    "lexical_schema",
    "live",
    "new_snapshot_id",
    "now_iso",
    "open_chunks_arrow",
    "open_lexical",
    "open_manifest",
    "part_file",
    "parts_dir",
    "parts_of",
    "published",
    "repo_parts",
    "read_cards",
    "read_chunks",
    "read_graph",
    "read_lance_chunks",
    "read_part_chunks",
    "read_part_info",
    "read_edge_facts",
    "read_part_table",
    "snapshots_dir",
    "store_error",
    "unit_length",
    "vector_matrix",
    "whole",
]
