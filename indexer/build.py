"""One index run: mirror -> scan -> (new blobs only) chunk + embed -> write -> publish.

Safe to run from cron on every push: a lock keeps runs apart, caches make unchanged content
free, and a repo that fails keeps the content the previous snapshot had for it (marked stale).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import shutil
import sqlite3
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from indexer import mirror, snapshot
from indexer.cache import Cache, text_id
from indexer.cards import card_texts
from indexer.config import Config, RepoSpec
from indexer.errors import BlobdexError
from indexer.embed import Embedder, configured_embedder, embed_text, fast_variant, model_id_for, vector_tier
from indexer.ignore import SkipReason
from indexer.prepare import BlobEntry, prepare
from indexer.progress import Progress
from indexer.report import Report, RepoReport
from indexer.rows import Tables, add_repo, carried, entry_lookup
from indexer.scan import RefScan, ScanError, resolve_ref, scan_commit
from indexer.snapshot import FACT_COLUMNS, Manifest, RepoState, vector_matrix
from indexer.verify import open_check
from indexer.versions import TOOLS
from indexer.write import write_cards, write_chunks, write_graph, write_lexical

log = logging.getLogger(__name__)

EMBED_BATCH = 256  # texts per model call; vectors are cached after every batch, so a crash loses little
CHUNK_CACHE_BATCH = 500
# fast_first: a run with at least this many chunks lacking the model's vectors (about a minute of the bundled
# model on two cores) publishes the model's static tier first, in seconds, then backfills.
FAST_FIRST_CHUNKS = 2000


class RunError(BlobdexError):
    """The run as a whole cannot proceed (lock held, no repos); per-repo failures are report data."""


class LockBusy(RunError):
    """Another run holds the lock: try again later; nothing is wrong with the input."""

    exit_code = 75  # EX_TEMPFAIL (sysexits.h): cron wrappers retry, they do not page anyone


class DiskFull(RunError):
    """The disk filled up while the run wrote; the previous snapshot keeps serving."""

    exit_code = 1  # a failed run, like a failed repo; 2 stays for bad input


@dataclass(kw_only=True)
class _RepoWork:
    spec: RepoSpec
    report: RepoReport
    scans: list[RefScan] = field(default_factory=list)
    mirror_path: Path | None = None


@contextmanager
def _lock(data_dir: Path):
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "index.lock"
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise LockBusy(
                f"another 'blobdex index' is running on {str(data_dir)!r} (it holds {str(path)!r}); "
                f"wait for it to finish"
            ) from exc
        yield


def run(cfg: Config, full: bool = False, embedder: Embedder | None = None, show_progress: bool = True) -> Report:
    if not cfg.repos:
        raise RunError(f"no repos configured in {str(cfg.path)!r}: add one with 'blobdex repo add NAME URL'")
    with _lock(cfg.data_dir):
        try:
            return _run(cfg, full, embedder, show_progress)
        except BaseException as exc:
            if _no_space(exc):
                free = shutil.disk_usage(cfg.data_dir).free // 2**20
                raise DiskFull(
                    f"no space left on device while writing to {str(cfg.data_dir)!r} ({free} MB free); "
                    f"free space and run 'blobdex index' again (the previous snapshot keeps "
                    f"serving)"
                ) from exc
            raise


def _no_space(exc: BaseException | None) -> bool:
    """True when `exc` or what it was raised from reports a full disk, in any store's words: OSError ENOSPC,
    sqlite's SQLITE_FULL, or Lance's RuntimeError carrying the OS message."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return True
        if "No space left on device" in str(exc) or "os error 28" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _previous(data_dir: Path) -> tuple[Path | None, Manifest | None]:
    try:
        return snapshot.open_manifest(data_dir)
    except snapshot.SnapshotError as exc:
        if snapshot.current_id(data_dir) is not None:
            log.warning("previous snapshot is unreadable, building from scratch: %s", exc)
        return None, None


def _run(cfg: Config, full: bool, embedder: Embedder | None, show_progress: bool) -> Report:
    started = time.monotonic()
    model_id = embedder.model_id if embedder else model_id_for(cfg.model)
    report = Report(model=model_id)
    _sweep(cfg, report)
    prev_path, prev = _previous(cfg.data_dir)
    report.previous_snapshot_id = prev.snapshot_id if prev else None
    work = [
        _RepoWork(spec=s, report=RepoReport(org=s.org, name=s.name, url=mirror.redact(s.url), status="ok"))
        for s in cfg.repos
    ]
    report.repos = [w.report for w in work]

    t0 = time.monotonic()
    _mirror_stage(cfg, work)
    report.seconds["mirror"] = time.monotonic() - t0
    t0 = time.monotonic()
    _scan_stage(work)
    report.seconds["scan"] = time.monotonic() - t0

    if all(w.report.status != "ok" for w in work):
        _note(
            report,
            "nothing published: every repo failed this run, so there is nothing new to serve"
            + (f"; snapshot {prev.snapshot_id} keeps serving" if prev else "")
            + "; fix the errors above and run 'blobdex index' again",
        )
        return report
    wanted = _wanted(cfg, work)
    report.blobs = len(wanted)
    if not full and prev is not None and _unchanged(cfg, prev, work, model_id):
        problem = open_check(prev_path, prev)
        if problem is None:
            report.unchanged = True
            report.snapshot_id = prev.snapshot_id
            _fill_from_manifest(report, prev)
            return report
        _note(report, f"rebuilding: nothing changed upstream, but snapshot {prev.snapshot_id} is damaged ({problem})")

    cache = Cache(cfg.data_dir / "cache")
    try:
        cache.forget_other_versions()
        run = Run(
            cfg=cfg,
            report=report,
            cache=cache,
            work=work,
            model=cfg.model,
            model_id=model_id,
            prev_path=prev_path,
            prev=prev,
            show_progress=show_progress,
            started=started,
            embedder=embedder,
        )
        return _build(run, wanted)
    finally:
        if cache.moved_aside is not None:  # the cache logged it already
            report.notes.append(cache.moved_aside)
        cache.close()


def _mirror_stage(cfg: Config, work: list[_RepoWork]) -> None:
    """Fetch every repo's mirror; a repo that cannot be fetched is marked stale, the others go on."""
    for w in work:
        try:
            w.mirror_path = mirror.fetch(cfg.data_dir, w.spec)
        except mirror.MirrorError as exc:
            _mark_stale(w, str(exc))
        except Exception as exc:  # a hostile or broken remote must not stop the other repos
            log.debug("fetch of %s failed", w.spec.name, exc_info=True)
            _mark_stale(
                w,
                f"cannot fetch repo {w.spec.name!r} from {w.report.url}: unexpected "
                f"{type(exc).__name__}: {exc}; run 'blobdex -v index' for details",
            )


def _scan_stage(work: list[_RepoWork]) -> None:
    """Resolve and scan every configured ref of each fetched repo; a repo that cannot be scanned is marked stale."""
    for w in work:
        if w.report.status != "ok":
            continue
        try:
            with mirror.open_mirror(w.mirror_path) as repo:
                for ref in w.spec.refs or (None,):
                    full_ref, commit_id = resolve_ref(repo, ref, w.spec.name)
                    w.scans.append(scan_commit(repo, full_ref, commit_id, w.spec.include, w.spec.exclude))
                    w.report.refs.append({"ref": full_ref, "commit_id": commit_id})
        except (ScanError, mirror.MirrorError) as exc:
            _mark_stale(w, str(exc))
        except Exception as exc:  # corrupt objects in a mirror: this repo only
            log.debug("scan of %s failed", w.spec.name, exc_info=True)
            _mark_stale(
                w,
                f"cannot scan repo {w.spec.name!r}: {type(exc).__name__}: {exc}; delete its mirror "
                f"({w.mirror_path}) and run 'blobdex index' to fetch it again",
            )


def _note(report: Report, sentence: str) -> None:
    """Something the run repaired or refused, said once in the log and once in the report."""
    log.warning("%s", sentence)
    report.notes.append(sentence)


def _sweep(cfg: Config, report: Report) -> None:
    """Delete what interrupted runs left (under the lock, on every run, changed or not)."""
    removed = snapshot.sweep(cfg.data_dir) + mirror.sweep(cfg.data_dir)
    if removed:
        _note(report, f"removed {len(removed)} leftover(s) of interrupted runs: {', '.join(removed)}")


def _mark_stale(w: _RepoWork, error: str) -> None:
    log.error("%s/%s: %s", w.spec.org, w.spec.name, error)
    w.report.status, w.report.error = "stale", error
    w.scans, w.report.refs = [], []


def _unchanged(cfg: Config, prev: Manifest, work: list[_RepoWork], model_id: str) -> bool:
    """True when a rebuild would reproduce `prev`: same repos at the same commits, same tools."""
    built_with = (prev.format_version, prev.model_id, prev.tools, prev.max_blob_bytes)
    if built_with != (snapshot.FORMAT_VERSION, model_id, TOOLS, cfg.max_blob_bytes):
        return False
    if {(r.org, r.name) for r in prev.repos} != {w.spec.key for w in work}:
        return False
    for w in work:
        before = prev.repo(*w.spec.key)
        if w.report.status != "ok" or before.status != "ok" or before.url != w.report.url:
            return False
        if (before.include, before.exclude) != (list(w.spec.include), list(w.spec.exclude)):
            return False
        if [(r.ref, r.commit_id) for r in before.refs] != [(s.ref, s.commit_id) for s in w.scans]:
            return False
    return True


def _fill_from_manifest(report: Report, prev: Manifest) -> None:
    report.repos = [
        RepoReport(
            org=r.org,
            name=r.name,
            url=r.url,
            status=r.status,
            error=r.error,
            refs=[{"ref": x.ref, "commit_id": x.commit_id} for x in r.refs],
            files=r.files,
            files_indexed=r.files_indexed,
            chunks=r.chunks,
        )
        for r in prev.repos
    ]
    report.chunks_reused = prev.chunks
    _totals(report, prev)


def _wanted(cfg: Config, work: list[_RepoWork]) -> dict[str, tuple[Path, str, str]]:
    """Every (blob, language) the scans reach that its path does not rule out: cache key -> where to read it."""
    wanted: dict[str, tuple[Path, str, str]] = {}
    for w in work:
        for scan in w.scans:
            for f in scan.files:
                if f.skip is None:
                    key = Cache.blob_key(f.blob_id, f.lang, cfg.max_blob_bytes)
                    wanted.setdefault(key, (w.mirror_path, f.blob_id, f.lang))
    return wanted


@dataclass(kw_only=True)
class Run:
    """What every stage of one build reads: the config, the report it fills, the cache, the model and the
    previous snapshot. Not frozen: the embedder is loaded at most once, by the first stage that needs it."""

    cfg: Config
    report: Report
    cache: Cache
    work: list[_RepoWork]
    model: str  # the model's name, as load_embedder takes it
    model_id: str
    prev_path: Path | None
    prev: Manifest | None
    show_progress: bool
    started: float  # time.monotonic() at the run's start
    embedder: Embedder | None = None

    def loaded_embedder(self) -> Embedder:
        if self.embedder is None:
            self.embedder = configured_embedder(self.cfg, self.model, writable=True)
        return self.embedder


def _chunk_stage(run: Run, wanted: dict[str, tuple[Path, str, str]]) -> dict[str, BlobEntry]:
    """Each wanted blob's entry, from the cache or prepared now (new blobs only)."""
    cache, report = run.cache, run.report
    entries = cache.get_blobs(list(wanted))
    missing = [k for k in wanted if k not in entries]
    report.blobs_new = len(missing)
    by_mirror: dict[Path, list[str]] = defaultdict(list)
    for key in missing:
        by_mirror[wanted[key][0]].append(key)
    with Progress("chunk", len(missing), run.show_progress) as bar:
        for mirror_path, keys in by_mirror.items():
            with mirror.open_mirror(mirror_path) as repo:
                pending: dict[str, BlobEntry] = {}
                for key in keys:
                    _, blob_id, lang = wanted[key]
                    try:
                        data = repo.object_store[blob_id.encode()].as_raw_string()
                        pending[key] = prepare(data, lang, run.cfg.max_blob_bytes, seconds=report.seconds)
                    except Exception as exc:  # one bad file is recorded, never aborts a repo
                        log.warning("cannot read or chunk blob %s (%s): %s", blob_id, lang, exc)
                        # Recorded for this run only, never cached: a missing object may be fetched later,
                        # and a crash may be fixed by the next version; the next run tries again.
                        entries[key] = BlobEntry(size=0, skip=SkipReason.UNREADABLE.value)
                    bar.advance()
                    if len(pending) >= CHUNK_CACHE_BATCH:
                        cache.put_blobs(pending)
                        entries.update(pending)
                        pending = {}
                cache.put_blobs(pending)
                entries.update(pending)
    return entries


def _rows(run: Run, entries: dict[str, BlobEntry]) -> tuple[Tables, dict]:
    """Rows of every repo scanned this run, and their manifest states."""
    tables, states = Tables(), {}
    entry_of = entry_lookup(entries, run.cfg.max_blob_bytes)
    for w in run.work:
        if w.report.status != "ok":
            continue
        state = add_repo(tables, w.spec.org, w.spec.name, w.report.url, w.scans, entry_of, snapshot.now_iso())
        state.include, state.exclude = list(w.spec.include), list(w.spec.exclude)
        states[w.spec.key] = state
        w.report.files, w.report.files_indexed, w.report.chunks = state.files, state.files_indexed, state.chunks
    return tables, states


def _vectors(
    run: Run, texts: list[str], dim_hint: int | None, show_progress: bool, label: str = "embed"
) -> tuple[np.ndarray, int]:
    """Vectors for `texts` from the cache, embedding only the texts it lacks (the model loads only then).
    Returns the vectors and how many distinct texts were embedded."""
    cache, model_id = run.cache, run.model_id
    ids = [text_id(t) for t in texts]
    unique = list(dict.fromkeys(ids))
    dim = run.embedder.dim if run.embedder else dim_hint
    found = cache.get_vectors(model_id, unique, dim) if dim else {}
    missing = [i for i in unique if i not in found]
    if missing or dim is None:
        dim = run.loaded_embedder().dim
        if not found:
            found = cache.get_vectors(model_id, unique, dim)
            missing = [i for i in unique if i not in found]
    found.update(_embed(run, missing, dict(zip(ids, texts)), show_progress, label))
    matrix = np.stack([found[i] for i in ids]) if ids else np.zeros((0, dim), dtype=np.float32)
    return matrix.astype(np.float32, copy=False), len(missing)


def _embed(
    run: Run,
    ids: list[str],
    text_of: dict[str, str],
    show_progress: bool,
    label: str,
    deadline: float = 0.0,
    after=None,
) -> dict[str, np.ndarray]:
    """Embed the texts of `ids` in batches, each cached as soon as it is done (a killed run loses one batch);
    stop after the batch that passes `deadline` (a time.monotonic(); 0: none). `after(n)` is called with the
    count embedded so far after every batch."""
    done: dict[str, np.ndarray] = {}
    with Progress(label, len(ids), show_progress) as bar:
        for start in range(0, len(ids), EMBED_BATCH):
            if deadline and time.monotonic() >= deadline:
                break
            batch = ids[start : start + EMBED_BATCH]
            new = dict(zip(batch, run.loaded_embedder().embed([text_of[i] for i in batch])))
            run.cache.put_vectors(run.model_id, new)
            done.update(new)
            bar.advance(len(batch))
            if after is not None:
                after(len(done))
    return done


def _carry_forward(run: Run, tables: Tables, states: dict) -> None:
    """Append the previous snapshot's rows of repos that failed this run, so they keep serving. Their vectors
    go to the cache under the previous snapshot's model, to be read back like any chunk's (a run with
    another model embeds their texts instead)."""
    prev = run.prev
    stale = [w for w in run.work if w.report.status != "ok" and prev is not None and prev.repo(*w.spec.key)]
    if stale:
        chunks, others = carried(run.prev_path, [w.spec.key for w in stale])
        tables.extend(tables.chunks, chunks)
        tables.extend(tables.files, others["files"])
        for name, table in others.items():
            if name != "files":
                tables.extend(tables.facts[name], table)
        run.cache.put_vectors(prev.model_id, _vectors_by_text(chunks), keep_existing=True)
    for w in stale:
        before = prev.repo(*w.spec.key)
        states[w.spec.key] = RepoState(**{**before.__dict__, "status": "stale", "error": w.report.error})
        w.report.refs = [{"ref": r.ref, "commit_id": r.commit_id} for r in before.refs]
        w.report.files, w.report.files_indexed, w.report.chunks = before.files, before.files_indexed, before.chunks
    for w in run.work:
        if w.spec.key not in states:  # failed, and nothing earlier to keep serving
            states[w.spec.key] = RepoState(
                org=w.spec.org,
                name=w.spec.name,
                url=w.report.url,
                status="stale",
                error=w.report.error,
                indexed_at=None,
            )


def _build(run: Run, wanted: dict) -> Report:
    """Chunk, then publish: the model's static tier first when the model has much to embed (fast_first),
    then, once every chunk has the model's vectors, the model's own snapshot."""
    report = run.report
    t0 = time.monotonic()
    entries = _chunk_stage(run, wanted)
    tables, states = _rows(run, entries)
    _carry_forward(run, tables, states)
    report.seconds["chunk"] = time.monotonic() - t0 - report.seconds["extract"]
    texts = [embed_text(s, t) for s, t in zip(tables.chunks["symbol"], tables.chunks["text"])]
    ids = [text_id(t) for t in texts]
    missing = _missing(run, ids)
    fast_run = _fast_tier(run, missing)
    if fast_run is not None:
        lacking = set(missing)
        report.chunks_reused = sum(1 for i in ids if i not in lacking)
        if not _serves(run, fast_run):
            serving = _publish(fast_run, tables, states, texts, backfill_model_id=run.model_id, backlog=len(missing))
        else:
            serving = report.snapshot_id = run.prev.snapshot_id
            _totals(report, run.prev)
        left = _backfill(run, missing, dict(zip(ids, texts)), serving)
        report.backlog = left
        if left:  # backfill_seconds ran out
            _note(
                report,
                f"snapshot {serving} serves static vectors ({fast_run.model_id}); {left} of its chunks still lack "
                f"{run.model_id}'s: this run stopped embedding after backfill_seconds = {run.cfg.backfill_seconds}, "
                f"the next 'blobdex index' goes on",
            )
            return report
    _publish(run, tables, states, texts)
    snapshot.clear_backfill(run.cfg.data_dir)
    return report


def _missing(run: Run, ids: list[str]) -> list[str]:
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


def _fast_tier(run: Run, missing: list[str]) -> Run | None:
    """The run of the model's static tier when fast_first is on and at least FAST_FIRST_CHUNKS texts lack
    the model's vectors; else None: the model embeds what it lacks and publishes."""
    if not run.cfg.fast_first or len(missing) < FAST_FIRST_CHUNKS:
        return None
    fast = fast_variant(run.model) if run.model_id == model_id_for(run.model) else None  # not a test's embedder
    return replace(run, model=fast, model_id=model_id_for(fast), embedder=None) if fast else None


def _serves(run: Run, fast_run: Run) -> bool:
    """Whether the live snapshot is the static tier of exactly what this run would publish (a run that goes on
    with the backfill of an unchanged corpus publishes nothing first)."""
    prev = run.prev
    return (
        prev is not None
        and prev.backfill_model_id == run.model_id
        and _unchanged(run.cfg, prev, run.work, fast_run.model_id)
        and open_check(run.prev_path, prev) is None
    )


def _backfill(run: Run, missing: list[str], text_of: dict[str, str], serving: str) -> int:
    """Embed the model's missing vectors (the cache keeps each batch) while the static tier `serving` serves,
    until done or backfill_seconds have passed; returns how many are still missing."""
    data_dir = run.cfg.data_dir
    snapshot.write_backfill(data_dir, serving, run.model_id, len(missing))
    t0 = time.monotonic()
    deadline = t0 + run.cfg.backfill_seconds if run.cfg.backfill_seconds else 0.0
    done = _embed(
        run,
        missing,
        text_of,
        run.show_progress,
        "backfill",
        deadline,
        lambda n: snapshot.write_backfill(data_dir, serving, run.model_id, len(missing) - n),
    )
    run.report.chunks_embedded += len(done)
    run.report.seconds["embed"] += time.monotonic() - t0
    return len(missing) - len(done)


def _publish(run: Run, tables: Tables, states: dict, texts: list[str], **manifest_fields) -> str:
    """Embed what the run's model lacks, write every store into a new snapshot, publish it; returns its id."""
    cfg, report, prev = run.cfg, run.report, run.prev
    t0 = time.monotonic()
    dim_hint = prev.dim if prev is not None and prev.model_id == run.model_id else None
    vectors, embedded = _vectors(run, texts, dim_hint, run.show_progress)
    if run.model_id == report.model:  # the counts are the configured model's: a static tier is a lookup
        report.chunks_embedded += embedded
        report.chunks_reused = len(texts) - report.chunks_embedded
    report.seconds["embed"] += time.monotonic() - t0

    t0 = time.monotonic()
    snapshot_id = snapshot.new_snapshot_id()
    built = snapshot.build_dir(cfg.data_dir, snapshot_id)
    try:
        dim = vectors.shape[1] if len(vectors) else (run.embedder.dim if run.embedder else (dim_hint or 0))
        if dim == 0:
            dim = run.loaded_embedder().dim
        table = write_chunks(built, tables.chunks, vectors.reshape(-1, dim))
        cards = card_texts(tables)
        card_vectors, _ = _vectors(run, list(cards.values()), dim, False)
        write_cards(built, cards, card_vectors.reshape(-1, dim))
        with Progress("lexical", table.num_rows, run.show_progress) as bar:
            write_lexical(built, table, bar)
        edge_count = write_graph(built, tables)
        report.seconds["write"] += time.monotonic() - t0

        t0 = time.monotonic()
        manifest = Manifest(
            snapshot_id=snapshot_id,
            created_at=snapshot.now_iso(),
            model_id=run.model_id,
            dim=dim,
            repos=[states[w.spec.key] for w in run.work],
            max_blob_bytes=cfg.max_blob_bytes,
            edges=edge_count,
            **manifest_fields,
            **TOOLS.as_fields(),
        )
        snapshot.publish(cfg.data_dir, built, manifest)
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise
    snapshot.prune(cfg.data_dir, cfg.keep_snapshots)
    report.seconds["publish"] += time.monotonic() - t0
    report.snapshot_id, report.published = snapshot_id, True
    report.snapshots.append(
        {
            "snapshot_id": snapshot_id,
            "model": run.model_id,
            "tier": vector_tier(run.model_id),
            "seconds": round(time.monotonic() - run.started, 3),
        }
    )
    _totals(report, manifest)
    return snapshot_id


def _totals(report: Report, manifest: Manifest) -> None:
    report.chunks = manifest.chunks
    report.graph = {t: sum(r.graph.get(t, 0) for r in manifest.repos) for t in FACT_COLUMNS}
    report.graph["edges"] = manifest.edges
    report.files = sum(r.files for r in manifest.repos)
    report.files_indexed = sum(r.files_indexed for r in manifest.repos)
    report.files_skipped = Counter()
    for r in manifest.repos:
        report.files_skipped.update(r.files_skipped)
    report.secrets_held_back = sum(r.secrets_held_back for r in manifest.repos)
    report.parse_fallbacks = sum(r.parse_fallbacks for r in manifest.repos)
    report.syntax_errors = sum(r.syntax_errors for r in manifest.repos)
