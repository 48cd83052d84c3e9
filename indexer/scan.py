"""Scanning a mirror: refs resolved to commits, commits to the files of their trees, each file judged by path."""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass

import pathspec
from dulwich.objects import Commit, Tag
from dulwich.repo import Repo

from indexer.errors import BlobdexError
from indexer.ignore import Attributes, SkipReason, skip_for_path, validate_path
from indexer.languages import language_for

MAX_TREE_DEPTH = 64  # deeper directories are hostile or broken, not source code: skipped as too_deep
MAX_FILES_PER_REF = 200_000
S_IFGITLINK = 0o160000
HEX40_RE = re.compile(r"^[0-9a-f]{40}$")


class ScanError(BlobdexError):
    """A ref or commit of a repo cannot be scanned; the message says what to do."""


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    path: str  # validated, or the raw path's repr when `skip` is bad_path
    blob_id: str
    lang: str
    skip: SkipReason | None  # known from the path alone; content reasons come later


@dataclass(frozen=True)
class RefScan:
    ref: str
    commit_id: str
    files: tuple[FileEntry, ...]


def _peel_to_commit(repo: Repo, object_id: bytes, what: str) -> Commit:
    try:
        obj = repo[object_id]
        while isinstance(obj, Tag):
            obj = repo[obj.object[1]]
    except KeyError as exc:
        raise ScanError(
            f"{what} points at object {object_id.decode()} which is missing from the mirror; "
            f"delete the mirror and run 'blobdex index' to fetch it again"
        ) from exc
    if not isinstance(obj, Commit):
        raise ScanError(f"{what} names a {obj.type_name.decode()}, not a commit; use a branch, tag or commit id")
    return obj


def resolve_ref(
    repo: Repo, ref: str | None, repo_name: str, fix: str | None = None, held: frozenset[str] = frozenset()
) -> tuple[str, str]:
    """(full ref name or pinned commit_id, commit_id) for a branch, tag, full ref, commit id or the default; `repo`
    is read for its refs and, to peel, its objects (a Repo, or mirror.RefsFirst).
    `fix` is what the message tells to do about a ref that is not there: by default the operator's step (the
    configured ref is wrong); a reader asking for a ref passes its own (`⟦ref⟧`). `held`: commit ids an index
    run already read as commits (the last snapshot's): a ref that names one is not read again (opening a pack
    to read each repo's commit was most of a cron run's mirror stage at 923 repos)."""
    fix = fix or f"fix the repo's ref with 'blobdex repo add {repo_name} URL --ref BRANCH --replace'"

    def commit_id(object_id: bytes, what: str) -> str:
        return object_id.decode() if object_id.decode() in held else _peel_to_commit(repo, object_id, what).id.decode()

    if not ref:
        try:
            target = repo.refs.follow(b"HEAD")[0][-1]
        except (KeyError, IndexError) as exc:
            raise ScanError(f"repo {repo_name!r} has no default branch (HEAD) in its mirror; {fix}") from exc
        if target not in repo.refs:
            raise ScanError(f"repo {repo_name!r}: HEAD points at {target.decode()!r}, which does not exist; {fix}")
        return target.decode(), commit_id(repo.refs[target], f"ref {target.decode()!r} of repo {repo_name!r}")
    if HEX40_RE.match(ref):
        return ref, commit_id(ref.encode(), f"commit {ref} of repo {repo_name!r}")
    for candidate in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}"):
        name = candidate.encode()
        if candidate.startswith("refs/") and name in repo.refs:
            return candidate, commit_id(repo.refs[name], f"ref {candidate!r} of repo {repo_name!r}")
    branches = sorted(n.decode()[len("refs/heads/") :] for n in repo.refs.keys() if n.startswith(b"refs/heads/"))
    tags = sorted(n.decode()[len("refs/tags/") :] for n in repo.refs.keys() if n.startswith(b"refs/tags/"))
    raise ScanError(
        f"ref {ref!r} not found in repo {repo_name!r} (branches: {', '.join(branches[:10]) or 'none'}; "
        f"tags: {', '.join(tags[:10]) or 'none'}); {fix}"
    )


def _walk(repo: Repo, tree_id: bytes):
    """(path, mode, object id) of every entry below a tree, depth first; a directory nested deeper than
    MAX_TREE_DEPTH comes back as itself (mode S_IFDIR) instead of being entered."""
    todo = [(0, b"", tree_id)]
    while todo:
        depth, prefix, tid = todo.pop()
        tree = repo.object_store[tid]
        subdirs = []
        for entry in tree.iteritems(name_order=True):
            path = prefix + entry.path
            if stat.S_ISDIR(entry.mode):
                if depth + 1 >= MAX_TREE_DEPTH:
                    yield path, entry.mode, entry.sha
                else:
                    subdirs.append((depth + 1, path + b"/", entry.sha))
            else:
                yield path, entry.mode, entry.sha
        todo.extend(reversed(subdirs))


def selection(include: tuple[str, ...], exclude: tuple[str, ...]):
    """Whether a path is chosen by a repo's include/exclude globs (gitignore syntax)."""
    wanted = pathspec.PathSpec.from_lines("gitignore", include) if include else None
    unwanted = pathspec.PathSpec.from_lines("gitignore", exclude) if exclude else None
    return lambda path: (
        (wanted is None or wanted.match_file(path)) and (unwanted is None or not unwanted.match_file(path))
    )


def scan_commit(
    repo: Repo, ref: str, commit_id: str, include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()
) -> RefScan:
    """Every file of a commit with its language and, when known from the path, why it is skipped:
    the repo's own include/exclude globs first (the operator's word), then .gitattributes and our rules."""
    commit = repo[commit_id.encode()]
    chosen = selection(include, exclude)
    listed = []
    for raw_path, mode, sha in _walk(repo, commit.tree):
        if len(listed) >= MAX_FILES_PER_REF:
            raise ScanError(
                f"commit {commit_id} ({ref}) has more than {MAX_FILES_PER_REF} files; "
                f"index a smaller ref or raise MAX_FILES_PER_REF"
            )
        listed.append((raw_path, mode, sha.decode(), validate_path(raw_path)))
    attributes = Attributes.from_files(
        (path, repo.object_store[sha.encode()])
        for _, mode, sha, path in listed
        if path is not None and path.rsplit("/", 1)[-1] == ".gitattributes" and stat.S_ISREG(mode)
    )
    files = []
    for raw_path, mode, blob_id, path in listed:
        if path is None:
            files.append(FileEntry(path=repr(raw_path)[2:-1], blob_id=blob_id, lang="text", skip=SkipReason.BAD_PATH))
            continue
        if stat.S_ISDIR(mode):
            skip = SkipReason.TOO_DEEP
        elif stat.S_ISLNK(mode):
            skip = SkipReason.SYMLINK
        elif mode & 0o170000 == S_IFGITLINK:
            skip = SkipReason.SUBMODULE
        elif not chosen(path):
            skip = SkipReason.EXCLUDED
        else:
            skip = attributes.skip_for(path, skip_for_path(path))
        files.append(FileEntry(path=path, blob_id=blob_id, lang=language_for(path), skip=skip))
    return RefScan(ref, commit_id, tuple(files))
