"""The history stage: for each repo a run fetched, the commits its refs reach that the previous snapshot's history
parts do not hold yet, read from the mirror and written as a history part (indexer/snapshot/write.py).

A run whose refs moved forward writes a delta of the new commits; one that finds history rewritten (a force-push,
a ref gone), other settings, more than MAX_PARTS parts, or a --full run writes a base of the whole history the
settings allow, listed alone. A repo that failed, or was left out of the run, keeps the history it had.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from indexer import history, mirror
from indexer.build.progress import Progress
from indexer.build.vectors import vectors
from indexer.snapshot import HistoryInfo, parts_dir, read_history_info
from indexer.snapshot.schemas import COMMIT_CHANGES_SCHEMA, COMMITS_SCHEMA
from indexer.snapshot.write import write_history_part

if TYPE_CHECKING:
    from indexer.build.work import RepoWork, Run

log = logging.getLogger(__name__)

MAX_PARTS = 16  # a repo's history parts before a run writes one base of them all
PARALLEL_FROM = 2_000  # commits a walk must have before worker processes read them
MAX_WORKERS = 8
SLICE = 250  # commits one worker reads at a time
PROGRESS_FROM = 500  # commits a walk must have to show progress lines (a few new commits take milliseconds)


@dataclass(kw_only=True)
class RepoHistory:
    """One repo's history in the snapshot being published: its parts and settings, whether the commits index
    drops what it held of the repo (a base replaced it, or history is off), and the rows a new part added."""

    parts: list[str] = field(default_factory=list)
    settings: str = ""
    drop: bool = False
    written: HistoryInfo | None = None
    commits: pa.Table = field(default_factory=COMMITS_SCHEMA.empty_table)
    changes: pa.Table = field(default_factory=COMMIT_CHANGES_SCHEMA.empty_table)


def history_stage(run: Run, full: bool) -> dict[tuple[str, str], RepoHistory]:
    """Each configured repo's history for the snapshot this run publishes; seconds.history is its time."""
    t0 = time.monotonic()
    out = {}
    for w in run.work:
        try:
            out[w.spec.key] = _repo_history(run, w, full)
        except Exception as exc:  # corrupt objects in a mirror: this repo's history only, and not its content
            log.warning("cannot read the history of %s/%s", *w.spec.key, exc_info=True)
            before = run.prev.repo(*w.spec.key) if run.prev is not None else None
            out[w.spec.key] = RepoHistory(
                parts=list(before.history) if before else [], settings=before.history_as if before else ""
            )
            run.report.notes.append(
                f"cannot read the history of repo {w.spec.name!r} ({type(exc).__name__}: {exc}); it keeps the "
                "history it had, and the next run that finds the repo changed reads what is missing"
            )
    run.report.seconds["history"] += time.monotonic() - t0
    return out


def _repo_history(run: Run, w: RepoWork, full: bool) -> RepoHistory:
    settings = run.cfg.history
    before = run.prev.repo(*w.spec.key) if run.prev is not None else None
    held = list(before.history) if before is not None else []
    if not w.ok or not w.fetched:  # failed, or left out: as the previous snapshot has it
        return RepoHistory(parts=held, settings=before.history_as if before else "")
    if settings.mode == "off":
        return RepoHistory(drop=bool(held))
    same = not full and held and before.history_as == settings.recorded
    heads = sorted({commit_id for _, commit_id in w.refs})
    infos = [read_history_info(parts_dir(run.cfg.data_dir) / p) for p in held] if same else []
    # parts with another model's vectors (or none) are read again: the cache has what that model embedded
    current = bool(infos) and all(i.model_id == run.model_id for i in infos)
    if current and sorted(set(infos[-1].heads)) == heads:
        return RepoHistory(parts=held, settings=settings.recorded)  # nothing new: the mirror is not opened
    with mirror.open_mirror(w.mirror_path) as repo:
        if current:
            last = infos[-1]
            forward = all(any(history.is_ancestor(repo, h, n) for n in heads) for h in last.heads)
            delta = _read(run, w, repo, heads, last.heads, base=False) if forward and len(held) < MAX_PARTS else None
            if delta is not None:
                return RepoHistory(parts=[*held, delta.written.part_id], settings=settings.recorded, **_rows(delta))
        found = _read(run, w, repo, heads, [], base=True)
    return RepoHistory(parts=[found.written.part_id], settings=settings.recorded, drop=bool(held), **_rows(found))


@dataclass
class _Read:
    written: HistoryInfo
    commits: pa.Table
    changes: pa.Table


def _rows(read: _Read) -> dict:
    return {"written": read.written, "commits": read.commits, "changes": read.changes}


def _read(run: Run, w: RepoWork, repo, heads: list[str], exclude: list[str], base: bool) -> _Read | None:
    """Read the commits `heads` reach and `exclude` does not, and write them as a history part. None for a delta
    that reaches as many new commits as the settings keep: the older ones would be lost, so a base is read."""
    settings, (org, name) = run.cfg.history, w.spec.key
    commits = history.walk(repo, heads, exclude, settings)
    if not base and len(commits) >= settings.max_commits:
        return None
    c_rows: dict[str, list] = {n: [] for n in COMMITS_SCHEMA.names}
    p_rows: dict[str, list] = {n: [] for n in COMMIT_CHANGES_SCHEMA.names}
    shown = run.show_progress and len(commits) >= PROGRESS_FROM
    with Progress(f"history {org}/{name}", len(commits), shown) as bar:
        for commit, changed in zip(commits, _changes(repo, w.mirror_path, commits, settings.mode == "diffs")):
            message, held = history.screen(commit.message.decode("utf-8", "replace")[: history.MAX_MESSAGE_CHARS])
            author, committer = history.person(commit.author), history.person(commit.committer)
            commit_id = commit.id.decode()
            for key, value in {
                "org": org,
                "repo": name,
                "commit_id": commit_id,
                "parents": [p.decode() for p in commit.parents],
                "author_name": author[0],
                "author_email": author[1],
                "author_time": commit.author_time,
                "committer_name": committer[0],
                "committer_email": committer[1],
                "committer_time": commit.commit_time,
                "subject": message.strip().split("\n", 1)[0],
                "message": message,
                "held_back": held + sum(c.held_back for c in changed),
                "files_changed": len(changed),
                "added": sum(max(c.added, 0) for c in changed),
                "removed": sum(max(c.removed, 0) for c in changed),
            }.items():
                c_rows[key].append(value)
            for c in changed:
                for key, value in {"org": org, "repo": name, "commit_id": commit_id, **_change_fields(c)}.items():
                    p_rows[key].append(value)
            bar.advance()
    commits_table = pa.table(c_rows, schema=COMMITS_SCHEMA)
    changes_table = pa.table(p_rows, schema=COMMIT_CHANGES_SCHEMA)
    texts = [history.commit_text(m) for m in c_rows["message"]]
    matrix, _ = vectors(run, texts, None, shown, f"embed commits {org}/{name}")
    info = {"org": org, "repo": name, "base": base, "heads": heads, "settings": settings.recorded}
    written = write_history_part(
        run.cfg.data_dir,
        info={**info, "model_id": run.model_id},
        commits=commits_table,
        changes=changes_table,
        vectors=matrix,
    )
    run.report.commits_read += len(commits)
    return _Read(written, commits_table, changes_table)


def _changes(repo, mirror: Path, commits: list, with_hunks: bool) -> Iterator[list[history.PathChange]]:
    """Each commit's changes, in order: read here, or, for a long walk on a machine with more than one CPU, by
    worker processes in slices (reading is pure Python: about 15 ms a commit on one core)."""
    workers = min(os.cpu_count() or 1, MAX_WORKERS)
    if len(commits) < PARALLEL_FROM or workers < 2:
        yield from (history.changes(repo, c, with_hunks) for c in commits)
        return
    ids = [c.id.decode() for c in commits]
    slices = [ids[i : i + SLICE] for i in range(0, len(ids), SLICE)]
    # spawn, not fork: the run's process holds threads and open stores a forked child must not inherit
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for found in pool.map(history.changes_of, [str(mirror)] * len(slices), slices, [with_hunks] * len(slices)):
            yield from found


def _change_fields(c: history.PathChange) -> dict:
    return {
        "path": c.path,
        "old_path": c.old_path,
        "change": c.change,
        "old_blob": c.old_blob,
        "new_blob": c.new_blob,
        "added": c.added,
        "removed": c.removed,
        "hunks": c.hunks,
    }
