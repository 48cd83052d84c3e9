"""Approximate vector search's files: a codebook (an IVF-PQ quantizer, faiss) trained once per model and kept in
every snapshot's directory, and each part's codes of its rows under it (codes.arrow), written with the part.

Why IVF-PQ with one codebook for every part, measured with ci/bench_vectors.py (one thread, candidates rescored
from the float vectors; recall@10 against exact, ties counted):

| vectors | index | bytes a vector | p50 | recall@10 |
|---|---|---|---|---|
| 25k real (MiniLM) | usearch HNSW i8, M=16, ef=64 | 533 | 0.15 ms | 0.995 |
| 25k real | faiss IVF-PQ m=48, nprobe=32, 100 rescored | 111 | 0.24 ms | 0.967 |
| 300k hashed | usearch HNSW i8, ef=128, 50 rescored | 533 | 0.25 ms | 0.981 |
| 300k hashed | faiss IVF-PQ m=48, nprobe=8, 100 rescored | 69 | 0.34 ms | 1.0 |
| 300k hashed | exact, float32 | 1,536 | 38 ms | 1.0 |

HNSW recalls a little better, but holds 533 bytes a vector (5.3 GB at 10M chunks, against a 6 GB serving
budget) and cannot take a filter's mask during the search; IVF-PQ holds about 50 (one list number and 48 code
bytes), takes the mask as a bitmap (faiss.IDSelectorBitmap) and, with one codebook, every part's codes join one
index a query searches once. Per-part indexes would cost a search per part: an org of a thousand repos is a
thousand parts. Lance's IVF-PQ needs a Lance dataset (parts are Arrow IPC since format 3); hnswlib keeps float
vectors only.

The codes are 4-bit (a sub-vector of 4 dimensions each, 96 for 384: the same 48 bytes as 8-bit codes of 8
dimensions), searched by faiss's fast-scan kernel (IndexIVFPQFastScan: the 16-entry distance tables sit in SIMD
registers). At 10M codes a passage over 96 of 1,024 lists took 22-26 ms with 8-bit codes and 2.5 ms with 4-bit
ones (4.3 ms over 192); per code they rank a little worse, which probing more lists and rescoring more candidates
buys back for less than the 8-bit scan costs (query/approximate.py has the figures). A codebook trained before
(8-bit IndexIVFPQ) still serves, at its own settings, until `blobdex index --full` trains a new one.

A part written before the snapshot had a codebook, or under another one, has no usable codes: its rows are
scored exactly. Compaction rewrites a part, and with it its codes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa

CODEBOOK = "codebook.faiss"
CODES = "codes.arrow"
LISTS = 1024  # inverted lists; k-means wants about 40 training vectors a list
TRAIN_ROWS = 50_000  # a snapshot this large gets a codebook: below it, exact search takes ~5 ms
SAMPLE = 65_536  # vectors a codebook is trained on


def subquantizers(dim: int) -> int:
    """PQ's sub-vectors of 4-bit codes: 4 dimensions each (96 for 384), fewer where 4 does not divide the dimension."""
    return next(m for m in (dim // 4, dim // 2, dim) if m and dim % m == 0)


def train(sample: np.ndarray) -> bytes:
    """A codebook trained on unit vectors (inner product), serialized."""
    import faiss

    dim = sample.shape[1]
    index = faiss.IndexIVFPQFastScan(
        faiss.IndexFlatIP(dim), dim, LISTS, subquantizers(dim), 4, faiss.METRIC_INNER_PRODUCT
    )
    index.cp.seed = 36  # the same sample trains the same codebook
    # faiss warns below 39 points a centroid; a snapshot trains only past TRAIN_ROWS (far more), a test on less
    index.cp.min_points_per_centroid = index.pq.cp.min_points_per_centroid = 1
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    return faiss.serialize_index(index).tobytes()


def is_fast(path: Path) -> bool:
    """Whether a codebook file holds 4-bit fast-scan codes, from faiss's four-byte tag alone (no index is read)."""
    with open(path, "rb") as f:
        return f.read(4) == b"IwPf"


def digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()[:16]


class Codebook:
    """A trained codebook, read from its bytes: encodes vectors to codes, and is the empty index a reader fills.
    `fast`: 4-bit codes searched by the fast-scan kernel; else a codebook of 8-bit codes trained before."""

    def __init__(self, blob: bytes):
        import faiss

        self.blob, self.digest = blob, digest(blob)
        self.index = faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))
        self.fast = isinstance(self.index, faiss.IndexIVFPQFastScan)
        if (
            not (self.fast or isinstance(self.index, faiss.IndexIVFPQ))
            or self.index.ntotal
            or not self.index.is_trained
        ):
            raise ValueError("not an empty trained IVF-PQ index")

    @classmethod
    def read(cls, path: Path) -> "Codebook | None":
        return cls(path.read_bytes()) if path.exists() else None

    def encode(self, vectors: np.ndarray) -> np.ndarray:
        """Each vector's code: its list number and PQ code, as faiss's standalone codec writes them."""
        return self.index.sa_encode(np.ascontiguousarray(vectors, dtype=np.float32))


def write_codes(path: Path, codes: np.ndarray, codebook: str) -> None:
    """A part's codes, row for row, naming the codebook they were encoded with."""
    width = codes.shape[1]
    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(codes), [None, pa.py_buffer(codes.tobytes())])
    table = pa.table({"code": column}).replace_schema_metadata({"codebook": codebook})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def read_codes(path: Path) -> tuple[np.ndarray, str]:
    """(codes as a uint8 matrix, a view of the mapped file; the codebook's digest)."""
    reader = pa.ipc.open_file(pa.memory_map(str(path)))
    table = reader.read_all().combine_chunks()
    column = table.column("code").chunk(0) if table.num_rows else None
    width = table.schema.field("code").type.byte_width
    if column is None:
        return np.zeros((0, width), dtype=np.uint8), ""
    data = np.frombuffer(column.buffers()[1], dtype=np.uint8)[
        column.offset * width : (column.offset + len(column)) * width
    ]
    return data.reshape(len(column), width), (table.schema.metadata or {}).get(b"codebook", b"").decode()
