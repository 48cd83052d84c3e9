"""Building real git repositories for tests, object by object (so hostile trees can be made too)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

SYMLINK = 0o120000
GITLINK = 0o160000
FILE = 0o100644


def init(path: Path, bare: bool = False) -> Repo:
    path.mkdir(parents=True, exist_ok=True)
    return Repo.init_bare(str(path)) if bare else Repo.init(str(path))


def _tree(repo: Repo, files: dict) -> bytes:
    """Write nested trees for {path: bytes | (mode, bytes_or_id)}; path parts are taken verbatim."""
    here: dict[bytes, tuple[int, bytes]] = {}
    subdirs: dict[bytes, dict] = {}
    for path, value in files.items():
        head, _, rest = path.partition("/")
        if rest:
            subdirs.setdefault(head.encode(), {})[rest] = value
            continue
        mode, data = value if isinstance(value, tuple) else (FILE, value)
        if mode == GITLINK:
            here[head.encode()] = (mode, data)  # data is a commit id that is not in this repo
        else:
            blob = Blob.from_string(data)
            repo.object_store.add_object(blob)
            here[head.encode()] = (mode, blob.id)
    for name, sub in subdirs.items():
        here[name] = (stat.S_IFDIR, _tree(repo, sub))
    tree = Tree()
    for name, (mode, sha) in here.items():
        tree.add(name, mode, sha)
    repo.object_store.add_object(tree)
    return tree.id


def commit(
    repo: Repo,
    files: dict,
    branch: str = "main",
    message: str = "change",
    parents: list[bytes] | None = None,
    author: str = "Test <test@example.com>",
    when: int | None = None,
) -> str:
    """Commit exactly `files` as the whole tree on `branch` (its current tip is the parent), by `author` at `when`
    (seconds since the epoch; now by default)."""
    ref = f"refs/heads/{branch}".encode()
    if parents is None:
        parents = [repo.refs[ref]] if ref in repo.refs else []
    c = Commit()
    c.tree = _tree(repo, files)
    c.parents = parents
    c.author = c.committer = author.encode()
    c.commit_time = c.author_time = int(time.time()) if when is None else when
    c.commit_timezone = c.author_timezone = 0
    c.message = message.encode()
    repo.object_store.add_object(c)
    repo.refs[ref] = c.id
    try:
        repo.refs[b"HEAD"]
    except KeyError:  # HEAD names a branch with no commits yet: point it at this one
        repo.refs.set_symbolic_ref(b"HEAD", ref)
    return c.id.decode()
