"""Routing measured on pooled cases: does route_task rank the repo that made the change first?

A case is a commit subject (`eval commits`' sample) or a long task text (`eval issues`' sample of one half of
the time split), asked against the live snapshot. With `mask`, every pooled repo's name and package names
(`src/<name>/`, the repo name without its extension) are replaced by "PKG" in every query, so a report that
says `pytest` or `import blinker` cannot name its owner.
"""

from __future__ import annotations

import re

from indexer.config import Config
from query.eval import EvalError
from query.eval.commits import commit_cases
from query.eval.issues import issue_cases, sample, split_cases
from query.eval.metrics import Case, configuration
from query.reader import SnapshotReader

CASE_KINDS = ("subjects", "issues")
MASK = "PKG"


def package_names(reader: SnapshotReader, org: str, repos: list[str]) -> set[str]:
    """The names a text could use for the pooled repos: each repo's name (without `.js`-like suffixes) and the
    packages under its `src/` (a leading underscore dropped: pytest ships `_pytest`)."""
    names = {r.split(".")[0].lower() for r in repos}
    for repo, path in reader.files(org):
        if repo in repos and path.startswith("src/") and path.count("/") >= 2:
            names.add(path.split("/")[1].lstrip("_").lower())
    return {n for n in names if len(n) >= 3}


def mask(text: str, names: set[str]) -> str:
    if not names:
        return text
    pattern = re.compile(
        r"(?<!\w)_?(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?!\w)", re.I
    )
    return pattern.sub(MASK, text)


def pooled_cases(cfg: Config, repos: list[str], n: int, seed: int, org: str, kind: str, split: str) -> list[Case]:
    if kind not in CASE_KINDS:
        raise EvalError(f"unknown case kind {kind!r}; use one of {', '.join(CASE_KINDS)}")
    if kind == "subjects":
        return [c for repo in repos for c in commit_cases(cfg, repo, n, seed, org)]
    pooled = []
    for repo in repos:
        cases, _ = issue_cases(cfg, repo, org)
        pooled += [c.case for c in sample(split_cases(cases, split)[0] if cases else [], n, seed)]
    return pooled


def eval_routing(
    cfg: Config,
    reader: SnapshotReader,
    embedder,
    repos: list[str],
    n: int,
    seed: int,
    org: str = "default",
    kind: str = "subjects",
    split: str = "test",
    masked: bool = False,
) -> dict:
    """Pool cases of several repos, ask route_task for each, and score the owning repo."""
    from query.history import committed_at
    from query.route_task import MAX_ROUTES, route

    pooled = pooled_cases(cfg, repos, n, seed, org, kind, split)
    names = package_names(reader, org, repos) if masked else set()
    ranks, rows = [], []
    has_history = any(r.history for r in reader.manifest.repos if r.org == org)
    for case in pooled:
        query = mask(case.query, names)
        # history as it stood before the case's commit: a task's own fix never votes (none, when unknown)
        before = committed_at(reader, org, case.repo, case.commit_id) if has_history else None
        before = 0 if has_history and before is None else before
        ranked = [r.repo for r in route(reader, embedder, query, org, limit=min(len(repos), MAX_ROUTES), before=before)]
        rank = ranked.index(case.repo) + 1 if case.repo in ranked else None
        ranks.append(rank)
        rows.append({"query": query, "owner": case.repo, "rank": rank, "ranked": ranked})
    count = len(ranks) or 1
    summary = {
        "n": len(ranks),
        "top1": round(sum(1 for r in ranks if r == 1) / count, 3),
        "mrr": round(sum(1 / r for r in ranks if r) / count, 3),
    }
    return {
        "configuration": configuration(reader),
        "cases_from": {"kind": kind, "split": split if kind == "issues" else None, "masked": sorted(names)},
        "summary": summary,
        "cases": rows,
    }
