"""The process's pages: asking the kernel, before a gather, for the pages of a mapped file it will touch (madvise
MADV_WILLNEED), and giving the heap's freed pages back (release_freed).

A page fault in a memory-mapped file reads ahead a window meant for sequential reads, and waits for it: a gather
of rows scattered over a large file that the page cache does not hold pays one such read a row, one after another.
Gathering 1,000 float vectors at random from the 15 GB of a 10M-chunk snapshot took 3.9 s with a cold page cache
on this project's 2-core VM, and 26-34 ms when the rows' pages were asked for first (the kernel reads just those
pages, all at once). For pages already in memory the advice costs its system call, about 2 µs a row.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

import numpy as np
import pyarrow as pa

MADV_WILLNEED = 3  # the same on Linux, the BSDs and macOS


def _madvise():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError, TypeError):  # no C library to ask: gathers fault page by page as before
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_MADVISE = _madvise()

SYS_PROCESS_MADVISE = 440  # the same on x86-64 and arm64 (the generic system call table)
UIO_MAXIOV = 1024  # ranges one call takes


class _Batched:
    """process_madvise(2) on this process (Linux 5.10+): up to UIO_MAXIOV ranges advised in one system call. A
    gather's rows are each a range of their own; one madvise a row cost about 2 µs, two thirds of gathering 2,000
    rows whose pages were in memory already (4.5 ms; 1.3 ms without the advice)."""

    def __init__(self, syscall):
        self.syscall, self.pid, self.fd = syscall, -1, -1

    def __call__(self, ranges: np.ndarray) -> bool:
        """Advise (start, size) ranges; False where the kernel refused (the caller advises them one by one)."""
        if self.pid != os.getpid():  # a forked child asks for its own pages
            try:
                self.fd, self.pid = os.pidfd_open(os.getpid()), os.getpid()
            except OSError:
                return False
        vectors = np.ascontiguousarray(ranges, dtype=np.uint64)
        for at in range(0, len(vectors), UIO_MAXIOV):
            batch = vectors[at : at + UIO_MAXIOV]
            if self.syscall(SYS_PROCESS_MADVISE, self.fd, batch.ctypes.data, len(batch), MADV_WILLNEED, 0) < 0:
                return False
        return True


def _batched() -> _Batched | None:
    """process_madvise where this kernel and process may call it (tried once on a page of its own), else None."""
    try:
        syscall = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).syscall
        syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint]
        syscall.restype = ctypes.c_long
        batched = _Batched(syscall)
        page = mmap.mmap(-1, mmap.PAGESIZE)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        works = batched(np.array([[address, mmap.PAGESIZE]], dtype=np.uint64))
        return batched if works else None
    except (OSError, AttributeError, TypeError, ValueError):  # not Linux, no pidfd, no C library
        return None


_BATCHED = _batched()


def advise(ranges: np.ndarray) -> None:
    """MADV_WILLNEED over page-aligned (start, size) ranges: in batches where the kernel takes them, else one call
    a range."""
    if _BATCHED is not None and _BATCHED(ranges):
        return
    for start, size in ranges.tolist():
        _MADVISE(start, size, MADV_WILLNEED)


def will_need(starts: np.ndarray, lengths) -> None:
    """Ask for the pages holding `lengths` bytes (one for all, or one each) at each address in `starts` (of a mapped
    file, usually) before they are read. A gather over several files (a snapshot's parts) asks for all of them at
    once: reads overlap only if none is touched before every one is asked for. Without a C library rows fault as
    they come; the advice never fails a read."""
    if _MADVISE is None or not len(starts):
        return
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.broadcast_to(np.asarray(lengths, dtype=np.int64), starts.shape)
    starts, ends = starts[lengths > 0], (starts + lengths)[lengths > 0]  # an empty string asks for nothing
    first = starts - starts % mmap.PAGESIZE  # madvise takes page-aligned addresses
    advise(np.stack([first, ends - first], axis=1))


class Layout:
    """Where a mapped Arrow table's values lie (one record batch, as a part is), read once, for `will_read`."""

    def __init__(self, table: pa.Table):
        self.fixed: list[tuple[int, int]] = []  # (address of row 0's value, its width)
        self.strings: list[tuple[np.ndarray, int, int, int]] = []  # (offsets from row 0, their address, width, data)
        self.lists: list[tuple[np.ndarray, int, tuple]] = []  # (offsets from row 0, their address, its strings)
        for column in table.columns:
            if column.num_chunks != 1:  # anything but one record batch is read as it comes
                continue
            values, kind = column.chunk(0), column.type
            if pa.types.is_string(kind) or pa.types.is_large_string(kind):
                self.strings.append(_strings(values))
            elif pa.types.is_list(kind) and pa.types.is_string(kind.value_type):
                offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset :]
                self.lists.append((offsets, offsets.ctypes.data, _strings(values.values)))
            elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
                width = kind.bit_width // 8
                self.fixed.append((values.buffers()[1].address + values.offset * width, width))


def _strings(values: pa.Array) -> tuple[np.ndarray, int, int, int]:
    dtype = np.int64 if pa.types.is_large_string(values.type) else np.int32
    offsets = np.frombuffer(values.buffers()[1], dtype=dtype)[values.offset :]
    return offsets, offsets.ctypes.data, offsets.itemsize, values.buffers()[2].address


def will_read(parts: list[tuple[Layout, list[int]]]) -> None:
    """Ask for the pages of rows of mapped Arrow tables (each part's layout, and its rows) before they are read one
    by one (a search's hits), in three rounds that each ask for every part's at once: each fixed-width value and
    the offsets of each string and list of strings; then the offsets of those lists' strings; then every string's
    bytes. 100 rows of a 10M-chunk snapshot with a cold page cache: 570 ms read as they came, about 25 ms asked
    for first; with their pages in memory already, about 4.5 ms. Columns of other types fault as they come."""
    if _MADVISE is None:
        return
    first: list[tuple[int, int]] = []  # (address, bytes) asked for in each round
    for layout, rows in parts:
        for address, width in layout.fixed:
            first += [(address + row * width, width) for row in rows]
        for _, address, width, _ in layout.strings:
            first += [(address + row * width, 2 * width) for row in rows]
        for _, address, _ in layout.lists:
            first += [(address + row * 4, 8) for row in rows]
    _ask(first)
    second, spans = [], []  # spans: (a strings column, its first item, the item after its last)
    for layout, rows in parts:
        spans += [(strings, row, row + 1) for strings in layout.strings for row in rows]
        for offsets, _, strings in layout.lists:
            for row in rows:
                start, end = int(offsets[row]), int(offsets[row + 1])
                second.append((strings[1] + start * strings[2], (end - start + 1) * strings[2]))
                spans.append((strings, start, end))
    _ask(second)
    third = []
    for (offsets, _, _, data), start, end in spans:
        begin = int(offsets[start])
        third.append((data + begin, int(offsets[end]) - begin))
    _ask(third)


def _ask(ranges: list[tuple[int, int]]) -> None:
    """One round of will_read: its (address, bytes) asked for at once."""
    if ranges:
        starts, sizes = zip(*ranges)
        will_need(np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64))


def release_freed() -> None:
    """Hand the free pages of the heap (glibc's malloc_trim) and of Arrow's allocator back to the system, once a
    snapshot is open and prepared or codes joined its approximate index: what opening it, reading its history,
    packing codes and leaving the snapshot it replaces freed would otherwise stay the process's (at 303k chunks a
    third of a server's anonymous memory; at 3M, 56 MiB of Arrow's alone after reading the history; at 10M, 230
    MiB after codes joined, measured). A C library without malloc_trim keeps its pages."""
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass
