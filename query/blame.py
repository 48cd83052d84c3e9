"""blame: for each line of a file at a commit, the commit that last changed it, computed from the mirror's objects.

Lines are passed from a commit to its parents where a line diff matches them (every parent of a merge in turn, as
`git blame` does); a line no parent has is the commit's own. A file renamed on the way is followed through the
renames the history tables hold, and a commit the tables say left the file alone costs no read. The walk stops
after MAX_STEPS commits that changed it: lines not settled by then are the last commit's, marked `boundary`, as
git marks a boundary commit. Results are cached by (mirror, commit, path, snapshot): commits never change.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dulwich.object_store import tree_lookup_path

from indexer import history
from indexer.mirror import mirror_dir, open_mirror
from query.get_file import BadRequest, FileText

MAX_STEPS = 3000  # commits one blame visits
MAX_BLAME_LINES = 20_000  # a longer file is refused: blame it in a clone
CACHED = 256  # blames kept, most recently used
_cache: OrderedDict[tuple, tuple] = OrderedDict()


@dataclass(frozen=True, kw_only=True)
class Blame:
    org: str
    repo: str
    ref: str
    commit_id: str
    path: str
    blob_id: str
    line_start: int
    line_end: int
    total_lines: int
    lines: list[dict]  # {line, commit_id, boundary?, text}, text with withheld lines marked as get_file marks them
    commits: dict[str, dict]  # commit_id -> {author, author_email, date, subject}


class Graph(Protocol):
    """What the history tables of one snapshot say about commits (query.history.History)."""

    def commit(self, commit_id: str) -> tuple[list[str], int] | None:
        """(parents, commit time) of a commit the tables hold; None for one they do not."""

    def touched(self, commit_id: str, path: str) -> bool:
        """Whether the commit changed `path` (a commit the tables hold)."""

    def renamed_from(self, commit_id: str, path: str) -> str | None:
        """The path a file had before the commit renamed it to `path`, or None."""


def blame(data_dir: Path, file: FileText, graph: Graph, snapshot_id: str) -> Blame:
    """Blame of the lines get_file answered (`file`: the text shown, its commit and path), with what the history
    tables of snapshot `snapshot_id` say about commits (`graph`)."""
    if file.total_lines > MAX_BLAME_LINES:
        raise BadRequest(
            f"{file.path!r} in repo {file.repo!r} has {file.total_lines} lines, over blame's {MAX_BLAME_LINES}; "
            "blame it with git in a clone"
        )
    mirror = mirror_dir(data_dir, file.org, file.repo)
    key = (str(mirror), file.commit_id, file.path, snapshot_id)
    owners = _cache.pop(key, None) or _attribute(mirror, file.commit_id, file.path, graph)
    _cache[key] = owners
    while len(_cache) > CACHED:
        _cache.popitem(last=False)
    texts = file.content.decode("utf-8", "replace").split("\n")
    lines, commits = [], {}
    with open_mirror(mirror) as repo:
        for n in range(file.line_start, file.line_end + 1):
            commit_id, boundary = owners[n - 1]
            row = {"line": n, "commit_id": commit_id, "text": texts[n - file.line_start]}
            if boundary:
                row["boundary"] = True
            lines.append(row)
            if commit_id not in commits:
                commits[commit_id] = _commit_info(repo[commit_id.encode()])
    return Blame(
        org=file.org,
        repo=file.repo,
        ref=file.ref,
        commit_id=file.commit_id,
        path=file.path,
        blob_id=file.blob_id,
        line_start=file.line_start,
        line_end=file.line_end,
        total_lines=file.total_lines,
        lines=lines,
        commits=commits,
    )


def _commit_info(commit) -> dict:
    name, email = history.person(commit.author)
    subject = commit.message.decode("utf-8", "replace").strip().split("\n", 1)[0]
    return {
        "author": name,
        "author_email": email,
        "date": history.when(commit.author_time),
        "subject": history.screen(subject)[0],
    }


def _attribute(mirror: Path, commit_id: str, path: str, graph: Graph) -> tuple[tuple[str, bool], ...]:
    """(commit_id, boundary) of each line of `path` at `commit_id`. A commit the history tables say left the path
    as its one parent had it passes every line on without a read of the mirror; the others are diffed."""
    with open_mirror(mirror) as repo:
        walk = _Walk(repo, graph)
        count = len(walk.lines(_blob(repo, repo[commit_id.encode()].tree, path)))
        owners: list[tuple[str, bool]] = [("", False)] * count
        walk.hand_on(commit_id, path, [(i, i) for i in range(count)])
        steps = 0
        while walk.queue:
            _, cid, p = heapq.heappop(walk.queue)
            items = walk.pending.pop((cid, p), None)
            if not items:
                continue
            known = graph.commit(cid)
            if known and len(known[0]) == 1 and not graph.touched(cid, p):
                walk.hand_on(known[0][0], p, items)  # the same blob at its parent: every line as it is
                continue
            commit, left = repo[cid.encode()], items
            steps += 1
            if steps < MAX_STEPS:
                left = walk.to_parents(commit, p, graph.renamed_from(cid, p) or p, items)
            boundary = steps >= MAX_STEPS and bool(commit.parents)
            for _, f in left:
                owners[f] = (cid, boundary)
        return tuple(owners)


class _Walk:
    """One blame's walk: the commits still to visit, newest first, with the lines each is asked about."""

    def __init__(self, repo, graph: Graph):
        self.repo, self.graph = repo, graph
        self.versions: dict[bytes, list[str]] = {}
        self.pending: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (commit, path) -> (line there, line asked)
        self.queue: list[tuple[int, str, str]] = []

    def lines(self, blob_id: bytes) -> list[str]:
        if blob_id not in self.versions:
            self.versions[blob_id] = history.lines_of(self.repo[blob_id].data)
        return self.versions[blob_id]

    def hand_on(self, commit_id: str, path: str, items: list[tuple[int, int]]) -> None:
        if (commit_id, path) not in self.pending:
            known = self.graph.commit(commit_id)
            when = known[1] if known else self.repo[commit_id.encode()].commit_time
            heapq.heappush(self.queue, (-when, commit_id, path))
        self.pending.setdefault((commit_id, path), []).extend(items)

    def to_parents(self, commit, path: str, before: str, items: list) -> list:
        """Pass the lines each parent (`before`: the path there) has on to it, in turn; the rest are the commit's."""
        here, left = _blob(self.repo, commit.tree, path), items
        for parent_id in commit.parents:
            theirs = _blob(self.repo, self.repo[parent_id].tree, before) if left else None
            if theirs is None:
                continue
            if theirs == here:
                passed, left = left, []
            else:
                mapped = _mapping(self.lines(theirs), self.lines(here))
                passed = [(mapped[i], f) for i, f in left if i in mapped]
                left = [(i, f) for i, f in left if i not in mapped]
            if passed:
                self.hand_on(parent_id.decode(), before, passed)
        return left


def _mapping(old: list[str], new: list[str]) -> dict[int, int]:
    """Line of `new` -> the line of `old` it is, where a line diff matches them."""
    return {b + k: a + k for a, b, size in history.matching(old, new) for k in range(size)}


def _blob(repo, tree_id: bytes, path: str) -> bytes | None:
    try:
        mode, sha = tree_lookup_path(repo.__getitem__, tree_id, path.encode("utf-8", "surrogateescape"))
    except KeyError:
        return None
    return sha if stat.S_ISREG(mode) else None
