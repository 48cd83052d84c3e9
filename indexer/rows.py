"""The rows of a snapshot's tables, built from scans and cached blob entries, or carried forward.

One chunk row and one set of fact rows per distinct (path, blob) of a repo, listing every ref
that reaches it; one files row per (ref, path), skipped files included.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from indexer import snapshot
from indexer.cache import Cache
from indexer.prepare import BlobEntry
from indexer.scan import RefScan
from indexer.snapshot import FACT_COLUMNS, RefState, RepoState

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


@dataclass
class Tables:
    """Column lists for every table of a snapshot except the vectors (kept beside, row-aligned)."""

    chunks: dict[str, list] = field(default_factory=lambda: _columns(CHUNK_COLUMNS))
    files: dict[str, list] = field(default_factory=lambda: _columns(snapshot.FILES_SCHEMA.names))
    facts: dict[str, dict[str, list]] = field(
        default_factory=lambda: {t: _columns(snapshot.GRAPH_SCHEMAS[t].names) for t in FACT_COLUMNS}
    )

    def extend(self, target: dict[str, list], table: pa.Table) -> None:
        for name in target:  # a column an older format lacks (files.held_back before 2) carries as empty
            values = table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows
            target[name].extend(values)

    def fact_rows(self, table: str) -> list[dict]:
        cols = self.facts[table]
        return [dict(zip(cols, values)) for values in zip(*cols.values())]

    def file_rows(self) -> list[dict]:
        return [dict(zip(self.files, values)) for values in zip(*self.files.values())]


def add_repo(
    tables: Tables, org: str, name: str, url: str, scans: list[RefScan], entry_of, indexed_at: str
) -> RepoState:
    """Append one scanned repo's rows; `entry_of(blob_id, lang)` gives a blob's cache entry."""
    refs = [RefState(ref=s.ref, commit_id=s.commit_id) for s in scans]
    state = RepoState(org=org, name=name, url=url, status="ok", error=None, indexed_at=indexed_at, refs=refs)
    refs_of: dict[tuple[str, str], list[str]] = defaultdict(list)
    lang_of: dict[tuple[str, str], str] = {}
    skipped: Counter = Counter()
    files = tables.files
    for scan in scans:
        for f in scan.files:
            entry = entry_of(f.blob_id, f.lang) if f.skip is None else None
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
                ("commit_id", scan.commit_id),
                ("path", f.path),
                ("blob_id", f.blob_id),
                ("lang", f.lang),
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
        lang = lang_of[(path, blob_id)]
        entry: BlobEntry = entry_of(blob_id, lang)
        state.secrets_held_back += entry.secrets_held_back
        state.parse_fallbacks += entry.fallback is not None
        state.syntax_errors += entry.syntax_error
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


def carried(prev_path: Path, repos: list[tuple[str, str]]) -> tuple[pa.Table, dict[str, pa.Table]]:
    """The previous snapshot's rows for `repos`: chunks (with vectors), files and facts."""

    def only(table: pa.Table) -> pa.Table:
        keep = None
        for org, name in repos:
            m = pc.and_(pc.equal(table["org"], org), pc.equal(table["repo"], name))
            keep = m if keep is None else pc.or_(keep, m)
        return table.filter(keep)

    chunks = snapshot.read_chunks(prev_path)
    others = {t: only(snapshot.read_graph(prev_path, t)) for t in ("files", *FACT_COLUMNS)}
    return only(chunks), others


def entry_lookup(entries: dict[str, BlobEntry], max_bytes: int):
    return lambda blob_id, lang: entries[Cache.blob_key(blob_id, lang, max_bytes)]
