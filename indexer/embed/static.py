"""The `fast` profile: a static embedding model distilled from a BERT sentence model, in the way model2vec
distills one, with blobdex's own ONNX encoder instead of torch.

Distilling: every word piece of the model's vocabulary is read by the model alone ([CLS] piece [SEP]) and its
output averaged over the three positions; the vocabulary's vectors are reduced to PCA_DIMS by PCA and each
weighted by SIF_COEFFICIENT / (SIF_COEFFICIENT + p), p the piece's probability by Zipf's law over the vocabulary
order (model2vec's defaults: 256 dimensions, 1e-4). A text's vector is then the mean of its pieces' vectors,
normalised: no attention, a table lookup (of the first MAX_TOKENS pieces). The table is written once per model
and cached beside the ONNX graphs (the indexer writes it; a query process that finds none distills in memory,
to the same table: the PCA's signs are fixed below, so no machine's eigensolver can flip an axis).

The distilled vectors are another model's: the model id is the base's with embed.STATIC, and its snapshots
and cached vectors are its own.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np

from indexer.embed.artifacts import cached_artifact, damaged_cache

# 1: the distillation above (graph output `pooled`, PCA by eigendecomposition, SIF weights).
STATIC_VERSION = 1
PCA_DIMS = 256
SIF_COEFFICIENT = 1e-4
MAX_TOKENS = 512  # pieces read per text, as model2vec reads by default; a chunk is rarely longer
DISTILL_BATCH = 512
UNUSED_RE = re.compile(r"^\[unused\d+\]$")  # BERT's reserved pieces: never produced by the tokenizer


class StaticEmbedder:
    """Mean of per-piece vectors (a table distilled by `distill`), normalised."""

    def __init__(self, model_id: str, tokenizer_path: Path, table: np.ndarray):
        from tokenizers import Tokenizer

        self.model_id = model_id
        self.dim = int(table.shape[1])
        self.max_tokens = MAX_TOKENS
        self._table = table
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._unknown = self._tokenizer.token_to_id("[UNK]")

    def fits(self, text: str) -> bool:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids) <= self.max_tokens

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, encoded in enumerate(self._tokenizer.encode_batch(texts, add_special_tokens=False)):
            ids = [i for i in encoded.ids[: self.max_tokens] if i != self._unknown]
            if ids:
                vector = self._table[ids].mean(axis=0)
                out[row] = vector / (np.linalg.norm(vector) or 1.0)
        return out


def distill(encoder, tokenizer_path: Path) -> np.ndarray:
    """The static table of a BERT sentence model (`encoder`: an embed.OnnxEmbedder of it), one row per piece."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    vocabulary = tokenizer.get_vocab()
    size = max(vocabulary.values()) + 1
    cls, sep = vocabulary["[CLS]"], vocabulary["[SEP]"]
    pooled = np.zeros((size, encoder.dim), dtype=np.float32)
    for start in range(0, size, DISTILL_BATCH):
        ids = np.arange(start, min(start + DISTILL_BATCH, size), dtype=np.int64)
        batch = np.stack([np.full_like(ids, cls), ids, np.full_like(ids, sep)], axis=1)
        pooled[ids] = encoder.pooled(batch, np.ones_like(batch))
    kept = np.asarray(sorted(i for piece, i in vocabulary.items() if not UNUSED_RE.match(piece)))
    # PCA fitted on the pieces text can produce (model2vec drops the reserved ones), applied to all
    mean = pooled[kept].mean(axis=0)
    centred = pooled[kept] - mean
    eigenvalues, eigenvectors = np.linalg.eigh(centred.T @ centred / (len(kept) - 1))
    components = eigenvectors[:, ::-1][:, :PCA_DIMS]
    reduced = (pooled - mean) @ components
    signs = np.sign(reduced[kept][np.argmax(np.abs(reduced[kept]), axis=0), np.arange(components.shape[1])])
    reduced *= np.where(signs == 0, 1, signs)
    rank = np.empty(size)
    rank[kept] = np.arange(len(kept))
    rank[np.setdiff1d(np.arange(size), kept)] = len(kept)
    probability = (1 / (rank + 2)) / np.sum(1 / (np.arange(len(kept)) + 2))
    weights = SIF_COEFFICIENT / (SIF_COEFFICIENT + probability)
    return (reduced * weights[:, None]).astype(np.float32)


def table(encoder, path: Path, directory: Path | None, writable: bool, model_id: str) -> np.ndarray:
    """The model's static table, distilled at most once per STATIC_VERSION with `encoder()` (loaded only
    then): from the cache when it is there, else distilled now (kept when `writable`)."""

    def build() -> bytes:
        out = io.BytesIO()
        np.save(out, distill(encoder(), path / "tokenizer.json"))
        return out.getvalue()

    found = cached_artifact(directory, path, f"static|{STATIC_VERSION}", ".static.npy", writable, build)
    if isinstance(found, bytes):
        return np.load(io.BytesIO(found))
    try:
        return np.load(found)
    except (OSError, ValueError, EOFError) as exc:
        raise damaged_cache(model_id, found, exc) from exc
