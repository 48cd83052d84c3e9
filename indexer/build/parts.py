"""A repo's rows across the parts of a snapshot, and the part one run writes for it: a delta holding the paths
that changed (merged with the repo's newer deltas when it has many), or a base holding every live row (a new
repo, a model change, or a repo whose parts are mostly superseded). A row keeps its id while its (path,
blob_id, chunk_index) lives, so the lexical index changes only by the rows that came and went. A part is planned
(its rows, ids and tables, without vectors) before the run's embed stage and written after it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.build.cards import card_text
from indexer.build.edges import EDGE_INPUTS, edge_inputs
from indexer.embed import embed_text
from indexer.snapshot import (
    FACT_COLUMNS,
    PART_FILES_SCHEMA,
    PATHS_SCHEMA,
    GRAPH_SCHEMAS,
    Manifest,
    PartInfo,
    PartRef,
    RepoState,
    chunk_schema,
    live,
    parts_of,
    read_part_chunks,
    read_part_info,
    read_part_table,
    vector_matrix,
)
from indexer.snapshot.write import vector_column, write_part

# A repo's parts at most: every reader keeps arrays per part and looks each delta's paths up in every older one.
# The change that would make one more is merged with the newer half of the deltas: a row is merged a few times
# in its life (the deltas halve), never once per run, and the base is not written for it.
MAX_PARTS = 8
# A repo whose parts would hold more superseded rows than this share of their rows is written as one base: the
# dead rows cost memory and scan time, and a base rewrite is paid for by as many rows changed.
DEAD_SHARE = 0.5
LEXICAL_COLUMNS = ("row", "org", "repo", "path", "symbol", "text")  # what the lexical index reads of a row
KEY_COLUMNS = ("row", "path", "blob_id", "chunk_index")  # a row's id and identity
CARD_COLUMNS = ("path", "chunk_index", "text")  # what a card reads of the rows (the README's)


class RepoLive:
    """One repo's live rows in a snapshot: its parts' rows that no later part supersedes (a format-1/2
    snapshot's one part, filtered to the repo)."""

    def __init__(self, snapshot_dir: Path, manifest: Manifest, org: str, name: str):
        self.org, self.name = org, name
        self.legacy = manifest.format_version < 3
        self.refs: list[PartRef] = parts_of(snapshot_dir, manifest, {(org, name)})
        self.model_id = manifest.model_id
        self.dim = manifest.dim
        self.rows_held = (
            sum(read_part_info(r.dir).rows for r in self.refs) if not self.legacy else manifest.repo(org, name).chunks
        )

    def _own(self, table: pa.Table) -> pa.Table:
        if not self.legacy or "repo" not in table.column_names:
            return table
        return table.filter(pc.and_(pc.equal(table["org"], self.org), pc.equal(table["repo"], self.name)))

    def table(self, name: str, columns: tuple[str, ...] | None = None, refs: list[PartRef] | None = None) -> pa.Table:
        """A table's live rows: `chunks` (with vectors), `paths`, `files` (without commit_id) or a fact table;
        only `columns` of it, and only the rows of `refs` (some of the repo's parts) when given."""
        if self.legacy and name == "paths":  # a format-1/2 snapshot kept no per-path counts
            files = self.table("files")
            paths = sorted(set(files.column("path").to_pylist()))
            zeros = [0] * len(paths)
            return pa.table([paths, zeros, zeros, zeros], schema=PATHS_SCHEMA)
        tables = []
        read = (
            None
            if columns is None
            else list(dict.fromkeys([*columns, "path", *(("org", "repo") if self.legacy else ())]))
        )
        for ref in self.refs if refs is None else refs:  # only the columns asked for are read (and path, for live)
            part = read_part_chunks(ref) if name == "chunks" else read_part_table(ref, name, columns=read)
            if columns is not None and name == "chunks":
                part = part.select(read)
            tables.append(live(self._own(part), ref.covered))
        if not tables:
            empty = _empty(name, self.dim)
            return empty.select(list(columns)) if columns else empty
        result = pa.concat_tables(tables, promote_options="permissive")
        if columns is not None:
            result = result.select(list(columns))
        if name == "files" and columns is None:
            if "held_back" not in result.column_names:  # format 1
                result = result.append_column(
                    "held_back", pa.nulls(result.num_rows, PART_FILES_SCHEMA.field("held_back").type)
                )
            return result.select(PART_FILES_SCHEMA.names).cast(PART_FILES_SCHEMA)
        return result


def _empty(name: str, dim: int) -> pa.Table:
    """A part table with no rows."""
    schemas = {"chunks": chunk_schema(dim), "paths": PATHS_SCHEMA, "files": PART_FILES_SCHEMA, **GRAPH_SCHEMAS}
    return schemas[name].empty_table()


def changed_paths(files: pa.Table, new_files: pa.Table) -> set[str] | None:
    """The paths whose (ref, blob_id) rows differ between a repo's live files and a new scan's files rows (both
    with ref, path, blob_id, skip), and paths the last run could not read. None, for every path, when a
    .gitattributes file changed: its attributes decide how other paths are skipped."""
    before, after = _by_path(files), _by_path(new_files)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    unreadable = pc.equal(files["skip"], "unreadable")  # recorded for one run only: tried again
    changed |= set(files.filter(pc.fill_null(unreadable, False)).column("path").to_pylist())
    if any(p == ".gitattributes" or p.endswith("/.gitattributes") for p in changed):
        return None
    return changed


def _by_path(files: pa.Table) -> dict[str, frozenset]:
    out: dict[str, set] = {}
    for ref, path, blob_id in zip(*(files.column(c).to_pylist() for c in ("ref", "path", "blob_id"))):
        out.setdefault(path, set()).add((ref, blob_id))
    return {p: frozenset(v) for p, v in out.items()}


def inside(table: pa.Table, paths: set[str] | None) -> pa.Table:
    """Rows at `paths` (None: every row)."""
    if paths is None:
        return table
    if not paths or not table.num_rows:
        return table.slice(0, 0)
    return table.filter(pc.is_in(table["path"], value_set=pa.array(sorted(paths), pa.string())))


def outside(table: pa.Table, paths: set[str] | None) -> pa.Table:
    """Rows not at `paths` (None: no row): what a part at those paths leaves live."""
    return table.slice(0, 0) if paths is None else live(table, frozenset(paths))


@dataclass(kw_only=True)
class PartPlan:
    """One repo's part, decided and not yet written: its rows (those that keep their vectors, `held`, then those
    that need this model's, `fresh`, in the order the part holds them), its tables and card, and how the
    lexical index changes (the ids of rows gone, the rows new). Vectors are the embed stage's to supply."""

    state: RepoState
    base: bool  # the part holds every path of the repo
    keep: list[PartRef]  # the repo's parts listed as they are, oldest first, before this one
    held: pa.Table  # chunk rows with their vectors (chunk_schema), kept from live parts
    fresh: pa.Table  # chunk rows without a vector column: this model embeds them
    tables: dict[str, pa.Table]  # the part's paths, files and fact tables
    card: str
    edge_inputs: dict
    drop: list[int]
    add: pa.Table  # LEXICAL_COLUMNS of the rows new to the lexical index

    def texts(self) -> list[str]:
        """What the model embeds for the rows that need its vectors."""
        return [embed_text(s, t) for s, t in zip(self.fresh["symbol"].to_pylist(), self.fresh["text"].to_pylist())]


@dataclass(kw_only=True)
class RepoParts:
    """What a run wrote for one repo: the parts the next snapshot lists for it, and how its lexical documents
    change (the ids of rows gone, the rows new)."""

    parts: list[str]
    drop: list[int]
    add: pa.Table


class PartWriter:
    """Plans, then writes, the parts of one publish: `plan` decides each repo's rows (ids are handed out from
    `next_row`) without vectors; `write` writes a plan once the embed stage has cached its vectors."""

    def __init__(self, data_dir: Path, model_id: str, next_row: int):
        self.data_dir, self.model_id = data_dir, model_id
        self.next_row = next_row

    def plan(
        self,
        state: RepoState,
        live_rows: RepoLive | None,
        changed: set[str] | None,
        new: dict[str, pa.Table],
        fresh_ids: bool = False,
    ) -> PartPlan:
        """The part for `state`'s repo after `new` (Tables.arrow of the rows at `changed`; None: every path)
        replaced its rows at those paths in `live_rows` (None: a repo with nothing before). `fresh_ids` gives
        every row a new id (the previous snapshot's ids are not this one's: it is rebuilt from scratch).
        Fills the state's counts."""
        before = live_rows.table("chunks", KEY_COLUMNS) if live_rows is not None else _empty("chunks", 0)
        at_changed = inside(before, changed)
        identity = {} if fresh_ids else _identities(at_changed)
        chunks = new_rows = self._with_ids(new["chunks"], identity)
        same_model = live_rows is not None and live_rows.model_id == self.model_id
        tables = {}
        for name in ("paths", "files", *FACT_COLUMNS):
            old = outside(live_rows.table(name), changed) if live_rows is not None else new[name].slice(0, 0)
            tables[name] = pa.concat_tables([old, new[name]])
        readme = live_rows.table("chunks", CARD_COLUMNS) if live_rows is not None else chunks.select(CARD_COLUMNS)
        if live_rows is not None:
            readme = pa.concat_tables([outside(readme, changed), chunks.select(CARD_COLUMNS)])
        card, inputs = self._about(state, tables, readme)
        kind = _kind(live_rows, changed, same_model and not fresh_ids, before.num_rows - at_changed.num_rows)
        held = None
        if kind == "base":
            kept = outside(live_rows.table("chunks"), changed) if live_rows is not None else None
            if kept is not None and fresh_ids:
                ids = pa.array(np.arange(self.next_row, self.next_row + kept.num_rows, dtype=np.int64))
                self.next_row += kept.num_rows
                kept = kept.set_column(kept.schema.get_field_index("row"), "row", ids)
            if kept is not None and not same_model:  # from another model's snapshot: this model's vectors
                chunks, kept = pa.concat_tables([kept.drop_columns(["vector"]), chunks]), None
            held, own, keep = kept, tables, []
        else:  # a delta of the change, or (merge) the change and the newest deltas as one
            keep = live_rows.refs if kind == "delta" else live_rows.refs[: 1 + (len(live_rows.refs) - 1) // 2]
            merged = live_rows.refs[len(keep) :]
            held = outside(live_rows.table("chunks", refs=merged), changed)
            own = {n: pa.concat_tables([outside(live_rows.table(n, refs=merged), changed), new[n]]) for n in tables}
        _count(state, tables, before.num_rows - at_changed.num_rows + new["chunks"].num_rows)
        held = held if held is not None else chunks.slice(0, 0)
        if fresh_ids:  # every row is new to the lexical index
            drop, add = [], pa.concat_tables([held.select(LEXICAL_COLUMNS), chunks.select(LEXICAL_COLUMNS)])
        else:  # a row that lived on keeps its id and its document
            reused = set(identity.values()) & set(new_rows.column("row").to_pylist())
            drop = [r for r in at_changed.column("row").to_pylist() if r not in reused]
            came = pc.invert(pc.is_in(new_rows["row"], value_set=pa.array(sorted(reused), pa.int64())))
            add = new_rows.filter(came).select(LEXICAL_COLUMNS)
        return PartPlan(
            state=state,
            base=kind == "base",
            keep=keep,
            held=held,
            fresh=chunks,
            tables=own,
            card=card,
            edge_inputs=inputs,
            drop=drop,
            add=add,
        )

    def write(self, plan: PartPlan, info: dict, chunks: pa.Table, card_vector: np.ndarray | None, codebook=None):
        """Write a plan's part as laid out (laid_out), its card's vector, and the rows' codes under `codebook`
        (indexer/snapshot/ann.py) when the run has one."""
        dim = info["dim"]
        codes = (codebook.encode(vector_matrix(chunks, dim)), codebook.digest) if codebook is not None else None
        part = write_part(
            self.data_dir, info=info, chunks=chunks, tables=plan.tables, card_vector=card_vector, codes=codes
        )
        return self.written(plan, part)

    def laid_out(self, plan: PartPlan, dim: int, vectors: np.ndarray) -> tuple[dict, pa.Table]:
        """A plan's part as write_part takes it: its info (PartInfo's fields but part_id and rows) and its rows,
        the fresh ones with the model's `vectors`."""
        fresh = plan.fresh.append_column("vector", vector_column(vectors, dim)).cast(chunk_schema(dim))
        chunks = pa.concat_tables([plan.held.cast(chunk_schema(dim)), fresh]) if plan.held.num_rows else fresh
        info = {"org": plan.state.org, "repo": plan.state.name, "model_id": self.model_id, "dim": dim}
        return {**info, "card": plan.card, "edge_inputs": plan.edge_inputs, "base": plan.base}, chunks

    def written(self, plan: PartPlan, part: PartInfo) -> RepoParts:
        """What the snapshot lists for a plan's repo once its part is in place."""
        return RepoParts(parts=[r.part_id for r in plan.keep] + [part.part_id], drop=plan.drop, add=plan.add)

    def _about(self, state: RepoState, tables: dict[str, pa.Table], chunks: pa.Table) -> tuple[str, dict]:
        """The repo as a whole as of this part: its card (embedded like a chunk, not counted as one) and its
        coupling facts."""
        card = card_text(state.name, tables["files"], chunks, tables)
        paths = sorted(set(tables["files"].column("path").to_pylist()))
        return card, edge_inputs({t: tables[t] for t in EDGE_INPUTS}, paths, chunks)

    def _with_ids(self, rows: pa.Table, identity: dict) -> pa.Table:
        """`rows` (chunk_schema without row and vector) with ids: a row whose identity lived keeps its id."""
        keys = zip(*(rows.column(c).to_pylist() for c in ("path", "blob_id", "chunk_index")))
        ids = []
        for key in keys:
            row = identity.get(key)
            if row is None:
                row, self.next_row = self.next_row, self.next_row + 1
            ids.append(row)
        return rows.add_column(0, "row", pa.array(ids, pa.int64()))


def _kind(live_rows: RepoLive | None, changed: set[str] | None, as_they_are: bool, kept: int) -> str:
    """How a change is written: `delta` (a part of its paths), `merge` (with the newer half of the repo's deltas,
    when one more part would make more than MAX_PARTS), or `base` (every live row: a new repo, a repo whose rows
    cannot stay as they are (`as_they_are`: same model, same ids), new path rules, or a repo whose parts would
    hold more superseded rows than DEAD_SHARE). `kept`: the live rows the change leaves."""
    if live_rows is None or live_rows.legacy or changed is None or not as_they_are:
        return "base"
    if live_rows.rows_held - kept > DEAD_SHARE * live_rows.rows_held:
        return "base"
    return "delta" if len(live_rows.refs) < MAX_PARTS else "merge"


def _identities(chunks: pa.Table) -> dict[tuple[str, str, int], int]:
    """(path, blob_id, chunk_index) -> row id of live rows: a row that lives on keeps its id."""
    keys = zip(*(chunks.column(c).to_pylist() for c in ("path", "blob_id", "chunk_index", "row")))
    return {(p, b, i): r for p, b, i, r in keys}


def _count(state: RepoState, tables: dict[str, pa.Table], chunks: int) -> None:
    """The repo's counts from its live rows after the run."""
    files = tables["files"]
    skips = Counter(s for s in files.column("skip").to_pylist())
    state.files, state.chunks = files.num_rows, chunks
    state.files_indexed = skips.pop(None, 0)
    state.files_skipped = dict(sorted(skips.items()))
    paths = tables["paths"]
    for name in ("secrets_held_back", "parse_fallbacks", "syntax_errors"):
        setattr(state, name, int(pc.sum(paths[name]).as_py() or 0))
    state.graph = {t: tables[t].num_rows for t in FACT_COLUMNS}
