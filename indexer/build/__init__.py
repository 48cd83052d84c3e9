"""One index run, in stage order: mirror (fetch, read refs) -> scan (changed repos) -> history (new commits) ->
chunk and resolve calls (new blobs, changed paths) -> embed -> write parts -> publish. The stages are this
package's modules; this one runs them.

Safe to run from cron on every push: a lock keeps runs apart, caches make unchanged content free, a run writes
only the paths that changed (indexer/build/parts.py), and a repo that fails keeps the content the previous snapshot
had for it (marked stale).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import shutil
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from indexer import mirror, runs, snapshot
from indexer.build.assemble import plan_parts, publish_snapshot, totals
from indexer.build.cache import Cache, text_id
from indexer.build.changes import changes_of
from indexer.build.history import history_stage
from indexer.build.cluster import Cluster
from indexer.build.report import RepoReport, Report
from indexer.build.vectors import backfill, fast_tier, missing_vectors
from indexer.build.work import Base, RepoWork, Run
from indexer.config import Config
from indexer.embed import Embedder, model_id_for
from indexer.errors import BlobdexError
from indexer.scan import ScanError, resolve_ref, scan_commit
from indexer.snapshot import Manifest
from indexer.snapshot.publish import prune, sweep
from indexer.snapshot.verify import check_oldest, open_check, open_check_kept
from indexer.versions import TOOLS

__all__ = ["Base", "DiskFull", "LockBusy", "RepoWork", "Run", "RunError", "lock", "run"]

log = logging.getLogger(__name__)


class RunError(BlobdexError):
    """The run as a whole cannot proceed (lock held, no repos); per-repo failures are report data."""


class LockBusy(RunError):
    """Another run holds the lock: try again later; nothing is wrong with the input."""

    exit_code = 75  # EX_TEMPFAIL (sysexits.h): cron wrappers retry, they do not page anyone


class DiskFull(RunError):
    """The disk filled up while the run wrote; the previous snapshot keeps serving."""

    exit_code = 1  # a failed run, like a failed repo; 2 stays for bad input


LOCK_POLL_SECONDS = 0.2  # how often --wait tries the lock again
# Mirrors fetched at once: a fetch mostly waits on the network (a few round trips a repo even when nothing moved),
# so a cron run over an organisation's hundreds of remotes waited for each in turn.
FETCH_THREADS = 8


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
            while report.deferred and report.published:  # the next batch of repos new to the index
                earlier, report = report, Report(model=report.model)
                _run(cfg, False, embedder, show_progress, report, only)
                report.after(earlier)
            if cfg.store:
                _upload(cfg, report)
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


def _upload(cfg: Config, report: Report) -> None:
    """Upload the live snapshot to the configured store when the store's newest is another (this run published
    one, or the last upload failed); a failure is the run's note and verdict, and the next run tries again."""
    from indexer.store import StoreError, store_for, upload

    live = snapshot.current_id(cfg.data_dir)
    t0 = time.monotonic()
    try:
        store = store_for(cfg)
        if live is not None and store.newest() != live:
            report.store = upload(store, cfg.data_dir, live).to_dict()
    except StoreError as exc:
        report.store_error = str(exc)
        _note(report, f"snapshot {live} was published here but not uploaded: {exc}; the next run uploads it")
    report.seconds["publish"] += time.monotonic() - t0


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
    _leftovers(report, fetch_refs(cfg, [w for w in work if w.fetched], prev))
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
        problem = open_check_kept(cfg.data_dir, prev_path, prev) or check_oldest(cfg.data_dir, prev_path, prev)
        if problem is None:
            report.unchanged = True
            report.snapshot_id = prev.snapshot_id
            _fill_from_manifest(report, prev, work, cfg.data_dir)
            return report
        _note(report, f"rebuilding: nothing changed upstream, but snapshot {prev.snapshot_id} is damaged ({problem})")
        base, full = None, True  # history too: the damage may be in its parts
        _leftovers(report, fetch_refs(cfg, [w for w in work if not w.fetched]))  # a rebuild scans every repo
    for w in work:
        w.kept = base is not None and w.ok and at_base(base.manifest, w)
    t0 = time.monotonic()
    scan_stage([w for w in work if w.ok and not w.kept])
    report.seconds["scan"] = time.monotonic() - t0
    work = _this_batch(cfg, prev, work, report)

    cache = Cache(cfg.data_dir / "cache")
    cluster = Cluster(cfg.cluster, cfg.cluster_workers) if cfg.cluster else None  # Ray starts on first use
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
            cluster=cluster,
        )
        return _build(run, full)
    finally:
        if cluster is not None:
            report.cluster = cluster.summary()
            cluster.close()
        if cache.moved_aside is not None:  # the cache logged it already
            report.notes.append(cache.moved_aside)
        if cache.damaged_entries:  # logged one by one
            report.notes.append(
                f"{cache.damaged_entries} damaged cache entries (failed their checksum, or vectors not of unit "
                f"length) were computed again; nothing damaged was published"
            )
        cache.close()


def _this_batch(cfg: Config, prev: Manifest | None, work: list[RepoWork], report: Report) -> list[RepoWork]:
    """The repos this run builds: all but those `deferred` leaves for the next batch (named in the report)."""
    later = deferred(cfg, prev, work)
    if not later:
        return work
    report.deferred = [f"{org}/{name}" for org, name in sorted(later)]
    _note(
        report,
        f"left {len(later)} of the repos new to the index for the next batch: together they hold more than "
        f"run_files = {cfg.run_files} files to chunk, and a run holds a new chunk's rows until it writes",
    )
    work = [w for w in work if w.spec.key not in later]
    report.repos = [w.report for w in work]
    return work


def deferred(cfg: Config, prev: Manifest | None, work: list[RepoWork]) -> set[tuple[str, str]]:
    """The repos no snapshot holds yet that this run leaves for its next batch: in config order, the first whose
    files to chunk (distinct blobs) take the batch past `run_files` and every one after it (never the first). A
    run holds each new chunk's rows until it writes (6-9 KB a chunk measured: one run of a 10M-chunk organisation
    would need 60-90 GB); a repo the previous snapshot holds is never deferred, so a rebuild stays one snapshot."""
    new = [w for w in work if w.ok and not w.kept and (prev is None or prev.repo(*w.spec.key) is None)]
    total = 0
    for i, w in enumerate(new):
        total += len({f.blob_id for s in w.scans for f in s.files if f.skip is None})
        if i and total > cfg.run_files:
            return {x.spec.key for x in new[i:]}
    return set()


def fetch_refs(cfg: Config, work: list[RepoWork], prev: Manifest | None = None) -> list[str]:
    """The mirror stage: fetch the repos' mirrors and read the commit each configured ref names there
    (seconds.mirror covers both; "resolve" in a run's report is call resolution); a ref that still names the
    commit `prev` holds is not read again. Returns what interrupted fetches had left in those mirrors, deleted
    first (mirror.sweep)."""
    removed = mirror.sweep(cfg.data_dir, [mirror.mirror_path(cfg.data_dir, w.spec) for w in work])
    for w in work:
        w.fetched, w.refs, w.report.refs = True, [], []
    _fetch(cfg, work)
    _read_refs(work, prev)
    return removed


def _fetch(cfg: Config, work: list[RepoWork]) -> None:
    """Fetch every repo's mirror, those from a network FETCH_THREADS at a time (a local path's fetch is all CPU:
    side by side they were slower, 0.36 s against 0.23 for 70 local repos); a repo that cannot be fetched is
    marked stale, the others go on."""
    remote = [w for w in work if not mirror.is_local(w.spec.url)]
    pooled = {id(w): w for w in remote} if len(remote) > 1 else {}
    with ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix="fetch") as pool:
        fetched = pool.map(lambda w: _fetch_one(cfg, w), pooled.values())  # the network's; this thread the rest
        for w in work:
            if id(w) not in pooled:  # a local path's, or the only remote's
                _fetch_one(cfg, w)
        for _ in fetched:
            pass


def _fetch_one(cfg: Config, w: RepoWork) -> None:
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


def _read_refs(work: list[RepoWork], prev: Manifest | None) -> None:
    """Read the commit every configured ref of each fetched repo names; a repo with a ref that names none is
    marked stale."""
    for w in work:
        if not w.ok:
            continue
        before = prev.repo(*w.spec.key) if prev else None
        held = frozenset(r.commit_id for r in before.refs) if before else frozenset()
        try:
            with mirror.RefsFirst(w.mirror_path) as repo:
                for ref in w.spec.refs or (None,):
                    w.refs.append(resolve_ref(repo, ref, w.spec.name, held=held))
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
    """Delete what interrupted runs left in the data dir (under the lock, on every run, changed or not); the
    mirrors' leftovers are deleted as each is fetched (fetch_refs)."""
    _leftovers(report, sweep(cfg.data_dir))


def _leftovers(report: Report, removed: list[str]) -> None:
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
        and (before.include, before.exclude, before.releases) == w.spec.prepared_as
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
        if before.url != w.report.url:
            return False
        if not w.ok:  # failing again: a rebuild would keep it as `prev` holds it, already stale
            if before.status != "stale":
                return False  # its first failure publishes, so that status shows it stale
            continue
        if before.status != "ok":
            return False
        if (before.include, before.exclude, before.releases) != w.spec.prepared_as:
            return False
        if [(r.ref, r.commit_id) for r in before.refs] != w.refs or before.history_as != cfg.history.recorded:
            return False
    return True


def _fill_from_manifest(report: Report, prev: Manifest, work: list[RepoWork], data_dir: Path) -> None:
    """The report of an unchanged run: what `prev` holds, with this run's error for a repo that failed again."""
    errors = {w.spec.key: w.report.error for w in work if not w.ok}
    report.repos = [
        RepoReport(
            org=r.org,
            name=r.name,
            url=r.url,
            status=r.status,
            error=errors.get((r.org, r.name), r.error),
            refs=[{"ref": x.ref, "commit_id": x.commit_id} for x in r.refs],
            files=r.files,
            files_indexed=r.files_indexed,
            chunks=r.chunks,
        )
        for r in prev.repos
    ]
    report.chunks_reused = prev.chunks
    totals(report, prev, data_dir)


def _build(run: Run, full: bool) -> Report:
    """Chunk what changed, then publish: the model's static tier first when the model has much to embed
    (fast_first), then, once every chunk has the model's vectors, the model's own snapshot. Old snapshots are
    pruned once the run is done: the model's snapshot is published against the run's base, whose parts the
    static tier does not list. `full`: history is read whole (history_stage)."""
    try:
        return _publish_changes(run, full)
    finally:
        if run.report.published:
            t0 = time.monotonic()
            prune(run.cfg.data_dir, run.cfg.keep_snapshots)
            run.report.seconds["publish"] += time.monotonic() - t0


def _publish_changes(run: Run, full: bool) -> Report:
    """The run's stages after the scan: chunk and resolve what changed; read the history new since the last
    run; plan each repo's part (the rows it writes, and so the one answer to which of them need the model's
    vectors); then, when the model has much to embed, publish its static tier first and backfill; embed what
    the cache lacks; write and publish."""
    report = run.report
    t0 = time.monotonic()
    changes = changes_of(run)
    report.seconds["chunk"] = time.monotonic() - t0 - report.seconds["extract"] - report.seconds["resolve"]
    # after chunking: on a cluster, the commits' vectors start the embedding actors, whose CPUs the blob
    # preparing tasks then could not get
    run.history = history_stage(run, full)
    t0 = time.monotonic()
    planned = plan_parts(run, changes)
    report.seconds["write"] += time.monotonic() - t0
    texts = planned.texts()
    ids = [text_id(t) for t in texts]
    missing = missing_vectors(run, ids)
    fast_run = fast_tier(run, missing)
    lexical_from = None
    if fast_run is not None:
        lacking = set(missing)
        report.chunks_reused = sum(1 for i in ids if i not in lacking)
        if not _serves(run, fast_run):
            serving = lexical_from = publish_snapshot(
                fast_run, changes, backfill_model_id=run.model_id, backlog=len(missing)
            )
        else:
            serving = run.prev_path
            report.snapshot_id = run.prev.snapshot_id
            totals(report, run.prev, run.cfg.data_dir)
        left = backfill(run, missing, dict(zip(ids, texts)), serving.name)
        report.backlog = left
        if left:  # backfill_seconds ran out
            _note(
                report,
                f"snapshot {serving.name} serves static vectors ({fast_run.model_id}); {left} of its chunks still "
                f"lack {run.model_id}'s: this run stopped embedding after backfill_seconds = "
                f"{run.cfg.backfill_seconds}, the next 'blobdex index' goes on",
            )
            return report
        missing = []  # the backfill embedded them (and counted them)
    publish_snapshot(run, changes, planned, missing, lexical_from=lexical_from)
    runs.clear_backfill(run.cfg.data_dir)
    return report


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
