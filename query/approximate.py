"""Approximate vector search over an opened snapshot: every part's codes (indexer/snapshot/ann.py) in one IVF-PQ
index under the snapshot's codebook, searched with the request's filters as a bitmap, and the candidates rescored
from the float vectors, so every score a caller sees is the exact cosine.

A search over fewer than EXACT_ROWS allowed rows is exact (about 10 ms there, and a narrow filter leaves an IVF
search few candidates); so is a server configured with `exact_search = true`. Rows of parts without codes
(written before the codebook existed) are scored exactly beside the candidates.
"""

from __future__ import annotations

import logging

import numpy as np

from indexer.snapshot.ann import CODEBOOK, Codebook

log = logging.getLogger(__name__)

EXACT_ROWS = 100_000
# Lists searched of the codebook's 1,024, and candidates per query passage rescored exactly. Measured on real
# vectors (54 real repositories, 161,665 chunks, the default model's static tier, 220 queries; bench-scale
# --real-model): recall@10 0.909 at 32 / 200, 0.949 at 64 / 500, 0.960 at 96 / 500, 0.973 at 128 / 500 (another
# sample of 220: 0.954 at 96, 0.959 at 128); at 1M hashed chunks the vector signal took 5.1, 6.9, 5.3 and 9.5 ms
# (p50). The floor is 0.95.
NPROBE = 96
RESCORE = 500


class Approximate:
    """The IVF-PQ index of a snapshot's parts, built when the snapshot is opened (the codes are copied in: 56 bytes
    a row of anonymous memory, the code and its id; 560 MB at 10M rows)."""

    def __init__(self, codebook: Codebook, parts, offsets: np.ndarray):
        import faiss

        self.index = faiss.deserialize_index(np.frombuffer(codebook.blob, dtype=np.uint8))
        self.covered = np.zeros(int(offsets[-1]), dtype=bool)
        coded = [
            (part, start)
            for part, start in zip(parts, offsets.tolist())
            if part.codes is not None and part.codes[1] == codebook.digest and len(part.codes[0]) == len(part)
        ]
        _reserve(self.index, [part.codes[0] for part, _ in coded])
        for part, start in coded:
            self.index.add_sa_codes(part.codes[0], np.arange(start, start + len(part), dtype=np.int64))
            self.covered[start : start + len(part)] = True
        self.digest = codebook.digest

    def asked(self, allowed: int) -> bool:
        """Whether a search over `allowed` rows uses this index (below EXACT_ROWS, exact is as fast)."""
        return allowed >= EXACT_ROWS

    def candidates(self, queries: np.ndarray, mask: np.ndarray, k: int = RESCORE) -> np.ndarray:
        """The positions the index finds near any of the query's passages (`k` each) among the `mask`ed rows,
        sorted. Rows it holds no codes of (`covered` is False) are never among them: callers score those."""
        import faiss

        bitmap = np.packbits(mask, bitorder="little")  # bit i of byte i // 8 is position i, as faiss reads it
        params = faiss.SearchParametersIVF(sel=faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bitmap)), nprobe=NPROBE)
        _, found = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)
        return np.unique(found[found >= 0])


def _reserve(index, codes: list[np.ndarray]) -> None:
    """Give each inverted list the room its codes take, before they are added: a list grown code by code doubles
    its room as it fills (82 bytes a row held where 56 are used, measured at 293k rows). A code starts with its
    list's number, little-endian."""
    import faiss

    width, counts = index.coarse_code_size(), np.zeros(index.nlist, np.int64)
    for block in codes:
        numbers = block[:, :width].astype(np.int64) << (8 * np.arange(width, dtype=np.int64))
        counts += np.bincount(numbers.sum(axis=1), minlength=index.nlist)
    lists = faiss.downcast_InvertedLists(index.invlists)
    for number, count in enumerate(counts.tolist()):
        lists.resize(number, count)  # a vector's room stays when it is cut back to nothing
        lists.resize(number, 0)


def open_approximate(path, parts, offsets: np.ndarray) -> Approximate | None:
    """The snapshot's approximate index, or None: it has no codebook (a small corpus), or the codebook does not
    read (then search is exact, and `blobdex verify` names the file)."""
    try:
        codebook = Codebook.read(path / CODEBOOK)
        return Approximate(codebook, parts, offsets) if codebook is not None else None
    except (OSError, ValueError, RuntimeError) as exc:
        log.warning("snapshot %s: its codebook is unusable (%s); vector search is exact", path.name, exc)
        return None
