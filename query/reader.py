"""An opened snapshot: manifest, chunk rows and vectors in memory, and a Tantivy searcher. Read-only."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from indexer.languages import category
from indexer.snapshot import SnapshotError, kept, open_lexical, open_manifest, read_chunks, store_error, vector_matrix

log = logging.getLogger(__name__)


class SnapshotReader:
    """Everything a query needs from one snapshot, loaded once.

    Vectors are held as one numpy matrix: exact search by matrix-vector product is ~17 ms at
    100k x 384 here, faster than LanceDB's flat scan and with perfect recall (LIBRARIES.md).
    """

    def __init__(self, data_dir: Path, snapshot_id: str | None = None):
        self.path, self.manifest = open_manifest(data_dir, snapshot_id)
        try:
            table = read_chunks(self.path)
            self.lexical = open_lexical(self.path)
        except BaseException as exc:  # lance and tantivy raise their own types (pyo3 panics too) when damaged
            if not store_error(exc):
                raise
            raise SnapshotError(
                f"cannot open snapshot {str(self.path)!r}: {exc}; run 'blobdex verify', "
                f"then rebuild with 'blobdex index --full'"
            ) from exc
        try:
            table.validate(full=True)  # the mapped file is read as it is: bad offsets must not reach a query
        except Exception as exc:
            raise SnapshotError(
                f"cannot open snapshot {str(self.path)!r}: its chunks do not validate ({exc}); run 'blobdex "
                f"verify', then rebuild with 'blobdex index --full'"
            ) from exc
        order = table.column("row").to_numpy()
        if not np.array_equal(order, np.arange(len(order))):  # Lance reads fragments in the order written: a
            table = table.sort_by("row")  # sort would copy every column (50 MiB at 10k chunks) for nothing
        self.rows = table.drop_columns(["vector"])
        self.vectors = vector_matrix(table, self.manifest.dim)
        if self.vectors.shape[1] != self.manifest.dim:
            raise SnapshotError(
                f"cannot open snapshot {str(self.path)!r}: vectors have dim "
                f"{self.vectors.shape[1]}, the manifest says {self.manifest.dim}; "
                f"rebuild with 'blobdex index --full'"
            )
        self.searcher = self.lexical.searcher()
        self.schema = self.lexical.schema
        # Columns used for filtering, as codes into their distinct values (Labels).
        self.col = {name: Labels.of(self.rows.column(name)) for name in ("org", "repo", "lang", "kind", "path")}
        self.col["category"] = self.col["lang"].mapped(category)
        self.symbol_rows = _symbol_index(self.rows.column("symbol").to_pylist(), self.col["kind"])
        self._refs: list[list[str]] | None = None
        self._rows_at: dict[tuple[str, str, str], list[int]] | None = None
        self._cache: dict[str, object] = {}
        self.commit_of = {(r.org, r.name, x.ref): x.commit_id for r in self.manifest.repos for x in r.refs}

    def cached(self, name: str, load):
        """Something derived from this snapshot, loaded on first use: a snapshot never changes."""
        if name not in self._cache:
            self._cache[name] = load()
        return self._cache[name]

    def rows_at(self, org: str, repo: str, path: str) -> list[int]:
        """The rows of one file (every blob of it); the index is built on first use."""
        if self._rows_at is None:
            index: dict[tuple[str, str, str], list[int]] = {}
            for i, key in enumerate(zip(self.col["org"], self.col["repo"], self.col["path"])):
                index.setdefault(key, []).append(i)
            self._rows_at = index
        return self._rows_at.get((org, repo, path), [])

    def files(self, org: str) -> frozenset[tuple[str, str]]:
        """The (repo, path) of every indexed file of an org."""

        def load() -> frozenset[tuple[str, str]]:
            rows = self.col["org"] == org
            return frozenset(zip(self.col["repo"][rows], self.col["path"][rows]))

        return self.cached(f"files:{org}", load)

    @property
    def snapshot_id(self) -> str:
        return self.manifest.snapshot_id

    def refs(self, row: int) -> list[str]:
        if self._refs is None:
            self._refs = self.rows.column("refs").to_pylist()
        return self._refs[row]

    def row(self, row: int) -> dict:
        return {name: self.rows.column(name)[row].as_py() for name in self.rows.column_names}

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
                f"(blobdex status shows how many are left); run 'blobdex index' to finish, then ask again"
            )
        raise SnapshotError(
            f"cannot serve snapshot {str(self.path)!r}: built with model {self.manifest.model_id!r} "
            f"(dim {self.manifest.dim}), this process embeds with {model_ids[0]!r}; rebuild with "
            f"'blobdex index --full' or set model = {self.manifest.model_id!r} in blobdex.toml"
        )


def open_kept(data_dir: Path, model_ids: tuple[str, ...]) -> SnapshotReader | None:
    """The newest snapshot kept before CURRENT's that opens and serves one of `model_ids`, or None."""
    for snapshot_id in kept(data_dir):
        try:
            reader = SnapshotReader(data_dir, snapshot_id)
            reader.check_model(model_ids)
            return reader
        except SnapshotError as exc:
            log.debug("kept snapshot %s cannot be served either: %s", snapshot_id, exc)
    return None


class Labels:
    """A string column as int32 codes into its distinct values. Built once per snapshot: at a million rows
    it holds 4 MB of codes where an object array held a million Python strings (365 MiB for five columns,
    measured), and a filter is a table lookup per row (`==`, `isin`: a boolean mask). Indexing by a row gives
    its string; by rows or a mask, an object array of them (references to the distinct values)."""

    __hash__ = None  # `==` answers with a mask, as numpy's arrays do

    def __init__(self, codes: np.ndarray, values: np.ndarray):
        self.codes, self.values = codes, values

    @classmethod
    def of(cls, column) -> "Labels":
        encoded = pc.dictionary_encode(column.combine_chunks(), null_encoding="encode")
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        return cls(codes, np.asarray(encoded.dictionary.to_pylist(), dtype=object))

    def mapped(self, fn) -> "Labels":
        """The column of fn(value) for each row (computed once per distinct value)."""
        return Labels(self.codes, np.asarray([fn(v) for v in self.values], dtype=object))

    def isin(self, wanted) -> np.ndarray:
        wanted = set(wanted)
        chosen = np.fromiter((v in wanted for v in self.values), dtype=bool, count=len(self.values))
        return chosen[self.codes]

    def __eq__(self, value) -> np.ndarray:  # type: ignore[override]
        return self.isin((value,))

    def __getitem__(self, rows):
        return self.values[self.codes[rows]]

    def __len__(self) -> int:
        return len(self.codes)

    def __iter__(self):
        return iter(self.values[self.codes])


def _symbol_index(symbols: list[str], kinds: Labels) -> dict[str, list[int]]:
    """Lower-cased definition names -> rows: `Command.make_context` under itself and `make_context`."""
    index: dict[str, list[int]] = {}
    for row, (symbol, kind) in enumerate(zip(symbols, kinds)):
        if not symbol or kind in ("module", "section", "text"):
            continue
        full = symbol.lower()
        last = re.split(r"\.|::", full)[-1]
        for key in {full, last}:
            index.setdefault(key, []).append(row)
    return index
