"""What a run changes in each repo it scanned: the paths whose rows differ from the base snapshot's, their new
blobs read and prepared (chunks and facts, cached), and the rows those paths hold now."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from indexer import mirror, snapshot
from indexer.cache import Cache
from indexer.config import Config
from indexer.edges import python_packages
from indexer.ignore import SkipReason
from indexer.parts import RepoLive, changed_paths, inside, outside
from indexer.prepare import BlobEntry, prepare
from indexer.progress import Progress
from indexer.resolve import Code, Resolver, World, resolve_calls
from indexer.rows import Tables, add_repo, entry_lookup
from indexer.scip import FAMILY as SCIP_FAMILY
from indexer.scip import Precise, ScipError, agreement, apply, index_commit, scip_targets
from indexer.scan import RefScan
from indexer.snapshot import RESOLUTION_COLUMNS, RepoState

if TYPE_CHECKING:
    from indexer.build import Base, RepoWork, Run

log = logging.getLogger(__name__)

CHUNK_CACHE_BATCH = 500  # prepared blob entries written to the cache at a time


@dataclass(kw_only=True)
class Change:
    """One scanned repo's change against the base: the paths whose rows it replaces (None: every path), the
    repo's live rows there (None: it had none), and the new rows (Tables.arrow) with its state."""

    live: RepoLive | None
    paths: set[str] | None
    new: dict[str, pa.Table]
    state: RepoState


def scope(cfg: Config, work: list[RepoWork], base: Base | None, again: dict | None = None) -> tuple[dict, dict]:
    """What each scanned repo changes against the base: key -> (its live rows there, the paths it rewrites (None:
    every path), its scans cut to those paths); and every blob those paths hold: cache key -> where to read it.
    `again`: key -> unchanged paths to write again all the same (their calls resolve differently now)."""
    scoped, wanted = {}, {}
    for w in work:
        if not w.ok or w.kept:
            continue
        before = base.manifest.repo(*w.spec.key) if base else None
        live = RepoLive(base.path, base.manifest, *w.spec.key) if before is not None and before.parts else None
        paths = None
        if live is not None and (before.include, before.exclude) == (list(w.spec.include), list(w.spec.exclude)):
            paths = changed_paths(live.table("files"), _scanned_files(w.scans))
            if paths is not None and again:
                paths |= again.get(w.spec.key, set())
        scans = w.scans if paths is None else [_only(s, paths) for s in w.scans]
        scoped[w.spec.key] = (live, paths, scans)
        for scan in scans:
            for f in scan.files:
                if f.skip is None:
                    key = Cache.blob_key(f.blob_id, f.lang, cfg.max_blob_bytes)
                    wanted.setdefault(key, (w.mirror_path, f.blob_id, f.lang))
    return scoped, wanted


def changes_of(run: Run) -> dict[tuple[str, str], Change]:
    """Each scanned repo's change: the paths that differ from the base, their blobs chunked (new blobs only),
    their calls resolved against the repo as the run leaves it; and, written again, the unchanged paths whose
    calls now resolve to another definition (a definition moved, a re-export changed)."""
    seen: set[str] = set()  # the blobs the run reads, counted once over both passes
    changes = _changes(run, *scope(run.cfg, run.work, run.base), seen)
    t0, answers = time.monotonic(), {}  # the SCIP indexers' answers, run once per repo
    again = resolve_changes(run, changes, answers=answers)
    run.report.seconds["resolve"] += time.monotonic() - t0
    if again:
        keys = set(again)
        redo = _changes(run, *scope(run.cfg, [w for w in run.work if w.spec.key in keys], run.base, again), seen)
        changes.update(redo)
        t0 = time.monotonic()
        resolve_changes(run, changes, only=keys, answers=answers)  # the same tree: nothing else resolves elsewhere
        run.report.seconds["resolve"] += time.monotonic() - t0
    t0 = time.monotonic()
    changes.update(importers(run, changes))
    run.report.seconds["resolve"] += time.monotonic() - t0
    return changes


def importers(run: Run, changes: dict) -> dict[tuple[str, str], Change]:
    """Repos this run leaves as they are that import a package of a repo it changes: their calls into it may now
    resolve elsewhere (a definition moved, a re-export changed), so the paths whose calls do are written again,
    from the base's rows, with their calls resolved anew."""
    base = run.base
    if base is None:
        return {}
    trees = {key: _tree(change) for key, change in changes.items()}
    found: dict[tuple[str, str], Change] = {}
    for org in sorted({org for org, _ in changes}):
        packages = set()
        for (o, name), tree in trees.items():
            if o == org:
                packages |= python_packages(tree["files"].column("path").to_pylist())
                before = base.manifest.repo(o, name)
                if before is not None and before.parts:
                    packages |= set(_part_info(run, before).edge_inputs.get("packages", {}))
        world = None
        for w in run.work:
            state = base.manifest.repo(*w.spec.key)
            if w.spec.org != org or w.spec.key in changes or not w.ok or state is None or not state.parts:
                continue
            inputs = _part_info(run, state).edge_inputs
            if not (set(inputs.get("imports", {})) - set(inputs.get("packages", {}))) & packages:
                continue
            world = world or _world(run, org, trees)
            live = RepoLive(base.path, base.manifest, org, w.spec.name)
            imports = live.table("imports", ("path", "module"))
            roots = pc.list_element(pc.split_pattern(imports["module"], "."), 0)
            touching = set(
                imports.filter(pc.is_in(roots, value_set=pa.array(sorted(packages)))).column("path").to_pylist()
            )
            stored = inside(live.table("calls"), touching)  # only files that import a changed package
            again = _kept_answers(stored, resolve_calls(stored, Resolver(world.code(w.spec.name), world)))
            paths = _differ(stored, again)
            if paths:
                new = {t: inside(live.table(t), paths) for t in ("paths", "files", *snapshot.FACT_COLUMNS)}
                new["calls"] = inside(again, paths)
                new["chunks"] = inside(live.table("chunks"), paths).drop_columns(["row", "vector"])
                state = replace(state, refs=list(state.refs), parts=list(state.parts))
                found[w.spec.key] = Change(live=live, paths=paths, new=new, state=state)
    return found


def _part_info(run: Run, state: RepoState):
    return snapshot.read_part_info(snapshot.parts_dir(run.cfg.data_dir) / state.parts[-1])


def _kept_answers(stored: pa.Table, again: pa.Table) -> pa.Table:
    """`again` (stored calls resolved anew, without SCIP) with the answers an earlier run's SCIP gave kept."""
    scip = pc.equal(stored["resolution"], "scip")
    for c in RESOLUTION_COLUMNS:
        again = again.set_column(again.schema.get_field_index(c), c, pc.if_else(scip, stored[c], again[c]))
    return again


def _differ(stored: pa.Table, again: pa.Table) -> set[str]:
    """The paths of call rows whose resolution differs between `stored` and `again` (the same rows)."""
    before = zip(*(stored.column(c).to_pylist() for c in RESOLUTION_COLUMNS))
    after = zip(*(again.column(c).to_pylist() for c in RESOLUTION_COLUMNS))
    return {path for path, b, a in zip(stored.column("path").to_pylist(), before, after) if b != a}


def _changes(run: Run, scoped: dict, wanted: dict, seen: set[str]) -> dict[tuple[str, str], Change]:
    seen.update(wanted)
    run.report.blobs = len(seen)
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


def resolve_changes(
    run: Run, changes: dict, only: set | None = None, answers: dict | None = None
) -> dict[tuple[str, str], set[str]]:
    """Resolve the call rows each change (or those of `only`) writes, against its repo as the run leaves it and
    the org's other repos; returns, per repo, the unchanged paths whose stored calls now resolve differently.
    `answers` keeps the SCIP indexers' answers per repo between calls (config `scip`)."""
    answers = {} if answers is None else answers
    trees = {key: _tree(change) for key, change in changes.items()}
    worlds: dict[str, World] = {}
    stale: dict[tuple[str, str], set[str]] = {}
    for key, change in changes.items():
        if only is not None and key not in only:
            continue
        org, name = key
        if org not in worlds:
            worlds[org] = _world(run, org, trees)
        resolver = Resolver(worlds[org].code(name), worlds[org])
        if run.cfg.scip and key not in answers:
            answers[key] = _precise(run, key, change, trees[key])
        precise = answers.get(key)
        change.new["calls"] = _resolved(change.new["calls"], resolver, precise, trees[key], run.report, key)
        if only is None and change.live is not None and change.paths is not None:
            kept = outside(change.live.table("calls"), change.paths)
            again = _resolved(kept, resolver, precise, trees[key])
            if precise is None:  # no SCIP answers this run: a call an earlier run's SCIP resolved keeps them
                again = _kept_answers(kept, again)
            differ = _differ(kept, again)
            if differ:
                stale[key] = differ
    return stale


def _precise(run: Run, key: tuple[str, str], change: Change, tree: dict) -> Precise | None:
    """The SCIP indexers' answers for a repo this run writes (config `scip`), at its first ref; None, with a note
    saying why, when there are none."""
    langs = set(tree["files"].column("lang").to_pylist())
    work = next(w for w in run.work if w.spec.key == key)
    ref = change.state.refs[0] if change.state.refs else None
    if ref is None or not langs & set(SCIP_FAMILY):
        return None
    try:
        return index_commit(work.mirror_path, ref.commit_id, key[1], langs, run.cfg.scip_timeout_seconds)
    except ScipError as exc:
        note = f"repo {key[1]!r}: calls keep blobdex's own resolution: {exc}"
        if note not in run.report.notes:
            run.report.notes.append(note)
        return None


def _resolved(calls: pa.Table, resolver: Resolver, precise, tree: dict, report=None, key=None) -> pa.Table:
    """Call rows resolved, the SCIP answers taken where there are some; the report gets how often the two agreed
    (over the rows of the run's changed paths)."""
    calls = resolve_calls(calls, resolver)
    if precise is None:
        return calls
    targets = scip_targets(calls, tree["symbols"], precise.documents, precise.sources)
    if report is not None:
        figures = agreement(calls, targets).to_dict()
        report.scip[f"{key[0]}/{key[1]}"] = {**figures, "tools": precise.tools, "seconds": round(precise.seconds, 1)}
    return apply(calls, targets, resolver.code.name)


TREE_COLUMNS = {
    "files": ("path", "lang"),
    "symbols": ("path", "name", "qualified_name", "kind", "parent", "signature", "line"),
    "imports": ("path", "module", "name", "alias"),
}


def _tree(change: Change) -> dict[str, pa.Table]:
    """What resolution reads of a repo as the run leaves it: its unchanged live rows and the new ones."""
    tree = {}
    for table, columns in TREE_COLUMNS.items():
        new = change.new[table].select(list(columns))
        if change.live is None or change.paths is None:
            tree[table] = new
        else:
            tree[table] = pa.concat_tables([outside(change.live.table(table, columns), change.paths), new])
    return tree


def _world(run: Run, org: str, trees: dict) -> World:
    """The org's repos for resolution: those this run changes as it leaves them, the others as the base holds
    them (read when a call first needs them); and which repo defines each Python package."""
    base = run.base
    owners: dict[str, str] = {}
    states = [r for r in base.manifest.repos if r.org == org and r.parts] if base else []
    for state in states:
        if (org, state.name) not in trees:
            for package in _part_info(run, state).edge_inputs.get("packages", {}):
                owners.setdefault(package, state.name)
    for (o, name), tree in sorted(trees.items()):
        if o == org:
            for package in python_packages(tree["files"].column("path").to_pylist()):
                owners[package] = name

    def load(name: str) -> Code | None:
        tree = trees.get((org, name))
        if tree is None and base is not None and any(s.name == name for s in states):
            live = RepoLive(base.path, base.manifest, org, name)
            tree = {t: live.table(t, columns) for t, columns in TREE_COLUMNS.items()}
        return Code(name, tree["files"], tree["symbols"], tree["imports"]) if tree is not None else None

    return World(load, owners)


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
    report.blobs_new += len(missing)
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
