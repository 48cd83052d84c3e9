"""One index run: mirror -> resolve -> scan (changed repos) -> chunk + embed (new blobs) -> write parts -> publish.

Safe to run from cron on every push: a lock keeps runs apart, caches make unchanged content free, a run writes
only the paths that changed (indexer/parts.py), and a repo that fails keeps the content the previous snapshot
had for it (marked stale).
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
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer import mirror, runs, snapshot
from indexer.cache import Cache, text_id
from indexer.config import Config, RepoSpec
from indexer.edges import edges
from indexer.errors import BlobdexError
from indexer.embed import Embedder, configured_embedder, embed_text, fast_variant, model_id_for, vector_tier
from indexer.ignore import SkipReason
from indexer.parts import PartWriter, RepoLive, RepoParts, changed_paths, outside as _outside
from indexer.prepare import BlobEntry, prepare
from indexer.progress import Progress
from indexer.publish import build_dir, prune, publish, sweep
from indexer.report import Report, RepoReport
from indexer.rows import Tables, add_repo, entry_lookup
from indexer.scan import RefScan, ScanError, resolve_ref, scan_commit
from indexer.snapshot import FACT_COLUMNS, Manifest, RepoState, vector_matrix
from indexer.verify import open_check
from indexer.versions import TOOLS
from indexer.write import write_edges, write_lexical, write_views

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
class RepoWork:
    spec: RepoSpec
    report: RepoReport
    refs: list[tuple[str, str]] = field(default_factory=list)  # (ref, commit_id), resolved this run
    scans: list[RefScan] = field(default_factory=list)  # empty when the repo is kept as the base holds it
    mirror_path: Path | None = None
    kept: bool = False  # at the commits the base snapshot holds: its parts are listed again, nothing scanned
    fetched: bool = True  # False: left out of this run (`only`), listed with the state the base has

    @property
    def ok(self) -> bool:
        return self.report.status == "ok"


@dataclass(frozen=True)
class Base:
    """The snapshot a run changes: CURRENT's, when it is of this format and built with these tools (a run on
    any other builds every repo from scratch)."""

    path: Path
    manifest: Manifest


LOCK_POLL_SECONDS = 0.2  # how often --wait tries the lock again


@contextmanager
def lock(data_dir: Path, wait: float = 0.0):
    """The index lock, held for the run; another run holding it is LockBusy at once, or after `wait` seconds."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "index.lock"
    deadline = time.monotonic() + wait
    with open(path, "w") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() >= deadline:
                    waited = f" for {wait:g} s" if wait else ""
                    raise LockBusy(
                        f"another 'blobdex index' is running on {str(data_dir)!r} (it holds {str(path)!r}) and "
                        f"did not finish{waited}; try again later, or pass --wait SECONDS to queue behind it"
                    ) from exc
                time.sleep(LOCK_POLL_SECONDS)
        yield


def run(
    cfg: Config,
    full: bool = False,
    embedder: Embedder | None = None,
    show_progress: bool = True,
    wait: float = 0.0,
    only: set[tuple[str, str]] | None = None,
) -> Report:
    """One index run (see the module's docstring); its report is kept in the run history. `wait`: seconds to
    queue behind a run that holds the lock. `only`: fetch and scan only these repos (org, name); every other
    repo is listed as the live snapshot holds it (one it does not hold yet is fetched all the same)."""
    if not cfg.repos:
        raise RunError(f"no repos configured in {str(cfg.path)!r}: add one with 'blobdex repo add NAME URL'")
    with lock(cfg.data_dir, wait):
        started = datetime.now(timezone.utc)
        report = Report(model=embedder.model_id if embedder else model_id_for(cfg.model))
        try:
            _run(cfg, full, embedder, show_progress, report, only)
        except BaseException as exc:
            failure = exc
            if _no_space(exc):
                free = shutil.disk_usage(cfg.data_dir).free // 2**20
                failure = DiskFull(
                    f"no space left on device while writing to {str(cfg.data_dir)!r} ({free} MB free); "
                    f"free space and run 'blobdex index' again (the previous snapshot keeps "
                    f"serving)"
                )
            if isinstance(exc, Exception):  # an interrupt is not a run's verdict
                _record(cfg, started, report, failure)
            if failure is exc:
                raise
            raise failure from exc
        _record(cfg, started, report, None)
        return report


def _record(cfg: Config, started: datetime, report: Report, failure: BaseException | None) -> None:
    """Keep the run in the history; a history that cannot be written (a full disk) never hides the run's own
    outcome."""
    error = None
    if failure is not None:
        error = str(failure) if isinstance(failure, BlobdexError) else f"{type(failure).__name__}: {failure}"
    try:
        runs.record(cfg.data_dir, started, report.to_dict(), error)
    except OSError as exc:
        log.warning("cannot keep this run in the history under %s: %s", runs.runs_dir(cfg.data_dir), exc)


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


def previous_snapshot(data_dir: Path) -> tuple[Path | None, Manifest | None]:
    try:
        return snapshot.open_manifest(data_dir)
    except snapshot.SnapshotError as exc:
        if snapshot.current_id(data_dir) is not None:
            log.warning("previous snapshot is unreadable, building from scratch: %s", exc)
        return None, None


def base_of(cfg: Config, prev_path: Path | None, prev: Manifest | None, full: bool) -> Base | None:
    """The snapshot this run changes, or None to build every repo from scratch (`--full`, no snapshot yet, one of
    another format, or built with other tools: its rows are not what these tools make)."""
    if full or prev is None or prev.format_version != snapshot.FORMAT_VERSION:
        return None
    if (prev.tools, prev.max_blob_bytes) != (TOOLS, cfg.max_blob_bytes):
        return None
    return Base(prev_path, prev)


def _run(
    cfg: Config, full: bool, embedder: Embedder | None, show_progress: bool, report: Report, only: set | None
) -> Report:
    started = time.monotonic()
    model_id = report.model
    _sweep(cfg, report)
    prev_path, prev = previous_snapshot(cfg.data_dir)
    report.previous_snapshot_id = prev.snapshot_id if prev else None
    work = [
        RepoWork(spec=s, report=RepoReport(org=s.org, name=s.name, url=mirror.redact(s.url), status="ok"))
        for s in cfg.repos
    ]
    report.repos = [w.report for w in work]
    base = base_of(cfg, prev_path, prev, full)
    if only is not None and base is not None:  # the others stay at the commits the snapshot holds
        for w in work:
            before = base.manifest.repo(*w.spec.key)
            if w.spec.key not in only and before is not None and before.parts:
                w.fetched = False
                w.refs = [(r.ref, r.commit_id) for r in before.refs]
                w.report.refs = [{"ref": r, "commit_id": c} for r, c in w.refs]
                w.report.status, w.report.error = before.status, before.error
    t0 = time.monotonic()
    fetch_refs(cfg, [w for w in work if w.fetched])
    report.seconds["mirror"] = time.monotonic() - t0
    if all(not w.ok for w in work):
        _note(
            report,
            "nothing published: every repo failed this run, so there is nothing new to serve"
            + (f"; snapshot {prev.snapshot_id} keeps serving" if prev else "")
            + "; fix the errors above and run 'blobdex index' again",
        )
        return report
    if not full and prev is not None and _unchanged(cfg, prev, work, model_id):
        problem = open_check(prev_path, prev)
        if problem is None:
            report.unchanged = True
            report.snapshot_id = prev.snapshot_id
            _fill_from_manifest(report, prev)
            return report
        _note(report, f"rebuilding: nothing changed upstream, but snapshot {prev.snapshot_id} is damaged ({problem})")
        base = None
        fetch_refs(cfg, [w for w in work if not w.fetched])  # a rebuild from scratch scans every repo
    for w in work:
        w.kept = base is not None and w.ok and at_base(base.manifest, w)
    t0 = time.monotonic()
    scan_stage([w for w in work if w.ok and not w.kept])
    report.seconds["scan"] = time.monotonic() - t0

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
            base=base,
            show_progress=show_progress,
            started=started,
            embedder=embedder,
        )
        return _build(run)
    finally:
        if cache.moved_aside is not None:  # the cache logged it already
            report.notes.append(cache.moved_aside)
        cache.close()


def fetch_refs(cfg: Config, work: list[RepoWork]) -> None:
    """Fetch the repos' mirrors and resolve their refs."""
    for w in work:
        w.fetched, w.refs, w.report.refs = True, [], []
    _mirror_stage(cfg, work)
    _resolve_stage(work)


def _mirror_stage(cfg: Config, work: list[RepoWork]) -> None:
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


def _resolve_stage(work: list[RepoWork]) -> None:
    """Resolve every configured ref of each fetched repo to a commit; a repo with a ref that cannot be resolved
    is marked stale."""
    for w in work:
        if not w.ok:
            continue
        try:
            with mirror.open_mirror(w.mirror_path) as repo:
                for ref in w.spec.refs or (None,):
                    w.refs.append(resolve_ref(repo, ref, w.spec.name))
        except (ScanError, mirror.MirrorError) as exc:
            _mark_stale(w, str(exc))
        except Exception as exc:  # corrupt objects in a mirror: this repo only
            _mirror_broken(w, exc)
        w.report.refs = [{"ref": r, "commit_id": c} for r, c in w.refs]


def scan_stage(work: list[RepoWork]) -> None:
    """Scan the resolved commits of each repo; a repo that cannot be scanned is marked stale."""
    for w in work:
        try:
            with mirror.open_mirror(w.mirror_path) as repo:
                for ref, commit_id in w.refs:
                    w.scans.append(scan_commit(repo, ref, commit_id, w.spec.include, w.spec.exclude))
        except (ScanError, mirror.MirrorError) as exc:
            _mark_stale(w, str(exc))
        except Exception as exc:
            _mirror_broken(w, exc)


def _mirror_broken(w: RepoWork, exc: Exception) -> None:
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
    removed = sweep(cfg.data_dir) + mirror.sweep(cfg.data_dir)
    if removed:
        _note(report, f"removed {len(removed)} leftover(s) of interrupted runs: {', '.join(removed)}")


def _mark_stale(w: RepoWork, error: str) -> None:
    log.error("%s/%s: %s", w.spec.org, w.spec.name, error)
    w.report.status, w.report.error = "stale", error
    w.refs, w.scans, w.report.refs = [], [], []


def at_base(manifest: Manifest, w: RepoWork) -> bool:
    """True when the base holds this repo at the commits just resolved, scanned as configured: nothing to scan."""
    before = manifest.repo(*w.spec.key)
    return (
        before is not None
        and bool(before.parts)
        and [(r.ref, r.commit_id) for r in before.refs] == w.refs
        and (before.include, before.exclude) == (list(w.spec.include), list(w.spec.exclude))
    )


def _unchanged(cfg: Config, prev: Manifest, work: list[RepoWork], model_id: str) -> bool:
    """True when a rebuild would reproduce `prev`: same repos at the same commits, same tools."""
    built_with = (prev.format_version, prev.model_id, prev.tools, prev.max_blob_bytes)
    if built_with != (snapshot.FORMAT_VERSION, model_id, TOOLS, cfg.max_blob_bytes):
        return False
    if {(r.org, r.name) for r in prev.repos} != {w.spec.key for w in work}:
        return False
    for w in work:
        before = prev.repo(*w.spec.key)
        if not w.ok or before.status != "ok" or before.url != w.report.url:
            return False
        if (before.include, before.exclude) != (list(w.spec.include), list(w.spec.exclude)):
            return False
        if [(r.ref, r.commit_id) for r in before.refs] != w.refs:
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


@dataclass(kw_only=True)
class Run:
    """What every stage of one build reads: the config, the report it fills, the cache, the model, the previous
    snapshot and the base it changes. Not frozen: the embedder is loaded at most once, by the first stage that
    needs it."""

    cfg: Config
    report: Report
    cache: Cache
    work: list[RepoWork]
    model: str  # the model's name, as load_embedder takes it
    model_id: str
    prev_path: Path | None
    prev: Manifest | None
    base: Base | None
    show_progress: bool
    started: float  # time.monotonic() at the run's start
    embedder: Embedder | None = None

    def loaded_embedder(self) -> Embedder:
        if self.embedder is None:
            self.embedder = configured_embedder(self.cfg, self.model, writable=True)
        return self.embedder


@dataclass(kw_only=True)
class Change:
    """One scanned repo's change against the base: the paths whose rows it replaces (None: every path), the
    repo's live rows there (None: it had none), and the new rows (Tables.arrow) with its state."""

    live: RepoLive | None
    paths: set[str] | None
    new: dict[str, pa.Table]
    state: RepoState


def _build(run: Run) -> Report:
    """Chunk what changed, then publish: the model's static tier first when the model has much to embed
    (fast_first), then, once every chunk has the model's vectors, the model's own snapshot. Old snapshots are
    pruned once the run is done: the model's snapshot is published against the run's base, whose parts the
    static tier does not list."""
    try:
        return _publish_changes(run)
    finally:
        if run.report.published:
            t0 = time.monotonic()
            prune(run.cfg.data_dir, run.cfg.keep_snapshots)
            run.report.seconds["publish"] += time.monotonic() - t0


def _publish_changes(run: Run) -> Report:
    report = run.report
    t0 = time.monotonic()
    changes = _changes(run)
    report.seconds["chunk"] = time.monotonic() - t0 - report.seconds["extract"]
    texts = _texts(run, changes)
    ids = [text_id(t) for t in texts]
    missing = _missing(run, ids)
    fast_run = _fast_tier(run, missing)
    lexical_from = None
    if fast_run is not None:
        lacking = set(missing)
        report.chunks_reused = sum(1 for i in ids if i not in lacking)
        if not _serves(run, fast_run):
            serving = lexical_from = _publish(fast_run, changes, backfill_model_id=run.model_id, backlog=len(missing))
        else:
            serving = run.prev_path
            report.snapshot_id = run.prev.snapshot_id
            _totals(report, run.prev)
        left = _backfill(run, missing, dict(zip(ids, texts)), serving.name)
        report.backlog = left
        if left:  # backfill_seconds ran out
            _note(
                report,
                f"snapshot {serving.name} serves static vectors ({fast_run.model_id}); {left} of its chunks still "
                f"lack {run.model_id}'s: this run stopped embedding after backfill_seconds = "
                f"{run.cfg.backfill_seconds}, the next 'blobdex index' goes on",
            )
            return report
    _publish(run, changes, lexical_from=lexical_from)
    snapshot.clear_backfill(run.cfg.data_dir)
    return report


def scope(cfg: Config, work: list[RepoWork], base: Base | None) -> tuple[dict, dict]:
    """What each scanned repo changes against the base: key -> (its live rows there, the paths it rewrites (None:
    every path), its scans cut to those paths); and every blob those paths hold: cache key -> where to read it."""
    scoped, wanted = {}, {}
    for w in work:
        if not w.ok or w.kept:
            continue
        before = base.manifest.repo(*w.spec.key) if base else None
        live = RepoLive(base.path, base.manifest, *w.spec.key) if before is not None and before.parts else None
        paths = None
        if live is not None and (before.include, before.exclude) == (list(w.spec.include), list(w.spec.exclude)):
            paths = changed_paths(live.table("files"), _scanned_files(w.scans))
        scans = w.scans if paths is None else [_only(s, paths) for s in w.scans]
        scoped[w.spec.key] = (live, paths, scans)
        for scan in scans:
            for f in scan.files:
                if f.skip is None:
                    key = Cache.blob_key(f.blob_id, f.lang, cfg.max_blob_bytes)
                    wanted.setdefault(key, (w.mirror_path, f.blob_id, f.lang))
    return scoped, wanted


def _changes(run: Run) -> dict[tuple[str, str], Change]:
    """Each scanned repo's change: the paths that differ from the base, their blobs chunked (new blobs only)."""
    scoped, wanted = scope(run.cfg, run.work, run.base)
    run.report.blobs = len(wanted)
    entry_of = entry_lookup(_chunk_stage(run, wanted), run.cfg.max_blob_bytes)
    changes = {}
    for w in run.work:
        if w.spec.key not in scoped:
            continue
        live, paths, scans = scoped[w.spec.key]
        tables = Tables()
        state = add_repo(tables, w.spec.org, w.spec.name, w.report.url, scans, entry_of, snapshot.now_iso())
        state.include, state.exclude = list(w.spec.include), list(w.spec.exclude)
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


def _retiered(run: Run) -> bool:
    """Whether the snapshot this run publishes holds vectors of another model than its base: then every repo's
    rows are written again with this run's model."""
    return run.base is None or run.base.manifest.model_id != run.model_id


def _texts(run: Run, changes: dict[tuple[str, str], Change]) -> list[str]:
    """The embedded texts of the rows this run writes: the changed rows, and, when the model's vectors replace
    another's (a first index, a model change, a backfill), every row the snapshot will hold."""
    tables = [c.new["chunks"] for c in changes.values()]
    if _retiered(run):
        tables += [_outside(c.live.table("chunks"), c.paths) for c in changes.values() if c.live is not None]
        for w in run.work:
            source = _carried_from(run, w) if w.spec.key not in changes else None
            if source is not None:
                tables.append(RepoLive(*source, *w.spec.key).table("chunks"))
    texts = []
    for t in tables:
        texts += [embed_text(s, x) for s, x in zip(t.column("symbol").to_pylist(), t.column("text").to_pylist())]
    return texts


def _carried_from(run: Run, w: RepoWork) -> tuple[Path, Manifest] | None:
    """Where the rows of a repo this run does not scan are (kept at the base's commits, or failed): the base, or,
    in a run from scratch, the previous snapshot of whatever format; None when it has none to keep serving."""
    path, manifest = (run.base.path, run.base.manifest) if run.base else (run.prev_path, run.prev)
    before = manifest.repo(*w.spec.key) if manifest is not None else None
    if before is None:
        return None
    held = bool(before.parts) if manifest.format_version >= 3 else before.indexed_at is not None
    return (path, manifest) if held else None


def _vectors(run: Run, texts: list[str], dim_hint: int | None, show_progress: bool, label: str = "embed"):
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


def _publish(run: Run, changes: dict, lexical_from: Path | None = None, **manifest_fields) -> Path:
    """Write each repo's part (a delta of what changed, a base, or none when the base's parts hold it as it is),
    the lexical index, the edges and the views into a new snapshot, and publish it; returns its directory.
    `lexical_from`: a snapshot this run published with the same rows (the static tier), whose index is reused."""
    cfg, report, base = run.cfg, run.report, run.base
    same_model = base is not None and base.manifest.model_id == run.model_id
    dim = base.manifest.dim if same_model else (run.embedder.dim if run.embedder else run.loaded_embedder().dim)
    counted = run.model_id == report.model  # the counts are the configured model's: a static tier is a lookup

    def vectors(texts: list[str]):
        t = time.monotonic()
        matrix, embedded = _vectors(run, texts, dim, run.show_progress)
        report.seconds["embed"] += time.monotonic() - t
        return matrix, embedded

    t0, embed_before = time.monotonic(), report.seconds["embed"]
    writer = PartWriter(cfg.data_dir, run.model_id, dim, vectors, base.manifest.next_row if base else 0)
    states, written = {}, {}
    for w in run.work:
        states[w.spec.key], parts = _repo_parts(run, w, changes.get(w.spec.key), writer)
        if parts is not None:
            written[w.spec.key] = parts
    if counted:
        report.chunks_embedded += sum(p.embedded for p in written.values())
    snapshot_id = snapshot.new_snapshot_id()
    built = build_dir(cfg.data_dir, snapshot_id)
    try:
        _write_lexical(run, built, written, lexical_from)
        edge_count = _write_edges(cfg.data_dir, built, states, written)
        report.seconds["write"] += time.monotonic() - t0 - (report.seconds["embed"] - embed_before)
        t0 = time.monotonic()
        manifest = Manifest(
            snapshot_id=snapshot_id,
            created_at=snapshot.now_iso(),
            model_id=run.model_id,
            dim=dim,
            repos=[states[w.spec.key] for w in run.work],
            max_blob_bytes=cfg.max_blob_bytes,
            edges=edge_count,
            next_row=writer.next_row,
            **manifest_fields,
            **TOOLS.as_fields(),
        )
        write_views(built, manifest)
        publish(cfg.data_dir, built, manifest)
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise
    report.seconds["publish"] += time.monotonic() - t0
    report.snapshot_id, report.published = snapshot_id, True
    if counted:
        report.chunks_reused = manifest.chunks - report.chunks_embedded
    report.snapshots.append(
        {
            "snapshot_id": snapshot_id,
            "model": run.model_id,
            "tier": vector_tier(run.model_id),
            "seconds": round(time.monotonic() - run.started, 3),
        }
    )
    _totals(report, manifest)
    for w in run.work:
        state = states[w.spec.key]
        w.report.files, w.report.files_indexed, w.report.chunks = state.files, state.files_indexed, state.chunks
        if not w.ok:
            w.report.refs = [{"ref": r.ref, "commit_id": r.commit_id} for r in state.refs]
    return snapshot.snapshots_dir(cfg.data_dir) / snapshot_id


def _repo_parts(run: Run, w: RepoWork, change: Change | None, writer: PartWriter) -> tuple[RepoState, RepoParts | None]:
    """One repo's state in the snapshot being published, and what was written for it (None when its parts are
    listed as the base has them, or it has none)."""
    base, key = run.base, w.spec.key
    same_model = base is not None and base.manifest.model_id == run.model_id
    if change is not None:
        state = replace(change.state)
        if same_model and change.live is not None and change.paths is not None and not change.paths:
            kept = base.manifest.repo(*key)  # new commits, the same blob at every path: the parts hold it all
            state.parts, state.indexed_at = list(kept.parts), kept.indexed_at
            _copy_counts(kept, state)
            return state, None
        written = writer.repo(state, change.live, change.paths, change.new, fresh_ids=base is None)
        state.parts = written.parts
        return state, written
    source = _carried_from(run, w)
    before = source[1].repo(*key) if source else None
    if before is None:  # failed, and nothing earlier to keep serving
        state = RepoState(
            org=key[0], name=key[1], url=w.report.url, status="stale", error=w.report.error, indexed_at=None
        )
        return state, None
    state = replace(before, refs=list(before.refs), parts=list(before.parts))
    if w.fetched:  # one left out of the run keeps the verdict of the run that fetched it last
        state.status, state.error = ("ok", None) if w.ok else ("stale", w.report.error)
    if w.ok:
        state.url = w.report.url
    if same_model and source[0] == base.path:
        return state, None
    written = writer.repo(state, RepoLive(*source, *key), set(), Tables().arrow([]), fresh_ids=base is None)
    state.parts = written.parts
    return state, written


def _copy_counts(source: RepoState, target: RepoState) -> None:
    for name in ("files", "files_indexed", "files_skipped", "chunks", "secrets_held_back", "parse_fallbacks"):
        setattr(target, name, getattr(source, name))
    target.syntax_errors, target.graph = source.syntax_errors, dict(source.graph)


def _write_lexical(run: Run, built: Path, written: dict[tuple[str, str], RepoParts], lexical_from: Path | None) -> None:
    """The new snapshot's lexical index: the base's (or `lexical_from`'s) with the documents of the rows that
    went and came, or, from scratch, one document per row."""
    base = run.base
    if lexical_from is not None:
        write_lexical(built, lexical_from / snapshot.LEXICAL_DIR, [], [], _no_rows(), None)
        return
    adds = [r.add for r in written.values() if r.add.num_rows]
    add = pa.concat_tables(adds) if adds else _no_rows()
    if base is None:
        with Progress("lexical", add.num_rows, run.show_progress) as bar:
            write_lexical(built, None, [], [], add, bar)
        return
    configured = {w.spec.key for w in run.work}
    removed = [(r.org, r.name) for r in base.manifest.repos if (r.org, r.name) not in configured]
    drop = [row for r in written.values() for row in r.drop]
    with Progress("lexical", add.num_rows, run.show_progress) as bar:
        write_lexical(built, base.path / snapshot.LEXICAL_DIR, drop, removed, add, bar)


def _no_rows() -> pa.Table:
    return pa.table(
        {
            "row": pa.array([], pa.int64()),
            **{c: pa.array([], pa.string()) for c in ("org", "repo", "path", "symbol", "text")},
        }
    )


def _write_edges(data_dir: Path, built: Path, states: dict, written: dict) -> int:
    """Coupling edges of every org, from each repo's newest part's edge inputs."""
    by_org: dict[str, dict[str, dict]] = defaultdict(dict)
    for key, state in states.items():
        if state.parts:
            info = snapshot.read_part_info(snapshot.parts_dir(data_dir) / state.parts[-1])
            by_org[key[0]][key[1]] = info.edge_inputs
    rows = [e for org in sorted(by_org) for e in edges(org, by_org[org])]
    write_edges(built, rows)
    return len(rows)


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
