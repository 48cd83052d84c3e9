"""`blobdex index --dry-run`: what a run would do, before it does it. The mirrors are fetched and the changed
repos scanned as a run would (under the same lock), then nothing is written: no cache entry, no snapshot.

New blobs are counted and a sample of them chunked for at most SAMPLE_SECONDS, and the chunks per byte of the
sample give the estimate for the rest; the texts lacking the model's vectors are counted the same way, and the
model embeds a few of them to measure its speed on this machine.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from indexer import mirror
from indexer.build import (
    RepoWork,
    at_base,
    base_of,
    fetch_refs,
    lock,
    previous_snapshot,
    scan_stage,
)
from indexer.build.changes import scope
from indexer.build.cache import Cache, text_id
from indexer.config import Config
from indexer.embed import Embedder, configured_embedder, embed_text, fast_variant, model_id_for
from indexer.prepare import prepare
from indexer.build.report import RepoReport
from indexer.build.vectors import FAST_FIRST_CHUNKS

SAMPLE_SECONDS = 5.0  # chunking a sample of the new blobs: enough for a stable chunks-per-byte figure
EMBED_SAMPLE = 32  # texts the model embeds to measure its speed (after one warm-up batch)


@dataclass(kw_only=True)
class RepoPlan:
    org: str
    name: str
    status: str  # unchanged | changed | new | failed
    error: str | None = None
    refs: list[dict] = field(default_factory=list)
    paths_changed: int | None = None  # None: every path (a new repo, or one written again whole)


@dataclass(kw_only=True)
class Plan:
    model: str
    previous_snapshot_id: str | None
    repos: list[RepoPlan]
    blobs: int = 0  # at the changed paths
    blobs_new: int = 0  # not in the cache: to read and chunk
    bytes_new: int = 0
    blobs_sampled: int = 0
    chunks_estimated: int = 0  # at the changed paths (exact when every new blob was sampled)
    chunks_to_embed: int = 0  # estimated texts lacking the model's vectors
    chunks_per_second: float | None = None  # the model on this machine, measured
    embed_seconds: float | None = None
    fast_first: bool = False  # the run would publish the static tier first
    would_publish: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def to_text(self) -> str:
        lines = []
        for r in self.repos:
            what = r.status if r.paths_changed is None else f"{r.status}: {r.paths_changed} path(s)"
            lines.append(f"{r.org}/{r.name}: {what}" + (f" ({r.error})" if r.error else ""))
        mib = self.bytes_new / 2**20
        lines.append(f"blobs at changed paths {self.blobs} ({self.blobs_new} new, {mib:.1f} MiB to read and chunk)")
        exact = "" if self.blobs_sampled >= self.blobs_new else f", estimated from {self.blobs_sampled} sampled"
        lines.append(f"chunks {self.chunks_estimated}{exact}; lacking {self.model}'s vectors: {self.chunks_to_embed}")
        if self.embed_seconds is not None:
            lines.append(
                f"embedding: about {_duration(self.embed_seconds)} at {self.chunks_per_second:.1f} chunks/s "
                f"(measured here)" + ("; static vectors would be published first" if self.fast_first else "")
            )
        lines.append("the run would publish a snapshot" if self.would_publish else "the run would publish nothing")
        return "\n".join(lines)


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def plan(cfg: Config, wait: float = 0.0, embedder: Embedder | None = None) -> Plan:
    """What `blobdex index` would do now, measured and estimated, writing nothing but the fetched mirrors."""
    model_id = embedder.model_id if embedder else model_id_for(cfg.model)
    with lock(cfg.data_dir, wait):
        prev_path, prev = previous_snapshot(cfg.data_dir)
        work = [
            RepoWork(spec=s, report=RepoReport(org=s.org, name=s.name, url=mirror.redact(s.url), status="ok"))
            for s in cfg.repos
        ]
        base = base_of(cfg, prev_path, prev, False)
        fetch_refs(cfg, work)
        for w in work:
            w.kept = base is not None and w.ok and at_base(base.manifest, w)
        scan_stage([w for w in work if w.ok and not w.kept])
        scoped, wanted = scope(cfg, work, base)
        result = Plan(model=model_id, previous_snapshot_id=prev.snapshot_id if prev else None, repos=[])
        for w in work:
            before = base.manifest.repo(*w.spec.key) if base else None
            status = "failed" if not w.ok else "unchanged" if w.kept else "changed" if before else "new"
            paths = scoped.get(w.spec.key, (None, None, None))[1]
            result.repos.append(
                RepoPlan(
                    org=w.spec.org,
                    name=w.spec.name,
                    status=status,
                    error=w.report.error,
                    refs=w.report.refs,
                    paths_changed=len(paths) if paths is not None else None,
                )
            )
        sample = _estimate(cfg, result, wanted, model_id)
    result.would_publish = _publishes(cfg, result, prev, model_id)
    if result.chunks_to_embed:
        _measure(cfg, result, embedder, sample)
        fast = cfg.fast_first and fast_variant(cfg.model) is not None and result.chunks_to_embed >= FAST_FIRST_CHUNKS
        result.fast_first = fast and (prev is None or prev.model_id != model_id)
    return result


def _publishes(cfg: Config, result: Plan, prev, model_id: str) -> bool:
    """Whether the run would publish: a repo changed, came or went, one fails for the first time or recovers (a
    repo that fails again is left stale as the live snapshot holds it), or the vectors change model."""
    if prev is None or prev.model_id != model_id or any(r.status in ("changed", "new") for r in result.repos):
        return True
    failed = {(r.org, r.name) for r in result.repos if r.status == "failed"}
    return {r.key for r in cfg.repos} != {(r.org, r.name) for r in prev.repos} or any(
        (r.status != "ok") != ((r.org, r.name) in failed) for r in prev.repos
    )


def _estimate(cfg: Config, result: Plan, wanted: dict, model_id: str) -> list[str]:
    """Blobs, bytes, chunks and chunks lacking vectors at the changed paths: cached entries exactly, new blobs
    from a sample chunked for at most SAMPLE_SECONDS (nothing is cached). Returns texts to measure the model on."""
    cache = Cache(cfg.data_dir / "cache")
    try:
        entries = cache.get_blobs(list(wanted))
        new = [k for k in wanted if k not in entries]
        texts = [embed_text(c.symbol, c.text) for e in entries.values() for c in e.chunks]
        sampled_bytes, sampled_chunks, sampled_texts, sizes = 0, 0, [], {}
        deadline = time.monotonic() + SAMPLE_SECONDS
        for key in new:
            path, blob_id, lang, released = wanted[key]
            with mirror.open_mirror(path) as repo:
                data = repo.object_store[blob_id.encode()].as_raw_string()
            sizes[key] = len(data)
            if time.monotonic() < deadline:
                entry = prepare(data, lang, cfg.max_blob_bytes, released=released)
                result.blobs_sampled += 1
                sampled_bytes += len(data)
                sampled_chunks += len(entry.chunks)
                sampled_texts += [embed_text(c.symbol, c.text) for c in entry.chunks]
        result.blobs, result.blobs_new, result.bytes_new = len(wanted), len(new), sum(sizes.values())
        rest = result.bytes_new - sampled_bytes
        per_byte = sampled_chunks / sampled_bytes if sampled_bytes else 0.0
        result.chunks_estimated = len(texts) + sampled_chunks + round(rest * per_byte)
        known = list(dict.fromkeys(text_id(t) for t in texts + sampled_texts))
        lacking = len(known) - len(cache.vector_ids(model_id, known))
        share = lacking / len(known) if known else 1.0
        result.chunks_to_embed = lacking + round(rest * per_byte * share)
    finally:
        cache.close()
    return sampled_texts or texts


def _measure(cfg: Config, result: Plan, embedder: Embedder | None, texts: list[str]) -> None:
    """The model's chunks per second here, on a few of the texts the run would embed (the first batch warms up)."""
    embedder = embedder or configured_embedder(cfg)
    sample = (texts * EMBED_SAMPLE)[:EMBED_SAMPLE]
    if not sample:
        return
    embedder.embed(sample[:8])
    started = time.perf_counter()
    embedder.embed(sample)
    result.chunks_per_second = len(sample) / max(time.perf_counter() - started, 1e-6)
    result.embed_seconds = result.chunks_to_embed / result.chunks_per_second
