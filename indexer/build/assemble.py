"""Publishing one snapshot of a run, stage by stage: plan each repo's part (indexer/build/parts.py), embed what the
plans' rows lack (indexer/build/vectors.py), write the parts, the lexical index, the edges, the views and the
manifest, then publish it (indexer/snapshot/publish.py)."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from indexer import snapshot
from indexer.build.edges import edges
from indexer.embed import vector_tier
from indexer.build.parts import PartPlan, PartWriter, RepoParts
from indexer.build.progress import Progress
from indexer.snapshot.publish import build_dir, publish
from indexer.build.report import Report
from indexer.build.rows import Tables
from indexer.snapshot import FACT_COLUMNS, Manifest, RepoState
from indexer.build.codebook import run_codebook
from indexer.snapshot.ann import CODEBOOK
from indexer.build.vectors import embed_stage, vectors
from indexer.versions import TOOLS
from indexer.snapshot.read import history_commits, read_graph, read_history_parts
from indexer.snapshot.schemas import COMMIT_CHANGES_SCHEMA, COMMITS_SCHEMA
from indexer.snapshot.write import (
    deleted_share,
    place_part,
    edges_table,
    write_edges,
    write_history_lexical,
    write_lexical,
    write_views,
)

if TYPE_CHECKING:
    from indexer.build.work import RepoWork, Run
    from indexer.build.work import Change

# A base's lexical index that would hold more than this share of deleted documents is written whole instead:
# Tantivy keeps a deleted document in its segment until it merges the segment (which tantivy-py cannot ask for),
# walking its postings and counting it in BM25's document frequencies. A 1M-chunk index holding 3.3M deleted
# documents (repos removed) searched at 35.6 ms p50, written whole 12.2 ms. Writing 10M rows whole takes about
# 12 minutes of one core (70 us a row), so one-commit runs rarely pay it: each deletes a few files' rows.
LEXICAL_REWRITE_SHARE = 0.2


@dataclass(kw_only=True)
class Planned:
    """The parts of one publish, decided: every repo's state in the snapshot, and a plan for each part to write
    (a repo without one is listed as the base holds it)."""

    states: dict[tuple[str, str], RepoState]
    plans: dict[tuple[str, str], PartPlan]
    writer: PartWriter

    def texts(self) -> list[str]:
        """The one answer to "which rows need this model's vectors": the rows the plans write without theirs."""
        return [text for plan in self.plans.values() for text in plan.texts()]

    def cards(self) -> list[str]:
        return [plan.card for plan in self.plans.values() if plan.card]


def plan_parts(run: Run, changes: dict) -> Planned:
    """Decide each repo's part for a publish by `run`'s model: a delta of what changed, a base, or none when the
    base's parts hold the repo as it is. Reads the live rows it needs; embeds and writes nothing."""
    base = run.base
    writer = PartWriter(run.cfg.data_dir, run.model_id, base.manifest.next_row if base else 0)
    states, plans = {}, {}
    for w in run.work:
        states[w.spec.key], plan = _plan_repo(run, w, changes.get(w.spec.key), writer)
        if plan is not None:
            plans[w.spec.key] = plan
    return Planned(states=states, plans=plans, writer=writer)


def publish_snapshot(
    run: Run,
    changes: dict,
    planned: Planned | None = None,
    missing: list[str] | None = None,
    lexical_from: Path | None = None,
    **manifest_fields,
) -> Path:
    """Publish a snapshot of `run`'s model in three stages: plan each repo's part (`planned`, when the caller
    planned them already), embed what the plans' rows lack (`missing`: their text ids the cache lacks, when
    known), write the parts, the lexical index, the edges and the views; returns its directory. Each stage's
    time is measured around it. `lexical_from`: a snapshot this run published with the same rows (the static
    tier), whose index is reused."""
    cfg, report, base = run.cfg, run.report, run.base
    counted = run.model_id == report.model  # the counts are the configured model's: a static tier is a lookup
    if planned is None:
        t0 = time.monotonic()
        planned = plan_parts(run, changes)
        report.seconds["write"] += time.monotonic() - t0
    embedded = embed_stage(run, planned.texts(), planned.cards(), missing)
    same_model = base is not None and base.manifest.model_id == run.model_id
    dim = base.manifest.dim if same_model else (run.embedder.dim if run.embedder else run.loaded_embedder().dim)
    states, written = planned.states, {}
    for key, h in run.history.items():
        states[key].history, states[key].history_as = list(h.parts), h.settings
    t0 = time.monotonic()
    codebook = _codebook(run, planned, dim, same_model, fast_tier=bool(manifest_fields.get("backfill_model_id")))
    report.seconds["write"] += time.monotonic() - t0
    embedded += _write_parts(run, planned, dim, codebook, written)
    if counted:
        report.chunks_embedded += embedded
    snapshot_id = snapshot.new_snapshot_id()
    built = build_dir(cfg.data_dir, snapshot_id)
    try:
        t0 = time.monotonic()
        _lexical(run, built, written, lexical_from, states)
        _history_lexical(run, built, states)
        _keep_codebook(run, built, codebook)
        edge_count = _edges(run, built, states)
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
            next_row=planned.writer.next_row,
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
    totals(report, manifest, cfg.data_dir)
    for w in run.work:
        state = states[w.spec.key]
        w.report.files, w.report.files_indexed, w.report.chunks = state.files, state.files_indexed, state.chunks
        if not w.ok:
            w.report.refs = [{"ref": r.ref, "commit_id": r.commit_id} for r in state.refs]
    return snapshot.snapshots_dir(cfg.data_dir) / snapshot_id


def _plan_repo(run: Run, w: RepoWork, change: Change | None, writer: PartWriter) -> tuple[RepoState, PartPlan | None]:
    """One repo's state in the snapshot being published, and the plan of its part (None when its parts are
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
        return state, writer.plan(state, change.live, change.paths, change.new, fresh_ids=base is None)
    source = run.carried(w)
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
    live = run.carried_live(w, source)
    return state, writer.plan(state, live, set(), Tables().arrow([]), fresh_ids=base is None)


def _copy_counts(source: RepoState, target: RepoState) -> None:
    for name in ("files", "files_indexed", "files_skipped", "chunks", "secrets_held_back", "parse_fallbacks"):
        setattr(target, name, getattr(source, name))
    target.syntax_errors, target.graph = source.syntax_errors, dict(source.graph)


def _write_parts(run: Run, planned: Planned, dim: int, codebook, written: dict) -> int:
    """Write every plan's part (into `written`), on the run's Ray cluster when the rows are worth its start (the
    workers build each part's files and codes, the driver places them: docs/scale-out.md); the texts embedded again."""
    report, writer, embedded = run.report, planned.writer, [0]

    def laid_out() -> Iterator[tuple]:
        for key, plan in planned.plans.items():
            t0 = time.monotonic()  # the embed stage cached them: read back (a damaged entry is embedded again)
            matrix, again = vectors(run, plan.texts(), dim, show_progress=False)
            card_vector = vectors(run, [plan.card], dim, show_progress=False)[0][0] if plan.card else None
            report.seconds["embed"] += time.monotonic() - t0
            embedded[0] += again
            info, chunks = writer.laid_out(plan, dim, matrix)
            yield key, info, chunks, plan.tables, card_vector, plan

    rows = sum(p.held.num_rows + p.fresh.num_rows for p in planned.plans.values())
    if run.cluster is not None and run.cluster.worth(rows=rows):
        blob, landed = (codebook.blob if codebook is not None else None), {}
        for (key, info, chunks, _, _, plan), files in run.cluster.part_files(laid_out(), blob):
            t0 = time.monotonic()
            landed[key] = writer.written(
                plan, place_part(run.cfg.data_dir, info=info, rows=chunks.num_rows, files=files)
            )
            plan.state.parts = landed[key].parts
            report.seconds["write"] += time.monotonic() - t0
        written.update((key, landed[key]) for key in planned.plans)  # in the plans' order, as a local run
        return embedded[0]
    for key, info, chunks, _, card_vector, plan in laid_out():
        t0 = time.monotonic()
        written[key] = writer.write(plan, info, chunks, card_vector, codebook)
        plan.state.parts = written[key].parts
        report.seconds["write"] += time.monotonic() - t0
    return embedded[0]


def _lexical(
    run: Run, built: Path, written: dict[tuple[str, str], RepoParts], lexical_from: Path | None, states: dict
) -> None:
    """The new snapshot's lexical index: the base's (or `lexical_from`'s) with the documents of the rows that
    went and came, or, from scratch, one document per row: also when the base's would hold more than
    LEXICAL_REWRITE_SHARE of deleted documents."""
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
    drop, gone = [row for r in written.values() for row in r.drop], run.removed()
    dropping = len(drop) + sum(base.manifest.repo(*key).chunks for key in gone)
    if deleted_share(base.path / snapshot.LEXICAL_DIR, dropping, add.num_rows) > LEXICAL_REWRITE_SHARE:
        _lexical_whole(run, built, [states[w.spec.key] for w in run.work])
        return
    with Progress("lexical", add.num_rows, run.show_progress) as bar:
        write_lexical(built, base.path / snapshot.LEXICAL_DIR, drop, gone, add, bar)


def _lexical_whole(run: Run, built: Path, states: list[RepoState]) -> None:
    """The lexical index written from every live row of the snapshot the run publishes (the repos' `states`, as
    its manifest lists them), a part at a time."""
    refs = snapshot.repo_parts(snapshot.parts_dir(run.cfg.data_dir), states)
    rows = (snapshot.live(snapshot.read_part_chunks(r).select(_no_rows().column_names), r.covered) for r in refs)
    with Progress("lexical", sum(s.chunks for s in states), run.show_progress) as bar:
        write_lexical(built, None, [], [], rows, bar)


def _history_lexical(run: Run, built: Path, states: dict) -> None:
    """The new snapshot's commits index: the base's with the documents of repos whose history a base part
    replaced (or that left) deleted and the new parts' commits added; from scratch when the base has none."""
    base = run.base.path / snapshot.HISTORY_DIR if run.base is not None else None
    if base is not None and base.is_dir():
        drop = [key for key, h in run.history.items() if h.drop] + run.removed()
        new = [h for h in run.history.values() if h.written is not None]
        commits = pa.concat_tables([h.commits for h in new]) if new else COMMITS_SCHEMA.empty_table()
        changes = pa.concat_tables([h.changes for h in new]) if new else COMMIT_CHANGES_SCHEMA.empty_table()
        write_history_lexical(built, base, drop, commits, changes)
    elif any(s.history for s in states.values()):
        parts = [p for s in states.values() for p in s.history]
        commits, changes = (read_history_parts(run.cfg.data_dir, parts, t) for t in ("commits", "commit_changes"))
        write_history_lexical(built, None, [], commits, changes)


def _no_rows() -> pa.Table:
    return pa.table(
        {
            "row": pa.array([], pa.int64()),
            **{c: pa.array([], pa.string()) for c in ("org", "repo", "path", "symbol", "text")},
        }
    )


def _edges(run: Run, built: Path, states: dict) -> int:
    """Coupling edges of every org, from its repos' newest parts' edge facts; an org whose repos all have the
    facts the base's had keeps the base's edges, and no facts are read (they were 1.0 s of a cron run at 923
    repos, while a commit seldom changes a route, an import or a package)."""
    by_org: dict[str, dict[str, RepoState]] = defaultdict(dict)
    for key, state in states.items():
        if state.parts:
            by_org[key[0]][key[1]] = state
    held = _base_edges(run)
    tables = []
    for org in sorted(by_org):
        if held is not None and _same_facts(run, org, by_org[org]):
            tables.append(held.filter(pc.equal(held["org"], org)))
        else:
            tables.append(edges_table(edges(org, {name: run.edge_facts(s) for name, s in by_org[org].items()})))
    table = pa.concat_tables(tables) if tables else edges_table([])
    write_edges(built, table)
    return table.num_rows


def _base_edges(run: Run) -> pa.Table | None:
    """The base's edges, or None: no base, or its edges do not read (damaged bytes), when every org's are made
    again from their facts rather than the run failing."""
    if run.base is None:
        return None
    try:
        return read_graph(run.base.path, "edges")
    except (OSError, pa.ArrowException) as exc:
        run.report.notes.append(f"the edges of snapshot {run.base.path.name} do not read ({exc}); made again")
        return None


def _same_facts(run: Run, org: str, repos: dict[str, RepoState]) -> bool:
    """Whether the base's edges of `org` are what `repos` make: the base holds the same repos, each at the same
    newest part or at one with the same facts (the names its calls reach aside: edges do not read them)."""
    before = {r.name: r for r in run.base.manifest.repos if r.org == org and r.parts}
    if set(before) != set(repos):
        return False

    def facts(state: RepoState) -> dict:
        return {k: v for k, v in run.edge_facts(state).items() if k != "reach"}

    return all(s.parts[-1] == before[n].parts[-1] or facts(s) == facts(before[n]) for n, s in repos.items())


def totals(report: Report, manifest: Manifest, data_dir: Path) -> None:
    report.chunks = manifest.chunks
    report.graph = {t: sum(r.graph.get(t, 0) for r in manifest.repos) for t in FACT_COLUMNS}
    report.graph["edges"] = manifest.edges
    report.files = sum(r.files for r in manifest.repos)
    report.files_indexed = sum(r.files_indexed for r in manifest.repos)
    report.files_skipped = Counter()
    for r in manifest.repos:
        report.files_skipped.update(r.files_skipped)
    report.secrets_held_back = sum(r.secrets_held_back for r in manifest.repos)
    report.commits = history_commits(data_dir, manifest)
    report.parse_fallbacks = sum(r.parse_fallbacks for r in manifest.repos)
    report.syntax_errors = sum(r.syntax_errors for r in manifest.repos)


def _codebook(run: Run, planned: Planned, dim: int, same_model: bool, fast_tier: bool):
    """The codebook the run's parts are encoded with (indexer/build/codebook.py); a fast tier trains none: it
    must be quick."""

    def fresh_vectors(plan):
        return vectors(run, plan.texts(), dim, show_progress=False)[0]

    return run_codebook(run, planned, dim, same_model, fresh_vectors, may_train=not fast_tier)


def _keep_codebook(run: Run, built: Path, codebook) -> None:
    """The codebook the parts were encoded with, in the snapshot's directory: a link to the base's copy when it is
    that one (one file on disk and in a bucket), else written."""
    if codebook is None:
        return
    kept = run.base.path / CODEBOOK if run.base is not None else None
    if kept is not None and kept.exists() and kept.stat().st_size == len(codebook.blob):
        try:
            if kept.read_bytes() == codebook.blob:
                os.link(kept, built / CODEBOOK)
                return
        except OSError:
            pass  # another file system, or no links: written below
    (built / CODEBOOK).write_bytes(codebook.blob)
