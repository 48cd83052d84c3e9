"""Approximate vector search over an opened snapshot: every part's codes (indexer/snapshot/ann.py) in one IVF-PQ
index under the snapshot's codebook, searched with the request's filters as a bitmap, and the candidates rescored
from the float vectors, so every score a caller sees is the exact cosine.

A server keeps one such index across the snapshots it serves (`Shared`): a part's codes join it when the first
snapshot listing the part opens, under ids of their own, and leave it once no open snapshot lists the part, so a
swap adds only the new parts' codes. Rebuilding it at every open was two thirds of a swap (35 of 53 ms at 303k
rows; about 1.2 s at 10M). A 4-bit codebook's lists are kept in a mapped file (query/mapped_lists.py), where
codes that leave stay, never selected, until they pass a quarter of the index and the next snapshot builds its
own.

A search over fewer than EXACT_ROWS allowed rows is exact (about 10 ms there, and a narrow filter leaves an IVF
search few candidates); so is a server configured with `exact_search = true`. Rows of parts without codes
(written before the codebook existed) are scored exactly beside the candidates.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from pathlib import Path

import numpy as np

from indexer.snapshot.ann import CODEBOOK, Codebook, digest
from query.mapped_lists import MappedLists
from query.pages import release_freed

log = logging.getLogger(__name__)

EXACT_ROWS = 100_000
# Lists searched of the codebook's 1,024, and candidates per query passage rescored exactly. 8-bit codes (the
# codebooks trained before 4-bit ones), measured on real vectors (54 real repositories, 161,665 chunks, the
# default model's static tier, 220 queries; bench-scale --real-model): recall@10 0.909 at 32 / 200, 0.949 at
# 64 / 500, 0.960 at 96 / 500, 0.973 at 128 / 500. 4-bit fast-scan codes against 8-bit ones on a harder corpus
# (200,006 chunks of the Python packages this project installs, the same model, 320 queries): 8-bit 0.928 at
# 96 / 500 and 0.946 at 128 / 1,000; 4-bit 0.902 at 96 / 500, 0.948 at 192 / 1,000, 0.954 at 256 / 1,000 and
# 0.964 at 384 / 1,000. At 1,000,000 real chunks (make bench-recall: the installed packages' Python, their
# JavaScript and C headers): 8-bit 0.919 at 96 / 500 and 0.955 at 192 / 1,000 (5.1 ms); 4-bit 0.925 at
# 256 / 1,000, 0.929 at 384 / 1,000, 0.945 at 256 / 1,500 and 0.955 at 256 / 2,000 (2.0 ms): more candidates buy
# recall cheaper than more lists. Their cost is reading their float vectors: at 10M chunks on a machine whose page
# cache holds half of them, search p50 / p95 went from 73 / 85-94 ms at 1,000 to 94-96 / 119-139 at 2,000. A
# passage at 10M codes: 8-bit 22-26 ms over 96 lists, 4-bit 4.3 over 192 (one thread). The floor is 0.95.
NPROBE, RESCORE = 256, 2_000
NPROBE_8BIT, RESCORE_8BIT = 96, 500
JOIN_ROWS = 1_000_000  # codes packed for the mapped lists at a time: a start-up holds two copies of this many
LEFTOVER_SHARE = 0.25  # codes of parts no snapshot lists, of those the index holds, past which it is rebuilt


def settings(fast: bool) -> tuple[int, int]:
    """(lists probed, candidates rescored a passage) for a codebook of 4-bit codes (`fast`) or 8-bit ones."""
    return (NPROBE, RESCORE) if fast else (NPROBE_8BIT, RESCORE_8BIT)


class Shared:
    """One codebook's IVF-PQ index, shared by the snapshots a server opens in turn. Each part's codes hold the ids
    [base, base + rows) given when they joined; a snapshot's view maps them to its positions. The codes and their
    ids take 56 bytes a row: of a mapped file (`folder`: where to make it) for a 4-bit codebook, of the heap for an
    8-bit one (560 MB of anonymous memory at 10M rows)."""

    def __init__(self, codebook: Codebook, folder: Path):
        self.index = codebook.index  # empty and trained: what the codes join
        self.digest = codebook.digest
        self.nprobe, self.rescore = settings(codebook.fast)
        self.mapped = MappedLists(self.index, folder) if codebook.fast else None
        self.leftover = 0  # rows of the mapped lists no view lists any more
        self.bases: dict[str, tuple[int, int]] = {}  # part key -> (first id, rows)
        self.users: collections.Counter[str] = collections.Counter()  # part key -> views listing it
        self.next_id = 0
        self.left: collections.deque[tuple[str, ...]] = collections.deque()  # keys of views gone (weakref.finalize)
        self.lock = ReadWriteLock()  # searches read; a part joining or leaving writes

    def view(self, parts, offsets: np.ndarray) -> Approximate:
        """A snapshot's view of the index, its parts' codes added first where they are not in it yet."""
        coded = [(p, s) for p, s in zip(parts, offsets.tolist()) if self._usable(p)]
        with self.lock.writing():
            joining = [p for p, _ in coded if p.key not in self.bases]
            ids = []
            for part in joining:  # never given again, even where the codes fail to join: those are left over
                ids.append(np.arange(self.next_id, self.next_id + len(part), dtype=np.int64))
                self.next_id += len(part)
            try:
                self._add([p.codes[0] for p in joining], ids)
            except BaseException:
                self.leftover += sum(len(p) for p in joining)
                raise
            for part, part_ids in zip(joining, ids):
                self.bases[part.key] = (int(part_ids[0]), len(part))
            keys = tuple(p.key for p, _ in coded)
            self.users.update(keys)
            self._remove_unlisted()
            view = Approximate(self, [(self.bases[p.key][0], start, len(p)) for p, start in coded], int(offsets[-1]))
        weakref.finalize(view, self.left.append, keys)  # any thread, any moment: only queued
        if joining:
            release_freed()
        return view

    def _add(self, codes: list[np.ndarray], ids: list[np.ndarray]) -> None:
        """Add parts' codes under their ids (under the write lock): to the mapped lists JOIN_ROWS at a time, with
        room made for all of them first, or to an 8-bit index's lists one part at a time."""
        numbers = [list_numbers(self.index, block) for block in codes]
        counts = sum((np.bincount(n, minlength=self.index.nlist) for n in numbers), np.zeros(self.index.nlist, int))
        if self.mapped is None:
            _reserve(self.index, counts)
            for block, block_ids in zip(codes, ids):
                self.index.add_sa_codes(block, block_ids)
            return
        self.mapped.reserve(counts)
        first, rows = 0, 0
        for i, block in enumerate(codes):
            rows += len(block)
            if rows >= JOIN_ROWS or i == len(codes) - 1:
                self.mapped.add(*(np.concatenate(x[first : i + 1]) for x in (codes, ids, numbers)))
                first, rows = i + 1, 0
        self.mapped.write_back()

    def held(self) -> int:
        """Rows of the parts a view lists."""
        return sum(rows for _, rows in self.bases.values())

    def takes(self, parts) -> bool:
        """Whether a snapshot of `parts` joins this index: it shares most of its rows, and the codes no snapshot
        lists are not too many of them (else it starts its own, so that the old codes leave with the old one)."""
        held = self.held()
        return self.joining_rows(parts) <= held // 2 and self.leftover <= LEFTOVER_SHARE * held

    def joining_rows(self, parts) -> int:
        """Rows of `parts` whose codes are not in the index yet."""
        return sum(len(p) for p in parts if self._usable(p) and p.key not in self.bases)

    def _usable(self, part) -> bool:
        return part.codes is not None and part.codes[1] == self.digest and len(part.codes[0]) == len(part)

    def _remove_unlisted(self) -> None:
        """Take out the codes of parts no view lists any more (under the write lock)."""
        import faiss

        while self.left:
            self.users.subtract(self.left.popleft())
        gone = [key for key in self.bases if self.users[key] <= 0]
        if not gone:
            return
        unlisted = np.zeros(self.next_id, dtype=bool)
        for key in gone:
            base, rows = self.bases.pop(key)
            unlisted[base : base + rows] = True
            del self.users[key]
        if self.mapped is not None:  # never selected again; the index is rebuilt past LEFTOVER_SHARE
            self.leftover += int(np.count_nonzero(unlisted))
            return
        bitmap = np.packbits(unlisted, bitorder="little")
        self.index.remove_ids(faiss.IDSelectorBitmap(len(bitmap), faiss.swig_ptr(bitmap)))


class Approximate:
    """One snapshot's view of a `Shared` index: which positions it holds codes of (`covered`) and how its ids map
    to positions (runs of parts whose ids and positions both follow on)."""

    def __init__(self, shared: Shared, placed: list[tuple[int, int, int]], rows: int):
        """`placed`: (first id, first position, rows) of each part whose codes the index holds, in position order."""
        self.shared, self.digest = shared, shared.digest
        self.covered = np.zeros(rows, dtype=bool)
        runs: list[list[int]] = []
        for base, start, count in placed:
            self.covered[start : start + count] = True
            if runs and runs[-1][0] + runs[-1][2] == base and runs[-1][1] + runs[-1][2] == start:
                runs[-1][2] += count
            else:
                runs.append([base, start, count])
        runs.sort()
        self._runs = np.asarray(runs, dtype=np.int64).reshape(-1, 3)  # (first id, first position, rows) by id

    def asked(self, allowed: int) -> bool:
        """Whether a search over `allowed` rows uses this index (below EXACT_ROWS, exact is as fast)."""
        return allowed >= EXACT_ROWS

    def candidates(self, queries: np.ndarray, mask: np.ndarray, k: int | None = None) -> np.ndarray:
        """The positions the index finds near any of the query's passages (`k` each, the codebook's RESCORE by
        default) among the `mask`ed rows, sorted. Rows it holds no codes of (`covered` is False) are never among
        them: callers score those."""
        import faiss

        k = k or self.shared.rescore

        if not len(self._runs):
            return np.zeros(0, np.int64)
        bases, starts, counts = self._runs.T
        selected = np.zeros(int((bases + counts).max()), dtype=bool)  # by id: only this view's parts
        for base, start, count in self._runs.tolist():
            selected[base : base + count] = mask[start : start + count]
        bitmap = np.packbits(selected, bitorder="little")  # bit i of byte i // 8 is id i, as faiss reads it
        params = faiss.SearchParametersIVF(
            sel=faiss.IDSelectorBitmap(len(bitmap), faiss.swig_ptr(bitmap)), nprobe=self.shared.nprobe
        )
        with self.shared.lock.reading():
            _, found = self.shared.index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)
        found = np.unique(found[found >= 0])
        run = np.searchsorted(bases, found, side="right") - 1
        return np.sort(starts[run] + found - bases[run])


class ReadWriteLock:
    """Many readers or one writer; a waiting writer lets no new reader in (a swap is not starved by searches)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._waiting = 0

    def reading(self):
        return _Held(self._acquire_read, self._release_read)

    def writing(self):
        return _Held(self._acquire_write, self._release_write)

    def _acquire_read(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing and not self._waiting)
            self._readers += 1

    def _release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            self._cond.notify_all()

    def _acquire_write(self) -> None:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._writing and not self._readers)
            self._waiting -= 1
            self._writing = True

    def _release_write(self) -> None:
        with self._cond:
            self._writing = False
            self._cond.notify_all()


class _Held:
    def __init__(self, acquire, release):
        self._acquire, self._release = acquire, release

    def __enter__(self):
        self._acquire()

    def __exit__(self, *exc):
        self._release()


def list_numbers(index, codes: np.ndarray) -> np.ndarray:
    """Each code's inverted list: its first bytes, little-endian."""
    width = index.coarse_code_size()
    return (codes[:, :width].astype(np.int64) << (8 * np.arange(width, dtype=np.int64))).sum(axis=1)


def _reserve(index, counts: np.ndarray) -> None:
    """Give each inverted list of an 8-bit codebook's index the room of the `counts` codes joining it, before they
    are added: a list grown code by code doubles its room as it fills (82 bytes a row held where 56 are used,
    measured at 293k rows)."""
    import faiss

    lists = faiss.downcast_InvertedLists(index.invlists)
    for number, count in enumerate(counts.tolist()):
        if count:
            held = lists.list_size(number)
            lists.resize(number, held + count)  # a vector's room stays when it is cut back
            lists.resize(number, held)


def open_approximate(path, parts, offsets: np.ndarray, previous: Approximate | None = None) -> Approximate | None:
    """The snapshot's view of an approximate index, or None: it has no codebook (a small corpus), or the codebook
    does not read (then search is exact, and `blobdex verify` names the file). `previous`: the view of the
    snapshot served before, whose index this one joins when it has the same codebook and shares most of its rows
    (Shared.takes). An index that cannot be built (its mapped lists find the disk full) leaves search exact."""
    kept = previous.shared if previous is not None else None
    try:
        blob = (path / CODEBOOK).read_bytes() if (path / CODEBOOK).exists() else None
        if blob is None:
            return None
        joins = kept is not None and digest(blob) == kept.digest and kept.takes(parts)
        codebook = None if joins else Codebook(blob)
    except (OSError, ValueError, RuntimeError) as exc:
        log.warning("snapshot %s: its codebook is unusable (%s); vector search is exact", path.name, exc)
        return None
    try:
        shared = kept if codebook is None else Shared(codebook, path.parent.parent)  # the data dir: the lists' disk
        return shared.view(parts, offsets)
    except (OSError, RuntimeError) as exc:  # a full disk, say: the next snapshot opened tries again
        log.warning("snapshot %s: its approximate index cannot be built (%s); vector search is exact", path.name, exc)
        return None
