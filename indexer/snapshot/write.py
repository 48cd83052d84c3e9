"""Writing the format's files: a part (chunks.arrow, its trigram index, Parquet tables, part.json), a snapshot's
lexical index (a copy by hard links of the previous one, changed in place of a rebuild), its edges and its DuckDB
views."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tantivy

from indexer.snapshot import grams
from indexer.snapshot.ann import CODES, write_codes
from indexer.snapshot.publish import finish_part, part_build_dir
from indexer.snapshot import (
    CARD,
    CHUNKS_ARROW,
    EDGES_SCHEMA,
    FACT_COLUMNS,
    GRAPH_DIR,
    GRAPH_VIEWS,
    HISTORY_DIR,
    HISTORY_INFO,
    COMMIT_VECTORS,
    HISTORY_SCHEMAS,
    LEXICAL_DIR,
    EDGE_FACTS,
    PART_INFO,
    PART_INPUTS,
    CHUNK_TEXT,
    PARTS_DIR,
    PATHS,
    TABLE_SCHEMAS,
    HistoryInfo,
    Manifest,
    PartInfo,
    cards_schema,
    chunk_schema,
    data_dir_of,
    graph_path,
    commit_vectors_schema,
    history_lexical_schema,
    lexical_schema,
    new_snapshot_id,
)
from indexer.tokenize import path_tokens, tokens

TANTIVY_HEAP_BYTES = 256 * 1024 * 1024
TANTIVY_LOCKS = (".tantivy-meta.lock", ".tantivy-writer.lock")  # per process: never shared between copies
DELETE_BATCH = 10_000  # row ids per delete query


def _write_parquet(table: pa.Table, path: Path, **options) -> None:
    # Page checksums let `blobdex verify` tell flipped bytes from data (verify reads with checking on).
    pq.write_table(table, path, write_page_checksum=True, **options)


def vector_column(vectors: np.ndarray, dim: int) -> pa.FixedSizeListArray:
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, dim)


def write_part(
    data_dir: Path,
    *,
    info: dict,
    chunks: pa.Table,
    tables: dict[str, pa.Table],
    card_vector: np.ndarray | None,
    codes: tuple[np.ndarray, str] | None = None,
) -> PartInfo:
    """Write one part (`info`: PartInfo's fields but part_id and rows; `chunks` in chunk_schema; `tables`: paths,
    files and every fact table; `codes`: its rows' codes and their codebook's digest, for approximate search)
    aside, then rename it into place. Returns what part.json says."""
    with _aside(data_dir) as (part_id, built):
        _part_files(built, info, chunks, tables, card_vector, codes)
        return _part_info(built, part_id, chunks.num_rows, info)


def part_files(
    info: dict,
    chunks: pa.Table,
    tables: dict[str, pa.Table],
    card_vector: np.ndarray | None,
    codes: tuple[np.ndarray, str] | None = None,
) -> dict[str, bytes]:
    """A part's files but part.json, by name, built in a temporary folder (on a Ray worker: indexer.build.cluster)
    and read back: what write_part would write."""
    with tempfile.TemporaryDirectory(prefix="blobdex-part-") as folder:
        built = Path(folder)
        _part_files(built, info, chunks, tables, card_vector, codes)
        return {f.name: f.read_bytes() for f in sorted(built.iterdir())}


def place_part(data_dir: Path, *, info: dict, rows: int, files: dict[str, bytes]) -> PartInfo:
    """Write a part whose files part_files built (elsewhere) aside, with its part.json, then rename it into place."""
    with _aside(data_dir) as (part_id, built):
        for name, content in files.items():
            if Path(name).name != name or name in (PART_INFO, EDGE_FACTS):  # a worker's names are checked, not trusted
                raise ValueError(f"a part's file is named {name!r}")
            (built / name).write_bytes(content)
        return _part_info(built, part_id, rows, info)


def _part_files(built: Path, info: dict, chunks: pa.Table, tables: dict, card_vector, codes) -> None:
    with pa.OSFile(str(built / CHUNKS_ARROW), "wb") as sink, pa.ipc.new_file(sink, chunks.schema) as writer:
        writer.write_table(chunks.combine_chunks())  # one record batch: a reader's matrix is a view of the file
    grams.write(built / grams.GRAMS, chunks.column("text").to_pylist())
    if codes is not None:
        write_codes(built / CODES, *codes)
    # The rows again without vectors, for DuckDB (which reads no Arrow IPC): zstd, about a tenth of chunks.arrow.
    _write_parquet(chunks.drop_columns(["vector"]), built / f"{CHUNK_TEXT}.parquet", compression="zstd")
    for name, table in tables.items():
        _write_parquet(table, built / f"{name}.parquet")
    card = {"org": [info["org"]], "repo": [info["repo"]], "text": [info["card"]]} if info["card"] else None
    dim = info["dim"]
    if card is not None:
        card["vector"] = vector_column(card_vector.reshape(1, dim), dim)
    empty = {"org": [], "repo": [], "text": [], "vector": vector_column(np.zeros((0, dim)), dim)}
    _write_parquet(pa.table(card or empty, schema=cards_schema(dim)), built / CARD)


def _part_info(built: Path, part_id: str, rows: int, info: dict) -> PartInfo:
    """part.json, and the edge inputs but PART_INPUTS in EDGE_FACTS beside it."""
    inputs = info["edge_inputs"]
    part = PartInfo(
        part_id=part_id, rows=rows, **{**info, "edge_inputs": {k: v for k, v in inputs.items() if k in PART_INPUTS}}
    )
    facts = {k: v for k, v in inputs.items() if k not in PART_INPUTS}
    (built / EDGE_FACTS).write_text(json.dumps(facts, sort_keys=True), encoding="utf-8")
    (built / PART_INFO).write_text(part.to_json(), encoding="utf-8")
    return part


@contextmanager
def _aside(data_dir: Path) -> Iterator[tuple[str, Path]]:
    """A new part's id and the folder it is written in aside; renamed into place when the block ends, removed if
    it fails."""
    part_id = new_snapshot_id()
    built = part_build_dir(data_dir, part_id)
    try:
        yield part_id, built
        finish_part(data_dir, built, part_id)
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise


def write_lexical(
    built: Path,
    base: Path | None,
    drop_rows: list[int],
    drop_repos: list[tuple[str, str]],
    add: pa.Table | Iterable[pa.Table],
    progress,
) -> None:
    """The snapshot's Tantivy index: `base`'s (another snapshot's lexical/) copied by hard links, its documents of
    `drop_rows` and of `drop_repos` deleted and `add`'s rows (row, org, repo, path, symbol, text; a table, or
    tables read one at a time) added; or, with no base, a new index of `add`. Tantivy writes new segment and
    deletion files and replaces meta.json by rename, so the base's files are never changed."""
    index = _index_from(built / LEXICAL_DIR, lexical_schema(), base)
    writer = index.writer(heap_size=TANTIVY_HEAP_BYTES, num_threads=1)
    schema = index.schema
    for start in range(0, len(drop_rows), DELETE_BATCH):
        ids = drop_rows[start : start + DELETE_BATCH]
        writer.delete_documents_by_query(tantivy.Query.term_set_query(schema, "row", ids))
    _drop_repos(writer, schema, drop_repos)
    for table in [add] if isinstance(add, pa.Table) else add:
        _add_documents(writer, table, progress)
    writer.commit()
    writer.wait_merging_threads()


def deleted_share(lexical: Path, dropping: int, adding: int) -> float:
    """The share of a Tantivy index's documents that would be deleted ones once `dropping` more are deleted and
    `adding` added: a deleted document stays in its segment (its postings walked, its term counted in BM25's
    document frequencies) until Tantivy merges the segment, which tantivy-py cannot ask for."""
    segments = json.loads((lexical / "meta.json").read_text(encoding="utf-8"))["segments"]
    held = sum(s["max_doc"] for s in segments)
    deleted = sum((s.get("deletes") or {}).get("num_deleted_docs", 0) for s in segments)
    return (deleted + dropping) / max(held + adding, 1)


def _index_from(path: Path, schema, base: Path | None):
    """A Tantivy index at `path`: a new one, or `base`'s files linked (Tantivy writes new segment and deletion
    files and replaces meta.json by rename, so the base's files are never changed)."""
    path.mkdir()
    if base is None:
        return tantivy.Index(schema, path=str(path))
    for source in base.iterdir():
        if source.is_file() and source.name not in TANTIVY_LOCKS:
            _link(source, path / source.name)
    return tantivy.Index.open(str(path))


def _drop_repos(writer, schema, repos: list[tuple[str, str]]) -> None:
    Q, Occur = tantivy.Query, tantivy.Occur
    for org, repo in repos:
        both = [(Occur.Must, Q.term_query(schema, "org", org)), (Occur.Must, Q.term_query(schema, "repo", repo))]
        writer.delete_documents_by_query(Q.boolean_query(both))


def write_history_part(
    data_dir: Path, *, info: dict, commits: pa.Table, changes: pa.Table, vectors: np.ndarray
) -> HistoryInfo:
    """Write one history part (`info`: HistoryInfo's fields but part_id and commits; `vectors`: one per commit,
    by info's model_id) aside, then rename it into place."""
    with _aside(data_dir) as (part_id, built):
        _write_parquet(commits, built / "commits.parquet")
        _write_parquet(changes, built / "commit_changes.parquet")
        dim = vectors.shape[1]
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), pa.float32())
        column = pa.FixedSizeListArray.from_arrays(flat, dim)
        _write_parquet(pa.table([column], schema=commit_vectors_schema(dim)), built / COMMIT_VECTORS)
        part = HistoryInfo(part_id=part_id, commits=commits.num_rows, **info)
        (built / HISTORY_INFO).write_text(part.to_json(), encoding="utf-8")
    return part


def write_history_lexical(
    built: Path, base: Path | None, drop_repos: list[tuple[str, str]], commits: pa.Table, changes: pa.Table
) -> None:
    """The snapshot's commits index: `base`'s (another snapshot's history/) linked, the documents of `drop_repos`
    deleted, one document per row of `commits` added (its message, and its changed paths and hunks from
    `changes`); or, with no base, a new index of `commits`."""
    index = _index_from(built / HISTORY_DIR, history_lexical_schema(), base)
    writer = index.writer(heap_size=TANTIVY_HEAP_BYTES, num_threads=1)
    _drop_repos(writer, index.schema, drop_repos)
    paths: dict[tuple[str, str, str], list[str]] = {}
    hunks: dict[tuple[str, str, str], list[str]] = {}
    c = changes.select(["org", "repo", "commit_id", "path", "hunks"]).to_pydict()
    for org, repo, commit_id, path, text in zip(c["org"], c["repo"], c["commit_id"], c["path"], c["hunks"]):
        paths.setdefault((org, repo, commit_id), []).extend(path_tokens(path))
        if text:
            hunks.setdefault((org, repo, commit_id), []).extend(tokens(text))
    m = commits.select(["org", "repo", "commit_id", "message"]).to_pydict()
    for org, repo, commit_id, message in zip(m["org"], m["repo"], m["commit_id"], m["message"]):
        key = (org, repo, commit_id)
        doc = tantivy.Document(org=org, repo=repo, commit_id=commit_id)
        doc.add_text("message", " ".join(tokens(message)))
        doc.add_text("paths", " ".join(paths.get(key, ())))
        doc.add_text("hunks", " ".join(hunks.get(key, ())))
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()


def _link(source: Path, target: Path) -> None:
    """A hard link (no bytes written), or a copy where the file system has none."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _add_documents(writer, table: pa.Table, progress) -> None:
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


def edges_table(rows: list[dict]) -> pa.Table:
    return pa.table({name: [r[name] for r in rows] for name in EDGES_SCHEMA.names}, schema=EDGES_SCHEMA)


def write_edges(built: Path, edges: pa.Table) -> None:
    (built / GRAPH_DIR).mkdir()
    _write_parquet(edges, graph_path(built, "edges"))


def write_views(built: Path, manifest: Manifest) -> None:
    """graph.sql: one DuckDB view per graph table, and `chunks`, over the snapshot's parts, superseded rows left
    out (a row is superseded when a later part of its repo lists its path in paths.parquet). Paths are relative
    to the snapshot's directory: `cd` there (or `SET file_search_path` to it) before `.read graph.sql`."""
    parts = [(p, r.org, r.name, seq) for r in manifest.repos for seq, p in enumerate(r.parts)]
    where = f"../../{PARTS_DIR}"
    listed = ", ".join(f"({_sql(p)}, {_sql(o)}, {_sql(n)}, {s})" for p, o, n, s in parts)
    lines = [
        f"-- DuckDB views of blobdex snapshot {manifest.snapshot_id}: run from this directory, `.read {GRAPH_VIEWS}`",
        f"CREATE OR REPLACE TEMP VIEW blobdex_parts AS SELECT * FROM (VALUES {listed or _NONE}) t(part, org, repo, seq)"
        " WHERE part IS NOT NULL;",
    ]
    deltas = [f"{where}/{p}/{PATHS}.parquet" for p, _, _, seq in parts if seq > 0]
    covers = (
        f"SELECT p.org, p.repo, p.seq, c.path FROM read_parquet({_sql_list(deltas)}, filename = true) c "
        f"JOIN blobdex_parts p ON {_PART_OF.format('c')} = p.part"
        if deltas
        else "SELECT org, repo, seq, NULL::VARCHAR AS path FROM blobdex_parts WHERE false"
    )
    lines.append(f"CREATE OR REPLACE TEMP VIEW blobdex_covers AS {covers};")
    commits = ", ".join(
        "(" + ", ".join(map(_sql, (r.org, r.name, x.ref, x.commit_id))) + ")" for r in manifest.repos for x in r.refs
    )
    lines.append(
        f"CREATE OR REPLACE TEMP VIEW blobdex_commits AS SELECT * FROM (VALUES {commits or _NONE}) "
        "t(org, repo, ref, commit_id);"
    )
    text_parts = {p for p, _, _, _ in parts if (data_dir_of(built) / PARTS_DIR / p / f"{CHUNK_TEXT}.parquet").exists()}
    if len(text_parts) < len(parts):  # parts written before chunk_text.parquet: `blobdex index --full` rewrites them
        lines.append(
            f"-- chunks: {len(parts) - len(text_parts)} parts have no {CHUNK_TEXT}.parquet, their rows are not in it"
        )
    views = [(t, t, TABLE_SCHEMAS[t].names, None) for t in ("files", *FACT_COLUMNS)]
    views.append(("chunks", CHUNK_TEXT, [n for n in chunk_schema(1).names if n != "vector"], text_parts))
    for view, table, names, having in views:
        files = [f"{where}/{p}/{table}.parquet" for p, _, _, _ in parts if having is None or p in having]
        if not files:
            nulls = ", ".join(f"NULL AS {c}" for c in names)
            lines.append(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT {nulls} WHERE false;")
            continue
        columns = ", ".join("k.commit_id" if c == "commit_id" else f"t.{c}" for c in names)
        join = (
            " LEFT JOIN blobdex_commits k ON k.org = t.org AND k.repo = t.repo AND k.ref = t.ref"
            if table == "files"
            else ""
        )
        lines.append(
            f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT {columns} "
            f"FROM read_parquet({_sql_list(files)}, filename = true) t "
            f"JOIN blobdex_parts p ON {_PART_OF.format('t')} = p.part{join} "
            "WHERE NOT EXISTS (SELECT 1 FROM blobdex_covers c "
            "WHERE c.org = p.org AND c.repo = p.repo AND c.seq > p.seq AND c.path = t.path);"
        )
    lines.append(f"CREATE OR REPLACE TEMP VIEW edges AS SELECT * FROM read_parquet('{GRAPH_DIR}/edges.parquet');")
    for table, schema in HISTORY_SCHEMAS.items():  # history parts supersede nothing: every row is live
        files = [f"{where}/{h}/{table}.parquet" for r in manifest.repos for h in r.history]
        source = f"read_parquet({_sql_list(files)})" if files else None
        names = ", ".join(schema.names) if files else ", ".join(f"NULL AS {c}" for c in schema.names)
        lines.append(
            f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT {names} FROM {source};"
            if source
            else f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT {names} WHERE false;"
        )
    (built / GRAPH_VIEWS).write_text("\n".join(lines) + "\n", encoding="utf-8")


# The part a row was read from: the directory its file is in (DuckDB reports a path as given or resolved).
_PART_OF = "regexp_extract({}.filename, '([^/]+)/[^/]+$', 1)"
_NONE = "(NULL, NULL, NULL, NULL)"


def _sql(value) -> str:
    """A SQL string literal (repo names and refs come from configuration and git: quoted, never pasted)."""
    return "'" + str(value).replace("'", "''") + "'"


def _sql_list(values: list[str]) -> str:
    return "[" + ", ".join(_sql(v) for v in values) + "]"
