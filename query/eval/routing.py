"""Routing measured on pooled commit subjects: does route_task rank the repo that made the commit first?"""

from __future__ import annotations

from indexer.config import Config
from query.eval.commits import commit_cases
from query.eval.metrics import configuration
from query.reader import SnapshotReader


def eval_routing(
    cfg: Config, reader: SnapshotReader, embedder, repos: list[str], n: int, seed: int, org: str = "default"
) -> dict:
    """Pool commit subjects of several repos, ask route_task for each, and score the owning repo."""
    from query.route_task import route

    pooled = [c for repo in repos for c in commit_cases(cfg, repo, n, seed, org)]
    ranks, rows = [], []
    for case in pooled:
        ranked = [r.repo for r in route(reader, embedder, case.query, org, limit=len(repos))]
        rank = ranked.index(case.repo) + 1 if case.repo in ranked else None
        ranks.append(rank)
        rows.append({"query": case.query, "owner": case.repo, "rank": rank, "ranked": ranked})
    count = len(ranks) or 1
    summary = {
        "n": len(ranks),
        "top1": round(sum(1 for r in ranks if r == 1) / count, 3),
        "mrr": round(sum(1 / r for r in ranks if r) / count, 3),
    }
    return {"configuration": configuration(reader), "summary": summary, "cases": rows}
