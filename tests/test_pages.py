"""query.pages: a gather over mapped matrices asks the kernel for every row's pages, page-aligned, before it reads."""

from __future__ import annotations

import mmap

import numpy as np

from query import pages
from query.reader import Vectors


def _mapped(tmp_path, name: str, rows: int, dim: int, seed: int) -> np.ndarray:
    path = tmp_path / name
    np.random.default_rng(seed).random((rows, dim), dtype=np.float32).tofile(path)
    return np.memmap(path, dtype=np.float32, mode="r", shape=(rows, dim))


def _covered(asked: list[tuple[int, int]], matrix: np.ndarray, row: int) -> bool:
    start = matrix.ctypes.data + row * matrix.strides[0]
    return any(a <= start and start + matrix.strides[0] <= a + n for a, n in asked)


def test_every_row_of_a_gather_across_parts_is_asked_for_page_aligned_and_the_rows_are_unchanged(tmp_path, monkeypatch):
    matrices = [_mapped(tmp_path, f"part{i}.f32", rows, 384, i) for i, rows in enumerate((10, 3000, 2500))]
    offsets = np.cumsum([0] + [len(m) for m in matrices])
    vectors = Vectors(matrices, offsets, 384)
    wanted = np.array([2500, 7, 3100, 10, 5509, 9, 12], dtype=np.int64)  # positions in every part, unsorted
    expected = np.concatenate(matrices)[wanted]

    asked: list[tuple[int, int]] = []
    real = pages.advise
    monkeypatch.setattr(pages, "advise", lambda ranges: asked.extend(map(tuple, ranges.tolist())) or real(ranges))
    assert np.array_equal(vectors[wanted], expected)
    assert asked and all(start % mmap.PAGESIZE == 0 for start, _ in asked)
    which = np.searchsorted(offsets, wanted, side="right") - 1
    for position, p in zip(wanted.tolist(), which.tolist()):
        assert _covered(asked, matrices[p], position - int(offsets[p])), position

    asked.clear()  # scoring a few rows of each part gathers them too
    mask = np.zeros(len(vectors), dtype=bool)
    mask[wanted] = True
    query = np.ones((1, 384), dtype=np.float32)
    rows, scores = vectors.scored(query, mask)
    assert sorted(rows.tolist()) == sorted(wanted.tolist())
    assert np.allclose(scores, (np.concatenate(matrices)[rows] @ query.T).max(axis=1))
    gathered = [(position, p) for position, p in zip(wanted.tolist(), which.tolist()) if p]  # part 0: scored whole
    assert all(_covered(asked, matrices[p], position - int(offsets[p])) for position, p in gathered)

    monkeypatch.setattr(pages, "_MADVISE", None)  # no C library to ask: the same rows
    assert np.array_equal(vectors[wanted], expected)


def test_the_pages_asked_for_a_tables_rows_hold_every_value_those_rows_read(tmp_path, monkeypatch):
    """Each row's fixed-width values, strings and lists of strings lie in the ranges asked for (read back from
    those very addresses), asked page-aligned, in rounds: offsets first, then what they point at."""
    import ctypes

    import pyarrow as pa

    n = 5000
    table = pa.table(
        {
            "row": pa.array(range(n), pa.int64()),
            "line": pa.array([i % 977 for i in range(n)], pa.int32()),
            "path": [f"src/pkg{i % 13}/module_{i}.py" for i in range(n)],
            "refs": [[f"name_{i}_{k}" for k in range(i % 4)] for i in range(n)],
            "text": [f"def f{i}():\n" + "    return 1\n" * (i % 50) for i in range(n)],
        }
    )
    path = tmp_path / "rows.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    mapped = pa.ipc.open_file(pa.memory_map(str(path))).read_all().slice(7)  # a slice: offsets count from it
    rounds: list[list[tuple[int, int]]] = [[]]
    real = pages._ask
    monkeypatch.setattr(pages, "_ask", lambda ranges: rounds.append(list(ranges)) or real(ranges))
    asked: list[tuple[int, int]] = []
    monkeypatch.setattr(pages, "advise", lambda ranges: asked.extend(map(tuple, ranges.tolist())))
    rows = [0, 1, 2500, 4990]
    pages.will_read([(pages.Layout(mapped), rows)])
    assert len(rounds) == 4 and all(start % mmap.PAGESIZE == 0 for start, _ in asked)
    held = b"\0".join(ctypes.string_at(start, size) for start, size in asked)
    for row in rows:
        value = mapped.slice(row, 1).to_pylist()[0]
        assert value["text"].encode() in held and value["path"].encode() in held
        assert all(ref.encode() in held for ref in value["refs"])
        assert np.int64(value["row"]).tobytes() in held and np.int32(value["line"]).tobytes() in held


def test_ranges_are_advised_in_batches_where_the_kernel_takes_them_and_one_by_one_where_it_refuses(
    tmp_path, monkeypatch
):
    """process_madvise advises a gather's ranges a thousand to a system call; a kernel without it (or a sandbox
    that refuses it) gets one madvise a range, the same ranges."""
    matrix = _mapped(tmp_path, "rows.f32", 3000, 384, 0)
    starts = [matrix.ctypes.data + row * matrix.strides[0] for row in (0, 1000, 2999)]
    ranges = np.array([[start - start % mmap.PAGESIZE, mmap.PAGESIZE] for start in starts], dtype=np.int64)
    if pages._BATCHED is not None:  # this kernel takes them: on the project's own machine it does
        assert pages._BATCHED(ranges)
    singles, batches = [], []
    monkeypatch.setattr(pages, "_MADVISE", lambda start, size, advice: singles.append((start, size)) or 0)
    monkeypatch.setattr(pages, "_BATCHED", lambda batch: batches.append(batch.tolist()) or True)
    pages.advise(ranges)
    assert batches == [ranges.tolist()] and singles == []
    monkeypatch.setattr(pages, "_BATCHED", lambda batch: False)  # refused: advised one range at a time
    pages.advise(ranges)
    assert singles == [tuple(r) for r in ranges.tolist()]
