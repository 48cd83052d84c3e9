"""Files derived from a model's weights (an ONNX graph, a static table), cached beside the index, and the error
every encoder raises: one module below the encoders, so a static table and an ONNX graph are cached one way."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from indexer.errors import BlobdexError


class EmbedError(BlobdexError):
    """The embedding model cannot be loaded or run; the message says what to do."""


def cached_artifact(
    directory: Path | None, model: Path, recipe: str, suffix: str, writable: bool, build
) -> Path | bytes:
    """A file derived from a model's weights by `build()` (its bytes): its path in `directory` (named by the
    recipe and the weights file's path, size and time) when it is there or this process may keep it
    (`writable`: only the indexer writes the cache), else the bytes, built in memory. Written whole or not at
    all: synced to a temporary name, then renamed; the temporary file never outlives a failure."""
    if directory is None:
        return build()
    weights = (model / "model.safetensors").resolve()
    stat = weights.stat()
    key = f"{recipe}|{weights}|{stat.st_size}|{stat.st_mtime_ns}"
    cached = directory / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}{suffix}"
    if cached.is_file():
        return cached
    data = build()
    if not writable:
        return data
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{cached.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, cached)
    finally:
        tmp.unlink(missing_ok=True)
    return cached


def damaged_cache(model_id: str, path: Path, exc: Exception) -> EmbedError:
    """A cached graph or table that cannot be read (a truncated file, another version's): one sentence."""
    why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return EmbedError(
        f"cannot load {model_id!r} from the cached file {str(path)!r} ({why}): delete it and run 'blobdex index', "
        f"which writes it again"
    )
