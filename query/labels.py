"""A string column as integer codes into its distinct values: how a reader holds the columns filters read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.snapshot import whole


def code_type(values: int) -> type:
    """The narrowest integer type that numbers `values` distinct values: a snapshot's org, repo, lang and kind take
    a byte a row (at 10M rows, 10 MB a column where int32 took 40)."""
    return np.uint8 if values <= 1 << 8 else np.uint16 if values <= 1 << 16 else np.int32


class Labels:
    """A string column as integer codes (`code_type`) into its distinct values. Built once per part: at a million
    rows it holds 1-4 MB of codes where an object array held a million Python strings (365 MiB for five columns,
    measured), and a filter is a table lookup per row (`==`, `isin`: a boolean mask). Indexing by a row gives its
    string; by rows or a mask, an object array of them (references to the distinct values)."""

    __hash__ = None  # `==` answers with a mask, as numpy's arrays do

    def __init__(self, codes: np.ndarray, values: np.ndarray):
        self.codes, self.values = codes, values

    @classmethod
    def of(cls, column) -> "Labels":
        """A column (an Arrow array or chunked array) as codes."""
        array = whole(column) if isinstance(column, pa.ChunkedArray) else column
        encoded = pc.dictionary_encode(array, null_encoding="encode")
        values = np.asarray(encoded.dictionary.to_pylist(), dtype=object)
        if len(values) == 1:  # a part's org and repo: one code, every row (a view, no memory a row)
            return cls(np.broadcast_to(np.zeros(1, np.uint8), (len(array),)), values)
        return cls(encoded.indices.to_numpy(zero_copy_only=False).astype(code_type(len(values))), values)

    @classmethod
    def joined(cls, parts: list["Labels"]) -> "Labels":
        """Parts' labels as one column: their codes renumbered into the union of their values."""
        index: dict = {}
        codes = []
        for labels in parts:
            renumber = np.fromiter(
                (index.setdefault(v, len(index)) for v in labels.values), np.int32, len(labels.values)
            )
            codes.append(renumber[labels.codes] if len(labels.values) else labels.codes)
        values = np.empty(len(index), dtype=object)
        values[:] = list(index)
        if len(values) == 1:
            return cls(np.broadcast_to(np.zeros(1, np.uint8), (sum(len(c) for c in codes),)), values)
        return cls(np.concatenate(codes).astype(code_type(len(values))) if codes else np.zeros(0, np.uint8), values)

    @classmethod
    def stacked(cls, parts: list["Labels"]) -> "Labels":
        """Parts' labels one after another, each part's values kept as its own (a value two parts hold has two
        codes): for paths, which are mostly each part's own, where uniting them cost a dict entry a value at
        every open (about 0.6 s of a swap at 10M rows, on paper from 303k)."""
        sizes = [len(labels.values) for labels in parts]
        starts = np.cumsum([0, *sizes])
        kind = code_type(int(starts[-1]))
        codes = [labels.codes.astype(kind) + kind(start) for labels, start in zip(parts, starts.tolist())]
        values = np.concatenate([labels.values for labels in parts]) if parts else np.zeros(0, dtype=object)
        return cls(np.concatenate(codes) if codes else np.zeros(0, np.uint8), values)

    def mapped(self, fn) -> "Labels":
        """The column of fn(value) for each row (computed once per distinct value)."""
        return Labels(self.codes, np.asarray([fn(v) for v in self.values], dtype=object))

    def without(self, rows: np.ndarray) -> "Labels":
        """These labels with `rows` reading None."""
        if not rows.any():
            return self
        values = np.append(self.values, np.asarray([None], dtype=object))
        codes = self.codes.astype(code_type(len(values)))  # a copy
        codes[rows] = len(values) - 1
        return Labels(codes, values)

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
