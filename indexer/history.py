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
MAX_DIFF_CELLS = 4_000_000  # line pairs of what changed between two versions that a line diff compares at most
MAX_EDITS = 200  # lines added and removed that line_counts finds by a minimal diff; past it, by counts
RENAME_FILES = 20  # a commit adding and deleting more files than this finds only renames of identical content
MAX_HUNK_CHARS = 8_000  # per changed path, in `diffs` mode: the rest of a huge change is not kept
MAX_MESSAGE_CHARS = 16_000  # a commit message longer than this is kept to this many characters
# The text of a commit's vector: its subject and the first paragraph after it (a merge's pull-request title, a
# "Fix #123"'s reason), cut here. The model's cost grows with the text: at 160 characters the bundled model embeds
# about 150 commits a second on two cores, the whole message about 75.
COMMIT_TEXT_CHARS = 160


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


def changes(repo, commit: Commit, with_hunks: bool = False) -> list[PathChange]:
    """What `commit` changed, as the module's docstring says (against its one parent, or what differs from every
    parent of a merge), renames detected."""
    from dulwich.diff_tree import RenameDetector, tree_changes

    store = repo.object_store
    before = store[commit.parents[0]].tree if commit.parents else None
    found = list(tree_changes(store, before, commit.tree))
    kinds = {c.type for c in found}
    if "add" in kinds and "delete" in kinds:  # only then can a path have moved (dulwich would read every delete)
        found = list(tree_changes(store, before, commit.tree, rename_detector=RenameDetector(store, RENAME_FILES)))
    if commit.parents:
        for parent in commit.parents[1:]:
            also = {(c.new or c.old).path for c in tree_changes(store, store[parent].tree, commit.tree)}
            found = [c for c in found if (c.new or c.old).path in also]
    return [_path_change(store, c, with_hunks) for c in found]


def changes_of(mirror: str, commit_ids: list[str], with_hunks: bool) -> list[list[PathChange]]:
    """`changes` of each commit, reading the mirror at `mirror` itself: a worker process's share of a long walk."""
    from dulwich.repo import Repo

    with Repo(mirror) as repo:
        return [changes(repo, repo[c.encode()], with_hunks) for c in commit_ids]


def _path_change(store, c, with_hunks: bool) -> PathChange:
    before, after = c.old, c.new  # the missing side of an add or a delete is None
    old_path = (before or after).path.decode("utf-8", "surrogateescape")
    path = (after or before).path.decode("utf-8", "surrogateescape")
    kind = {"delete": "delete", "add": "add", "rename": "rename", "copy": "add"}.get(c.type, "modify")
    old, new = blob_data(store, before), blob_data(store, after)
    if old is None or new is None:  # a submodule, or a blob the mirror lacks: no lines to count
        added, removed, text = -1, -1, ""
    else:
        added, removed, text = line_counts(old, new, with_hunks)
    text, held = screen_hunks(text) if text else ("", 0)
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
    """A file's lines as git counts them (and get_file numbers them): split at "\n" only, a final newline ending
    the last line rather than starting an empty one."""
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _trimmed(old: list[str], new: list[str]) -> tuple[int, int]:
    """How many lines the two versions share at their start and, after that, at their end."""
    most = min(len(old), len(new))
    head = 0
    while head < most and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < most - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, tail


def matching(old: list[str], new: list[str]) -> list[tuple[int, int, int]]:
    """The runs of lines `new` keeps from `old`: (start in old, start in new, length), as a line diff finds them.
    The lines both share at the start and the end are matched first (a changelog edited at its top costs
    nothing); what lies between is diffed only when it is under MAX_DIFF_CELLS line pairs, else no line of it
    matches (a diff there took minutes: difflib is quadratic on lines that repeat)."""
    head, tail = _trimmed(old, new)
    blocks = [(0, 0, head)] if head else []
    a, b = old[head : len(old) - tail], new[head : len(new) - tail]
    if a and b and len(a) * len(b) <= MAX_DIFF_CELLS:
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        blocks += [(head + i, head + j, n) for i, j, n in matcher.get_matching_blocks() if n]
    if tail:
        blocks.append((len(old) - tail, len(new) - tail, tail))
    return blocks


def hunks(old: list[str], new: list[str], context: int = 2) -> str:
    """The unified diff's hunks (without the ---/+++ header) of two versions, from `matching`'s runs and numbered
    as git numbers them; "" when what changed is too large to diff (over MAX_DIFF_CELLS line pairs)."""
    head, tail = _trimmed(old, new)
    if (len(old) - head - tail) * (len(new) - head - tail) > MAX_DIFF_CELLS:
        return ""
    ops, i, j = [], 0, 0
    for x, y, size in [*matching(old, new), (len(old), len(new), 0)]:
        tag = "replace" if i < x and j < y else "delete" if i < x else "insert" if j < y else ""
        if tag:
            ops.append((tag, i, x, j, y))
        if size:
            ops.append(("equal", x, x + size, y, y + size))
        i, j = x + size, y + size
    out = []
    for group in _Opcodes(ops).get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_span(i1, i2 - i1)} +{_span(j1, j2 - j1)} @@")
        for tag, x1, x2, y1, y2 in group:
            out += [" " + line for line in old[x1:x2]] if tag == "equal" else []
            out += ["-" + line for line in old[x1:x2]] if tag in ("replace", "delete") else []
            out += ["+" + line for line in new[y1:y2]] if tag in ("replace", "insert") else []
    return "\n".join(out)


class _Opcodes(difflib.SequenceMatcher):
    """difflib's grouping of opcodes into hunks, over opcodes made elsewhere."""

    def __init__(self, ops: list[tuple]):
        super().__init__(None, [], [])
        self.ops = ops

    def get_opcodes(self):
        return self.ops


def _span(start: int, length: int) -> str:
    """A hunk header's range, as git writes it: 1-based start (the line before, for an empty range), and the
    length when it is not 1."""
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"


def line_counts(old: bytes, new: bytes, with_hunks: bool = False) -> tuple[int, int, str]:
    """(lines added, lines removed, the hunks' text when asked) between two versions of a file, as few as a line
    diff needs (git's --numstat); (-1, -1, "") for a binary one. Where that takes more than MAX_EDITS edits, or
    a side is longer than MAX_DIFF_LINES, the lines whose count differs, without hunks."""
    if binary(old) or binary(new):
        return -1, -1, ""
    a, b = lines_of(old), lines_of(new)
    head, tail = _trimmed(a, b)
    middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
    edits = _edits(middle_a, middle_b) if max(len(a), len(b)) <= MAX_DIFF_LINES else None
    if edits is None:
        gone, came = Counter(middle_a) - Counter(middle_b), Counter(middle_b) - Counter(middle_a)
        return sum(came.values()), sum(gone.values()), ""
    grown = len(middle_b) - len(middle_a)  # added - removed; added + removed = edits
    text = hunks(a, b)[:MAX_HUNK_CHARS] if with_hunks else ""
    return (edits + grown) // 2, (edits - grown) // 2, text


def _edits(old: list[str], new: list[str]) -> int | None:
    """The fewest lines to delete and insert to turn `old` into `new` (Myers' greedy O((N+M)D) walk, counting
    only), or None past MAX_EDITS."""
    if not old or not new:  # a file that comes or goes: the walk took up to MAX_EDITS^2 / 2 steps to say N+M
        return len(old) + len(new) if len(old) + len(new) <= MAX_EDITS else None
    ids: dict[str, int] = {}
    a = [ids.setdefault(line, len(ids)) for line in old]
    b = [ids.setdefault(line, len(ids)) for line in new]
    n, m = len(a), len(b)
    most = min(n + m, MAX_EDITS)
    far = [0] * (2 * most + 3)  # far[k + most + 1]: the furthest x reached on diagonal k = x - y
    for d in range(most + 1):
        for k in range(-d, d + 1, 2):
            at = k + most + 1
            x = far[at + 1] if k == -d or (k != d and far[at - 1] < far[at + 1]) else far[at - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            far[at] = x
            if x >= n and y >= m:
                return d
    return None


def screen(text: str) -> tuple[str, int]:
    """`text` (a message, hunks) fit to store: each line that holds credential material, or is part of a key,
    replaced by a marker that names its kind, never its text; and how many lines were held back."""
    lines = text.split("\n")
    held = withheld_lines(lines, 1, len(lines))
    for n, kind in held.items():
        lines[n - 1] = f"[line held back: {kind}]"
    return "\n".join(lines), len(held)


def screen_hunks(text: str) -> tuple[str, int]:
    """Hunks (`hunks`' text) fit to store: `screen` of the lines as the files hold them, each line's `+`, `-` or
    space taken off first (a key's removed lines start with `-`, which no key body does), put back after."""
    lines = text.split("\n")
    marks = [line[:1] if line[:1] in ("+", "-", " ") else "" for line in lines]
    bodies = [line[len(mark) :] if not line.startswith("@@") else "" for line, mark in zip(lines, marks)]
    held = withheld_lines(bodies, 1, len(bodies))
    for n, kind in held.items():
        lines[n - 1] = f"{marks[n - 1]}[line held back: {kind}]"
    return "\n".join(lines), len(held)


def commit_text(message: str) -> str:
    """What a commit's vector embeds (COMMIT_TEXT_CHARS of its screened message: subject, first paragraph)."""
    subject, _, body = message.strip().partition("\n")
    paragraph = " ".join(body.strip().split("\n\n", 1)[0].split())
    return (f"{subject.strip()}\n{paragraph}" if paragraph else subject.strip())[:COMMIT_TEXT_CHARS]


def person(raw: bytes) -> tuple[str, str]:
    """(name, email) of a commit's `Name <email>` line."""
    text = raw.decode("utf-8", "replace")
    name, _, rest = text.partition("<")
    return name.strip(), rest.rstrip(">").strip()


def when(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
