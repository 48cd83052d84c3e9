"""Approximate vector indexes measured against exact search, to choose one: build time, bytes per vector, query
latency (one thread, as a request runs) and recall@10 after the candidates are rescored exactly from the float
vectors. Vectors come from a data dir's parts (--data; e.g. bench-scale's corpus, hashing embedder) or a .npy
matrix of unit rows (--npy; real-model vectors); --queries of them are held out and asked.

    .venv/bin/python ci/bench_vectors.py --data /tmp/bs/data --limit 300000
    .venv/bin/python ci/bench_vectors.py --npy vectors.npy

Nothing is asserted; it prints one row per index and setting.
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from indexer.snapshot.ann import subquantizers  # noqa: E402

K = 10


def part_vectors(data: Path, limit: int) -> np.ndarray:
    mats, total = [], 0
    for path in sorted(glob.glob(str(data / "parts" / "*" / "chunks.arrow"))):
        column = pa.ipc.open_file(pa.memory_map(path)).read_all().column("vector").combine_chunks()
        mats.append(column.values.to_numpy().reshape(len(column), -1))
        total += len(column)
        if total >= limit:
            break
    return np.ascontiguousarray(np.concatenate(mats)[:limit], dtype=np.float32)


def exact_top(base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    scores = queries @ base.T
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, 1), axis=1), 1)


def rescored(base: np.ndarray, query: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    ids = ids[ids >= 0]
    return ids[np.argsort(-(base[ids] @ query))[:k]]


def measure(name: str, size_bytes: int, built_s: float, search, base, queries, truth, depth: int = K) -> dict:
    seconds, hits = [], 0
    for q, want in zip(queries, truth):
        t0 = time.perf_counter()
        got = rescored(base, q, search(q, depth), K)
        seconds.append(time.perf_counter() - t0)
        # Ties count: copied chunks have equal vectors, and any of them is as near as the one exact search chose.
        nth = base[want[-1]] @ q
        hits += min(K, int(np.sum(base[got] @ q >= nth - 1e-6)))
    seconds.sort()
    row = {
        "index": name,
        "candidates": depth,
        "build_s": round(built_s, 1),
        "bytes_per_vector": round(size_bytes / len(base)),
        "p50_ms": round(statistics.median(seconds) * 1000, 2),
        "p95_ms": round(seconds[int(0.95 * (len(seconds) - 1))] * 1000, 2),
        "recall_at_10": round(hits / (K * len(queries)), 4),
    }
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path)
    parser.add_argument("--npy", type=Path)
    parser.add_argument("--limit", type=int, default=300_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    import faiss
    from usearch.index import Index

    faiss.omp_set_num_threads(1)
    vectors = np.load(args.npy) if args.npy else part_vectors(args.data, args.limit)
    rng = np.random.default_rng(36)
    held = rng.choice(len(vectors), size=args.queries, replace=False)
    queries = vectors[held]
    base = np.ascontiguousarray(np.delete(vectors, held, axis=0))
    n, dim = base.shape
    print(f"{n:,} vectors of {dim} dims, {len(queries)} queries", file=sys.stderr)
    truth = exact_top(base, queries, K)
    asked = (base, queries, truth)
    SQ8 = faiss.ScalarQuantizer.QT_8bit

    measure("exact (float32 matrix product)", base.nbytes, 0.0, lambda q, d: np.argsort(-(base @ q))[:d], *asked)

    t0 = time.perf_counter()
    hnsw = Index(ndim=dim, metric="ip", dtype="i8", connectivity=16, expansion_add=128)
    hnsw.add(np.arange(n), base, threads=2)
    built = time.perf_counter() - t0
    for ef in (64, 128):
        hnsw.expansion_search = ef
        for depth in (20, 50):
            near = lambda q, d: hnsw.search(q, d, threads=1).keys.astype(np.int64)  # noqa: E731
            measure(f"usearch hnsw i8 M=16 ef={ef}", hnsw.serialized_length, built, near, *asked, depth)

    nlist = int(4 * np.sqrt(n))
    ip = faiss.METRIC_INNER_PRODUCT
    for label, make in (
        (
            f"faiss ivf-pq m={dim // 8} 8-bit",
            lambda: faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, dim // 8, 8, ip),
        ),
        (
            f"faiss ivf-pq fast-scan m={subquantizers(dim)} 4-bit",
            lambda: faiss.IndexIVFPQFastScan(faiss.IndexFlatIP(dim), dim, nlist, subquantizers(dim), 4, ip),
        ),
        ("faiss ivf-sq8", lambda: faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(dim), dim, nlist, SQ8, ip)),
        ("faiss hnsw sq8 M=16", lambda: faiss.IndexHNSWSQ(dim, SQ8, 16, ip)),
    ):
        t0 = time.perf_counter()
        index = make()
        index.train(base[rng.choice(n, size=min(n, 50 * nlist), replace=False)])
        index.add(base)
        built, size = time.perf_counter() - t0, faiss.serialize_index(index).nbytes
        for setting in (8, 32) if "ivf" in label else (64, 128):
            if "ivf" in label:
                index.nprobe, name = setting, f"{label} nlist={nlist} nprobe={setting}"
            else:
                index.hnsw.efSearch, name = setting, f"{label} ef={setting}"
            for depth in (50, 100):
                near = lambda q, d: index.search(q[None, :], d)[1][0]  # noqa: E731
                measure(name, size, built, near, *asked, depth)


if __name__ == "__main__":
    main()
