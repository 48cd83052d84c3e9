"""A part's trigram index (grams.arrow): for each trigram of its chunks' text, the blocks of BLOCK rows that hold
it. grep asks it which rows can match before RE2 reads any text (the approach of Google's codesearch and zoekt,
query/narrow.py reads a pattern).

Text is indexed case-folded (str.casefold) and as ASCII, every other character read as `?`: one index serves
case-sensitive and case-insensitive patterns alike, and a trigram is an exact 21-bit key. A pattern's literal
text is folded the same way (`fold`), so a trigram it needs is in the index wherever the text matches; a `?`
standing for any non-ASCII character only lets more blocks through.

Why blocks and not rows: on real code (the eval corpus, 6,698 chunks of 594 characters in several languages) a
chunk holds 323 distinct trigrams, a block of 16 rows 145 per row (32: 109). With uint16 block numbers (a part
of up to 2^20 rows) that is 290 bytes per row on disk; per-row postings would be 1,290 (uint32) or about 700 as
Roaring bitmaps. A block that passes is 16 texts for RE2, a few microseconds each.

Built when the part is written (compaction rewrites a part, so it rebuilds its index); a part written before
this file existed has none, and grep reads every row of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

BLOCK = 16
GRAMS = "grams.arrow"
_SHIFT = 7  # bits per ASCII character in a key


def fold(text: str) -> bytes:
    """Text as the index reads it: case-folded, then ASCII with `?` for each other character."""
    return text.casefold().encode("ascii", "replace")


def trigrams(data: bytes) -> np.ndarray:
    """The distinct trigram keys of folded bytes, sorted (uint32)."""
    if len(data) < 3:
        return np.zeros(0, dtype=np.uint32)
    a = np.frombuffer(data, dtype=np.uint8).astype(np.uint32)
    return np.unique((a[:-2] << 2 * _SHIFT) | (a[1:-1] << _SHIFT) | a[2:])


def build(texts: Sequence[str]) -> pa.Table:
    """The index of a part whose rows hold `texts`, in row order: one row per trigram (sorted) with its blocks."""
    count = -(-len(texts) // BLOCK)
    keys = []
    for block in range(count):
        # One pass over the block's texts joined: a trigram across two rows only lets the block through.
        grams = trigrams(fold("\n".join(texts[block * BLOCK : (block + 1) * BLOCK])))
        keys.append((grams.astype(np.uint64) << 32) | block)
    pairs = np.sort(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.uint64)
    grams, blocks = (pairs >> 32).astype(np.uint32), (pairs & 0xFFFFFFFF).astype(_block_type(count))
    distinct, starts = np.unique(grams, return_index=True)
    offsets = np.append(starts, len(grams)).astype(np.int32)
    lists = pa.ListArray.from_arrays(pa.array(offsets), pa.array(blocks))
    return pa.table({"gram": pa.array(distinct), "blocks": lists}).replace_schema_metadata({"block": str(BLOCK)})


def _block_type(count: int):
    return np.uint16 if count <= 2**16 else np.uint32


def write(path: Path, texts: Sequence[str]) -> None:
    table = build(texts)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())  # one record batch: a reader's arrays are views of the file


class GramsError(ValueError):
    """A grams.arrow that does not read as an index of its part (damaged bytes): the part is then read whole."""


class Grams:
    """A part's trigram index, mapped (no copy): which of its blocks hold a trigram."""

    def __init__(self, path: Path, rows: int):
        batch = pa.ipc.open_file(pa.memory_map(str(path))).read_all().combine_chunks().to_batches()
        if len(batch) != 1 or batch[0].schema.names != ["gram", "blocks"]:
            raise GramsError(f"{path.name} is not a trigram index")
        batch = batch[0]
        if (batch.schema.metadata or {}).get(b"block") != str(BLOCK).encode():
            raise GramsError(f"{path.name} has blocks of another size")
        lists = batch.column(1)
        self.keys = batch.column(0).to_numpy()
        self.offsets = np.frombuffer(lists.buffers()[1], dtype=np.int32)[lists.offset : lists.offset + len(lists) + 1]
        self.values = lists.values.to_numpy()
        self.count = -(-rows // BLOCK)
        # What a lookup trusts, checked at open (cheap: one pass over the keys, not the postings).
        if len(self.keys) and (
            np.any(np.diff(self.keys.astype(np.int64)) <= 0)
            or self.offsets[0] != 0
            or self.offsets[-1] != len(self.values)
            or np.any(np.diff(self.offsets) < 0)
        ):
            raise GramsError(f"{path.name}'s keys or offsets are out of order")

    def spans(self, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of `grams` has its blocks in `values` (start, end; an empty span for one the part lacks),
        looked up together: one search of the keys, not one a gram (thousands a query at a million rows)."""
        at = np.searchsorted(self.keys, grams)
        inside = np.minimum(at, max(len(self.keys) - 1, 0))
        held = (at < len(self.keys)) & (self.keys[inside] == grams) if len(self.keys) else np.zeros(len(grams), bool)
        starts = np.where(held, self.offsets[inside], 0)
        return starts, np.where(held, self.offsets[inside + 1], 0)

    def blocks(self, start: int, end: int) -> np.ndarray:
        """The blocks a span of `values` names (a bool per block)."""
        found = np.zeros(self.count, dtype=bool)
        blocks = self.values[start:end]
        found[blocks[blocks < self.count]] = True  # a damaged number names no block, never another part's
        return found
