"""blame: for each line of a file at a commit, the commit that last changed it, computed from the mirror's objects.

Lines are passed from a commit to its parents where a line diff matches them (every parent of a merge in turn, as
`git blame` does); a line no parent has is the commit's own. A file renamed on the way is followed through the
renames the history tables hold. The walk stops after MAX_STEPS commits: lines not settled by then are the last
commit's, marked `boundary`, as git marks a boundary commit. Results are cached by (mirror, commit, path):
commits never change.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
import stat
from dataclasses import dataclass
from pathlib import Path

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


def blame(data_dir: Path, file: FileText, renames, snapshot_id: str) -> Blame:
    """Blame of the lines get_file answered (`file`: the text shown, its commit and path). `renames(commit_id,
    path)`: the path the file had before that commit renamed it, or None, from snapshot `snapshot_id`'s
    history."""
    if file.total_lines > MAX_BLAME_LINES:
        raise BadRequest(
            f"{file.path!r} in repo {file.repo!r} has {file.total_lines} lines, over blame's {MAX_BLAME_LINES}; "
            "blame it with git in a clone"
        )
    mirror = mirror_dir(data_dir, file.org, file.repo)
    key = (str(mirror), file.commit_id, file.path, snapshot_id)
    owners = _cache.pop(key, None) or _attribute(mirror, file.commit_id, file.path, renames)
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


def _attribute(mirror: Path, commit_id: str, path: str, renames) -> tuple[tuple[str, bool], ...]:
    """(commit_id, boundary) of each line of `path` at `commit_id`."""
    with open_mirror(mirror) as repo:
        versions: dict[bytes, list[str]] = {}

        def lines(blob_id: bytes) -> list[str]:
            if blob_id not in versions:
                versions[blob_id] = history.lines_of(repo[blob_id].data)
            return versions[blob_id]

        start = repo[commit_id.encode()]
        blob_id = _blob(repo, start.tree, path)
        count = len(lines(blob_id))
        owners: list[tuple[str, bool]] = [("", False)] * count
        pending: dict[tuple[bytes, str], list[tuple[int, int]]] = {(start.id, path): [(i, i) for i in range(count)]}
        queue = [(-start.commit_time, start.id, path)]
        steps = 0
        while queue:
            _, cid, p = heapq.heappop(queue)
            items = pending.pop((cid, p), None)
            if not items:
                continue
            commit = repo[cid]
            steps += 1
            left = items
            if steps < MAX_STEPS:
                here = _blob(repo, commit.tree, p)
                before = renames(cid.decode(), p) or p
                for parent_id in commit.parents:
                    if not left:
                        break
                    parent = repo[parent_id]
                    theirs = _blob(repo, parent.tree, before)
                    if theirs is None:
                        continue
                    if theirs == here:
                        passed, left = left, []
                    else:
                        mapped = _mapping(lines(theirs), lines(here))
                        passed = [(mapped[i], f) for i, f in left if i in mapped]
                        left = [(i, f) for i, f in left if i not in mapped]
                    if passed:
                        key = (parent.id, before)
                        if key not in pending:
                            heapq.heappush(queue, (-parent.commit_time, parent.id, before))
                        pending.setdefault(key, []).extend(passed)
            boundary = steps >= MAX_STEPS and bool(commit.parents)
            for _, f in left:
                owners[f] = (cid.decode(), boundary)
        return tuple(owners)


def _mapping(old: list[str], new: list[str]) -> dict[int, int]:
    """Line of `new` -> the line of `old` it is, where a line diff matches them."""
    return {b + k: a + k for a, b, size in history.matching(old, new) for k in range(size)}


def _blob(repo, tree_id: bytes, path: str) -> bytes | None:
    try:
        mode, sha = tree_lookup_path(repo.__getitem__, tree_id, path.encode("utf-8", "surrogateescape"))
    except KeyError:
        return None
    return sha if stat.S_ISREG(mode) else None
