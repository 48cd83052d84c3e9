"""Writing one snapshot of a run: each repo's parts (indexer/parts.py), the lexical index, the edges, the views
and the manifest, then publishing it (indexer/publish.py)."""

from __future__ import annotations

import shutil
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from indexer import snapshot
from indexer.edges import edges
from indexer.embed import vector_tier
from indexer.parts import PartWriter, RepoLive, RepoParts
from indexer.progress import Progress
from indexer.publish import build_dir, publish
from indexer.report import Report
from indexer.rows import Tables
from indexer.snapshot import FACT_COLUMNS, Manifest, RepoState
from indexer.vectors import vectors
from indexer.versions import TOOLS
from indexer.write import write_edges, write_lexical, write_views

if TYPE_CHECKING:
    from indexer.build import RepoWork, Run
    from indexer.changes import Change


def carried_from(run: Run, w: RepoWork) -> tuple[Path, Manifest] | None:
    """Where the rows of a repo this run does not scan are (kept at the base's commits, or failed): the base, or,
    in a run from scratch, the previous snapshot of whatever format; None when it has none to keep serving."""
    path, manifest = (run.base.path, run.base.manifest) if run.base else (run.prev_path, run.prev)
    before = manifest.repo(*w.spec.key) if manifest is not None else None
    if before is None:
        return None
    held = bool(before.parts) if manifest.format_version >= 3 else before.indexed_at is not None
    return (path, manifest) if held else None


def publish_snapshot(run: Run, changes: dict, lexical_from: Path | None = None, **manifest_fields) -> Path:
    """Write each repo's part (a delta of what changed, a base, or none when the base's parts hold it as it is),
    the lexical index, the edges and the views into a new snapshot, and publish it; returns its directory.
    `lexical_from`: a snapshot this run published with the same rows (the static tier), whose index is reused."""
    cfg, report, base = run.cfg, run.report, run.base
    same_model = base is not None and base.manifest.model_id == run.model_id
    dim = base.manifest.dim if same_model else (run.embedder.dim if run.embedder else run.loaded_embedder().dim)
    counted = run.model_id == report.model  # the counts are the configured model's: a static tier is a lookup

    def of_model(texts: list[str]):
        t = time.monotonic()
        matrix, embedded = vectors(run, texts, dim, run.show_progress)
        report.seconds["embed"] += time.monotonic() - t
        return matrix, embedded

    t0, embed_before = time.monotonic(), report.seconds["embed"]
    writer = PartWriter(cfg.data_dir, run.model_id, dim, of_model, base.manifest.next_row if base else 0)
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
        _lexical(run, built, written, lexical_from)
        edge_count = _edges(cfg.data_dir, built, states)
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
    totals(report, manifest)
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
    source = carried_from(run, w)
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


def _lexical(run: Run, built: Path, written: dict[tuple[str, str], RepoParts], lexical_from: Path | None) -> None:
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
    drop = [row for r in written.values() for row in r.drop]
    with Progress("lexical", add.num_rows, run.show_progress) as bar:
        write_lexical(built, base.path / snapshot.LEXICAL_DIR, drop, run.removed(), add, bar)


def _no_rows() -> pa.Table:
    return pa.table(
        {
            "row": pa.array([], pa.int64()),
            **{c: pa.array([], pa.string()) for c in ("org", "repo", "path", "symbol", "text")},
        }
    )


def _edges(data_dir: Path, built: Path, states: dict) -> int:
    """Coupling edges of every org, from each repo's newest part's edge inputs."""
    by_org: dict[str, dict[str, dict]] = defaultdict(dict)
    for key, state in states.items():
        if state.parts:
            info = snapshot.read_part_info(snapshot.parts_dir(data_dir) / state.parts[-1])
            by_org[key[0]][key[1]] = info.edge_inputs
    rows = [e for org in sorted(by_org) for e in edges(org, by_org[org])]
    write_edges(built, rows)
    return len(rows)


def totals(report: Report, manifest: Manifest) -> None:
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
