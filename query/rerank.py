"""An optional cross-encoder pass over the head of a hybrid ranking.

Off unless `reranker` in blobdex.toml names a sentence-transformers CrossEncoder, as a local path:
nothing is downloaded at run time. A cross-encoder reads the query and a chunk together, which
neither the bi-encoder vectors nor BM25 can, at the price of one model call per candidate, so it
reorders only the first RERANK_POOL candidates and leaves the rest in fused order.
"""

from __future__ import annotations

import logging

import numpy as np

from indexer.embed import TORCH_ADVICE, offline_hub
from indexer.errors import BlobdexError

log = logging.getLogger(__name__)

RERANK_POOL = 30


class RerankError(BlobdexError):
    """The configured reranker cannot be loaded or run; the message says what to do."""


class Reranker:
    def __init__(self, name: str):
        offline_hub()
        try:
            from sentence_transformers import CrossEncoder
            from transformers.utils import logging as hf_logging
        except ImportError as exc:
            raise RerankError(f"cannot load reranker {name!r} without torch: {TORCH_ADVICE}") from exc
        try:
            hf_logging.disable_progress_bar()
            self.model = CrossEncoder(name)
        except Exception as exc:  # the library raises many types for "cannot load"
            raise RerankError(
                f"cannot load reranker {name!r}: {exc}; set `reranker` in blobdex.toml to a local "
                f"sentence-transformers CrossEncoder directory, or remove it to search without "
                f"one"
            ) from exc
        self.model_id = name
        log.info("reranking with %s", name)

    def rerank(self, query: str, ranked: list, text_of) -> list[tuple[object, float | None]]:
        """`ranked` with its first RERANK_POOL items in the cross-encoder's order (ties keep the fused
        order), each paired with its score; the items after the pool follow unscored."""
        head = ranked[:RERANK_POOL]
        if not head:
            return []
        scores = np.asarray(
            self.model.predict([(query, text_of(x)) for x in head], show_progress_bar=False), dtype=np.float32
        ).reshape(len(head), -1)[:, 0]
        order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
        return [(head[i], float(scores[i])) for i in order] + [(x, None) for x in ranked[RERANK_POOL:]]


def load_reranker(name: str | None) -> Reranker | None:
    return Reranker(name) if name else None
