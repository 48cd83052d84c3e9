"""Scratch snapshots for measuring: the one place query/ drives the indexer's build (indexer.SANCTIONED says so)."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from indexer.config import Config, RepoSpec
from indexer.mirror import mirror_path
from indexer.snapshot import CURRENT
from query.eval import EvalError
from query.reader import SnapshotReader


def index_scratch(cfg: Config, repo: str, org: str, embedder, refs: tuple[str, ...] | None = None) -> SnapshotReader:
    """Index one configured repo (at `refs`, or its configured refs) with `cfg.model` into a scratch
    data dir beside the live one. The content-addressed caches are shared, so nothing is embedded twice
    and the live snapshot is never touched."""
    from indexer.build import run

    spec = cfg.repo(repo, org)
    if spec is None:
        raise EvalError(f"unknown repo {repo!r} in org {org!r}; add it with 'blobdex repo add' and index it first")
    work = _scratch(cfg, repo, org)
    work.mkdir(parents=True, exist_ok=True)
    (cfg.data_dir / "cache").mkdir(exist_ok=True)  # before any index run too: the link must not dangle
    if not (work / "cache").is_symlink():
        os.symlink(cfg.data_dir / "cache", work / "cache")
    source = str(mirror_path(cfg.data_dir, spec))
    eval_cfg = replace(
        cfg,
        data_dir=work,
        keep_snapshots=1,
        fast_first=False,  # an eval measures the model itself: one snapshot, its own vectors
        repos=(RepoSpec(name=repo, url=source, org=org, refs=spec.refs if refs is None else refs),),
    )
    run(eval_cfg, embedder=embedder, show_progress=False)
    return SnapshotReader(work)


def _scratch(cfg: Config, repo: str, org: str) -> Path:
    return cfg.data_dir / "eval" / f"{org}-{repo}"


def drop_scratch(cfg: Config, repo: str, org: str) -> None:
    """The eval snapshots are scratch: drop them and the pointer to them (mirror and caches stay warm)."""
    work = _scratch(cfg, repo, org)
    shutil.rmtree(work / "snapshots", ignore_errors=True)
    (work / CURRENT).unlink(missing_ok=True)
