"""How many threads a server's numeric libraries run: one each."""

from __future__ import annotations


def one_thread_numerics() -> None:
    """Hold a server's numeric libraries (numpy's OpenBLAS, faiss's OpenBLAS and OpenMP) to one thread each: a
    search runs BM25 on a thread of its own beside its vector search, and a server answers requests side by side,
    so their threads (one a core) only took cores from those, spinning after every call. Served alone at 10M
    chunks on two cores: search p50 / p95 90 / 111 ms with a thread a core, 66-68 / 78-94 with one. Loaded first:
    limits reach the libraries loaded (threadpoolctl); the encoder's runtime keeps its own threads."""
    import faiss  # noqa: F401
    import numpy  # noqa: F401
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
