"""Reconciling a snapshot: manifest -> chunk rows and vectors -> lexical documents -> files table."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import lancedb
import numpy as np
import pyarrow.parquet as pq
import tantivy

from indexer.extract import FACT_COLUMNS
from indexer.snapshot import (CHUNKS_TABLE, LEXICAL_DIR, VECTORS_DIR, SnapshotError, graph_path, lexical_schema,
                              open_manifest)


def verify(data_dir: Path, snapshot_id: str | None = None) -> tuple[str, list[str]]:
    """(snapshot_id, problems): every count the manifest states, checked against each store."""
    path, manifest = open_manifest(data_dir, snapshot_id)
    problems: list[str] = []
    try:
        table = lancedb.connect(str(path / VECTORS_DIR)).open_table(CHUNKS_TABLE).to_arrow()
        files = pq.read_table(graph_path(path, "files"))
        facts = {t: _per_repo(pq.read_table(graph_path(path, t), columns=["org", "repo"])) for t in FACT_COLUMNS}
        edge_rows = pq.read_metadata(graph_path(path, "edges")).num_rows
        index = tantivy.Index.open(str(path / LEXICAL_DIR))
    except Exception as exc:
        raise SnapshotError(f"cannot open the stores of snapshot {str(path)!r}: {exc}; "
                            f"rebuild with 'blobdex index --full'") from exc
    rows = _per_repo(table)
    file_rows = _per_repo(files)
    indexed = Counter((o, r) for o, r, s in zip(files.column("org").to_pylist(), files.column("repo").to_pylist(),
                                                files.column("skip").to_pylist()) if s is None)
    searcher = index.searcher()
    schema = lexical_schema()
    for repo in manifest.repos:
        key = (repo.org, repo.name)
        if rows[key] != repo.chunks:
            problems.append(f"{repo.org}/{repo.name}: manifest says {repo.chunks} chunks, vectors table has {rows[key]}")
        if file_rows[key] != repo.files:
            problems.append(f"{repo.org}/{repo.name}: manifest says {repo.files} files, files table has {file_rows[key]}")
        if indexed[key] != repo.files_indexed:
            problems.append(f"{repo.org}/{repo.name}: manifest says {repo.files_indexed} indexed files, "
                            f"files table has {indexed[key]}")
        for name, fact_rows in facts.items():
            have = fact_rows[key]
            if have != repo.graph.get(name, 0):
                problems.append(f"{repo.org}/{repo.name}: manifest says {repo.graph.get(name, 0)} {name} rows, "
                                f"graph/{name}.parquet has {have}")
        q = tantivy.Query.boolean_query([
            (tantivy.Occur.Must, tantivy.Query.term_query(schema, "org", repo.org)),
            (tantivy.Occur.Must, tantivy.Query.term_query(schema, "repo", repo.name))])
        docs = searcher.search(q, 1, count=True).count
        if docs != repo.chunks:
            problems.append(f"{repo.org}/{repo.name}: manifest says {repo.chunks} chunks, lexical index has {docs}")
    extra = set(rows) - {(r.org, r.name) for r in manifest.repos}
    for org, name in sorted(extra):
        problems.append(f"{org}/{name}: {rows[(org, name)]} chunk rows for a repo the manifest does not list")
    if edge_rows != manifest.edges:
        problems.append(f"manifest says {manifest.edges} edges, graph/edges.parquet has {edge_rows}")
    if searcher.num_docs != table.num_rows:
        problems.append(f"lexical index has {searcher.num_docs} documents, vectors table has {table.num_rows} rows")
    ids = np.sort(np.asarray(table.column("row").to_pylist(), dtype=np.int64))
    if not np.array_equal(ids, np.arange(table.num_rows)):
        problems.append("row ids are not 0..n-1 without gaps or repeats")
    if table.num_rows:
        vectors = table.column("vector").combine_chunks().flatten().to_numpy().reshape(table.num_rows, -1)
        if vectors.shape[1] != manifest.dim:
            problems.append(f"vectors have dim {vectors.shape[1]}, the manifest says {manifest.dim}")
        norms = np.linalg.norm(vectors, axis=1)
        bad = int(np.sum(~np.isfinite(norms) | (np.abs(norms - 1) > 1e-3)))
        if bad:
            problems.append(f"{bad} vectors are not unit length (or not finite)")
    return manifest.snapshot_id, problems


def _per_repo(table) -> Counter:
    return Counter(zip(table.column("org").to_pylist(), table.column("repo").to_pylist()))
