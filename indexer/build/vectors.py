"""A run's vectors: the embed stage (what the planned rows lack in the cache, embedded in batches, each cached at
once), read back from a live snapshot when the cache was lost, and the fast-first tier: the model's static vectors
published first while the backfill embeds the model's own."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from indexer import runs, snapshot
from indexer.build.cache import text_id
from indexer.embed import EMBED_BATCH, embed_text, fast_variant, model_id_for
from indexer.build.progress import Progress
from indexer.snapshot import vector_matrix

if TYPE_CHECKING:
    from indexer.build.work import Run

log = logging.getLogger(__name__)

# fast_first: a run with at least this many chunks lacking the model's vectors (about a minute of the bundled
# model on two cores) publishes the model's static tier first, in seconds, then backfills.
FAST_FIRST_CHUNKS = 2000


def vectors(run: Run, texts: list[str], dim_hint: int | None, show_progress: bool, label: str = "embed"):
    """Vectors for `texts` from the cache, embedding only the texts it lacks (the model loads only then).
    Returns the vectors and how many distinct texts were embedded."""
    cache, model_id = run.cache, run.model_id
    ids = [text_id(t) for t in texts]
    unique = list(dict.fromkeys(ids))
    dim = run.embedder.dim if run.embedder else dim_hint
    found = cache.get_vectors(model_id, unique, dim) if dim else {}
    missing = [i for i in unique if i not in found]
    if missing or dim is None:
        dim = run.embedding_dim(len(missing))
        if not found:
            found = cache.get_vectors(model_id, unique, dim)
            missing = [i for i in unique if i not in found]
    found.update(embed_batches(run, missing, dict(zip(ids, texts)), show_progress, label))
    matrix = np.stack([found[i] for i in ids]) if ids else np.zeros((0, dim), dtype=np.float32)
    return matrix.astype(np.float32, copy=False), len(missing)


def embed_batches(
    run: Run,
    ids: list[str],
    text_of: dict[str, str],
    show_progress: bool,
    label: str,
    deadline: float = 0.0,
    after=None,
) -> dict[str, np.ndarray]:
    """Embed the texts of `ids` in batches, here or on the run's Ray cluster, each cached as soon as it lands (a
    killed run loses one batch);
    stop after the batch that passes `deadline` (a time.monotonic(); 0: none). `after(n)` is called with the
    count embedded so far after every batch."""
    done: dict[str, np.ndarray] = {}
    if deadline and time.monotonic() >= deadline:
        return done

    def here():
        for start in range(0, len(ids), EMBED_BATCH):
            batch = ids[start : start + EMBED_BATCH]
            yield batch, run.loaded_embedder().embed([text_of[i] for i in batch])

    if run.embeds_on_cluster(len(ids)):
        landed = run.cluster.embed(run.model, run.cfg.encoder, run.model_id, [(i, text_of[i]) for i in ids])
    else:
        landed = here()
    with Progress(label, len(ids), show_progress) as bar:
        for batch, vectors_ in landed:
            new = dict(zip(batch, vectors_))
            run.cache.put_vectors(run.model_id, new)
            done.update(new)
            bar.advance(len(batch))
            if after is not None:
                after(len(done))
            if deadline and time.monotonic() >= deadline:
                break
    return done


def embed_stage(run: Run, texts: list[str], cards: list[str], missing: list[str] | None = None) -> int:
    """A publish's embed stage, between deciding its rows and writing them: the vectors of `texts` (the rows that
    need this model's) and of the repos' `cards` that the cache lacks, embedded here or on the cluster and
    cached batch by batch. `missing`: the text ids the cache lacks, when the caller knows them. Returns how
    many texts of rows it embedded (a card is not a chunk); its time is the report's seconds.embed."""
    t0 = time.monotonic()
    ids = [text_id(t) for t in texts]
    missing = missing_vectors(run, ids) if missing is None else missing
    card_ids = [text_id(c) for c in cards]
    cached = run.cache.vector_ids(run.model_id, card_ids)
    lacking = list(dict.fromkeys([*missing, *(i for i in card_ids if i not in cached)]))
    done = embed_batches(
        run, lacking, {**dict(zip(ids, texts)), **dict(zip(card_ids, cards))}, run.show_progress, "embed"
    )
    run.report.seconds["embed"] += time.monotonic() - t0
    return sum(1 for i in set(missing) if i in done)


def missing_vectors(run: Run, ids: list[str]) -> list[str]:
    """The distinct text ids without the model's vectors in the cache. When many lack them and the live
    snapshot holds the model's vectors (a cache lost, or damaged and set aside), they are read back from it
    first: a snapshot that serves the model's vectors is never replaced by a static tier or re-embedded."""
    unique = list(dict.fromkeys(ids))
    cached = run.cache.vector_ids(run.model_id, unique)
    missing = [i for i in unique if i not in cached]
    prev = run.prev
    if len(missing) >= FAST_FIRST_CHUNKS and prev is not None and prev.model_id == run.model_id:
        try:
            held = _vectors_by_text(snapshot.read_chunks(run.prev_path), set(missing))
        except BaseException as exc:
            if not snapshot.store_error(exc):
                raise
            log.warning("cannot read the model's vectors back from snapshot %s: %s", prev.snapshot_id, exc)
            held = {}
        if held:
            run.cache.put_vectors(run.model_id, held, keep_existing=True)
            missing = [i for i in missing if i not in held]
    return missing


def _vectors_by_text(chunks, wanted: set[str] | None = None) -> dict[str, np.ndarray]:
    """A snapshot's chunk vectors by the id of the text they embed (those in `wanted`, or all)."""
    symbols, texts = chunks.column("symbol").to_pylist(), chunks.column("text").to_pylist()
    found = {}
    for row, (symbol, text) in enumerate(zip(symbols, texts)):
        tid = text_id(embed_text(symbol, text))
        if wanted is None or tid in wanted:
            found[tid] = row
    matrix = vector_matrix(chunks)
    return {tid: matrix[row] for tid, row in found.items()}


def fast_tier(run: Run, missing: list[str]) -> Run | None:
    """The run of the model's static tier when fast_first is on and at least FAST_FIRST_CHUNKS texts lack
    the model's vectors; else None: the model embeds what it lacks and publishes."""
    if not run.cfg.fast_first or len(missing) < FAST_FIRST_CHUNKS:
        return None
    fast = fast_variant(run.model) if run.model_id == model_id_for(run.model) else None  # not a test's embedder
    return replace(run, model=fast, model_id=model_id_for(fast), embedder=None) if fast else None


def backfill(run: Run, missing: list[str], text_of: dict[str, str], serving: str) -> int:
    """Embed the model's missing vectors (the cache keeps each batch) while the static tier `serving` serves,
    until done or backfill_seconds have passed; returns how many are still missing."""
    data_dir = run.cfg.data_dir
    runs.write_backfill(data_dir, serving, run.model_id, len(missing))
    t0 = time.monotonic()
    deadline = t0 + run.cfg.backfill_seconds if run.cfg.backfill_seconds else 0.0
    done = embed_batches(
        run,
        missing,
        text_of,
        run.show_progress,
        "backfill",
        deadline,
        lambda n: runs.write_backfill(data_dir, serving, run.model_id, len(missing) - n),
    )
    run.report.chunks_embedded += len(done)
    run.report.seconds["embed"] += time.monotonic() - t0
    return len(missing) - len(done)
