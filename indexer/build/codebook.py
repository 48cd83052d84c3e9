"""A run's codebook for approximate vector search (indexer/snapshot/ann.py): the base snapshot's when it has one
for this model, else one trained on a sample of the snapshot's vectors once it holds TRAIN_ROWS chunks."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from indexer.snapshot import parts_of, read_part_chunks, vector_matrix
from indexer.snapshot import ann
from indexer.snapshot.ann import CODEBOOK, Codebook

if TYPE_CHECKING:
    from indexer.build.work import Run

log = logging.getLogger(__name__)


def run_codebook(run: Run, planned, dim: int, same_model: bool, fresh_vectors, may_train: bool):
    """The Codebook the run's parts are encoded with, or None (the snapshot is small, or a fast tier is being
    published: it trains nothing, so it stays fast). `planned`: the run's assemble.Planned; `fresh_vectors(plan)`:
    a plan's vectors, from the cache."""
    if run.base is not None and same_model:
        try:
            found = Codebook.read(run.base.path / CODEBOOK)
        except (OSError, ValueError, RuntimeError) as exc:  # damaged: a new one is trained below
            log.warning("the base snapshot's codebook cannot be read (%s); training a new one", exc)
            found = None
        if found is not None:
            return found
    rows = sum(state.chunks for state in planned.states.values())
    if not may_train or rows < ann.TRAIN_ROWS:
        return None
    sample = _sample(run, planned, dim, same_model, fresh_vectors)
    enough = max(ann.TRAIN_ROWS // 2, ann.LISTS, 256)  # k-means needs a point a list, PQ 256 a sub-vector
    return Codebook(ann.train(sample)) if len(sample) >= enough else None


def _sample(run: Run, planned, dim: int, same_model: bool, fresh_vectors) -> np.ndarray:
    """Up to ann.SAMPLE vectors drawn evenly from the parts the run writes, then the base's parts it keeps."""
    found, held = [], 0
    for plan in planned.plans.values():
        if held >= 2 * ann.SAMPLE:
            break
        matrix = fresh_vectors(plan)
        if plan.held.num_rows and "vector" in plan.held.column_names:
            matrix = np.concatenate([vector_matrix(plan.held, dim), matrix])
        found.append(matrix)
        held += len(matrix)
    if held < 2 * ann.SAMPLE and run.base is not None and same_model:  # the repos this run leaves as they were
        written = {(p.state.org, p.state.name) for p in planned.plans.values()}
        for repo in run.base.manifest.repos:
            if held >= 2 * ann.SAMPLE or (repo.org, repo.name) in written:
                continue
            for ref in parts_of(run.base.path, run.base.manifest, {(repo.org, repo.name)}):
                found.append(vector_matrix(read_part_chunks(ref), dim))
                held += len(found[-1])
    sample = np.concatenate(found) if found else np.zeros((0, dim), dtype=np.float32)
    if len(sample) > ann.SAMPLE:
        sample = sample[np.random.default_rng(36).choice(len(sample), ann.SAMPLE, replace=False)]
    return sample
