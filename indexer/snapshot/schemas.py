"""The Arrow schemas of a snapshot's tables: chunk rows, files, paths, the graph's fact tables and edges, cards, and
the lexical index's fields."""

from __future__ import annotations

import pyarrow as pa

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
# (indexer/calls/rules.py); not extraction's, which sees one blob.
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
        ("confidence", pa.float64()),  # 0-1, by the rules of its kind (indexer/build/edges.py)
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


def lexical_schema():
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("row", stored=True, indexed=True, fast=True)
    builder.add_text_field("org", stored=False, tokenizer_name="raw")
    builder.add_text_field("repo", stored=False, tokenizer_name="raw")
    for name in ("content", "symbol", "path"):
        builder.add_text_field(name, stored=False, tokenizer_name="whitespace")
    return builder.build()


# A history part (indexer/build/history.py): one row per commit it holds, and one per path each commit changed
# (indexer/history.py says what a merge changed). Times are seconds since the epoch, UTC.
COMMITS_SCHEMA = pa.schema(
    [
        ("org", pa.string()),
        ("repo", pa.string()),
        ("commit_id", pa.string()),
        ("parents", pa.list_(pa.string())),
        ("author_name", pa.string()),
        ("author_email", pa.string()),
        ("author_time", pa.int64()),
        ("committer_name", pa.string()),
        ("committer_email", pa.string()),
        ("committer_time", pa.int64()),
        ("subject", pa.string()),
        ("message", pa.string()),  # screened: a line holding credential material reads `[line held back: KIND]`
        ("held_back", pa.int32()),  # lines of the message and its hunks held back
        ("files_changed", pa.int32()),
        ("added", pa.int32()),
        ("removed", pa.int32()),
    ]
)
COMMIT_CHANGES_SCHEMA = pa.schema(
    [
        ("org", pa.string()),
        ("repo", pa.string()),
        ("commit_id", pa.string()),
        ("path", pa.string()),
        ("old_path", pa.string()),  # the path before: differs from `path` for a rename
        ("change", pa.string()),  # add | modify | delete | rename
        ("old_blob", pa.string()),
        ("new_blob", pa.string()),
        ("added", pa.int32()),  # -1 for a binary file
        ("removed", pa.int32()),
        ("hunks", pa.string()),  # `history = "diffs"`: the change's hunks, capped and screened; "" otherwise
    ]
)
# Table name -> schema of the history tables; graph.sql and `blobdex sql` show one view per entry.
# (commit_vectors.parquet, beside them, is read by query/history.py alone: a vector per commits row, in order.)
HISTORY_SCHEMAS = {"commits": COMMITS_SCHEMA, "commit_changes": COMMIT_CHANGES_SCHEMA}


def commit_vectors_schema(dim: int) -> pa.Schema:
    """commit_vectors.parquet: one vector per row of the part's commits.parquet, in its order (HistoryInfo.model_id's
    vector of the commit's `commit_text`)."""
    return pa.schema([("vector", pa.list_(pa.float32(), dim))])


def history_lexical_schema():
    """The commits index: one document per commit, keyed by (org, repo, commit_id)."""
    import tantivy

    builder = tantivy.SchemaBuilder()
    for name in ("org", "repo", "commit_id"):
        builder.add_text_field(name, stored=True, tokenizer_name="raw")
    for name in ("message", "paths", "hunks"):
        builder.add_text_field(name, stored=False, tokenizer_name="whitespace")
    return builder.build()
