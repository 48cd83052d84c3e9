"""Retrieval evaluation anyone can run on their own repos: labelled queries from a JSONL file, or
queries generated from real commits (subject line -> the files the commit changed).

Every run measures BM25-only, vector-only and hybrid side by side and prints the configuration it
measured, so a change is judged as a ratio in one run, not against a remembered number.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from dulwich.diff_tree import tree_changes

from indexer.config import Config, RepoSpec
from indexer.errors import BlobdexError
from indexer.languages import GRAMMARS, language_for
from indexer.mirror import mirror_path, open_mirror
from indexer.scan import ScanError, resolve_ref
from indexer.snapshot import CURRENT
from query import localize as localize_module
from query import search as search_module
from query.localize import localize
from query.reader import SnapshotReader
from query.search import MODES, SearchRequest

SKIP_SUBJECT_RE = re.compile(
    r"\b(release|bump|merge|typo|format(ting)?|version|changelog|lint|autoupdate|"
    r"pre-commit|dependabot|deps)\b",
    re.I,
)
MIN_SUBJECT_WORDS = 4
MAX_FILES_CHANGED = 5


class EvalError(BlobdexError):
    pass


@dataclass(frozen=True)
class Case:
    query: str
    expected: tuple[str, ...]  # repo-relative paths
    repo: str | None = None
    commit_id: str | None = None  # for commit cases: the commit whose parent is searched


@dataclass
class Scores:
    ranks: list[int | None] = field(default_factory=list)  # rank of the first expected file, per case
    recalls: list[float] = field(default_factory=list)  # share of expected files in the top 10

    def add(self, ranked: list[str], expected: tuple[str, ...]) -> dict:
        rank = next((i for i, p in enumerate(ranked, 1) if p in expected), None)
        recall = len(set(ranked[:10]) & set(expected)) / len(expected)
        self.ranks.append(rank)
        self.recalls.append(recall)
        return {"rank": rank, "recall@10": round(recall, 3)}

    def summary(self) -> dict:
        n = len(self.ranks) or 1
        hit = lambda k: sum(1 for r in self.ranks if r is not None and r <= k) / n  # noqa: E731
        return {
            "n": len(self.ranks),
            "hit@1": round(hit(1), 3),
            "hit@5": round(hit(5), 3),
            "hit@10": round(hit(10), 3),
            "recall@10": round(sum(self.recalls) / n, 3),
            "mrr": round(sum(1 / r for r in self.ranks if r) / n, 3),
        }


def configuration(reader: SnapshotReader, reranker=None) -> dict:
    return {
        "model": reader.manifest.model_id,
        "reranker": reranker.model_id if reranker else "off",
        "snapshot_id": reader.snapshot_id,
        "chunker_version": reader.manifest.chunker_version,
        "tokenizer_version": reader.manifest.tokenizer_version,
        "rrf_k": search_module.RRF_K,
        "weights": "/".join(f"{k}:{v:g}" for k, v in search_module.WEIGHTS.items()),
        "candidates": search_module.CANDIDATES,
        "symbol_boost": search_module.SYMBOL_BOOST,
        "path_boost": search_module.PATH_BOOST,
        "compound_boost": search_module.COMPOUND_BOOST,
        "file_decay": localize_module.DECAY,
        "non_source_weight": localize_module.NON_SOURCE_WEIGHT,
        "off_topic_test_weight": localize_module.OFF_TOPIC_TEST_WEIGHT,
        "off_topic_code_weight": localize_module.OFF_TOPIC_CODE_WEIGHT,
    }


def modes(reranker=None) -> tuple[str, ...]:
    """The columns an eval measures: each signal alone, hybrid, and hybrid reranked when a reranker is set."""
    return MODES + (("rerank",) if reranker is not None else ())


def run_cases(reader: SnapshotReader, embedder, cases: list[Case], org: str = "default", reranker=None) -> dict:
    """Score file-level rankings of every case in each mode."""
    columns = modes(reranker)
    scores = {mode: Scores() for mode in columns}
    rows = []
    for case in cases:
        row = {"query": case.query, "expected": list(case.expected), "repo": case.repo}
        if case.commit_id:
            row["commit_id"] = case.commit_id
        for mode in columns:
            req = SearchRequest(
                case.query,
                org,
                (case.repo,) if case.repo else (),
                limit=10,
                mode="hybrid" if mode == "rerank" else mode,
            )
            ranked = [f.path for f in localize(reader, embedder, req, reranker if mode == "rerank" else None)]
            row[mode] = {**scores[mode].add(ranked, case.expected), "top": ranked[:3]}
        rows.append(row)
    return {"summary": {mode: scores[mode].summary() for mode in columns}, "cases": rows}


def load_queries(path: Path) -> list[Case]:
    cases = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            expected = tuple(str(e).split(":", 1)[0] for e in item["expected"])
            cases.append(Case(str(item["query"]), expected, item.get("repo")))
        except (ValueError, KeyError, TypeError) as exc:
            raise EvalError(f'{path}:{n}: each line must be {{"query", "expected": [paths], "repo"?}} ({exc})') from exc
    if not cases:
        raise EvalError(f"{path} holds no queries")
    return cases


def commit_cases(cfg: Config, repo: str, n: int, seed: int, org: str = "default", max_walk: int = 5000) -> list[Case]:
    """Real commits as labelled queries: non-merge, subject >= 4 words and not a chore, modifying
    1-5 existing source files; the query is the subject and the answer is those files."""
    spec = cfg.repo(repo, org)
    if spec is None:
        raise EvalError(f"unknown repo {repo!r} in org {org!r}; add it with 'blobdex repo add' and index it first")
    candidates = []
    with open_mirror(mirror_path(cfg.data_dir, spec)) as git:
        try:  # the history of the ref that is indexed, not whatever the mirror's HEAD is
            _, tip = resolve_ref(git, spec.refs[0] if spec.refs else None, repo)
        except ScanError as exc:
            raise EvalError(
                f"cannot sample commits of {repo!r}: {exc} (if 'blobdex index' reported that it "
                f"could not fetch {repo!r}, fix that first)"
            ) from exc
        for entry in git.get_walker(include=[tip.encode()], max_entries=max_walk):
            commit = entry.commit
            subject = commit.message.decode("utf-8", "replace").strip().split("\n", 1)[0]
            if len(commit.parents) != 1 or len(subject.split()) < MIN_SUBJECT_WORDS or SKIP_SUBJECT_RE.search(subject):
                continue
            parent = git[commit.parents[0]]
            changes = list(tree_changes(git.object_store, parent.tree, commit.tree))
            if not 1 <= len(changes) <= MAX_FILES_CHANGED or any(c.type != "modify" for c in changes):
                continue
            paths = tuple(sorted(c.old.path.decode("utf-8", "replace") for c in changes))
            if not all(language_for(p) in GRAMMARS for p in paths):  # source files, not config or docs
                continue
            candidates.append(Case(subject, paths, repo, commit.id.decode()))
    random.Random(seed).shuffle(candidates)
    return candidates[:n]


def eval_commits(
    cfg: Config, repo: str, n: int, seed: int, embedder, org: str = "default", progress=None, reranker=None
) -> dict:
    """Index each sampled commit's parent (blob identity makes consecutive parents nearly free),
    then ask its subject and score the files it changed."""
    cases = commit_cases(cfg, repo, n, seed, org)
    if not cases:
        raise EvalError(
            f"no commit of {repo!r} qualifies (non-merge, 1-{MAX_FILES_CHANGED} modified source "
            f"files, a subject of {MIN_SUBJECT_WORDS}+ words)"
        )
    columns = modes(reranker)
    totals = {mode: Scores() for mode in columns}
    rows, config = [], None
    for i, case in enumerate(cases):
        reader = index_scratch(cfg, repo, org, embedder, (_parent(cfg, cfg.repo(repo, org), case.commit_id),))
        config = config or configuration(reader, reranker)
        result = run_cases(reader, embedder, [case], org, reranker)
        for mode in columns:
            totals[mode].ranks += [result["cases"][0][mode]["rank"]]
            totals[mode].recalls += [result["cases"][0][mode]["recall@10"]]
        rows += result["cases"]
        if progress:
            progress(i + 1, len(cases))
    drop_scratch(cfg, repo, org)
    return {"configuration": config, "summary": {m: totals[m].summary() for m in columns}, "cases": rows}


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
    if not (work / "cache").exists():
        os.symlink(cfg.data_dir / "cache", work / "cache")
    source = str(mirror_path(cfg.data_dir, spec))
    eval_cfg = replace(
        cfg, data_dir=work, keep_snapshots=1, repos=(RepoSpec(repo, source, org, spec.refs if refs is None else refs),)
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


def _parent(cfg: Config, spec: RepoSpec, commit_id: str) -> str:
    with open_mirror(mirror_path(cfg.data_dir, spec)) as git:
        return git[commit_id.encode()].parents[0].decode()


def configuration_line(result: dict) -> str:
    return "configuration: " + ", ".join(f"{k}={v}" for k, v in result["configuration"].items())


def render(result: dict) -> str:
    lines = [
        configuration_line(result),
        "",
        f"{'mode':<8} {'n':>4} {'hit@1':>6} {'hit@5':>6} {'hit@10':>6} {'recall@10':>9} {'mrr':>6}",
    ]
    for mode, s in result["summary"].items():
        lines.append(
            f"{mode:<8} {s['n']:>4} {s['hit@1']:>6} {s['hit@5']:>6} {s['hit@10']:>6} {s['recall@10']:>9} {s['mrr']:>6}"
        )
    return "\n".join(lines)
