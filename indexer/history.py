"""A repository's history as the index holds it: the commits reachable from its refs, what each changed, and the
line diffs that counts, hunks and blame are made of. Read from a bare mirror with dulwich; the run's history stage
(indexer/build/history.py) and the query server's blame and diff (query/history.py) both use these.

What git calls a commit touching a path is kept: a commit with one parent changed what differs from that parent;
a merge changed only what differs from every parent (a conflict resolution, an evil merge), as `git log PATH` and
`git blame` see it, so a change is never counted twice, once on its branch and once on the merge.
"""

from __future__ import annotations

import difflib
import stat
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, timezone

from typing import TYPE_CHECKING

from indexer.secrets import withheld_lines

if TYPE_CHECKING:  # dulwich is imported where history is read: config reads this module's settings
    from dulwich.objects import Commit

GITLINK = 0o160000  # a tree entry that names a commit of another repo (a submodule)
MODES = ("off", "messages", "diffs")  # config `history`: nothing, commits and their paths, and their hunks too
DEFAULT_MODE = "messages"
DEFAULT_MAX_COMMITS = 50_000  # per repo, newest first: a base history part holds at most this many
BINARY_PROBE = 8000  # bytes git reads for a NUL before it calls a blob binary
MAX_DIFF_LINES = 20_000  # a side longer than this is counted as lines added and removed, not diffed
MAX_HUNK_CHARS = 8_000  # per changed path, in `diffs` mode: the rest of a huge change is not kept
MAX_MESSAGE_CHARS = 16_000  # a commit message longer than this is kept to this many characters


@dataclass(frozen=True)
class HistorySettings:
    """How much history a run keeps: config `history`, `history_since` (an ISO date; "" for all) and
    `history_max_commits`."""

    mode: str = DEFAULT_MODE
    since: str = ""
    max_commits: int = DEFAULT_MAX_COMMITS

    @property
    def recorded(self) -> str:
        """What a snapshot records of them ("" for off): a run that finds other settings reads history again."""
        return "" if self.mode == "off" else f"{self.mode};since={self.since};max={self.max_commits}"

    @property
    def since_seconds(self) -> int | None:
        if not self.since:
            return None
        return int(datetime.fromisoformat(self.since).replace(tzinfo=timezone.utc).timestamp())

    @classmethod
    def from_config(cls, raw: dict) -> "HistorySettings | str":
        """The settings of a config file's table, or the sentence that says what is wrong with them."""
        mode = raw.get("history", DEFAULT_MODE)
        if mode not in MODES:
            return f'`history` is {mode!r}; use "off", "messages" (the default) or "diffs"'
        since = raw.get("history_since", "")
        if isinstance(since, (date, datetime)):  # TOML's own date type: history_since = 2024-01-01
            since = since.isoformat()
        try:
            if since:
                datetime.fromisoformat(str(since))
        except ValueError:
            return f'`history_since` is {since!r}; write a date, as history_since = "2024-01-01"'
        most = raw.get("history_max_commits", DEFAULT_MAX_COMMITS)
        if not isinstance(most, int) or isinstance(most, bool) or most < 1:
            return f"`history_max_commits` is {most!r}; it must be a whole number of at least 1"
        return cls(mode=mode, since=str(since)[:10], max_commits=most)


@dataclass(frozen=True, kw_only=True)
class PathChange:
    """One path a commit changed. `old_path` differs from `path` for a rename; a deleted path has no new blob.
    Line counts are -1 for a binary blob."""

    path: str
    old_path: str
    change: str  # add | modify | delete | rename
    old_blob: str
    new_blob: str
    added: int
    removed: int
    hunks: str = ""  # the unified diff's hunks, in `diffs` mode, capped and screened
    held_back: int = 0  # lines of the hunks held back


def walk(repo, heads: list[str], exclude: list[str], settings: HistorySettings) -> list[Commit]:
    """The commits reachable from `heads` and not from `exclude`, newest first (by commit time, as `git log`),
    at most settings.max_commits, none older than settings.since."""
    from dulwich.walk import Walker

    walker = Walker(
        repo.object_store,
        [h.encode() for h in heads],
        exclude=[e.encode() for e in exclude],
        max_entries=settings.max_commits,
        since=settings.since_seconds,
    )
    return [entry.commit for entry in walker]


def is_ancestor(repo, older: str, newer: str) -> bool:
    """Whether commit `older` is reachable from `newer` (a history that moved forward, not rewritten)."""
    from dulwich.graph import can_fast_forward

    try:
        return can_fast_forward(repo, older.encode(), newer.encode())
    except KeyError:
        return False


def changes(repo, commit: Commit, hunks: bool = False) -> list[PathChange]:
    """What `commit` changed, as the module's docstring says (against its one parent, or what differs from every
    parent of a merge), renames detected."""
    from dulwich.diff_tree import RenameDetector, tree_changes

    store = repo.object_store
    detector = RenameDetector(store)
    if not commit.parents:
        found = list(tree_changes(store, None, commit.tree, rename_detector=detector))
    else:
        found = list(tree_changes(store, store[commit.parents[0]].tree, commit.tree, rename_detector=detector))
        for parent in commit.parents[1:]:
            also = {(c.new or c.old).path for c in tree_changes(store, store[parent].tree, commit.tree)}
            found = [c for c in found if (c.new or c.old).path in also]
    return [_path_change(store, c, hunks) for c in found]


def _path_change(store, c, hunks: bool) -> PathChange:
    before, after = c.old, c.new  # the missing side of an add or a delete is None
    old_path = (before or after).path.decode("utf-8", "surrogateescape")
    path = (after or before).path.decode("utf-8", "surrogateescape")
    kind = {"delete": "delete", "add": "add", "rename": "rename", "copy": "add"}.get(c.type, "modify")
    old, new = blob_data(store, before), blob_data(store, after)
    if old is None or new is None:  # a submodule, or a blob the mirror lacks: no lines to count
        added, removed, text = -1, -1, ""
    else:
        added, removed, text = line_counts(old, new, hunks)
    text, held = screen(text) if text else ("", 0)
    return PathChange(
        path=path,
        old_path=old_path,
        change=kind,
        old_blob=before.sha.decode() if before and before.sha else "",
        new_blob=after.sha.decode() if after and after.sha else "",
        added=added,
        removed=removed,
        hunks=text,
        held_back=held,
    )


def blob_data(store, side) -> bytes | None:
    """The bytes of one side of a change (b"" for the missing side of an add or a delete); None for a submodule
    (a commit of another repo) or a blob the mirror lacks (fetched mirrors can)."""
    if side is None or not side.sha:
        return b""
    if stat.S_ISDIR(side.mode) or side.mode & 0o170000 == GITLINK:
        return None
    try:
        return store[side.sha].data
    except KeyError:
        return None


def binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_PROBE]


def lines_of(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines()


def matching(old: list[str], new: list[str]) -> list[tuple[int, int, int]]:
    """The runs of lines `new` keeps from `old`: (start in old, start in new, length), as a line diff finds them."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [tuple(b) for b in matcher.get_matching_blocks() if b.size]


def line_counts(old: bytes, new: bytes, hunks: bool = False) -> tuple[int, int, str]:
    """(lines added, lines removed, the hunks' text when asked) between two versions of a file; (-1, -1, "") for
    a binary one. Sides longer than MAX_DIFF_LINES are counted by lines that differ, without hunks."""
    if binary(old) or binary(new):
        return -1, -1, ""
    a, b = lines_of(old), lines_of(new)
    if max(len(a), len(b)) > MAX_DIFF_LINES:
        gone, came = Counter(a) - Counter(b), Counter(b) - Counter(a)
        return sum(came.values()), sum(gone.values()), ""
    kept = sum(n for _, _, n in matching(a, b))
    text = ""
    if hunks:
        diff = difflib.unified_diff(a, b, lineterm="", n=2)
        text = "\n".join(line for i, line in enumerate(diff) if i >= 2)[:MAX_HUNK_CHARS]  # the ---/+++ header
    return len(b) - kept, len(a) - kept, text


def screen(text: str) -> tuple[str, int]:
    """`text` (a message, hunks) fit to store: each line that holds credential material, or is part of a key,
    replaced by a marker that names its kind, never its text; and how many lines were held back."""
    lines = text.split("\n")
    held = withheld_lines(lines, 1, len(lines))
    for n, kind in held.items():
        lines[n - 1] = f"[line held back: {kind}]"
    return "\n".join(lines), len(held)


def person(raw: bytes) -> tuple[str, str]:
    """(name, email) of a commit's `Name <email>` line."""
    text = raw.decode("utf-8", "replace")
    name, _, rest = text.partition("<")
    return name.strip(), rest.rstrip(">").strip()


def when(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
