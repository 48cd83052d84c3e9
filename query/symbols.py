"""A part's definitions by lower-cased name, for the symbol signal: `Command.make_context` is found under itself
and under `make_context`.

Held as sorted 32-bit hashes of the names with their rows, about 12 bytes a definition of anonymous memory. The
distinct names as Python strings, with the dicts that looked them up, held about 150 bytes a row (measured at
303k rows: 45 MiB of a server's anonymous memory; 1.5 GB at 10M). A hash that matches is checked against the
name itself, read from the part's mapped column, so a collision costs a read and finds nothing wrong.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.snapshot.read import whole

NOT_DEFINITIONS = ("module", "section", "text")  # kinds whose symbol names a file or a heading, not a definition
_LAST = r"^.*(\.|::)"  # what precedes a qualified name's last part
_MULTIPLIER = np.uint64(0x100000001B3)  # odd: the polynomial hash's base
_BLOCK_BYTES = 1 << 18  # bytes of names hashed at a time: the cached powers and per-byte temporaries stay a few MiB


class SymbolIndex:
    """One part's definitions: rows whose kind defines something and whose symbol is not empty."""

    def __init__(self, symbols: pa.ChunkedArray | pa.Array, kinds: np.ndarray):
        """`symbols`: the part's mapped `symbol` column (kept, unread, to check matches); `kinds`: which rows
        are definitions by kind (a boolean mask)."""
        self._symbols = whole(symbols) if isinstance(symbols, pa.ChunkedArray) else symbols
        lower = pc.utf8_lower(pc.fill_null(self._symbols, ""))
        named = pc.not_equal(lower, "").to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(named & kinds).astype(np.int32)
        full = name_hashes(lower.take(rows))
        last = name_hashes(pc.replace_substring_regex(lower.take(rows), _LAST, ""))
        differs = last != full  # a qualified name: also under its last part
        keys = np.concatenate([full, last[differs]])
        order = np.argsort(keys, kind="stable")
        self._keys = keys[order]
        self._rows = np.concatenate([rows, rows[differs]])[order]
        # A filter of about 8 bits a name (a key's low bits): a lookup passes over a part that lacks the name, but
        # for about one part in eight, with one byte read, where a search of the keys took 5 us a part (4 ms of
        # every name asked at 10M rows, about 930 parts).
        bits = 1 << max(6, int(8 * len(keys)).bit_length())
        self._low = bits - 1
        seen = np.zeros(bits, dtype=bool)
        seen[self._keys & np.uint32(self._low)] = True
        self._filter = np.packbits(seen, bitorder="little").tobytes()

    def may_hold(self, key: int) -> bool:
        """False when no definition of this part has a name with hash `key`; True for those that do (and a few
        that do not)."""
        low = key & self._low
        return bool(self._filter[low >> 3] >> (low & 7) & 1)

    def get(self, name: str, key: np.uint32 | None = None) -> np.ndarray:
        """Local rows of the definitions named `name` (lower-cased), in row order; `key`: its hash (`name_key`),
        worked out once by a caller that asks every part."""
        key = name_key(name) if key is None else key
        if not self.may_hold(int(key)):
            return np.zeros(0, np.int64)
        rows = self._rows[np.searchsorted(self._keys, key, "left") : np.searchsorted(self._keys, key, "right")]
        if not len(rows):
            return rows.astype(np.int64)
        lower = pc.utf8_lower(self._symbols.take(rows))
        named = pc.or_(pc.equal(lower, name), pc.equal(pc.replace_substring_regex(lower, _LAST, ""), name))
        return np.unique(rows[named.to_numpy(zero_copy_only=False)]).astype(np.int64)


def name_key(name: str) -> np.uint32:
    """The hash of one name, as `name_hashes` gives it."""
    return name_hashes(pa.array([name], pa.string()))[0]


def name_hashes(names: pa.Array) -> np.ndarray:
    """A 32-bit hash of each string of `names` (no nulls), computed on the array's bytes without a Python object
    per string: the polynomial sum of a name's bytes b_i * P**i, mixed with its length and finished as splitmix64
    does. A block's bytes are weighted by P**(place in the block) at once, and each name's sum is brought back to
    its own start by P**-start (P is odd, so it has an inverse modulo 2**64)."""
    out = np.empty(len(names), dtype=np.uint32)
    offsets = np.frombuffer(names.buffers()[1], dtype=np.int32)[names.offset : names.offset + len(names) + 1]
    start = 0
    while start < len(names):  # blocks of about _BLOCK_BYTES, at least one name (a longer one alone)
        end = max(start + 1, int(np.searchsorted(offsets, offsets[start] + _BLOCK_BYTES, "right")) - 1)
        out[start:end] = _hashed(names.slice(start, end - start))
        start = end
    return out


def _hashed(names: pa.Array) -> np.ndarray:
    offsets_buffer, data_buffer = names.buffers()[1:3]
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[names.offset : names.offset + len(names) + 1]
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]] if data_buffer else np.zeros(0, np.uint8)
    )
    starts, lengths = (offsets[:-1] - offsets[0]).astype(np.int64), np.diff(offsets).astype(np.int64)
    powers, inverses = _powers(len(data))
    sums = np.zeros(len(names), dtype=np.uint64)
    filled = lengths > 0
    if len(data):  # reduceat at the equal starts of empty names would read a byte: they sum to 0
        sums[filled] = np.add.reduceat(data * powers[: len(data)], starts[filled]) * inverses[starts[filled]]
    h = sums ^ (lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return (h ^ (h >> np.uint64(32))).astype(np.uint32)


_POWERS = (np.ones(1, np.uint64), np.ones(1, np.uint64))  # P**i and P**-i modulo 2**64, grown as blocks need


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    global _POWERS
    if len(_POWERS[0]) < n:
        size = 1 << max(n - 1, 1).bit_length()
        steps = [np.full(size, _MULTIPLIER, np.uint64), np.full(size, pow(int(_MULTIPLIER), -1, 1 << 64), np.uint64)]
        for step in steps:
            step[0] = 1
        _POWERS = (np.cumprod(steps[0], dtype=np.uint64), np.cumprod(steps[1], dtype=np.uint64))
    return _POWERS
