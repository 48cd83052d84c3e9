"""The snapshot format: the one directory layout the indexer writes and the query server reads.

A snapshot is a directory under `<data_dir>/snapshots/`, immutable once published:

    manifest.json     what is inside, from which commits, built how (written last, before publish)
    vectors/          a LanceDB database holding one table, `chunks`: one row per
                      (org, repo, path, blob_id, chunk_index) with the refs it is reachable from,
                      its text and its vector. `row` is the row's position and its id everywhere.
      chunks.arrow    the same table as one Arrow IPC file, which query processes map instead of
                      opening Lance: no Lance runtime (~120 MiB at 10k chunks) and no copy of the vectors
    lexical/          a Tantivy index: one document per chunks row, keyed by `row`, fields
                      tokenized by indexer.tokenize (handed to Tantivy's `whitespace` tokenizer)
    graph/            Parquet tables, schemas in TABLE_SCHEMAS below:
      files.parquet     one row per (org, repo, ref, path): blob_id, lang, bytes, sha256, skip reason, chunks
      symbols, imports, calls, routes, env_keys, tasks, url_literals .parquet
                        structural facts, one row per fact, keyed by (org, repo, path, blob_id, line)
      edges.parquet     cross-repo coupling edges with evidence (indexer/edges.py)
    cards.parquet     one row per repo: its card text (indexer/cards.py) and the card's vector

`<data_dir>/CURRENT` names the live snapshot. It is replaced atomically and written last,
so a crash at any moment leaves the previous snapshot serving. `<data_dir>/backfill.json`, while a
fast-tier snapshot serves, says how many of its chunks still lack the configured model's vectors.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer.errors import BlobdexError
from indexer.versions import ToolVersions

# Column names of each table's rows, in the order extraction appends them (GRAPH_SCHEMAS types them);
# indexer/extract/__init__.py appends rows in this order.
FACT_COLUMNS = {
    "symbols": ("name", "qualified_name", "kind", "parent", "signature", "doc", "line", "line_end"),
    "imports": ("module", "name", "line"),
    "calls": ("caller", "callee", "callee_root", "line"),
    "routes": ("method", "pattern", "handler", "framework", "line"),
    "env_keys": ("key", "how", "line"),
    "tasks": ("name", "role", "how", "line"),
    "url_literals": ("url", "url_path", "line"),
}

# 1: initial layout.
# 2: files gain `held_back`: the line spans and kinds of chunks held back as credentials (never their text).
FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)  # a format-1 snapshot lacks `held_back`: readers take it as empty

MANIFEST = "manifest.json"
VECTORS_DIR = "vectors"
CHUNKS_TABLE = "chunks"
LEXICAL_DIR = "lexical"
GRAPH_DIR = "graph"
CARDS = "cards.parquet"
CURRENT = "CURRENT"
SNAPSHOTS_DIR = "snapshots"


class SnapshotError(BlobdexError):
    """A snapshot cannot be read or served; the message says which and what to do."""


def chunk_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            ("row", pa.int64()),
            ("org", pa.string()),
            ("repo", pa.string()),
            ("path", pa.string()),
            ("blob_id", pa.string()),
            ("chunk_index", pa.int32()),
            ("refs", pa.list_(pa.string())),
            ("lang", pa.string()),
            ("kind", pa.string()),
            ("symbol", pa.string()),
            ("line_start", pa.int32()),
            ("line_end", pa.int32()),
            ("text", pa.string()),
            ("vector", pa.list_(pa.float32(), dim)),
        ]
    )


FILES_SCHEMA = pa.schema(
    [
        ("org", pa.string()),
        ("repo", pa.string()),
        ("ref", pa.string()),
        ("commit_id", pa.string()),
        ("path", pa.string()),
        ("blob_id", pa.string()),
        ("lang", pa.string()),
        ("bytes", pa.int64()),
        ("sha256", pa.string()),
        ("skip", pa.string()),
        ("chunks", pa.int32()),
        (
            "held_back",
            pa.list_(pa.struct([("line_start", pa.int32()), ("line_end", pa.int32()), ("kind", pa.string())])),
        ),
    ]
)
# Every fact row is keyed by where it was seen; `refs` lists the refs that reach that blob at that path.
_FACT_KEY = [
    ("org", pa.string()),
    ("repo", pa.string()),
    ("path", pa.string()),
    ("blob_id", pa.string()),
    ("refs", pa.list_(pa.string())),
]
GRAPH_SCHEMAS = {
    table: pa.schema(_FACT_KEY + [(c, pa.int32() if c in ("line", "line_end") else pa.string()) for c in columns])
    for table, columns in FACT_COLUMNS.items()
}
EDGES_SCHEMA = pa.schema(
    [
        ("org", pa.string()),
        ("kind", pa.string()),
        ("key", pa.string()),
        ("from_repo", pa.string()),
        ("from_path", pa.string()),
        ("from_line", pa.int32()),
        ("to_repo", pa.string()),
        ("to_path", pa.string()),
        ("to_line", pa.int32()),
        ("detail", pa.string()),
    ]
)
# Table name -> schema for every Parquet file under graph/; `blobdex sql` shows one view per entry.
TABLE_SCHEMAS = {"files": FILES_SCHEMA, **GRAPH_SCHEMAS, "edges": EDGES_SCHEMA}


def cards_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [("org", pa.string()), ("repo", pa.string()), ("text", pa.string()), ("vector", pa.list_(pa.float32(), dim))]
    )


def graph_path(snapshot_dir: Path, table: str) -> Path:
    return snapshot_dir / GRAPH_DIR / f"{table}.parquet"


# The readers of a snapshot's stores: every module that reads one goes through these, so the layout
# above is known here only. Heavy libraries are imported inside them: importing this module stays cheap.
def chunks_path(snapshot_dir: Path) -> Path:
    """The chunks' Lance dataset: `vectors/chunks.lance`, where a LanceDB database keeps its table `chunks`."""
    return snapshot_dir / VECTORS_DIR / f"{CHUNKS_TABLE}.lance"


def chunks_arrow_path(snapshot_dir: Path) -> Path:
    """The chunks table as one Arrow IPC file (absent in snapshots written before it)."""
    return snapshot_dir / VECTORS_DIR / f"{CHUNKS_TABLE}.arrow"


def open_chunks_arrow(snapshot_dir: Path) -> pa.ipc.RecordBatchFileReader:
    """chunks.arrow opened by mapping it: reading its batches copies nothing."""
    return pa.ipc.open_file(pa.memory_map(str(chunks_arrow_path(snapshot_dir)), "r"))


def chunks_table(snapshot_dir: Path):
    """The Lance dataset of chunks (with vectors), opened. Read with pylance: a query process reads the
    whole table and searches it in numpy, and pylance imports in 0.4 s where lancedb takes 2 s."""
    import lance

    return lance.dataset(str(chunks_path(snapshot_dir)))


def read_chunks(snapshot_dir: Path, vectors: bool = True) -> pa.Table:
    """Every chunk row as Arrow, in row order; without `vectors`, the `vector` column is left out. Mapped
    from chunks.arrow (zero copy: the pages are the file's) where the snapshot has it, else read by Lance."""
    if chunks_arrow_path(snapshot_dir).exists():
        table = open_chunks_arrow(snapshot_dir).read_all()
        return table if vectors else table.drop_columns(["vector"])
    dataset = chunks_table(snapshot_dir)
    return dataset.to_table(columns=None if vectors else [f for f in dataset.schema.names if f != "vector"])


def vector_matrix(table: pa.Table, dim: int = 0) -> np.ndarray:
    """A table's `vector` column (chunks or cards) as one float32 matrix, a row per table row; (0, dim) when empty."""
    if not table.num_rows:
        return np.zeros((0, dim), dtype=np.float32)
    flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat, dtype=np.float32).reshape(table.num_rows, -1)


def read_graph(snapshot_dir: Path, table: str, **options) -> pa.Table:
    """One graph table (files, a fact table, edges); `options` go to pyarrow.parquet.read_table."""
    import pyarrow.parquet as pq

    return pq.read_table(graph_path(snapshot_dir, table), **options)


def read_cards(snapshot_dir: Path, **options) -> pa.Table | None:
    """The repo cards (org, repo, text, vector), or None in a snapshot that has none."""
    import pyarrow.parquet as pq

    path = snapshot_dir / CARDS
    return pq.read_table(path, **options) if path.exists() else None


def open_lexical(snapshot_dir: Path):
    """The Tantivy index, opened."""
    import tantivy

    return tantivy.Index.open(str(snapshot_dir / LEXICAL_DIR))


def lexical_schema():
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("row", stored=True, indexed=True, fast=True)
    builder.add_text_field("org", stored=False, tokenizer_name="raw")
    builder.add_text_field("repo", stored=False, tokenizer_name="raw")
    for name in ("content", "symbol", "path"):
        builder.add_text_field(name, stored=False, tokenizer_name="whitespace")
    return builder.build()


@dataclass(frozen=True)
class RefState:
    ref: str  # full ref name (`refs/heads/main`), or a commit_id when the repo is pinned
    commit_id: str


@dataclass(kw_only=True)
class RepoState:
    """One repo as a snapshot holds it. Not frozen: rows.add_repo counts into it while it appends the rows."""

    org: str
    name: str
    url: str  # redacted: never carries credentials
    status: str  # ok | stale
    error: str | None
    indexed_at: str | None
    refs: list[RefState] = field(default_factory=list)
    files: int = 0
    files_indexed: int = 0
    files_skipped: dict[str, int] = field(default_factory=dict)
    chunks: int = 0
    secrets_held_back: int = 0
    parse_fallbacks: int = 0
    syntax_errors: int = 0  # files that parsed with errors: indexed with what could be recovered
    graph: dict[str, int] = field(default_factory=dict)  # rows per fact table
    include: list[str] = field(default_factory=list)  # the repo's include/exclude globs it was scanned with
    exclude: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    snapshot_id: str
    created_at: str
    model_id: str
    dim: int
    chunker_version: int
    policy_version: int
    tokenizer_version: int
    repos: list[RepoState]
    extractor_version: int = 0
    edges: int = 0
    max_blob_bytes: int = 0  # the size cap the files were judged with
    # A fast-tier snapshot (static vectors, published first: indexer/build.py) names the model whose vectors
    # are being backfilled and how many of its chunks lacked them when it was published; "" and 0 otherwise.
    backfill_model_id: str = ""
    backlog: int = 0
    format_version: int = FORMAT_VERSION

    @property
    def chunks(self) -> int:
        return sum(r.chunks for r in self.repos)

    @property
    def tools(self) -> ToolVersions:
        """The tool versions it was built with (an old manifest without extractor_version reads 0)."""
        return ToolVersions(
            chunker_version=self.chunker_version,
            policy_version=self.policy_version,
            tokenizer_version=self.tokenizer_version,
            extractor_version=self.extractor_version,
        )

    def repo(self, org: str, name: str) -> RepoState | None:
        return next((r for r in self.repos if r.org == org and r.name == name), None)

    def content_key(self) -> str:
        """Everything a rebuild would depend on: equal keys mean an identical snapshot."""
        data = asdict(self)
        for volatile in ("snapshot_id", "created_at"):
            data.pop(volatile)
        for repo in data["repos"]:
            repo.pop("indexed_at")
        return json.dumps(data, sort_keys=True)

    def to_json(self) -> str:
        data = asdict(self)
        if not self.backfill_model_id:  # a full snapshot's manifest reads as it did before fast-first runs
            del data["backfill_model_id"], data["backlog"]
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        repos = []
        for r in data.pop("repos"):
            r["refs"] = [RefState(**x) for x in r["refs"]]
            repos.append(RepoState(**r))
        return cls(repos=repos, **data)


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_snapshot_id() -> str:
    # Sortable by time; the random tail keeps two builds in one second apart.
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + "-" + secrets.token_hex(3)


def snapshots_dir(data_dir: Path) -> Path:
    return data_dir / SNAPSHOTS_DIR


def build_dir(data_dir: Path, snapshot_id: str) -> Path:
    """A temporary directory to build into; nothing reads it until `publish` renames it."""
    path = snapshots_dir(data_dir) / f".build-{snapshot_id}"
    path.mkdir(parents=True)
    return path


def _fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(data_dir: Path, built: Path, manifest: Manifest) -> Path:
    """Write the manifest, fsync, rename into place, then point CURRENT at it (written last)."""
    (built / MANIFEST).write_text(manifest.to_json(), encoding="utf-8")
    _fsync_tree(built)
    final = snapshots_dir(data_dir) / manifest.snapshot_id
    os.rename(built, final)
    _fsync_dir(final.parent)
    tmp = data_dir / f".{CURRENT}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(manifest.snapshot_id + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, data_dir / CURRENT)
    _fsync_dir(data_dir)
    return final


def current_id(data_dir: Path) -> str | None:
    try:
        value = (data_dir / CURRENT).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return value or None


def open_manifest(data_dir: Path, snapshot_id: str | None = None) -> tuple[Path, Manifest]:
    """The live (or named) snapshot's directory and manifest, or a SnapshotError saying what to do."""
    snapshot_id = snapshot_id or current_id(data_dir)
    if snapshot_id is None:
        raise SnapshotError(
            f"no snapshot published in {str(data_dir)!r}: run 'blobdex index' first "
            f"(or point --data-dir / BLOBDEX_DATA_DIR at an existing index)"
        )
    if "/" in snapshot_id or snapshot_id.startswith("."):
        raise SnapshotError(
            f"CURRENT in {str(data_dir)!r} names {snapshot_id!r}, which is not a snapshot id; "
            f"run 'blobdex index' to publish a new snapshot"
        )
    path = snapshots_dir(data_dir) / snapshot_id
    try:
        manifest = Manifest.from_json((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SnapshotError(
            f"cannot open snapshot {str(path)!r}: it has no {MANIFEST}; run 'blobdex index' to publish a new snapshot"
        ) from exc
    except (ValueError, TypeError, KeyError) as exc:
        raise SnapshotError(
            f"cannot open snapshot {str(path)!r}: its {MANIFEST} is not in a format this "
            f"version reads ({exc}); rebuild with 'blobdex index --full'"
        ) from exc
    if manifest.format_version not in READABLE_FORMATS:
        raise SnapshotError(
            f"cannot open snapshot {str(path)!r}: format {manifest.format_version}, this "
            f"version reads format {FORMAT_VERSION}; rebuild with 'blobdex index --full' "
            f"or run a matching blobdex version"
        )
    return path, manifest


BACKFILL = "backfill.json"


def write_backfill(data_dir: Path, snapshot_id: str, model_id: str, left: int) -> None:
    """Record the backlog of the fast-tier snapshot `snapshot_id`: `left` chunks still lack `model_id`'s
    vectors. Replaced whole (a reader never sees half a file); the indexer writes it after every batch."""
    tmp = data_dir / f".{BACKFILL}.tmp"
    state = {"snapshot_id": snapshot_id, "model_id": model_id, "left": left, "updated_at": now_iso()}
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, data_dir / BACKFILL)


def read_backfill(data_dir: Path, snapshot_id: str) -> dict | None:
    """The backlog record of snapshot `snapshot_id`, or None when there is none for it (or it is unreadable:
    the manifest's backlog then stands)."""
    try:
        state = json.loads((data_dir / BACKFILL).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and state.get("snapshot_id") == snapshot_id else None


def clear_backfill(data_dir: Path) -> None:
    (data_dir / BACKFILL).unlink(missing_ok=True)


TRASH_PREFIX = ".trash-"  # a snapshot being deleted: renamed first, so a kill never leaves a half-deleted one


def store_error(exc: BaseException) -> bool:
    """True for what a damaged store raises, so callers can catch it: any Exception, and pyo3's PanicException
    (a BaseException) that Tantivy or Lance raise on corrupt bytes; never an interrupt or an exit."""
    return not isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit))


def published(data_dir: Path) -> list[str]:
    """Ids of the published snapshots on disk, newest first (ids sort by time)."""
    root = snapshots_dir(data_dir)
    if not root.exists():
        return []
    return sorted((p.name for p in root.iterdir() if not p.name.startswith(".")), reverse=True)


def kept(data_dir: Path) -> list[str]:
    """The snapshots kept before the one CURRENT names, newest first: what a server may fall back to
    (all of them when CURRENT names no snapshot on disk; none when there is no CURRENT)."""
    live, ids = current_id(data_dir), published(data_dir)
    if live is None:
        return []
    return [i for i in ids if i < live] if live in ids else ids


def _remove(path: Path) -> None:
    trash = path.with_name(TRASH_PREFIX + path.name)
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def sweep(data_dir: Path) -> list[str]:
    """Delete what interrupted runs left; call only under the index lock. Removes build dirs, half-deleted
    snapshots, a stray `.CURRENT.tmp`, and snapshots renamed into place that CURRENT never named (newer than
    CURRENT's). CURRENT's snapshot and the older kept ones stay: a server may be reading them. When CURRENT
    names no snapshot on disk, no published snapshot is touched: a server may have fallen back to any."""
    root = snapshots_dir(data_dir)
    removed = []
    tmp = data_dir / f".{CURRENT}.tmp"
    if tmp.exists():
        tmp.unlink()
        removed.append(tmp.name)
    if not root.exists():
        return removed
    live = current_id(data_dir)
    named = live in published(data_dir)
    for path in sorted(root.iterdir()):
        if path.name.startswith((".build-", TRASH_PREFIX)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
        elif named and not path.name.startswith(".") and path.name > live:
            _remove(path)
            removed.append(path.name)
    return removed


def prune(data_dir: Path, keep: int) -> list[str]:
    """Delete all but the newest `keep` published snapshots (never CURRENT's) and what `sweep` deletes."""
    removed = sweep(data_dir)
    live = current_id(data_dir)
    for name in published(data_dir)[keep:]:
        if name != live:
            _remove(snapshots_dir(data_dir) / name)
            removed.append(name)
    return removed
