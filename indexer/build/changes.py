"""What a run changes in each repo it scanned: the paths whose rows differ from the base snapshot's, their new
blobs read and prepared (chunks and facts, cached), and the rows those paths hold now."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from indexer import mirror, snapshot
from indexer.config import Config
from indexer.ignore import SkipReason
from indexer.build.parts import changed_paths
from indexer.prepare import BlobEntry, prepare_batch
from indexer.build.progress import Progress
from indexer.build.resolution import importers, moved, resolve_changes, trees_of
from indexer.build.rows import Tables, add_repo, entry_key, entry_lookup
from indexer.build.work import Change
from indexer.scan import RefScan

if TYPE_CHECKING:
    from indexer.build.work import Base, RepoWork, Run

log = logging.getLogger(__name__)

CHUNK_CACHE_BATCH = 500  # prepared blob entries written to the cache at a time


def scope(cfg: Config, work: list[RepoWork], base: Base | None, again: dict | None = None) -> tuple[dict, dict]:
    """What each scanned repo changes against the base: key -> (its live rows there, the paths it rewrites (None:
    every path), its scans cut to those paths); and every blob those paths hold: cache key -> where to read it
    (mirror, blob_id, lang, the fingerprints of the lines released at its path).
    `again`: key -> unchanged paths to write again all the same (their calls resolve differently now)."""
    scoped, wanted = {}, {}
    for w in work:
        if not w.ok or w.kept:
            continue
        before = base.manifest.repo(*w.spec.key) if base else None
        live = base.live(*w.spec.key) if base else None
        paths = None
        if live is not None and (before.include, before.exclude, before.releases) == w.spec.prepared_as:
            paths = changed_paths(live.table("files"), _scanned_files(w.scans))
            if paths is not None and again:
                paths |= again.get(w.spec.key, set())
        scans = w.scans if paths is None else [_only(s, paths) for s in w.scans]
        scoped[w.spec.key] = (live, paths, scans)
        released = w.spec.released()
        for scan in scans:
            for f in scan.files:
                if f.skip is None:
                    lines = released.get(f.path, frozenset())
                    key = entry_key(f.blob_id, f.lang, cfg.max_blob_bytes, lines)
                    wanted.setdefault(key, (w.mirror_path, f.blob_id, f.lang, lines))
    return scoped, wanted


def changes_of(run: Run) -> dict[tuple[str, str], Change]:
    """Each scanned repo's change: the paths that differ from the base, their blobs chunked (new blobs only),
    their calls resolved against the repo as the run leaves it; and, written again, the unchanged paths whose
    calls now resolve to another definition (a definition moved, a re-export changed)."""
    seen: set[str] = set()  # the blobs the run reads, counted once over both passes
    changes = _changes(run, *scope(run.cfg, run.work, run.base), seen)
    t0, answers = time.monotonic(), {}  # the SCIP indexers' answers, run once per repo
    trees = trees_of(run, changes)
    moves = moved(run, changes, trees)  # what the first pass's changes may move: the calls to resolve again
    again = resolve_changes(run, changes, trees, moves, answers=answers)
    run.report.seconds["resolve"] += time.monotonic() - t0
    if again:
        keys = set(again)
        redo = _changes(run, *scope(run.cfg, [w for w in run.work if w.spec.key in keys], run.base, again), seen)
        changes.update(redo)
        t0 = time.monotonic()
        resolve_changes(run, changes, trees, moves, only=keys, answers=answers)  # same trees: nothing else moves
        run.report.seconds["resolve"] += time.monotonic() - t0
    t0 = time.monotonic()
    for key, (live, paths, new, state) in importers(run, changes, trees, moves).items():
        changes[key] = Change(live=live, paths=paths, new=new, state=state)
    run.report.seconds["resolve"] += time.monotonic() - t0
    return changes


def _changes(run: Run, scoped: dict, wanted: dict, seen: set[str]) -> dict[tuple[str, str], Change]:
    seen.update(wanted)
    run.report.blobs = len(seen)
    entries = _chunk_stage(run, wanted)
    changes = {}
    for w in run.work:
        if w.spec.key not in scoped:
            continue
        live, paths, scans = scoped[w.spec.key]
        tables = Tables()
        entry_of = entry_lookup(entries, run.cfg.max_blob_bytes, w.spec.released())
        state = add_repo(tables, w.spec.org, w.spec.name, w.report.url, scans, entry_of, snapshot.now_iso())
        state.include, state.exclude, state.releases = w.spec.prepared_as
        every = {f.path for s in w.scans for f in s.files}
        new = tables.arrow(sorted(every if paths is None else paths))
        changes[w.spec.key] = Change(live=live, paths=paths, new=new, state=state)
    return changes


def _scanned_files(scans: list[RefScan]) -> pa.Table:
    rows = [(s.ref, f.path, f.blob_id) for s in scans for f in s.files]
    return pa.table(
        {"ref": [r[0] for r in rows], "path": [r[1] for r in rows], "blob_id": [r[2] for r in rows]},
        schema=pa.schema([("ref", pa.string()), ("path", pa.string()), ("blob_id", pa.string())]),
    ).append_column("skip", pa.nulls(len(rows), pa.string()))


def _only(scan: RefScan, paths: set[str]) -> RefScan:
    return RefScan(scan.ref, scan.commit_id, tuple(f for f in scan.files if f.path in paths))


def _chunk_stage(run: Run, wanted: dict[str, tuple[Path, str, str]]) -> dict[str, BlobEntry]:
    """Each wanted blob's entry, from the cache or prepared now (new blobs only), in this process or, for work
    worth its start, on the run's Ray cluster. Entries are cached a batch at a time as they land, except a blob
    that could not be read or prepared: that is recorded for this run only (a missing object may be fetched
    later, a crash fixed by the next version), and the next run tries again."""
    cache, report = run.cache, run.report
    entries = cache.get_blobs(list(wanted))
    missing = [k for k in wanted if k not in entries]
    report.blobs_new += len(missing)
    batches = _batches(_read_blobs(wanted, missing, entries), CHUNK_CACHE_BATCH)
    if run.cluster is not None and run.cluster.worth(blobs=len(missing)):
        landed = run.cluster.prepare(batches, run.cfg.max_blob_bytes)
    else:
        landed = (prepare_batch(batch, run.cfg.max_blob_bytes, report.seconds) for batch in batches)
    with Progress("chunk", len(missing), run.show_progress) as bar:
        for batch, problems in landed:
            for problem in problems:
                log.warning("%s", problem)
            cache.put_blobs({key: entry for key, entry in batch if entry.skip != SkipReason.UNREADABLE.value})
            entries.update(batch)
            bar.advance(len(batch))
    return entries


def _read_blobs(wanted: dict, keys: list[str], entries: dict) -> Iterator[tuple[str, bytes, str]]:
    """(cache key, bytes, lang, released lines) of each blob, mirror by mirror; one that cannot be read is marked
    unreadable."""
    by_mirror: dict[Path, list[str]] = defaultdict(list)
    for key in keys:
        by_mirror[wanted[key][0]].append(key)
    for mirror_path, keys_ in by_mirror.items():
        with mirror.open_mirror(mirror_path) as repo:
            for key in keys_:
                _, blob_id, lang, released = wanted[key]
                try:
                    data = repo.object_store[blob_id.encode()].as_raw_string()
                except Exception as exc:  # a missing or damaged object
                    log.warning("cannot read blob %s (%s): %s", blob_id, lang, exc)
                    entries[key] = BlobEntry(size=0, skip=SkipReason.UNREADABLE.value)
                    continue
                yield key, data, lang, released


def _batches(items: Iterator, size: int) -> Iterator[list]:
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
