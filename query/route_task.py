"""route_task: which repos own a task, with the evidence, the coupling it touches, and a checkout plan.

Each repo is scored on four signals (vectormcp.md, "Routing"), then a substance factor:

    peak    0.48  the best chunk's relevance
    depth   0.28  mean of the repo's top 5, so one lucky match is not enough
    spread  0.10  distinct files among the candidates, saturating (35 files is not 4x 8)
    prior   0.14  the task against the repo's card, for vocabulary with no standout chunk

Relevance is the cosine of task and chunk vectors (a long task's best passage), plus a bonus when BM25
also found the chunk: unlike RRF scores, cosines are comparable across repos. The candidate pool is
capped per repo so one large repo cannot crowd the others out, and holds no test file unless the task
asks for tests: a report about a test framework's behaviour otherwise matches every repo's suite.

The repos are then ordered by fusing that score's ranking with file localization over the whole org
(`signals.file_rank`: where the repo's best file ranks), which weighs what the task names, and, where the
snapshot holds history, with the repos whose past commits are most like the task (`signals.history_rank`).
Measured with `blobdex eval routing` over six repos (pytest, blinker, itsdangerous, markupsafe, commander.js, pflag),
top-1: long reports with names masked 0.846 -> 0.923 (held-out half), 0.82 -> 0.88 (tune half);
commit subjects 0.578 -> 0.594.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from indexer.embed import Embedder
from indexer.snapshot import read_cards, read_graph, vector_matrix
from query.labels import Labels
from query.reader import SnapshotReader
from indexer.languages import is_test_file
from query.history import DamagedHistory, history_of, repo_votes
from query.localize import asks_for_tests, localize, runner_repos
from query.search import (
    CANDIDATES,
    SearchError,
    SearchRequest,
    row_cosines,
    lexical_ranks,
    scored_rows,
    top_ranks,
    query_vectors,
    row_mask,
    rrf,
    validate,
)

WEIGHTS = {"peak": 0.48, "depth": 0.28, "spread": 0.10, "prior": 0.14}
PER_REPO_CANDIDATES = 40
DEPTH_TOP = 5
SPREAD_HALF_FILES = 6.0  # spread = 1 - exp(-files / this): 6 files ~ 0.63, 18 files ~ 0.95
LEXICAL_BONUS = 0.08  # added to a chunk's cosine when BM25 found it too (scaled by rank)
RELATIVE_FLOOR = 0.5  # repos scoring under half the best are dropped
SUBSTANCE_MIN_SHARE = 0.2  # below this share of code evidence, a repo is demoted...
SUBSTANCE_FACTOR = 0.6  # ...by this factor (a threshold, not a ratio: a README that explains is fine)
EVIDENCE_PER_REPO = 3
ROUTE_POOL = 2000  # rows near the task an approximate search gives routing (an exact one scores every row)
MAX_RUNS = 10_000  # runs of one repo's rows past which candidates are found by sorting every score
MAX_ROUTES = 20  # repos one answer ranks (route_task's limit on every surface)
FILE_POOL = 30  # files ranked org-wide by file localization; a repo's place is its best file's
# The ranking of repos by their past commit most like the task (query.history.repo_votes). `eval routing --mask
# --n 30`, each case asked with the history before its commit, top-1 without -> with (weight 1.0): self,
# itsdangerous, markupsafe subjects 0.644 -> 0.856; with pytest too, subjects 0.667 -> 0.683, long reports
# 0.892 -> 0.946 (37 held out).
HISTORY_WEIGHT = 1.0
NOT_SUBSTANCE_RE = re.compile(
    r"(^|/)(tests?|spec|specs|__tests__|fixtures?|testdata|examples?|docs?)(/|$)|"
    r"(^|/)test_[^/]*$|_test\.\w+$|\.test\.\w+$|\.spec\.\w+$|\.(md|rst|txt)$",
    re.I,
)


@dataclass(kw_only=True)
class RepoRoute:
    org: str
    repo: str
    score: float
    signals: dict
    evidence: list[dict] = field(default_factory=list)
    edges: list[dict] = field(default_factory=list)
    edges_total: int = 0
    checkout: dict = field(default_factory=dict)


def _cards(reader: SnapshotReader) -> dict[tuple[str, str], np.ndarray]:
    table = read_cards(reader.path, reader.of_part)
    if table is None:
        return {}
    vectors = vector_matrix(table)
    return {
        (o, r): vectors[i]
        for i, (o, r) in enumerate(zip(table.column("org").to_pylist(), table.column("repo").to_pylist()))
    }


def _checkout(paths: list[str]) -> dict:
    """Directories that cover the evidence, and the sparse-checkout command for them."""
    dirs = sorted({p.rsplit("/", 1)[0] if "/" in p else "." for p in paths})
    dirs = [d for d in dirs if not any(d != o and o != "." and d.startswith(o + "/") for o in dirs)]
    cone = [d for d in dirs if d != "."]
    return {
        "directories": dirs,
        "command": "git sparse-checkout set " + " ".join(cone)
        if cone
        else "git sparse-checkout disable  # the evidence is at the repo root",
    }


def _test_rows(paths: Labels) -> np.ndarray:
    """Which rows are test code (is_test_file of their path), judged once per distinct path."""
    return paths.mapped(is_test_file).values.astype(bool)[paths.codes]


def _tests_of(reader: SnapshotReader) -> np.ndarray:
    """_test_rows of a snapshot's rows, worked out once a part (2.2 s for 10M rows' 513k paths: a swap that
    worked them all out again spent that on the 922 parts of 923 it shared with the snapshot before)."""

    def load() -> np.ndarray:
        tests = [part.cached("test_rows", lambda p=part: _test_rows(p.labels["path"])) for part in reader.parts]
        return np.concatenate(tests) if tests else np.zeros(0, dtype=bool)

    return reader.cached("test_rows", load)


def _cards_and_edges(reader: SnapshotReader) -> tuple[dict, dict[tuple[str, str], list[dict]]]:
    """The repos' card vectors, and the coupling edges touching each repo by (org, repo), read once a snapshot
    (each route's repos found theirs in a pass over every edge: repos times edges)."""

    def load() -> tuple[dict, dict]:
        touching = defaultdict(list)
        for e in read_graph(reader.path, "edges").to_pylist():
            for repo in dict.fromkeys((e["from_repo"], e["to_repo"])):
                touching[e["org"], repo].append(e)
        return _cards(reader), dict(touching)

    return reader.cached("route", load)


def _best_per_group(groups: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """The indices of each group's `n` best scores, best first, ties in index order: what a stable sort of every
    score followed by `_first_per_group` gives, without sorting a million scores (a repo's rows stand together,
    part after part, so each run of one group is cut to its n best by a partition first)."""
    runs = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1], True]) if len(groups) else np.zeros(1, np.int64)
    if len(runs) > MAX_RUNS:  # groups interleaved (not a snapshot's order): sort them all
        order = np.argsort(-scores, kind="stable")
        return order[_first_per_group(groups[order], n)]
    picked = []
    for start, end in zip(runs[:-1].tolist(), runs[1:].tolist()):
        run = scores[start:end]
        if len(run) <= n:
            picked.append(np.arange(start, end))
            continue
        nth = np.partition(run, len(run) - n)[len(run) - n]  # the n-th best
        above = np.flatnonzero(run > nth)
        ties = np.flatnonzero(run == nth)[: n - len(above)]  # in index order, as a stable sort keeps them
        picked.append(start + np.sort(np.concatenate([above, ties])))
    chosen = np.concatenate(picked) if picked else np.zeros(0, np.int64)
    chosen = chosen[np.argsort(-scores[chosen], kind="stable")]
    return chosen[_first_per_group(groups[chosen], n)]  # a group in several runs keeps its n best


def _first_per_group(groups: np.ndarray, n: int) -> np.ndarray:
    """A mask of the first `n` positions of each group value, in the order given."""
    by_group = np.argsort(groups, kind="stable")  # grouped, the given order kept within each group
    ordered = groups[by_group]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    place = np.arange(len(groups)) - np.repeat(starts, np.diff(np.r_[starts, len(groups)]))
    first = np.zeros(len(groups), dtype=bool)
    first[by_group[place < n]] = True
    return first


def prepare(reader: SnapshotReader) -> None:
    """Load now what every route reads of a snapshot whatever the task: the commit history, each org's
    files and test-tool repos, the repos' cards and the edges. A long-lived server does it before a new snapshot
    serves, and in a thread for the first (query.live); otherwise the first route after a start or a swap pays
    it (1.8 s at 1M chunks, the next route 0.12 s)."""
    _tests_of(reader)
    _cards_and_edges(reader)
    for org in sorted({r.org for r in reader.manifest.repos}):
        runner_repos(reader, org)
    try:
        history_of(reader)
    except DamagedHistory:  # said where history is asked for
        pass


def route(
    reader: SnapshotReader,
    embedder: Embedder,
    task: str,
    org: str = "default",
    limit: int = 5,
    before: int | None = None,
) -> list[RepoRoute]:
    """The repos that own `task`, best first (`before`: an eval's cutoff; history after it is not read)."""
    req = route_request(task, org, limit)
    validate(req, reader)
    mask = row_mask(req, reader)
    if not mask.any():
        return []
    vector = query_vectors(embedder, req.query)
    lexical = lexical_ranks(reader, req, mask)
    routes, near = repo_routes(reader, req, vector, mask, lexical)
    known = {"vector": near, "bm25": lexical}  # file localization ranks the same two lists

    def files(asked: SearchRequest) -> list:
        return localize(reader, embedder, asked, snippets=False, known=known)

    chosen = chosen_routes(reader, embedder, req, routes, files, before)
    for r in chosen:  # where each piece of evidence lies, read for the routes answered only
        r.evidence = [located(reader, e["row"], e["relevance"]) for e in r.evidence]
    return chosen


def route_request(task: str, org: str, limit: int) -> SearchRequest:
    """A route's request (its task cut to MAX_QUERY_CHARS: no step reads more), its limit checked."""
    if not 1 <= limit <= MAX_ROUTES:
        raise SearchError(f"limit {limit} is out of range: use 1 to {MAX_ROUTES}")
    return SearchRequest(query=task, org=org, limit=limit)


def repo_routes(
    reader: SnapshotReader, req: SearchRequest, vector: np.ndarray, mask: np.ndarray, lexical: list[tuple[int, float]]
) -> tuple[list[RepoRoute], list[tuple[int, float]]]:
    """Each of the reader's repos scored for the task (unordered; evidence by row), and its best rows by cosine.
    `lexical`: the org's BM25 ranking, where a row the reader does not hold is -1 (a shard's: query.shard) and
    keeps its place, so a BM25 hit's bonus is its rank among them all."""
    task = req.query
    allowed, cos = scored_rows(reader, vector, mask, ROUTE_POOL)  # every row, or those near the task
    held = [(rank, row) for rank, (row, _) in enumerate(lexical) if row >= 0]
    unscored = np.setdiff1d(np.asarray([row for _, row in held], dtype=np.int64), allowed)
    if len(unscored):  # BM25 found rows the approximate index did not: scored too
        allowed = np.concatenate([allowed, unscored])
        cos = np.concatenate([cos, row_cosines(reader, unscored, vector)])
        order = np.argsort(allowed, kind="stable")
        allowed, cos = allowed[order], cos[order]
    relevance = cos.astype(np.float64)
    near = top_ranks(allowed, cos)
    if held:  # allowed is sorted and holds every hit: a BM25 hit's place in it by binary search
        ranks, hit_rows = (np.asarray(x) for x in zip(*held))
        relevance[np.searchsorted(allowed, hit_rows)] += LEXICAL_BONUS * (1 - ranks / CANDIDATES)
    if not asks_for_tests(task):  # every repo's test suite speaks a test framework's vocabulary
        keep = ~_tests_of(reader)[allowed]
        allowed, relevance = allowed[keep], relevance[keep]
    repo_col = reader.col["repo"]
    best = _best_per_group(repo_col.codes[allowed], relevance, PER_REPO_CANDIDATES)
    per_repo: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row, score in zip(allowed[best].tolist(), relevance[best].tolist()):  # in relevance order
        per_repo[repo_col[row]].append((row, score))
    cards, edges = _cards_and_edges(reader)
    return [_repo_route(reader, req.org, repo, cands, vector, cards, edges) for repo, cands in per_repo.items()], near


def _repo_route(
    reader: SnapshotReader, org: str, repo: str, cands: list, vector: np.ndarray, cards: dict, edges: dict
) -> RepoRoute:
    """One repo's route from its best candidates (row, relevance), best first."""
    scores = [max(s, 0.0) for _, s in cands]
    top_rows = [r for r, _ in cands[: PER_REPO_CANDIDATES // 2]]
    files = {reader.col["path"][r] for r in top_rows}
    card = cards.get((org, repo))
    signals = {
        "peak": scores[0],
        "depth": sum(scores[:DEPTH_TOP]) / DEPTH_TOP,
        "spread": 1 - math.exp(-len(files) / SPREAD_HALF_FILES),
        "prior": max(float((vector @ card).max()), 0.0) if card is not None else 0.0,
    }
    score = sum(WEIGHTS[k] * v for k, v in signals.items())
    evidence_rows = [r for r, _ in cands[:10]]
    substantial = sum(1 for r in evidence_rows if not NOT_SUBSTANCE_RE.search(reader.col["path"][r]))
    signals["substance"] = 1.0 if substantial / len(evidence_rows) >= SUBSTANCE_MIN_SHARE else SUBSTANCE_FACTOR
    score *= signals["substance"]
    evidence_files = {reader.col["path"][r] for r in evidence_rows}
    touching = edges.get((org, repo), [])
    here = [
        e
        for e in touching
        if (e["from_repo"] == repo and e["from_path"] in evidence_files)
        or (e["to_repo"] == repo and e["to_path"] in evidence_files)
    ]
    return RepoRoute(
        org=org,
        repo=repo,
        score=round(score, 4),
        signals={k: round(v, 4) for k, v in signals.items()},
        evidence=[{"row": row, "relevance": round(rel, 4)} for row, rel in cands[:EVIDENCE_PER_REPO]],
        edges=here,
        edges_total=len(touching),
        checkout=_checkout(sorted(evidence_files)),
    )


def chosen_routes(reader, embedder: Embedder, req: SearchRequest, routes: list[RepoRoute], files, before) -> list:
    """The first `req.limit` routes, fused with where each repo's best file ranks (`files(asked)`: file localization
    over the org, one reader's or the shards': query.front) and with history's votes (`reader`: a SnapshotReader or
    a front's Catalog)."""
    routes.sort(key=lambda r: (-r.score, r.repo))
    best = routes[0].score if routes else 0.0
    return _fuse_files(reader, embedder, req, routes, best, before, files)[: req.limit]


def located(reader: SnapshotReader, row: int, relevance: float) -> dict:
    """Where a piece of evidence lies: its file, lines and symbol."""
    r = reader.row(row)
    return {
        "path": r["path"],
        "line_start": r["line_start"],
        "line_end": r["line_end"],
        "symbol": r["symbol"],
        "relevance": relevance,
        "row": row,
    }


def _fuse_files(
    reader: SnapshotReader,
    embedder: Embedder,
    req: SearchRequest,
    routes: list[RepoRoute],
    best: float,
    before: int | None,
    localized,
) -> list[RepoRoute]:
    """The routes in the order of rankings fused by reciprocal rank (ties to the repo score): the repo
    scores, each repo's best file in file localization over the whole org, which weighs what a task
    names (definitions, files, scopes) and whether it asks for tests, and, with history, the repos whose
    past commits are most like the task (HISTORY_WEIGHT). A repo under RELATIVE_FLOOR stays when it holds
    the first file."""
    asked = SearchRequest(query=req.query, org=req.org, limit=FILE_POOL)
    files = localized(asked)
    place: dict[str, int] = {}
    for i, f in enumerate(files, 1):
        place.setdefault(f.repo, i)
    rankings = [("score", 1.0, [(r.repo, r.score) for r in routes]), ("file", 1.0, list(place.items()))]
    try:
        voted = repo_votes(reader, req.org, req.query, embedder, before) if HISTORY_WEIGHT else []
    except DamagedHistory:  # said where history is asked for; routing goes on with its other rankings
        voted = []
    if voted:
        rankings.append(("history", HISTORY_WEIGHT, voted))
    fused = rrf(rankings)
    history_rank = {repo: i for i, (repo, _) in enumerate(voted, 1)}
    for r in routes:
        r.signals["file_rank"] = place.get(r.repo)
        if voted:
            r.signals["history_rank"] = history_rank.get(r.repo)
    keep = [r for r in routes if r.score >= RELATIVE_FLOOR * best or place.get(r.repo) == 1]
    return sorted(keep, key=lambda r: (-fused[r.repo]["score"], -r.score, r.repo))
