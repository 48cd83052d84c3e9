"""The readers of a snapshot's stores: every module that reads one goes through these, so the layout is known in
this package only, and every reader applies the superseding rule (a later part of a repo speaks for its paths).
Heavy libraries are imported inside them: importing this module stays cheap."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer.snapshot.format import (
    CARD,
    CARDS,
    CHUNKS_ARROW,
    HISTORY_DIR,
    COMMIT_VECTORS,
    HISTORY_INFO,
    LEXICAL_DIR,
    EDGE_FACTS,
    PART_INFO,
    PATHS,
    VECTORS_DIR,
    data_dir_of,
    graph_path,
    parts_dir,
)
from indexer.snapshot.ann import CODES
from indexer.snapshot.grams import GRAMS
from indexer.snapshot.legacy import read_lance_chunks
from indexer.snapshot.manifest import HistoryInfo, Manifest, PartInfo, PartRef, RepoState, open_manifest
from indexer.snapshot.schemas import HISTORY_SCHEMAS, PART_FILES_SCHEMA, TABLE_SCHEMAS, cards_schema, chunk_schema


def part_file(ref: PartRef, table: str) -> Path:
    """Where a part keeps a table: `chunks`, `grams` or `codes` (Arrow IPC), `paths`, `card` or a graph table
    (Parquet)."""
    if table in ("grams", "codes"):  # a format-1/2 snapshot has neither: the path names nothing
        return ref.dir / (GRAMS if table == "grams" else CODES)
    if ref.part_id is None:
        if table == "chunks":
            return ref.dir / VECTORS_DIR / CHUNKS_ARROW
        return ref.dir / CARDS if table == "card" else graph_path(ref.dir, table)
    return ref.dir / (CHUNKS_ARROW if table == "chunks" else f"{table}.parquet")


def read_part_info(part: Path) -> PartInfo:
    return PartInfo(**json.loads((part / PART_INFO).read_text(encoding="utf-8")))


def read_edge_facts(part: Path) -> dict:
    """A part's coupling facts beside part.json (EDGE_FACTS); {} for a part written before, whose part.json holds
    them."""
    try:
        return json.loads((part / EDGE_FACTS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def parts_of(snapshot_dir: Path, manifest: Manifest, repos: set[tuple[str, str]] | None = None) -> list[PartRef]:
    """The parts a snapshot lists (only those of `repos` when given), repo by repo, oldest first, each with the
    paths its later parts speak for."""
    if manifest.format_version < 3:
        return [PartRef(None, snapshot_dir, frozenset())]
    root = parts_dir(data_dir_of(snapshot_dir))
    return repo_parts(root, [r for r in manifest.repos if repos is None or (r.org, r.name) in repos])


def repo_parts(root: Path, states: list[RepoState]) -> list[PartRef]:
    """The parts of `states` under the parts folder `root`, as parts_of lists them (a run's, before its
    manifest is written)."""
    refs = []
    for repo in states:
        covered: frozenset[str] = frozenset()
        found = []
        for part_id in reversed(repo.parts):
            found.append(PartRef(part_id, root / part_id, covered))
            if part_id != repo.parts[0]:  # the base's paths cover nothing: no part is older
                covered = covered | set(_paths_of(root / part_id))
        refs.extend(reversed(found))
    return refs


@functools.lru_cache(maxsize=1024)
def _paths_of(part: Path) -> tuple[str, ...]:
    """The paths a part speaks for, read once per part (a part never changes; a server opening snapshot after
    snapshot read each delta's again: 2 ms apiece)."""
    import pyarrow.parquet as pq

    return tuple(pq.read_table(part / f"{PATHS}.parquet", columns=["path"]).column("path").to_pylist())


def live(table: pa.Table, covered: frozenset[str]) -> pa.Table:
    """A part's rows that no later part supersedes."""
    if not covered or not table.num_rows:
        return table
    import pyarrow.compute as pc

    return table.filter(pc.invert(pc.is_in(table["path"], value_set=pa.array(sorted(covered), pa.string()))))


def open_chunks_arrow(ref: PartRef) -> pa.ipc.RecordBatchFileReader:
    """A part's chunks.arrow opened by mapping it: reading its batches copies nothing."""
    return pa.ipc.open_file(pa.memory_map(str(part_file(ref, "chunks")), "r"))


def read_part_chunks(ref: PartRef) -> pa.Table:
    """Every chunk row of a part, superseded ones too, in the order written. Mapped from chunks.arrow (zero
    copy: the pages are the file's); a format-2 snapshot written before chunks.arrow is read with Lance."""
    if ref.part_id is not None or part_file(ref, "chunks").exists():
        return open_chunks_arrow(ref).read_all()
    return read_lance_chunks(ref.dir)


def read_part_table(ref: PartRef, table: str, **options) -> pa.Table:
    """A part's Parquet table (`paths`, `card`, a graph table); `options` go to pyarrow.parquet.read_table."""
    import pyarrow.parquet as pq

    return pq.read_table(part_file(ref, table), **options)


def read_chunks(snapshot_dir: Path, vectors: bool = True) -> pa.Table:
    """Every live chunk row of a snapshot as Arrow (`vectors=False` leaves the vector column out)."""
    _, manifest = open_manifest(data_dir_of(snapshot_dir), snapshot_dir.name)
    tables = []
    for ref in parts_of(snapshot_dir, manifest):
        table = live(read_part_chunks(ref), ref.covered)
        tables.append(table if vectors else table.drop_columns(["vector"]))
    if not tables:
        return chunk_schema(manifest.dim).empty_table()
    return pa.concat_tables(tables)


def read_graph(snapshot_dir: Path, table: str, repos: set[tuple[str, str]] | None = None, **options) -> pa.Table:
    """One graph table of a snapshot (files, a fact table, edges), live rows only, as the schema in TABLE_SCHEMAS
    names its columns; `repos` reads only those repos' parts; `options` go to pyarrow.parquet.read_table."""
    import pyarrow.parquet as pq

    path, manifest = snapshot_dir, open_manifest(data_dir_of(snapshot_dir), snapshot_dir.name)[1]
    if table == "edges" or manifest.format_version < 3:
        found = pq.read_table(graph_path(path, table), **options)
        return found if "columns" in options else _conform(found, TABLE_SCHEMAS[table])
    columns = options.pop("columns", None)
    wanted = None
    if columns:  # the path decides what is superseded; files rows need their ref's key for commit_id
        keys = ["path", "org", "repo", "ref"] if table == "files" else ["path"]
        wanted = [c for c in dict.fromkeys([*columns, *keys]) if c != "commit_id"]
    tables = []
    for ref in parts_of(path, manifest, repos):
        tables.append(live(read_part_table(ref, table, columns=wanted, **options), ref.covered))
    schema = TABLE_SCHEMAS[table] if table != "files" else PART_FILES_SCHEMA
    result = pa.concat_tables(tables) if tables else schema.empty_table()
    if table == "files":
        result = _with_commits(result, manifest)
    return result.select(columns) if columns else result.select(TABLE_SCHEMAS[table].names)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A table written before a column of its schema existed, with that column as nulls (edges gained
    confidence and evidence after format 3 was out)."""
    for f in schema:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table


def _with_commits(files: pa.Table, manifest: Manifest) -> pa.Table:
    """A part's files rows with each ref's commit_id, from the manifest."""
    commit_of = {(r.org, r.name, x.ref): x.commit_id for r in manifest.repos for x in r.refs}
    keys = zip(files.column("org").to_pylist(), files.column("repo").to_pylist(), files.column("ref").to_pylist())
    commits = pa.array([commit_of.get(k) for k in keys], pa.string())
    return files.append_column("commit_id", commits)


def read_cards(snapshot_dir: Path, of_part=None, **options) -> pa.Table | None:
    """The repo cards (org, repo, text, vector): each repo's newest part has its card. None in a snapshot that
    has none. `of_part(part_id, what, read)`: a server's memo of what it read of each part (a swap reads only
    its new parts' cards)."""
    import pyarrow.parquet as pq

    _, manifest = open_manifest(data_dir_of(snapshot_dir), snapshot_dir.name)
    if manifest.format_version < 3:
        path = snapshot_dir / CARDS
        return pq.read_table(path, **options) if path.exists() else None
    root = parts_dir(data_dir_of(snapshot_dir))
    of_part = of_part or (lambda part_id, what, read: read())
    cards = [
        of_part(p, "card", lambda p=p: pq.read_table(root / p / CARD, **options))
        for p in (r.parts[-1] for r in manifest.repos if r.parts)
    ]
    return pa.concat_tables(cards) if cards else cards_schema(manifest.dim).empty_table()


def whole(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array: its one chunk as it is (combine_chunks copies even one chunk: 1.5 GB of a mapped
    file's vectors at a million rows), or its chunks concatenated."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def vector_matrix(table: pa.Table, dim: int = 0) -> np.ndarray:
    """A table's `vector` column (chunks or cards) as one float32 matrix, a row per table row; (0, dim) when empty.
    A single-chunk column of a mapped file is a view of it, not a copy."""
    if not table.num_rows:
        return np.zeros((0, dim), dtype=np.float32)
    flat = whole(table.column("vector")).flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat, dtype=np.float32).reshape(table.num_rows, -1)


# Every embedder normalises its vectors (float32: within 1e-6 of unit length); 1e-3 leaves room for rounding and
# still catches a flipped byte, which moves a norm far more or makes it NaN.
UNIT_TOLERANCE = 1e-3


def unit_length(vectors: np.ndarray) -> np.ndarray:
    """Which rows of a vector matrix are what a model writes and nothing damaged: finite and of unit length
    (within UNIT_TOLERANCE), or all zeros, which the static tier and the hashing embedder write for a text they
    read nothing in (only unknown pieces); damage that leaves every byte of a vector zero is not a flip."""
    vectors = np.atleast_2d(vectors)
    with np.errstate(over="ignore", invalid="ignore"):
        squares = np.einsum("ij,ij->i", vectors, vectors)  # no copy; 2.5 ms for 10,800 x 384, norm took 6.8
    return np.isfinite(squares) & ((np.abs(np.sqrt(squares) - 1) <= UNIT_TOLERANCE) | ~vectors.any(axis=1))


def open_lexical(snapshot_dir: Path):
    """The Tantivy index, opened."""
    import tantivy

    return tantivy.Index.open(str(snapshot_dir / LEXICAL_DIR))


def read_history_info(part: Path) -> HistoryInfo:
    return HistoryInfo.from_json((part / HISTORY_INFO).read_text(encoding="utf-8"))


def read_history(
    snapshot_dir: Path,
    manifest: Manifest,
    table: str,
    repos: set[tuple[str, str]] | None = None,
    of_part=None,
    **options,
) -> pa.Table:
    """A history table (`commits` or `commit_changes`) of every repo (or of `repos`) the snapshot holds history
    of: each repo's history parts in order (a base first, so nothing is superseded), as HISTORY_SCHEMAS types it.
    `of_part`: a server's memo of what it read of each part (read_cards)."""
    listed = [p for r in manifest.repos if repos is None or (r.org, r.name) in repos for p in r.history]
    return read_history_parts(data_dir_of(snapshot_dir), listed, table, of_part, **options)


def _read_once(part_id: str, what: str, read):
    return read()


def read_history_parts(data_dir: Path, part_ids: list[str], table: str, of_part=None, **options) -> pa.Table:
    """A history table of these history parts, in order."""
    import pyarrow.parquet as pq

    schema, of_part = HISTORY_SCHEMAS[table], of_part or _read_once
    tables = [
        of_part(
            p,
            f"{table} {options}",
            lambda p=p: pq.read_table(parts_dir(data_dir) / p / f"{table}.parquet", schema=schema, **options),
        )
        for p in part_ids
    ]
    if not tables:
        empty = schema.empty_table()
        return empty.select(options["columns"]) if "columns" in options else empty
    return pa.concat_tables(tables)


def read_commit_vectors(snapshot_dir: Path, manifest: Manifest, of_part=None) -> tuple[np.ndarray, np.ndarray]:
    """The vectors of read_history(..., "commits")'s rows, row for row, and each row's model id ("" where its
    part has none): (float32 matrix, object array). The matrix is the first model's width; a part of another
    width reads as zeros (its rows' model says they are not comparable). `of_part`: as read_history's."""
    root, of_part = parts_dir(data_dir_of(snapshot_dir)), of_part or _read_once
    blocks, models, dim = [], [], 0
    for part_id in (p for r in manifest.repos for p in r.history):
        model_id, n, vectors = of_part(part_id, "commit vectors", lambda p=part_id: _commit_vectors(root / p))
        dim = dim or (vectors.shape[1] if vectors is not None else 0)
        blocks.append((n, vectors))
        models.extend([model_id if vectors is not None else ""] * n)
    matrix = np.zeros((len(models), dim), dtype=np.float32)
    at, model = 0, np.array(models, dtype=object)
    for n, vectors in blocks:
        if vectors is not None and vectors.shape[1] == dim:
            matrix[at : at + n] = vectors
        else:
            model[at : at + n] = ""
        at += n
    return matrix, model


def _commit_vectors(part: Path) -> tuple[str, int, np.ndarray | None]:
    """A history part's model, commits and their vectors (None: it has none)."""
    import pyarrow.parquet as pq

    info = read_history_info(part)
    if not info.model_id:
        return info.model_id, info.commits, None
    vectors = vector_matrix(pq.read_table(part / COMMIT_VECTORS))
    if vectors.shape[0] != info.commits:
        raise ValueError(f"history part {part.name}: {vectors.shape[0]} vectors for {info.commits} commits")
    return info.model_id, info.commits, vectors


def history_commits(data_dir: Path, manifest: Manifest) -> int:
    """How many commits the snapshot's history holds, from its parts' history.json."""
    root = parts_dir(data_dir)
    return sum(read_history_info(root / p).commits for r in manifest.repos for p in r.history)


def open_history_lexical(snapshot_dir: Path):
    """The snapshot's commits index, or None when it holds no history."""
    import tantivy

    path = snapshot_dir / HISTORY_DIR
    return tantivy.Index.open(str(path)) if path.is_dir() else None


def store_error(exc: BaseException) -> bool:
    """True for what a damaged store raises, so callers can catch it: any Exception, and pyo3's PanicException
    (a BaseException) that Tantivy or Lance raise on corrupt bytes; never an interrupt or an exit."""
    return not isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit))
