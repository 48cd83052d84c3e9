"""The rows one run builds for a repo's paths, from its scans and the blobs' cached entries.

One chunk row and one set of fact rows per distinct (path, blob) of a repo, listing every ref
that reaches it; one files row per (ref, path), skipped files included; per path, what its blobs'
entries counted (secrets held back, parse fallbacks, syntax errors).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pyarrow as pa

from indexer.build.cache import Cache
from indexer.config import release_digest
from indexer.prepare import BlobEntry
from indexer.scan import RefScan
from indexer.snapshot import (
    FACT_COLUMNS,
    FACT_KEY,
    GRAPH_SCHEMAS,
    PART_FILES_SCHEMA,
    PATHS_SCHEMA,
    RefState,
    RepoState,
    chunk_schema,
)

CHUNK_COLUMNS = (
    "org",
    "repo",
    "path",
    "blob_id",
    "chunk_index",
    "refs",
    "lang",
    "kind",
    "symbol",
    "line_start",
    "line_end",
    "text",
)


def _columns(names) -> dict[str, list]:
    return {n: [] for n in names}


@dataclass(kw_only=True)
class Tables:
    """Column lists for the rows of one repo's paths (chunks without `row` and `vector`, which the part adds)."""

    chunks: dict[str, list] = field(default_factory=lambda: _columns(CHUNK_COLUMNS))
    files: dict[str, list] = field(default_factory=lambda: _columns(PART_FILES_SCHEMA.names))
    facts: dict[str, dict[str, list]] = field(
        default_factory=lambda: {t: _columns([*FACT_KEY, *FACT_COLUMNS[t]]) for t in FACT_COLUMNS}
    )
    path_stats: dict[str, list[int]] = field(default_factory=dict)  # path -> PATHS_SCHEMA's counts

    def arrow(self, paths: list[str]) -> dict[str, pa.Table]:
        """The rows as Arrow tables: `chunks` (chunk_schema without row and vector), `files`, each fact table,
        and `paths`: one row per path in `paths` (every path the rows speak for, deleted ones included)."""
        schema = chunk_schema(1)
        chunks = pa.schema([f for f in schema if f.name in CHUNK_COLUMNS])
        out = {
            "chunks": pa.table(self.chunks, schema=chunks),
            "files": pa.table(self.files, schema=PART_FILES_SCHEMA),
            **{t: _fact_table(t, cols) for t, cols in self.facts.items()},
        }
        stats = [self.path_stats.get(p, (0, 0, 0)) for p in paths]
        columns = [paths, *([s[i] for s in stats] for i in range(3))]
        out["paths"] = pa.table(dict(zip(PATHS_SCHEMA.names, columns)), schema=PATHS_SCHEMA)
        return out


def _fact_table(table: str, columns: dict[str, list]) -> pa.Table:
    """A fact table's rows, as GRAPH_SCHEMAS types them; call rows come unresolved (resolution reads the whole
    repo: indexer/build/changes.py resolves them before the part is written)."""
    rows = len(columns["path"])
    fill = {c: [""] * rows for c in GRAPH_SCHEMAS[table].names if c not in columns}
    return pa.table({**columns, **fill}, schema=GRAPH_SCHEMAS[table])


def add_repo(
    tables: Tables, org: str, name: str, url: str, scans: list[RefScan], entry_of, indexed_at: str
) -> RepoState:
    """Append one scanned repo's rows; `entry_of(blob_id, lang, path)` gives a blob's cache entry."""
    refs = [RefState(ref=s.ref, commit_id=s.commit_id) for s in scans]
    state = RepoState(org=org, name=name, url=url, status="ok", error=None, indexed_at=indexed_at, refs=refs)
    refs_of: dict[tuple[str, str], list[str]] = defaultdict(list)
    lang_of: dict[tuple[str, str], str] = {}
    skipped: Counter = Counter()
    files = tables.files
    for scan in scans:
        for f in scan.files:
            entry = entry_of(f.blob_id, f.lang, f.path) if f.skip is None else None
            skip = f.skip.value if f.skip is not None else entry.skip
            state.files += 1
            if skip:
                skipped[skip] += 1
            else:
                state.files_indexed += 1
                refs_of[(f.path, f.blob_id)].append(scan.ref)
                lang_of[(f.path, f.blob_id)] = f.lang
            for column, value in (
                ("org", org),
                ("repo", name),
                ("ref", scan.ref),
                ("path", f.path),
                ("blob_id", f.blob_id),
                ("lang", (entry.lang if entry else None) or f.lang),  # a script's #! line names its language
                ("bytes", entry.size if entry else None),
                ("sha256", entry.sha256 if entry else None),
                ("skip", skip),
                ("chunks", len(entry.chunks) if entry and not skip else 0),
                (
                    "held_back",
                    [{"line_start": a, "line_end": b, "kind": k} for a, b, k in entry.held_back]
                    if entry and not skip
                    else [],
                ),
            ):
                files[column].append(value)
    counts: Counter = Counter()
    chunks = tables.chunks
    for (path, blob_id), refs in refs_of.items():
        entry: BlobEntry = entry_of(blob_id, lang_of[(path, blob_id)], path)
        lang = entry.lang or lang_of[(path, blob_id)]
        state.secrets_held_back += entry.secrets_held_back
        state.parse_fallbacks += entry.fallback is not None
        state.syntax_errors += entry.syntax_error
        stats = tables.path_stats.setdefault(path, [0, 0, 0])
        stats[0] += entry.secrets_held_back
        stats[1] += entry.fallback is not None
        stats[2] += entry.syntax_error
        for c in entry.chunks:
            for column, value in (
                ("org", org),
                ("repo", name),
                ("path", path),
                ("blob_id", blob_id),
                ("chunk_index", c.index),
                ("refs", refs),
                ("lang", lang),
                ("kind", c.kind),
                ("symbol", c.symbol),
                ("line_start", c.line_start),
                ("line_end", c.line_end),
                ("text", c.text),
            ):
                chunks[column].append(value)
            state.chunks += 1
        for table, rows in (entry.facts or {}).items():
            target = tables.facts[table]
            for row in rows:
                for column, value in (
                    ("org", org),
                    ("repo", name),
                    ("path", path),
                    ("blob_id", blob_id),
                    ("refs", refs),
                    *zip(FACT_COLUMNS[table], row),
                ):
                    target[column].append(value)
            counts[table] += len(rows)
    state.files_skipped = dict(sorted(skipped.items()))
    state.graph = {t: counts[t] for t in FACT_COLUMNS}
    return state


def entry_key(blob_id: str, lang: str, max_bytes: int, released: frozenset[str] = frozenset()) -> str:
    """A blob's cache key. A blob at a path with released lines is prepared with them (indexer/secrets.py), so
    their digest joins its key; elsewhere the key is the cache's own, as it always was."""
    key = Cache.blob_key(blob_id, lang, max_bytes)
    return f"{key}:r{release_digest(released)}" if released else key


def entry_lookup(entries: dict[str, BlobEntry], max_bytes: int, released: dict[str, frozenset[str]]):
    """`entry_of(blob_id, lang, path)`: a blob's entry as prepared at that path (`released`: path -> fingerprints)."""
    return lambda blob_id, lang, path: entries[entry_key(blob_id, lang, max_bytes, released.get(path, frozenset()))]
