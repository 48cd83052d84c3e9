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
        files.parquet       one row per (ref, path): blob_id, lang, bytes, sha256, skip reason, chunks
        symbols … url_literals .parquet   structural facts at those paths (FACT_COLUMNS)
        card.parquet        the repo's card and its vector
      snapshots/<snapshot_id>/
        manifest.json       what is inside, from which commits, built how; per repo the parts, oldest first
        lexical/            a Tantivy index over every live chunk row, keyed by `row`: the segment files the
                            previous snapshot's index already had are hard links to them, so a run writes only the
                            new segments and deletion files (Tantivy never rewrites a file in place)
        graph/edges.parquet cross-repo coupling edges with evidence (indexer/edges.py), computed from every
                            repo's coupling facts (part.json) at each publish
        graph.sql           DuckDB views of the graph tables over the parts, for analysts
      CURRENT               names the live snapshot; replaced atomically, written last

A repo's parts are read in order: a row of one part is **superseded** when a later part of the same repo speaks
for its path (lists it in paths.parquet), so a one-line change writes one small delta part and the snapshot
references every other part as it was. Every reader of a snapshot goes through the functions below, which
apply that rule, so no caller sees a superseded row.

A snapshot of format 1 or 2 keeps everything in its own directory (vectors/chunks.lance or chunks.arrow,
graph/*.parquet, cards.parquet) and reads as one part. `<data_dir>/backfill.json`, while a fast-tier snapshot
serves, says how many of its chunks still lack the configured model's vectors.
"""

from __future__ import annotations

import json
import secrets
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
    "imports": ("module", "name", "alias", "line"),
    "calls": ("caller", "callee", "callee_root", "receiver", "receiver_type", "line"),
    "routes": ("method", "pattern", "handler", "framework", "line"),
    "env_keys": ("key", "how", "line"),
    "tasks": ("name", "role", "how", "line"),
    "url_literals": ("url", "url_path", "line"),
}

# 1: initial layout.
# 2: files gain `held_back`: the line spans and kinds of chunks held back as credentials (never their text).
# 3: parts. A snapshot names immutable per-repo parts that later snapshots share, a run writes only the paths
#    that changed, and the lexical index shares its unchanged segment files; no Lance table (query processes
#    map chunks.arrow, which format 2 already wrote beside it).
FORMAT_VERSION = 3
READABLE_FORMATS = (1, 2, 3)  # a format-1 snapshot lacks `held_back`: readers take it as empty

MANIFEST = "manifest.json"
CURRENT = "CURRENT"
SNAPSHOTS_DIR = "snapshots"
PARTS_DIR = "parts"
PART_INFO = "part.json"
PATHS = "paths"
CHUNKS_ARROW = "chunks.arrow"
CARD = "card.parquet"
LEXICAL_DIR = "lexical"
GRAPH_DIR = "graph"
GRAPH_VIEWS = "graph.sql"
# Where a format-1/2 snapshot kept what a part holds now.
VECTORS_DIR = "vectors"
CHUNKS_TABLE = "chunks"
CARDS = "cards.parquet"


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
# A part's files rows leave commit_id out: a new commit moves every row's commit, not its content. Readers add
# it back from the manifest, which names each ref's commit.
PART_FILES_SCHEMA = pa.schema([f for f in FILES_SCHEMA if f.name != "commit_id"])
# Per path a part speaks for: what its blobs' entries counted that no table row records.
PATHS_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("secrets_held_back", pa.int32()),
        ("parse_fallbacks", pa.int32()),
        ("syntax_errors", pa.int32()),
    ]
)
# Every fact row is keyed by where it was seen; `refs` lists the refs that reach that blob at that path.
FACT_KEY_FIELDS = [
    ("org", pa.string()),
    ("repo", pa.string()),
    ("path", pa.string()),
    ("blob_id", pa.string()),
    ("refs", pa.list_(pa.string())),
]
# What a part adds to each call row when it is written: the definition the call resolves to and how it was found
# (indexer/resolve.py); not extraction's, which sees one blob.
FACT_KEY = tuple(name for name, _ in FACT_KEY_FIELDS)
RESOLUTION_COLUMNS = ("resolution", "resolved_repo", "resolved_path", "resolved_symbol")
GRAPH_SCHEMAS = {
    table: pa.schema(
        FACT_KEY_FIELDS
        + [(c, pa.int32() if c in ("line", "line_end") else pa.string()) for c in columns]
        + [(c, pa.string()) for c in (RESOLUTION_COLUMNS if table == "calls" else ())]
    )
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
        ("confidence", pa.float64()),  # 0-1, by the rules of its kind (indexer/edges.py)
        ("from_evidence", pa.string()),  # the fact as written on each side
        ("to_evidence", pa.string()),
    ]
)
# Table name -> schema of every graph table; `blobdex sql` and graph.sql show one view per entry.
TABLE_SCHEMAS = {"files": FILES_SCHEMA, **GRAPH_SCHEMAS, "edges": EDGES_SCHEMA}
PART_TABLES = ("files", *FACT_COLUMNS)  # the graph tables a part holds; edges span repos


def cards_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [("org", pa.string()), ("repo", pa.string()), ("text", pa.string()), ("vector", pa.list_(pa.float32(), dim))]
    )


@dataclass(frozen=True)
class RefState:
    ref: str  # full ref name (`refs/heads/main`), or a commit_id when the repo is pinned
    commit_id: str


@dataclass(kw_only=True)
class RepoState:
    """One repo as a snapshot holds it. Not frozen: the run counts into it while it builds the repo's rows."""

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
    parts: list[str] = field(default_factory=list)  # format 3: its part ids, oldest (the base) first
    releases: str = ""  # config.RepoSpec.releases_digest it was prepared with; "" (not written) for none


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
    resolver_version: int = 0
    edges: int = 0
    max_blob_bytes: int = 0  # the size cap the files were judged with
    # A fast-tier snapshot (static vectors, published first: indexer/build.py) names the model whose vectors
    # are being backfilled and how many of its chunks lacked them when it was published; "" and 0 otherwise.
    backfill_model_id: str = ""
    backlog: int = 0
    next_row: int = 0  # format 3: the id the next new chunk row gets (ids are never given twice)
    format_version: int = FORMAT_VERSION

    @property
    def chunks(self) -> int:
        return sum(r.chunks for r in self.repos)

    @property
    def tools(self) -> ToolVersions:
        """The tool versions it was built with (an old manifest without extractor_version or resolver_version
        reads 0)."""
        return ToolVersions(
            chunker_version=self.chunker_version,
            policy_version=self.policy_version,
            tokenizer_version=self.tokenizer_version,
            extractor_version=self.extractor_version,
            resolver_version=self.resolver_version,
        )

    def repo(self, org: str, name: str) -> RepoState | None:
        return next((r for r in self.repos if r.org == org and r.name == name), None)

    def content_key(self) -> str:
        """Everything a rebuild would depend on: equal keys mean the same content, however it is stored."""
        data = asdict(self)
        for volatile in ("snapshot_id", "created_at", "next_row"):
            data.pop(volatile)
        for repo in data["repos"]:
            repo.pop("indexed_at")
            repo.pop("parts")
        return json.dumps(data, sort_keys=True)

    def to_json(self) -> str:
        data = asdict(self)
        if not self.backfill_model_id:  # a full snapshot's manifest reads as it did before fast-first runs
            del data["backfill_model_id"], data["backlog"]
        if self.format_version < 3:  # an older snapshot's manifest reads back byte for byte
            del data["next_row"]
            for repo in data["repos"]:
                del repo["parts"]
        for repo in data["repos"]:  # a repo without releases reads as it did before releases existed
            if not repo["releases"]:
                del repo["releases"]
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        repos = []
        for r in data.pop("repos"):
            r["refs"] = [RefState(**x) for x in r["refs"]]
            repos.append(RepoState(**r))
        return cls(repos=repos, **data)


@dataclass(frozen=True, kw_only=True)
class PartInfo:
    """part.json: what a part is. `card` and `edge_inputs` describe the whole repo as of this part (the newest
    part of a repo speaks for it), so a run that changes one repo reads no other repo's tables."""

    part_id: str
    org: str
    repo: str
    model_id: str
    dim: int
    rows: int  # chunk rows
    base: bool  # holds every path of the repo: no older part counts
    card: str
    edge_inputs: dict  # indexer/edges.py: the facts that can couple this repo to another

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class PartRef:
    """One part as a snapshot lists it: where its tables are, and the paths later parts of its repo speak for
    (its rows at those paths are superseded). A format-1/2 snapshot is one part kept in its own directory."""

    part_id: str | None  # None: a format-1/2 snapshot's own tables
    dir: Path
    covered: frozenset[str]


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


# The readers of a snapshot's stores: every module that reads one goes through these, so the layout above is
# known here only. Heavy libraries are imported inside them: importing this module stays cheap.
def graph_path(snapshot_dir: Path, table: str) -> Path:
    """A graph table of a format-1/2 snapshot, or the edges of any snapshot."""
    return snapshot_dir / GRAPH_DIR / f"{table}.parquet"


def part_file(ref: PartRef, table: str) -> Path:
    """Where a part keeps a table: `chunks` (Arrow IPC), `paths`, `card` or a graph table (Parquet)."""
    if ref.part_id is None:
        if table == "chunks":
            return ref.dir / VECTORS_DIR / CHUNKS_ARROW
        return ref.dir / CARDS if table == "card" else graph_path(ref.dir, table)
    return ref.dir / (CHUNKS_ARROW if table == "chunks" else f"{table}.parquet")


def read_part_info(part: Path) -> PartInfo:
    return PartInfo(**json.loads((part / PART_INFO).read_text(encoding="utf-8")))


def parts_of(snapshot_dir: Path, manifest: Manifest, repos: set[tuple[str, str]] | None = None) -> list[PartRef]:
    """The parts a snapshot lists (only those of `repos` when given), repo by repo, oldest first, each with the
    paths its later parts speak for."""
    if manifest.format_version < 3:
        return [PartRef(None, snapshot_dir, frozenset())]
    root = parts_dir(data_dir_of(snapshot_dir))
    refs = []
    for repo in manifest.repos:
        if repos is not None and (repo.org, repo.name) not in repos:
            continue
        covered: frozenset[str] = frozenset()
        found = []
        for part_id in reversed(repo.parts):
            found.append(PartRef(part_id, root / part_id, covered))
            if part_id != repo.parts[0]:  # the base's paths cover nothing: no part is older
                covered = covered | set(_paths_of(root / part_id))
        refs.extend(reversed(found))
    return refs


def _paths_of(part: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(part / f"{PATHS}.parquet", columns=["path"]).column("path").to_pylist()


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


def read_lance_chunks(snapshot_dir: Path) -> pa.Table:
    """A format-1/2 snapshot's chunks as its Lance table holds them (format 2 mapped a copy, chunks.arrow)."""
    import lance

    return lance.dataset(str(snapshot_dir / VECTORS_DIR / f"{CHUNKS_TABLE}.lance")).to_table()


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


def read_cards(snapshot_dir: Path, **options) -> pa.Table | None:
    """The repo cards (org, repo, text, vector): each repo's newest part has its card. None in a snapshot that
    has none."""
    import pyarrow.parquet as pq

    _, manifest = open_manifest(data_dir_of(snapshot_dir), snapshot_dir.name)
    if manifest.format_version < 3:
        path = snapshot_dir / CARDS
        return pq.read_table(path, **options) if path.exists() else None
    root = parts_dir(data_dir_of(snapshot_dir))
    cards = [pq.read_table(root / r.parts[-1] / CARD, **options) for r in manifest.repos if r.parts]
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


def lexical_schema():
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("row", stored=True, indexed=True, fast=True)
    builder.add_text_field("org", stored=False, tokenizer_name="raw")
    builder.add_text_field("repo", stored=False, tokenizer_name="raw")
    for name in ("content", "symbol", "path"):
        builder.add_text_field(name, stored=False, tokenizer_name="whitespace")
    return builder.build()


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
    import os

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
    (all of them when CURRENT is missing or empty, or names no snapshot on disk)."""
    live_id, ids = current_id(data_dir), published(data_dir)
    return [i for i in ids if i < live_id] if live_id in ids else ids
