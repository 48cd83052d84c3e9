"""Queries generated from real commits: each sampled commit's subject line, asked against its parent commit,
should find the files the commit changed."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from contextlib import contextmanager

from dulwich.diff_tree import tree_changes

from indexer.config import Config, RepoSpec
from indexer.languages import GRAMMARS, language_for
from indexer.mirror import mirror_path, open_mirror
from indexer.scan import ScanError, resolve_ref
from query.eval import EvalError
from query.eval.metrics import HITS, Case, Scores, configuration, modes, run_cases
from query.eval.scratch import drop_scratch, index_scratch

SKIP_SUBJECT_RE = re.compile(
    r"\b(release|bump|merge|typo|format(ting)?|version|changelog|lint|autoupdate|"
    r"pre-commit|dependabot|deps)\b",
    re.I,
)
MIN_SUBJECT_WORDS = 4
MAX_FILES_CHANGED = 5


@contextmanager
def indexed_tip(cfg: Config, repo: str, org: str, doing: str) -> Iterator[tuple[object, str]]:
    """The mirror of a configured repo and the commit its indexed ref points at (not whatever the mirror's HEAD
    is); `doing` says what could not be done without it ("sample commits of")."""
    spec = cfg.repo(repo, org)
    if spec is None:
        raise EvalError(f"unknown repo {repo!r} in org {org!r}; add it with 'blobdex repo add' and index it first")
    with open_mirror(mirror_path(cfg.data_dir, spec)) as git:
        try:
            _, tip = resolve_ref(git, spec.refs[0] if spec.refs else None, repo)
        except ScanError as exc:
            raise EvalError(
                f"cannot {doing} {repo!r}: {exc} (if 'blobdex index' reported that it "
                f"could not fetch {repo!r}, fix that first)"
            ) from exc
        yield git, tip


@contextmanager
def history(cfg: Config, repo: str, org: str = "default", max_walk: int = 5000) -> Iterator[tuple[object, Iterator]]:
    """The mirror of a configured repo and the commits of the ref that is indexed, newest first, at most
    `max_walk` of them."""
    with indexed_tip(cfg, repo, org, "sample commits of") as (git, tip):
        yield git, (entry.commit for entry in git.get_walker(include=[tip.encode()], max_entries=max_walk))


def commit_cases(
    cfg: Config,
    repo: str,
    n: int,
    seed: int,
    org: str = "default",
    max_walk: int = 5000,
    unseen_from: int | None = None,
) -> list[Case]:
    """Real commits as labelled queries: non-merge, subject >= 4 words and not a chore, modifying
    1-5 existing source files; the query is the subject and the answer is those files. With `unseen_from`
    (a tuned model's cutoff, seconds since the epoch) only commits from then on qualify."""
    candidates = []
    with history(cfg, repo, org, max_walk) as (git, commits):
        for commit in commits:
            if unseen_from is not None and commit.commit_time < unseen_from:
                continue
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
            candidates.append(Case(query=subject, expected=paths, repo=repo, commit_id=commit.id.decode()))
    random.Random(seed).shuffle(candidates)
    return candidates[:n]


def eval_commits(
    cfg: Config,
    repo: str,
    n: int,
    seed: int,
    embedder,
    org: str = "default",
    progress=None,
    reranker=None,
    unseen_from: int | None = None,
) -> dict:
    """Index each sampled commit's parent (blob identity makes consecutive parents nearly free),
    then ask its subject and score the files it changed (with `unseen_from`, only commits a tuned model
    did not learn from)."""
    cases = commit_cases(cfg, repo, n, seed, org, unseen_from=unseen_from)
    if not cases:
        newer = " newer than the tuned model's cutoff" if unseen_from is not None else ""
        raise EvalError(
            f"no commit of {repo!r}{newer} qualifies (non-merge, 1-{MAX_FILES_CHANGED} modified source "
            f"files, a subject of {MIN_SUBJECT_WORDS}+ words)"
        )
    return score_at_parents(cfg, repo, org, cases, embedder, progress, reranker)


def score_at_parents(
    cfg: Config, repo: str, org: str, cases: list[Case], embedder, progress=None, reranker=None, hits=HITS
) -> dict:
    """Index each case's parent commit (its first parent, for a merge) into a scratch snapshot and score
    the case there in every mode; the scratch snapshot is dropped at the end."""
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
    return {"configuration": config, "summary": {m: totals[m].summary(hits) for m in columns}, "cases": rows}


def _parent(cfg: Config, spec: RepoSpec, commit_id: str) -> str:
    with open_mirror(mirror_path(cfg.data_dir, spec)) as git:
        return git[commit_id.encode()].parents[0].decode()
