"""Long task texts from history: agents paste bug reports, not commit subjects, so each case is a commit or a
pull-request merge whose message describes a problem at length, asked against its parent commit; it should
find the non-test source files the change touched.

A case is, oldest first by commit time:
- a non-merge commit whose body (after the subject, with trailers such as `Signed-off-by:`, `Co-authored-by:`,
  `Change-Id:` and bare `Fixes #N` lines removed) holds at least MIN_PROSE_CHARS characters; the query is the
  subject and that body. A `Fixes #N` commit is asked with its own text: the issue's text is on a forge we
  cannot reach.
- a merge of a pull request ("Merge pull request #N from ..."), whose body is the pull request's title and
  description; the same length rule applies to the description, the query is title and description, and the
  change is the merge against its first parent (what the pull request brought in).
A chore (the subject, or a pull request's title, matches commits.SKIP_SUBJECT_RE) is never a case.
The truth is every file the change modified, renamed or deleted that existed in the parent, is source
(a language with a grammar) and is not test code (indexer.languages.TEST_PATH_RE): 1 to MAX_TRUTH_FILES of them, or the
commit is no case. Files the change added are not kept: the parent's snapshot cannot contain them.

The cases are split in time: the older half (floor) is for tuning, the newer half is reported; the split
falls at the first commit of the newer half.
"""

from __future__ import annotations

import random
import re
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone

from dulwich.diff_tree import tree_changes

from indexer.config import Config
from indexer.languages import GRAMMARS, language_for
from query.eval import EvalError
from query.eval.commits import SKIP_SUBJECT_RE, history, score_at_parents
from query.eval.metrics import Case
from query.eval.metrics import render as render_table
from indexer.languages import TEST_PATH_RE

MIN_PROSE_CHARS = 200
MAX_TRUTH_FILES = 10
ISSUE_HITS = (1, 3, 5, 10)
SPLITS = ("tune", "test", "all")
PR_MERGE_RE = re.compile(r"^Merge pull request #\d+ from \S+")
# Lines that say who or where, not what is wrong: git trailers, cherry-pick notes, bare issue references
# ("Fixes #12", "Updates golang/go#80459", "For org/repo#7").
TRAILER_RE = re.compile(
    r"^[ \t]*(?:[A-Za-z][\w-]*-(?:by|id)[ \t]*:.*"
    r"|\(cherry picked from commit [0-9a-f]+\)"
    r"|(?:fix(?:e[sd])?|close[sd]?|resolve[sd]?|refs?|see|updates?|for)[ \t]*:?[ \t]*(?:[\w.-]+/[\w.-]+)?#\d+"
    r"(?:[ \t]*,?[ \t]*(?:and[ \t]+)?#\d+)*\.?)[ \t]*$",
    re.I | re.M,
)
# A message's last paragraph of `Key: value` lines is its trailer block, whatever the other keys (Gerrit
# adds `Reviewed-on:`, `Auto-Submit:`, `LUCI-TryBot-Result:`), when one of them is a git trailer such as
# `Change-Id:` or `Reviewed-by:`: a report that ends "Expected: 1 / Actual: 2" keeps its last paragraph.
TRAILER_LINE_RE = re.compile(r"^[A-Za-z][\w-]*:[ \t]+\S")
GIT_TRAILER_RE = re.compile(r"^[A-Za-z][\w-]*-(?:by|id|on):", re.I | re.M)


def without_trailers(body: str) -> str:
    """The body with its trailer block and every trailer-like line removed."""
    paragraphs = re.split(r"\n[ \t]*\n", body.strip())
    while paragraphs and GIT_TRAILER_RE.search(paragraphs[-1].strip()):
        if not all(TRAILER_LINE_RE.match(line) for line in paragraphs[-1].strip().split("\n")):
            break
        paragraphs.pop()
    return re.sub(r"\n{3,}", "\n\n", TRAILER_RE.sub("", "\n\n".join(paragraphs))).strip()


@dataclass(frozen=True, kw_only=True)
class IssueCase:
    case: Case
    kind: str  # "commit" (a long message body) or "pull request" (a merge's description)
    time: int  # the commit's committer time, seconds since the epoch


def task_text(message: str, merge: bool) -> tuple[str, str, str]:
    """(title, description, reason): the report a commit message carries, trailers removed; the reason
    is empty when it qualifies, else why not. A pull request's merge carries its title in the body."""
    subject, _, body = message.strip().partition("\n")
    if merge:
        if not PR_MERGE_RE.match(subject):
            return "", "", "a merge not of a pull request"
        subject, _, body = body.strip().partition("\n")
    description = without_trailers(body)
    if SKIP_SUBJECT_RE.search(subject):
        return subject, description, "a chore"
    if len(" ".join(description.split())) < MIN_PROSE_CHARS:
        return subject, description, f"a body under {MIN_PROSE_CHARS} characters"
    return subject.strip(), description, ""


def truth_files(git, parent, commit) -> tuple[str, ...]:
    """The non-test source files the change modified, renamed or deleted (those the parent holds)."""
    changes = tree_changes(git.object_store, parent.tree, commit.tree)
    paths = {c.old.path.decode("utf-8", "replace") for c in changes if c.type != "add"}
    return tuple(sorted(p for p in paths if language_for(p) in GRAMMARS and not TEST_PATH_RE.search(p)))


def issue_cases(cfg: Config, repo: str, org: str = "default", max_walk: int = 5000) -> tuple[list[IssueCase], Counter]:
    """Every qualifying case of the indexed ref's history, oldest first, and why the other commits did not
    qualify (with the count of commits looked at under "looked at")."""
    found, skipped = [], Counter()
    with history(cfg, repo, org, max_walk) as (git, commits):
        for i, commit in enumerate(commits):
            skipped["looked at"] += 1
            if not commit.parents:
                skipped["the root commit"] += 1
                continue
            merge = len(commit.parents) > 1
            title, description, reason = task_text(commit.message.decode("utf-8", "replace"), merge)
            truth = () if reason else truth_files(git, git[commit.parents[0]], commit)
            if not reason and not truth:
                reason = "no non-test source file changed"
            elif len(truth) > MAX_TRUTH_FILES:
                reason = f"over {MAX_TRUTH_FILES} non-test source files changed"
            if reason:
                skipped[reason] += 1
                continue
            case = Case(query=f"{title}\n\n{description}", expected=truth, repo=repo, commit_id=commit.id.decode())
            kind = "pull request" if merge else "commit"
            # the walk is newest first, so among equal commit times the later-walked commit is the older
            found.append(((commit.commit_time, -i), IssueCase(case=case, kind=kind, time=commit.commit_time)))
    return [c for _, c in sorted(found, key=lambda f: f[0])], skipped


def split_cases(cases: list[IssueCase], split: str) -> tuple[list[IssueCase], dict]:
    """The half of the time-ordered cases `split` names (tune: the older floor(n/2), test: the newer rest,
    all: every case) and where the split falls."""
    if split not in SPLITS:
        raise EvalError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    half = len(cases) // 2
    at = cases[half]
    info = {
        "split": split,
        "at": at.case.commit_id,
        "at_time": datetime.fromtimestamp(at.time, timezone.utc).isoformat(),
        "tune": half,
        "test": len(cases) - half,
    }
    return {"tune": cases[:half], "test": cases[half:], "all": cases}[split], info


def sample(cases: list[IssueCase], n: int, seed: int) -> list[IssueCase]:
    """`n` of the cases at random (`seed`), kept in time order."""
    return [cases[i] for i in sorted(random.Random(seed).sample(range(len(cases)), min(n, len(cases))))]


def lengths(queries: list[str]) -> dict:
    """min / median / p90 (nearest rank) / max of the queries' length in characters and in words."""

    def spread(values: list[int]) -> dict:
        values = sorted(values)
        p90 = values[max(0, -(-9 * len(values) // 10) - 1)]
        return {"min": values[0], "median": statistics.median(values), "p90": p90, "max": values[-1]}

    return {"chars": spread([len(q) for q in queries]), "words": spread([len(q.split()) for q in queries])}


def eval_issues(
    cfg: Config,
    repo: str,
    n: int,
    seed: int,
    embedder,
    org: str = "default",
    split: str = "test",
    progress=None,
    reranker=None,
    unseen_from: int | None = None,
) -> dict:
    """Sample `n` cases of one half of the time split, index each one's parent and score the files it changed,
    with hit@1/3/5/10 and MRR per mode, the split and the queries' length distribution. With `unseen_from`
    (a tuned model's cutoff, seconds since the epoch) cases older than it are left out: the model learned
    from them."""
    cases, skipped = issue_cases(cfg, repo, org)
    if not cases:
        why = ", ".join(f"{reason}: {count}" for reason, count in skipped.most_common() if reason != "looked at")
        raise EvalError(
            f"no commit of {repo!r} qualifies as a long task text: looked at {skipped['looked at']} commits "
            f"({why or 'none'}); a case needs a message body of {MIN_PROSE_CHARS}+ characters and a changed "
            f"non-test source file"
        )
    chosen, info = split_cases(cases, split)
    if not chosen:
        raise EvalError(
            f"the {split} half of {repo!r} holds no case: only {len(cases)} commit qualifies; use --split all"
        )
    if unseen_from is not None:
        info["seen_dropped"] = sum(1 for c in chosen if c.time < unseen_from)
        chosen = [c for c in chosen if c.time >= unseen_from]
        if not chosen:
            raise EvalError(
                f"every case of the {split} half of {repo!r} is older than the tuned model's cutoff "
                f"({datetime.fromtimestamp(unseen_from, timezone.utc).isoformat()}): it learned from them; "
                f"tune with --before {info['at'][:12]} to keep the newer half unseen"
            )
    chosen = sample(chosen, n, seed)
    result = score_at_parents(cfg, repo, org, [c.case for c in chosen], embedder, progress, reranker, ISSUE_HITS)
    for row, c in zip(result["cases"], chosen):
        row.update(kind=c.kind, time=datetime.fromtimestamp(c.time, timezone.utc).isoformat())
    return {**result, "split": info, "lengths": lengths([c.case.query for c in chosen])}


def render(result: dict) -> str:
    """The summary table, then where the split falls and how long the queries are."""
    s, q = result["split"], result["lengths"]
    return "\n".join(
        [
            render_table(result),
            "",
            f"split: {s['split']} (tune {s['tune']} older, test {s['test']} newer; the newer half starts at "
            f"{s['at'][:12]}, {s['at_time']})"
            + (f"; {s['seen_dropped']} older than the tuned model's cutoff left out" if s.get("seen_dropped") else ""),
            *(
                f"query {unit:<5}: min {d['min']}  median {d['median']:g}  p90 {d['p90']}  max {d['max']}"
                for unit, d in (("chars", q["chars"]), ("words", q["words"]))
            ),
        ]
    )
