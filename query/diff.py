"""diff: the change between two refs or commits of a mirrored repo, file by file, read from git objects.

Files come in path order, a page at a time; each with its change, line counts and unified hunks, capped per file.
A credential file (by its name) is listed without hunks, and a hunk line that holds credential material reads as
a marker naming its kind, as everywhere else (indexer/history.py screen)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

from dulwich.diff_tree import RenameDetector, tree_changes

from indexer import history
from indexer.ignore import SkipReason, skip_for_path
from indexer.mirror import MirrorError, mirror_dir, open_mirror
from query.cursor import encode as cursor_encode
from query.cursor import offset as cursor_offset
from query.get_file import MAX_FILE_BYTES, BadRequest, GetFileError, _resolve, blob_size, known_repos, repo_path

MAX_FILES_PER_PAGE = 100
MAX_FILES = 1_000_000  # files a diff's cursor may page past
MAX_DIFF_CHARS = 20_000  # of one file's hunks; the rest is cut, and the file says so
CONTEXT_LINES = 3


@dataclass(frozen=True, kw_only=True)
class DiffPage:
    org: str
    repo: str
    base: str
    base_commit: str
    head: str
    head_commit: str
    files: list[dict]  # path, old_path?, change, added, removed, hunks, truncated?, held_back?, note?
    total: int  # files changed between the two (under `path` when given), on every page
    next_cursor: str | None


def diff(
    data_dir: Path,
    org: str,
    repo_name: str,
    base: str,
    head: str,
    path: str | None = None,
    cursor: str | None = None,
    limit: int = 20,
) -> DiffPage:
    """What changed from `base` to `head` (branches, tags, commit ids, `main~3`), under `path` when given."""
    if not 1 <= limit <= MAX_FILES_PER_PAGE:
        raise BadRequest(f"limit {limit} is out of range: use 1 to {MAX_FILES_PER_PAGE}")
    mirror = mirror_dir(data_dir, org, repo_name)
    if "/" in repo_name or repo_name.startswith(".") or not mirror.exists():
        known = ", ".join(known_repos(data_dir, org)) or "none"
        raise GetFileError(f"unknown repo {repo_name!r} in org {org!r} (known: {known})")
    under = repo_path(path) if path and path.strip("/") else ""
    try:
        repo = open_mirror(mirror)
    except MirrorError as exc:
        raise GetFileError(exc.message) from exc
    with repo:
        base_ref, base_id = _resolve(repo, base, repo_name)
        head_ref, head_id = _resolve(repo, head, repo_name)
        asked = {"org": org, "repo": repo_name, "path": under, "limit": limit}
        start = cursor_offset(cursor, "diff", f"{base_id}..{head_id}", asked, MAX_FILES)
        store = repo.object_store
        found = [
            c
            for c in tree_changes(
                store,
                repo[base_id.encode()].tree,
                repo[head_id.encode()].tree,
                rename_detector=RenameDetector(store, history.RENAME_FILES),
            )
            if not under or any(_under(side.path.decode("utf-8", "replace"), under) for side in (c.old, c.new) if side)
        ]
        found.sort(key=lambda c: (c.new or c.old).path)
        files = [_file(repo, c) for c in found[start : start + limit]]
    more = start + limit < len(found)
    return DiffPage(
        org=org,
        repo=repo_name,
        base=base_ref,
        base_commit=base_id,
        head=head_ref,
        head_commit=head_id,
        files=files,
        total=len(found),
        next_cursor=cursor_encode("diff", f"{base_id}..{head_id}", asked, start + limit) if more else None,
    )


def _under(path: str, wanted: str) -> bool:
    return path == wanted or path.startswith(wanted + "/")


def _size(repo, side) -> int | None:
    """A side's blob size from its object header (None: unknown, or no blob), read before the blob is."""
    if side is None or not side.sha or side.mode & 0o170000 == history.GITLINK:
        return None
    try:
        return blob_size(repo, side.sha)
    except (IndexError, ValueError, zlib.error):
        return None


def _file(repo, c) -> dict:
    store = repo.object_store
    before, after = c.old, c.new
    path = (after or before).path.decode("utf-8", "replace")
    old_path = (before or after).path.decode("utf-8", "replace")
    kind = {"delete": "delete", "add": "add", "rename": "rename", "copy": "add"}.get(c.type, "modify")
    out = {"path": path, "change": kind}
    if old_path != path:
        out["old_path"] = old_path
    if any(skip_for_path(p.rsplit("/", 1)[-1]) is SkipReason.CREDENTIALS for p in {path, old_path}):
        return {**out, "added": None, "removed": None, "hunks": "", "note": "a credential file: never shown"}
    sizes = [_size(repo, side) for side in (before, after)]
    if any(size is not None and size > MAX_FILE_BYTES for size in sizes):
        return {**out, "added": None, "removed": None, "hunks": "", "note": "over the size a diff reads: use git"}
    old, new = history.blob_data(store, before), history.blob_data(store, after)
    if old is None or new is None:
        return {**out, "added": None, "removed": None, "hunks": "", "note": "a submodule, or a blob the mirror lacks"}
    added, removed, _ = history.line_counts(old, new)
    if added < 0:
        return {**out, "added": None, "removed": None, "hunks": "", "note": "a binary file"}
    a, b = history.lines_of(old), history.lines_of(new)
    if max(len(a), len(b)) > history.MAX_DIFF_LINES:
        return {**out, "added": added, "removed": removed, "hunks": "", "note": "too long to diff here: use git"}
    body = history.hunks(a, b, CONTEXT_LINES)
    if not body and added + removed:
        return {**out, "added": added, "removed": removed, "hunks": "", "note": "too large to diff here: use git"}
    text, held = history.screen_hunks(body[:MAX_DIFF_CHARS])
    out.update(added=added, removed=removed, hunks=text)
    if len(body) > MAX_DIFF_CHARS:
        out["truncated"] = True
    if held:
        out["held_back"] = held
    return out
