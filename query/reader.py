"""An opened snapshot: its parts' rows and vectors mapped, per-column codes, and a Tantivy searcher. Read-only.

Positions: a reader numbers every row of every part it lists, part after part (a snapshot's row ids are not
positions: ids stay with a row from snapshot to snapshot, and superseded rows keep a position). Superseded rows
are never seen: their org reads None, so every org-scoped mask leaves them out, and the lexical index holds
only live rows. A reader opened as the successor of another takes over the parts both list, so a publish
that changed one repo costs the server that repo's new part, not the corpus.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.languages import category
from query.approximate import open_approximate
from query.labels import Labels
from query.pages import Layout, will_need, will_read
from query.symbols import NOT_DEFINITIONS, SymbolIndex, name_key
from indexer.snapshot.ann import read_codes
from indexer.snapshot.grams import Grams, GramsError
from indexer.snapshot import (
    Manifest,
    PartRef,
    SnapshotError,
    chunk_schema,
    kept,
    open_lexical,
    part_file,
    open_manifest,
    parts_of,
    read_part_chunks,
    store_error,
    vector_matrix,
    whole,
)

log = logging.getLogger(__name__)

LABELLED = ("org", "repo", "lang", "kind", "path")  # the columns filters read, held as codes
Select = Callable[[Manifest], set[tuple[str, str]]]  # the (org, repo) a reader opens of a manifest's
# Vector search scores every row in place when at least 1/GATHER_SHARE of them pass the filters: gathering
# the allowed rows first copies them (1.5 GB at 1M x 384), which costs more than the product it saves.
GATHER_SHARE = 4


class PartView:
    """One part opened for queries: its rows mapped (chunks.arrow; no copy), its vectors a view of the file, its
    filter columns as codes and its definitions by name. Immutable, like the part: readers of later snapshots
    that list the part share it."""

    def __init__(self, ref: PartRef, dim: int):
        self.key = ref.part_id or str(ref.dir)
        table = read_part_chunks(ref)
        _check_offsets(table)  # the mapped file is read as it is: bad offsets must not reach a query
        if ref.part_id is None:  # a format-1/2 snapshot: row ids are positions, and Lance may read out of order
            order = table.column("row").to_numpy()
            if not np.array_equal(order, np.arange(len(order))):
                table = table.sort_by("row")
        self.rows = table.drop_columns(["vector"])
        self.vectors = vector_matrix(table, dim)
        if self.vectors.shape[1] != dim:
            raise SnapshotError(f"vectors of part {self.key} have dim {self.vectors.shape[1]}, the manifest says {dim}")
        self.ids = table.column("row").to_numpy()
        self.labels = {name: Labels.of(self.rows.column(name)) for name in LABELLED}
        self.symbols = SymbolIndex(self.rows.column("symbol"), ~self.labels["kind"].isin(NOT_DEFINITIONS))
        self.grams = _grams_of(ref, len(self))
        self.codes = _codes_of(ref, len(self))
        self._cache: dict = {}

    def __len__(self) -> int:
        return self.rows.num_rows

    def cached(self, name: str, load):
        """Something derived from this part, loaded on first use: a part never changes, and the readers of later
        snapshots that list it take it over with it (a swap then works out only its new parts')."""
        if name not in self._cache:
            self._cache[name] = load()
        return self._cache[name]

    @functools.cached_property
    def layout(self) -> Layout:
        """Where its rows' values lie in the mapped file, for asking for their pages (query.pages)."""
        return Layout(self.rows)

    def paths(self) -> dict[tuple[str, str], frozenset[str]]:
        """The distinct paths of each (org, repo) it holds: one repo's (a format-1/2 snapshot's one part: all)."""

        def load() -> dict[tuple[str, str], frozenset[str]]:
            org, repo, path = (self.labels[name] for name in ("org", "repo", "path"))
            if not len(self):
                return {}
            if len(org.values) == len(repo.values) == 1:
                return {(org.values[0], repo.values[0]): frozenset(path.values)}
            codes = np.stack([np.asarray(x.codes, dtype=np.int64) for x in (org, repo, path)])
            found: dict[tuple[str, str], set[str]] = defaultdict(set)
            for o, r, at in np.unique(codes, axis=1).T.tolist():
                found[(org.values[o], repo.values[r])].add(path.values[at])
            return {key: frozenset(held) for key, held in found.items()}

        return self.cached("paths", load)

    def superseded(self, covered: frozenset[str]) -> np.ndarray:
        """Which rows a later part of the repo replaces."""
        return self.labels["path"].isin(covered) if covered else np.zeros(len(self), dtype=bool)

    def at(self, key: tuple[str, str, str]) -> np.ndarray:
        """Rows of one (org, repo, path), by local number. Looked up in the codes (a part holds one repo: the
        others are passed over at once), not in a dict of every row's key, which at 10M rows would hold a
        Python list entry a row."""
        org, repo, path = key
        if org not in self.labels["org"].values or repo not in self.labels["repo"].values:
            return np.zeros(0, np.int64)
        return np.flatnonzero(
            (self.labels["org"] == org) & (self.labels["repo"] == repo) & (self.labels["path"] == path)
        )


class Vectors:
    """The parts' vector matrices as one: `len`, a gather by positions, and every row's best cosine over a
    query's passages, scored part by part in place (no copy of the mapped matrices)."""

    def __init__(self, matrices: list[np.ndarray], offsets: np.ndarray, dim: int):
        self.matrices, self.offsets, self.dim = matrices, offsets, dim
        self.total = int(offsets[-1]) if len(offsets) else 0
        self._starts: np.ndarray | None = None

    def __len__(self) -> int:
        return self.total

    def cosines(self, queries: np.ndarray) -> np.ndarray:
        out = np.empty(self.total, dtype=np.float32)
        for matrix, start in zip(self.matrices, self.offsets):
            if len(matrix):
                out[start : start + len(matrix)] = (matrix @ queries.T).max(axis=1)
        return out

    def scored(self, queries: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the positions `mask` holds, their best cosines), scored part by part: in place where most of a part
        is asked, gathered where a few rows are."""
        rows, scores = [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
        asked = np.flatnonzero(mask)  # one pass: a part's own pass cost 0.3 ms a part, 0.29 s at 934 parts
        bounds = np.searchsorted(asked, self.offsets)
        each = []  # (part, its rows asked, whether its whole matrix is scored)
        for p in np.flatnonzero(np.diff(bounds)).tolist():
            local = asked[bounds[p] : bounds[p + 1]] - int(self.offsets[p])
            each.append((p, local, len(local) * GATHER_SHARE >= len(self.matrices[p])))
        gathered = [local + int(self.offsets[p]) for p, local, in_full in each if not in_full]
        self.will_need(np.concatenate(gathered) if gathered else asked[:0])
        for p, local, in_full in each:
            matrix = self.matrices[p]
            scored = (matrix @ queries.T).max(axis=1)[local] if in_full else (matrix[local] @ queries.T).max(axis=1)
            scores.append(scored)
            rows.append(local + int(self.offsets[p]))
        return np.concatenate(rows), np.concatenate(scores).astype(np.float32, copy=False)

    def will_need(self, rows: np.ndarray) -> None:
        """Ask for the pages of `rows` (positions) in every part at once, before a gather reads one (query.pages)."""
        if self._starts is None:  # each matrix's address: a matrix's own lookup is 5 µs, a gather asks for 1,000
            self._starts = np.array([m.ctypes.data if m.flags.c_contiguous else -1 for m in self.matrices], np.int64)
        which = np.searchsorted(self.offsets, rows, side="right") - 1
        kept = self._starts[which] >= 0
        row_bytes = self.dim * 4  # float32 rows, as every part stores them (vector_matrix)
        will_need(self._starts[which[kept]] + (rows[kept] - self.offsets[which[kept]]) * row_bytes, row_bytes)

    def __getitem__(self, rows) -> np.ndarray:
        if np.ndim(rows) == 0:
            return self[[rows]][0]
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        which = np.searchsorted(self.offsets, rows, side="right") - 1
        order = np.argsort(which, kind="stable")  # the rows of each part together: one slice a part
        groups = np.split(order, np.flatnonzero(np.diff(which[order])) + 1) if len(rows) else []
        if len(rows) > 1:
            self.will_need(rows)
        for chosen in groups:
            p = which[chosen[0]]
            out[chosen] = self.matrices[p][rows[chosen] - self.offsets[p]]
        return out


class DamagedSnapshot(SnapshotError):
    """A query met damaged bytes in a snapshot that opened: Tantivy panics on a damaged term dictionary, and only
    on the terms it holds (walking every dictionary at open, as `blobdex verify` does, took 0.22 s at 108k chunks:
    too slow for every swap). One sentence, never a 500; the server then serves an older kept snapshot."""

    status = 503


class LexicalSearcher:
    """A snapshot's Tantivy searcher: what Tantivy raises when it panics (pyo3's PanicException, a BaseException
    that `except Exception` misses) marks the reader damaged and is a DamagedSnapshot."""

    def __init__(self, searcher, reader: "SnapshotReader"):
        self._searcher, self._reader = searcher, reader

    def __getattr__(self, name: str):
        found = getattr(self._searcher, name)
        return self._guarded(found) if callable(found) else found

    def _guarded(self, method):
        @functools.wraps(method)
        def call(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except BaseException as exc:
                if type(exc).__name__ != "PanicException":  # named: pyo3 exposes no module to import it from
                    raise
                reason = (str(exc).strip().splitlines() or [""])[0]
                self._reader.damaged = reason
                raise DamagedSnapshot(
                    f"the lexical index of snapshot {self._reader.snapshot_id} is damaged ({reason}); run "
                    f"'blobdex verify', then 'blobdex index' to rebuild it (a server answers from an older kept "
                    f"snapshot meanwhile)"
                ) from exc

        return call


class SnapshotReader:
    """Everything a query needs from one snapshot, loaded once (the parts `previous` has open are taken over).

    Vectors are held as numpy matrices: exact search by matrix-vector product is ~17 ms at 100k x 384 here,
    faster than LanceDB's flat scan and with perfect recall (docs/format.md, "Why per-repo Arrow parts").
    """

    def __init__(
        self,
        data_dir: Path,
        snapshot_id: str | None = None,
        previous: "SnapshotReader | None" = None,
        exact: bool = False,
        select: "Select | None" = None,
    ):
        """`select`: the repos this reader opens, of those the manifest lists (a shard's, query.shard); every one
        when None. The lexical index is opened whole either way: its statistics are the snapshot's."""
        self.path, self.manifest = open_manifest(data_dir, snapshot_id)
        held = {p.key: p for p in previous.parts} if previous is not None else {}
        # the (org, repo) whose parts are open; None: every one
        self.selected: frozenset[tuple[str, str]] | None = frozenset(select(self.manifest)) if select else None
        try:
            refs = parts_of(self.path, self.manifest, self.selected)
            self.parts = [held.get(r.part_id or str(r.dir)) or PartView(r, self.manifest.dim) for r in refs]
            self.lexical = open_lexical(self.path)
        except SnapshotError as exc:
            raise SnapshotError(f"cannot open snapshot {str(self.path)!r}: {exc}; rebuild with 'blobdex index --full'")
        except BaseException as exc:  # arrow, tantivy and lance raise their own types (pyo3 panics too) when damaged
            if not store_error(exc):
                raise
            raise SnapshotError(
                f"cannot open snapshot {str(self.path)!r}: {exc}; run 'blobdex verify', "
                f"then rebuild with 'blobdex index --full'"
            ) from exc
        self.offsets = np.cumsum([0] + [len(p) for p in self.parts], dtype=np.int64)
        self.covered = [r.covered for r in refs]  # each part's paths that a later part of its repo replaces
        self.live = np.concatenate([~p.superseded(c) for p, c in zip(self.parts, self.covered)] or [np.zeros(0, bool)])
        empty = chunk_schema(self.manifest.dim).empty_table().drop_columns(["vector"])
        self.rows = pa.concat_tables([p.rows for p in self.parts]) if self.parts else empty
        self.vectors = Vectors([p.vectors for p in self.parts], self.offsets, self.manifest.dim)
        # None: every vector search is exact (`exact`: exact_search in blobdex.toml; or no codebook)
        self.approximate = (
            None
            if exact
            else open_approximate(self.path, self.parts, self.offsets, previous.approximate if previous else None)
        )
        self.damaged: str | None = None  # why a query failed on damaged bytes (LexicalSearcher)
        self.searcher = LexicalSearcher(self.lexical.searcher(), self)
        self.schema = self.lexical.schema
        # Columns used for filtering, as codes into their distinct values (Labels); a superseded row's org is None.
        self.col = {name: Labels.joined([p.labels[name] for p in self.parts]) for name in LABELLED if name != "path"}
        self.col["path"] = Labels.stacked([p.labels["path"] for p in self.parts])
        self.col["org"] = self.col["org"].without(~self.live)
        self.col["category"] = self.col["lang"].mapped(category)
        self._positions = self._position_index()
        self._cache: dict[str, object] = {}
        # What was read of a part's files (a card, a history part's tables) by (part id, what): taken over from
        # `previous` for the parts this snapshot lists, so that a swap reads only its new parts' (at 923 repos
        # reading every card and history part again was 4.1 s of each swap).
        listed = {p for r in self.manifest.repos for p in (*r.parts, *r.history)}
        self._read: dict[tuple[str, str], object] = (
            {k: v for k, v in previous._read.items() if k[0] in listed} if previous is not None else {}
        )
        self.commit_of = {(r.org, r.name, x.ref): x.commit_id for r in self.manifest.repos for x in r.refs}

    def _position_index(self) -> np.ndarray:
        """Row id -> position of the live row that has it (-1: none), for the lexical index's documents."""
        ids = [p.ids for p in self.parts]
        size = max((int(i.max()) + 1 for i in ids if len(i)), default=0)
        positions = np.full(size, -1, dtype=np.int32)  # 4 bytes a row: positions stay below 2**31
        for part_ids, start in zip(ids, self.offsets):
            local = np.arange(start, start + len(part_ids))
            keep = self.live[start : start + len(part_ids)]
            positions[part_ids[keep]] = local[keep]
        return positions

    def positions(self, ids) -> np.ndarray:
        """The positions of rows by id (the lexical index's `row`)."""
        ids = np.asarray(ids, dtype=np.int64)
        inside = (ids >= 0) & (ids < len(self._positions))
        out = np.full(len(ids), -1, dtype=np.int64)
        out[inside] = self._positions[ids[inside]]
        return out

    def cached(self, name: str, load):
        """Something derived from this snapshot, loaded on first use: a snapshot never changes."""
        if name not in self._cache:
            self._cache[name] = load()
        return self._cache[name]

    def of_part(self, part_id: str, what: str, read):
        """What `read()` reads of a part (a chunk part or a history part), once while a snapshot lists it."""
        key = (part_id, what)
        if key not in self._read:
            self._read[key] = read()
        return self._read[key]

    def _locate(self, row: int) -> tuple[PartView, int, int]:
        p = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return self.parts[p], p, int(row - self.offsets[p])

    def rows_at(self, org: str, repo: str, path: str) -> list[int]:
        """The live rows of one file (every blob of it)."""
        found = []
        for part, start in zip(self.parts, self.offsets.tolist()):
            rows = part.at((org, repo, path)) + start
            found += rows[self.live[rows]].tolist()
        return found

    @property
    def symbol_rows(self) -> "SymbolRows":
        return SymbolRows(self)

    def languages(self, org: str) -> frozenset[str]:
        """The languages of an org's indexed chunks (what a `lang` filter can name)."""
        return self.cached(f"langs:{org}", lambda: frozenset(self.col["lang"][self.col["org"] == org]))

    def repo_names(self, org: str) -> list[str]:
        """An org's indexed repos, by name."""
        return sorted(r.name for r in self.manifest.repos if r.org == org)

    def files(self, org: str) -> frozenset[tuple[str, str]]:
        """The (repo, path) of every indexed file of an org."""
        return self.cached(f"files:{org}", lambda: self._live_files(org, PartView.paths))

    def files_where(self, org: str, name: str, keep: Callable[[str], bool]) -> frozenset[tuple[str, str]]:
        """The (repo, path) of an org's indexed files whose path `keep` accepts, judged once a part under `name`:
        later snapshots take a part's judgements over, and a swap judges only its new parts' paths (the files of
        an org from every row were 1.8 s of each swap at 10M rows)."""

        def judged(part: PartView) -> dict[tuple[str, str], frozenset[str]]:
            return part.cached(name, lambda: {k: frozenset(filter(keep, v)) for k, v in part.paths().items()})

        return self.cached(f"{name}:{org}", lambda: self._live_files(org, judged))

    def _live_files(self, org: str, paths_of) -> frozenset[tuple[str, str]]:
        """The (repo, path) of an org's live rows among those `paths_of(part)` gives, (org, repo) -> paths."""
        found: set[tuple[str, str]] = set()
        for (o, repo), held in self._repo_parts().items():
            for part, covered in held if o == org else ():
                found.update((repo, path) for path in paths_of(part).get((o, repo), ()) if path not in covered)
        return frozenset(found)

    def has_file(self, org: str, repo: str, path: str) -> bool:
        """Whether a live row of the snapshot is of this file: looked up in its repo's parts' paths."""
        held = self._repo_parts().get((org, repo), ())
        return any(path in part.paths().get((org, repo), ()) and path not in covered for part, covered in held)

    def _repo_parts(self) -> dict[tuple[str, str], list[tuple[PartView, frozenset[str]]]]:
        """Each (org, repo)'s parts, with the paths later parts of the repo cover."""

        def load() -> dict:
            found: dict = defaultdict(list)
            for part, covered in zip(self.parts, self.covered):
                for key in part.paths():
                    found[key].append((part, covered))
            return dict(found)

        return self.cached("repo parts", load)

    @property
    def snapshot_id(self) -> str:
        return self.manifest.snapshot_id

    def refs(self, row: int) -> list[str]:
        part, _, local = self._locate(row)
        return part.rows.column("refs")[local].as_py()

    def ref_rows(self, names: set[str]) -> np.ndarray:
        """Which rows are reachable from a ref in `names`, for every position at once."""
        masks = []
        for part in self.parts:
            refs = whole(part.rows.column("refs"))
            hit = pc.is_in(pc.list_flatten(refs), value_set=pa.array(sorted(names), pa.string())).to_numpy(
                zero_copy_only=False
            )
            mask = np.zeros(len(part), dtype=bool)
            parents = pc.list_parent_indices(refs).to_numpy()
            mask[parents[hit]] = True
            masks.append(mask)
        return np.concatenate(masks) if masks else np.zeros(0, dtype=bool)

    def will_read(self, rows) -> None:
        """Ask for the pages of rows (positions) about to be read one by one, every part's at once (query.pages)."""
        rows = np.asarray(rows, dtype=np.int64)
        which = np.searchsorted(self.offsets, rows, side="right") - 1
        parts = np.unique(which).tolist()
        will_read([(self.parts[p].layout, (rows[which == p] - self.offsets[p]).tolist()) for p in parts])

    def row(self, row: int) -> dict:
        part, _, local = self._locate(row)
        one = part.rows.slice(local, 1)
        try:  # column by column: a one-row table's to_pylist took 147 us, this 42 (route builds 200 hits)
            return {name: values[0] for name, values in one.to_pydict().items()}
        except UnicodeDecodeError:  # damaged bytes in the mapped file: `text_of` each string
            return {name: text_of(one.column(name)[0]) for name in one.column_names}

    def row_id(self, row: int) -> int:
        """The id of the row at a position: kept by every later snapshot while its chunk lives (search hit ids)."""
        part, _, local = self._locate(row)
        return int(part.ids[local])

    def check_model(self, model_ids: str | tuple[str, ...]) -> None:
        """Refuse a snapshot whose vectors no model in `model_ids` (the one configured, then its static tier,
        which a fast-first run publishes first) can query."""
        model_ids = (model_ids,) if isinstance(model_ids, str) else model_ids
        if self.manifest.model_id in model_ids:
            return
        if self.manifest.backfill_model_id in model_ids:  # e.g. an eval of the model, during the backfill
            raise SnapshotError(
                f"cannot use snapshot {self.manifest.snapshot_id} with {model_ids[0]!r}: it holds the static vectors "
                f"{self.manifest.model_id!r} published while {self.manifest.backfill_model_id!r}'s own are embedded "
                f"(⟦backlog⟧); run 'blobdex index' to finish, then ask again"
            )
        raise SnapshotError(
            f"cannot serve snapshot {str(self.path)!r}: built with model {self.manifest.model_id!r} "
            f"(dim {self.manifest.dim}), this process embeds with {model_ids[0]!r}; rebuild with "
            f"'blobdex index --full' or set model = {self.manifest.model_id!r} in blobdex.toml"
        )


class SymbolRows:
    """Lower-cased definition names -> live positions, looked up part by part (each part indexes its own)."""

    def __init__(self, reader: SnapshotReader):
        self.reader = reader

    def get(self, name: str, default=()) -> list[int]:
        found, key = [], int(name_key(name))
        for part, start in zip(self.reader.parts, self.reader.offsets.tolist()):
            if not part.symbols.may_hold(key):
                continue
            rows = part.symbols.get(name, key)
            if len(rows):
                rows += start
                found += rows[self.reader.live[rows]].tolist()
        return found or list(default)


def text_of(value: pa.Scalar):
    """A string of a mapped column as Python reads it, with bytes that are not UTF-8 (damage, which verify names and
    the next run repairs) read as U+FFFD instead of failing the request; any other value as it is."""
    try:
        return value.as_py()
    except UnicodeDecodeError:
        if pa.types.is_list(value.type):  # refs
            return [text_of(v) for v in value.values]
        return value.as_buffer().to_pybytes().decode("utf-8", "replace")


def open_kept(
    data_dir: Path,
    model_ids: tuple[str, ...],
    before: str | None = None,
    exact: bool = False,
    select: Select | None = None,
) -> SnapshotReader | None:
    """The newest snapshot kept before CURRENT's (and before `before`, when given) that opens and serves one of
    `model_ids`, or None."""
    for snapshot_id in kept(data_dir):
        if before is not None and snapshot_id >= before:
            continue
        try:
            reader = SnapshotReader(data_dir, snapshot_id, exact=exact, select=select)
            reader.check_model(model_ids)
            return reader
        except SnapshotError as exc:
            log.debug("kept snapshot %s cannot be served either: %s", snapshot_id, exc)
    return None


def _grams_of(ref: PartRef, rows: int) -> Grams | None:
    """A part's trigram index, or None (grep then reads every row of the part): a part written before the index
    existed has none, and one that does not read as an index is left unused (`blobdex verify` names it)."""
    path = part_file(ref, "grams")
    if not path.exists():
        return None
    try:
        return Grams(path, rows)
    except (GramsError, pa.ArrowException, OSError) as exc:
        log.warning("part %s: its trigram index is unusable (%s); grep reads the part whole", ref.part_id, exc)
        return None


def _codes_of(ref: PartRef, rows: int) -> tuple[np.ndarray, str] | None:
    """A part's codes for approximate search and their codebook's digest, or None (none, or unreadable: its rows
    are then scored exactly)."""
    path = part_file(ref, "codes")
    if not path.exists():
        return None
    try:
        codes, digest = read_codes(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        log.warning("part %s: its codes are unusable (%s); its rows are scored exactly", ref.part_id, exc)
        return None
    return (codes, digest) if len(codes) == rows else None


def _check_offsets(table: pa.Table) -> None:
    """Arrow's cheap checks, then every string and list offset in bounds and in order: what a read trusts (the
    text itself is not read: a full validation would touch every page of the mapped file)."""
    table.validate()
    for column in table.columns:
        for chunk in column.chunks:
            _offsets_in_bounds(chunk)


def _offsets_in_bounds(array: pa.Array) -> None:
    kind = array.type
    if pa.types.is_fixed_size_list(kind):
        return _offsets_in_bounds(array.values)
    if not (pa.types.is_string(kind) or pa.types.is_list(kind)):
        return
    buffer = array.buffers()[1]
    offsets = np.frombuffer(buffer, dtype=np.int32)[array.offset : array.offset + len(array) + 1]
    limit = len(array.values) if pa.types.is_list(kind) else array.buffers()[2].size if array.buffers()[2] else 0
    if len(offsets) and (offsets[0] < 0 or offsets[-1] > limit or np.any(np.diff(offsets) < 0)):
        raise SnapshotError(f"a {kind} column's offsets run outside its data")
    if pa.types.is_list(kind):
        _offsets_in_bounds(array.values)
