"""Writing a snapshot's data files: the LanceDB chunks table, the Tantivy index and files.parquet."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tantivy

from indexer.edges import EDGE_INPUTS, edges
from indexer.snapshot import (
    CARDS,
    EDGES_SCHEMA,
    FILES_SCHEMA,
    GRAPH_DIR,
    GRAPH_SCHEMAS,
    LEXICAL_DIR,
    cards_schema,
    chunk_schema,
    chunks_arrow_path,
    chunks_path,
    graph_path,
    lexical_schema,
)
from indexer.tokenize import path_tokens, tokens

TANTIVY_HEAP_BYTES = 256 * 1024 * 1024
# One large write: many small appends make many fragments. Lance's default max_rows_per_file, so each
# data file holds this many rows; verify.open_check reads one row per file.
LANCE_ROWS_PER_FILE = 1024 * 1024


def _write_parquet(table: pa.Table, path: Path) -> None:
    # Page checksums let `blobdex verify` tell flipped bytes from data (verify reads with checking on).
    pq.write_table(table, path, write_page_checksum=True)


def write_chunks(built: Path, columns: dict[str, list], vectors: np.ndarray) -> pa.Table:
    """Write the chunks table; `columns` holds every chunk_schema column but `row` and `vector`."""
    dim = vectors.shape[1]
    schema = chunk_schema(dim)
    n = len(columns["path"])
    arrays = {"row": pa.array(np.arange(n, dtype=np.int64))}
    for fld in schema:
        if fld.name in ("row", "vector"):
            continue
        arrays[fld.name] = pa.array(columns[fld.name], type=fld.type)
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    arrays["vector"] = pa.FixedSizeListArray.from_arrays(flat, dim)
    table = pa.table([arrays[f.name] for f in schema], schema=schema)
    lance.write_dataset(table, str(chunks_path(built)), schema=schema, max_rows_per_file=LANCE_ROWS_PER_FILE)
    with pa.OSFile(str(chunks_arrow_path(built)), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table)  # one record batch: a reader's vector matrix is a view of the mapped file
    return table


def write_lexical(built: Path, table: pa.Table, progress=None) -> None:
    schema = lexical_schema()
    path = built / LEXICAL_DIR
    path.mkdir()
    index = tantivy.Index(schema, path=str(path))
    writer = index.writer(heap_size=TANTIVY_HEAP_BYTES, num_threads=1)
    cols = {name: table.column(name).to_pylist() for name in ("row", "org", "repo", "path", "symbol", "text")}
    path_cache: dict[str, str] = {}
    for i, row in enumerate(cols["row"]):
        doc = tantivy.Document()
        doc.add_unsigned("row", row)
        doc.add_text("org", cols["org"][i])
        doc.add_text("repo", cols["repo"][i])
        doc.add_text("content", " ".join(tokens(cols["text"][i])))
        doc.add_text("symbol", " ".join(tokens(cols["symbol"][i])))
        p = cols["path"][i]
        if p not in path_cache:
            path_cache[p] = " ".join(path_tokens(p))
        doc.add_text("path", path_cache[p])
        writer.add_document(doc)
        if progress is not None and i % 512 == 511:
            progress.advance(512)
    writer.commit()
    writer.wait_merging_threads()


def write_graph(built: Path, tables) -> int:
    """files.parquet, one Parquet file per fact table, and the coupling edges derived from them.
    Returns the number of edges."""
    (built / GRAPH_DIR).mkdir()
    _write_parquet(pa.table(tables.files, schema=FILES_SCHEMA), graph_path(built, "files"))
    for name, columns in tables.facts.items():
        _write_parquet(pa.table(columns, schema=GRAPH_SCHEMAS[name]), graph_path(built, name))
    facts = {name: tables.fact_rows(name) for name in EDGE_INPUTS}
    files = tables.file_rows()
    rows = []
    for org in sorted(set(tables.files["org"])):
        in_org = {name: [r for r in facts[name] if r["org"] == org] for name in facts}
        rows += edges(org, in_org, [f for f in files if f["org"] == org])
    columns = {name: [r[name] for r in rows] for name in EDGES_SCHEMA.names}
    _write_parquet(pa.table(columns, schema=EDGES_SCHEMA), graph_path(built, "edges"))
    return len(rows)


def write_cards(built: Path, cards: dict[tuple[str, str], str], vectors: np.ndarray) -> None:
    keys = list(cards)
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    table = pa.table(
        {
            "org": [k[0] for k in keys],
            "repo": [k[1] for k in keys],
            "text": list(cards.values()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1]),
        },
        schema=cards_schema(vectors.shape[1]),
    )
    _write_parquet(table, built / CARDS)
