"""A fast-scan IVF-PQ index's inverted lists in a mapped file rather than the heap: the approximate index's codes
(0.6 GiB at 10M chunks) are then pages of the page cache, which the kernel writes back and drops under pressure,
not the server's own memory. faiss reads them through OnDiskInvertedLists (each list's codes, then its ids, at an
offset of one file); blobdex writes them, each list's codes packed 32 to a block as the fast-scan kernel reads
them, packed by faiss's own conversion of a plain 4-bit index (query.approximate.Shared).

The file has no name: made in the data dir (on the snapshot's disk, not a tmpfs) and unlinked at once, faiss maps
it through /proc/self/fd; it goes with the process or the index. Its blocks are taken before they are written
(a write through the map to a full disk would be SIGBUS), and what joined is written back before it serves. A
list that outgrows its room moves to the file's end with a quarter more (its old room is left unused: disk,
never memory); codes of parts that leave stay, never selected, until the index is rebuilt
(query.approximate.open_approximate)."""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

BLOCK_CODES = 32  # codes a fast-scan block packs
ID_BYTES = 8
GROWTH = 1.25  # a list that outgrows its room gets this much of what it needs


class MappedLists:
    """The lists of `index` (an empty, trained IndexIVFPQFastScan), from now on in a mapped file."""

    def __init__(self, index, folder: Path):
        import faiss

        self.index, self.nlist = index, index.nlist
        self.block = faiss.downcast_InvertedLists(index.invlists).block_size  # bytes of 32 packed codes
        self.code_bytes = self.block // BLOCK_CODES  # what OnDiskInvertedLists takes a code to be
        self.packer = index.get_CodePacker()
        self.offset, self.capacity, self.size = (np.zeros(self.nlist, np.int64) for _ in range(3))
        self.end = 0  # bytes of the file given to lists
        self.file = _unnamed(folder)
        self.map: mmap.mmap | None = None
        self.bytes = np.zeros(0, np.uint8)
        self.lists = None  # the OnDiskInvertedLists faiss reads, replaced after every change
        self._publish()

    def add(self, codes: np.ndarray, ids: np.ndarray, numbers: np.ndarray) -> None:
        """Add codes (as the codebook encodes them, list number first) with their ids; `numbers`: their lists."""
        import faiss

        incoming = np.bincount(numbers, minlength=self.nlist)
        touched = np.flatnonzero(incoming)
        kept = self.size // BLOCK_CODES  # whole blocks that stay where they are
        tail_codes, tail_ids = self._tails(touched, kept)
        self.reserve(incoming)
        flat = plain_index(self.index)
        flat.add_sa_codes(np.concatenate([tail_codes, codes]), np.concatenate([tail_ids, ids]))
        packed_index = faiss.IndexIVFPQFastScan(flat)
        del flat
        packed = faiss.downcast_InvertedLists(packed_index.invlists)
        for number in touched.tolist():
            count = packed.list_size(number)  # the tail's codes and the new ones
            blocks = -(-count // BLOCK_CODES)
            at = int(self.offset[number] + kept[number] * self.block)
            self.bytes[at : at + blocks * self.block] = faiss.rev_swig_ptr(
                packed.get_codes(number), blocks * self.block
            )
            at = (
                int(self.offset[number] + self.capacity[number] * self.code_bytes)
                + int(kept[number]) * BLOCK_CODES * ID_BYTES
            )
            self.bytes[at : at + count * ID_BYTES] = faiss.rev_swig_ptr(packed.get_ids(number), count).view(np.uint8)
        self.size += incoming
        self.index.ntotal += len(codes)
        self._publish()

    def write_back(self) -> None:
        """Write what joined to the disk now, before the index serves: left to the kernel, 0.56 GB of a 10M start
        was written back 30 s later, in the middle of the requests it then slowed (search p95 85 -> 132 ms)."""
        os.fsync(self.file.fileno())

    def reserve(self, incoming: np.ndarray) -> None:
        """Room for `incoming` more codes in each list: a list without it moves to the file's end."""
        need = self.size + incoming
        moving = np.flatnonzero(need > self.capacity)
        if not len(moving):
            return
        room = -(-np.ceil(need[moving] * GROWTH).astype(np.int64) // BLOCK_CODES) * BLOCK_CODES
        slots = room * (self.code_bytes + ID_BYTES)
        starts = self.end + np.concatenate([[0], np.cumsum(slots)[:-1]])
        self._extend(int(self.end + slots.sum()))
        for number, start, capacity in zip(moving.tolist(), starts.tolist(), room.tolist()):
            old, size = int(self.offset[number]), int(self.size[number])
            if size:
                blocks = -(-size // BLOCK_CODES) * self.block
                self.bytes[start : start + blocks] = self.bytes[old : old + blocks]
                ids_from = old + int(self.capacity[number]) * self.code_bytes
                ids_to = start + capacity * self.code_bytes
                self.bytes[ids_to : ids_to + size * ID_BYTES] = self.bytes[ids_from : ids_from + size * ID_BYTES]
            self.offset[number], self.capacity[number] = start, capacity
        self.end = int(self.end + slots.sum())

    def _tails(self, touched: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The codes (as encoded: list number first) and ids of each touched list's last, partly filled block,
        which is packed again with the codes joining the list."""
        import faiss

        width = self.index.coarse_code_size()
        codes, ids, code = [], [], np.zeros(self.packer.code_size, np.uint8)
        for number in touched.tolist():
            start, size = int(kept[number]) * BLOCK_CODES, int(self.size[number])
            if start == size:
                continue
            block_at = int(self.offset[number] + kept[number] * self.block)
            block = self.bytes[block_at : block_at + self.block]
            for i in range(size - start):
                self.packer.unpack_1_c(faiss.swig_ptr(block), i, faiss.swig_ptr(code))
                codes.append(np.concatenate([np.frombuffer(number.to_bytes(width, "little"), np.uint8), code]))
            ids_at = int(self.offset[number] + self.capacity[number] * self.code_bytes) + start * ID_BYTES
            ids.append(self.bytes[ids_at : ids_at + (size - start) * ID_BYTES].view(np.int64).copy())
        sa_width = self.index.sa_code_size()
        return (
            np.array(codes, np.uint8).reshape(-1, sa_width),
            np.concatenate(ids) if ids else np.zeros(0, np.int64),
        )

    def _extend(self, size: int) -> None:
        """Make the file (and the map) at least `size` bytes, its blocks allocated."""
        if self.map is not None and len(self.map) >= size:
            return
        size = max(size, int(len(self.map) * 1.5) if self.map is not None else 0, mmap.PAGESIZE)
        # Blocks taken now: a write through the map to a full disk would be SIGBUS, this is an OSError.
        os.posix_fallocate(self.file.fileno(), 0, size)
        self.bytes = np.zeros(0, np.uint8)  # no view may outlive the map it is of
        if self.map is not None:
            self.map.close()
        self.map = mmap.mmap(self.file.fileno(), size)
        self.bytes = np.frombuffer(self.map, np.uint8)

    def _publish(self) -> None:
        """Give faiss the lists as they are now: a new OnDiskInvertedLists over the whole file."""
        import faiss

        self._extend(max(self.end, 1))
        lists = faiss.OnDiskInvertedLists(self.nlist, self.code_bytes, f"/proc/self/fd/{self.file.fileno()}")
        entries = faiss.OnDiskOneListVector()
        for offset, capacity, size in zip(self.offset.tolist(), self.capacity.tolist(), self.size.tolist()):
            entry = faiss.OnDiskOneList()
            entry.offset, entry.capacity, entry.size = offset, capacity, size
            entries.push_back(entry)
        lists.lists = entries
        lists.totsize, lists.read_only, lists.prefetch_nthread = len(self.map), True, 0
        lists.do_mmap()
        self.index.replace_invlists(lists, False)
        self.lists = lists  # the previous lists unmap as they go


def plain_index(index):
    """A plain 4-bit IVF-PQ index with `index`'s quantizer and PQ: what faiss converts to a fast-scan one."""
    import faiss

    flat = faiss.IndexIVFPQ(index.quantizer, index.d, index.nlist, index.pq.M, index.pq.nbits, index.metric_type)
    flat.pq, flat.by_residual, flat.is_trained = index.pq, index.by_residual, True
    return flat


def _unnamed(folder: Path):
    """A file no directory names (it goes with the process), in `folder` when the process may write there."""
    try:
        return tempfile.TemporaryFile(dir=folder)
    except OSError:
        return tempfile.TemporaryFile()
