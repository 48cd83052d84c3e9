"""get_file: any file of a mirrored repo at any ref or commit, read from git objects (no clone)."""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from pathlib import Path

from dulwich.objects import Blob, Commit, Tag, Tree
from dulwich.objectspec import parse_object
from dulwich.repo import Repo

from indexer.errors import BlobdexError
from indexer.ignore import BINARY_SNIFF_BYTES, validate_path
from indexer.mirror import MirrorError, open_mirror
from indexer.scan import ScanError, resolve_ref

MAX_FILE_BYTES = 25 * 1024 * 1024  # reading more than this is not what a caller of get_file wants
SHORT_HEX_RE = re.compile(r"^[0-9a-f]{4,39}$")
LINES_RE = re.compile(r"^(\d+)?(?:(-)(\d+)?)?$")


class GetFileError(BlobdexError):
    """The file cannot be returned as asked; the message says why and what to try."""


@dataclass(frozen=True)
class FileText:
    org: str
    repo: str
    ref: str
    commit_id: str
    path: str
    blob_id: str
    line_start: int
    line_end: int
    total_lines: int
    content: bytes  # exactly the requested lines, with their original line endings


def parse_lines(spec: str | None) -> tuple[int | None, int | None]:
    """`40-90`, `40-`, `-90` or `40` (1-based, inclusive) to (start, end)."""
    if not spec:
        return None, None
    m = LINES_RE.match(spec.strip())
    if not m or not (m.group(1) or m.group(3)):
        raise GetFileError(f"bad line range {spec!r}: use A-B (1-based, inclusive), A-, -B or A")
    start = int(m.group(1)) if m.group(1) else 1
    end = int(m.group(3)) if m.group(3) else (None if m.group(2) else start)
    if start < 1 or (end is not None and end < start):
        raise GetFileError(f"bad line range {spec!r}: lines start at 1 and the end may not precede the start")
    return start, end


def known_repos(data_dir: Path, org: str) -> list[str]:
    root = data_dir / "mirrors" / org
    return sorted(p.name[:-4] for p in root.glob("*.git")) if root.exists() else []


def _resolve(repo: Repo, ref: str | None, repo_name: str) -> tuple[str, str]:
    try:
        return resolve_ref(repo, ref, repo_name)
    except ScanError as exc:
        if not ref:
            raise GetFileError(str(exc)) from exc
        try:  # abbreviated commit ids and revision expressions (`main~1`)
            if SHORT_HEX_RE.match(ref):
                matches = list(repo.object_store.iter_prefix(ref.encode()))
                if len(matches) > 1:
                    raise GetFileError(f"commit id prefix {ref!r} is ambiguous in repo {repo_name!r}; give more digits")
                obj = repo[matches[0]]
            else:
                obj = parse_object(repo, ref.encode())
            while isinstance(obj, Tag):
                obj = repo[obj.object[1]]
        except GetFileError:
            raise
        except Exception:
            raise GetFileError(str(exc)) from exc
        if not isinstance(obj, Commit):
            raise GetFileError(f"{ref!r} in repo {repo_name!r} is not a commit") from exc
        return ref, obj.id.decode()


def get_file(data_dir: Path, repo_name: str, path: str, ref: str | None = None, org: str = "default",
             start: int | None = None, end: int | None = None) -> FileText:
    mirror = data_dir / "mirrors" / org / f"{repo_name}.git"
    if "/" in repo_name or repo_name.startswith(".") or not mirror.exists():
        known = ", ".join(known_repos(data_dir, org)) or "none"
        raise GetFileError(f"unknown repo {repo_name!r} in org {org!r} (known: {known}); "
                           f"add it with 'blobdex repo add' and run 'blobdex index'")
    clean = validate_path(path.strip("/").encode("utf-8", "surrogateescape"))
    if clean is None:
        raise GetFileError(f"invalid path {path!r}: give a repo-relative path without '..' or '.git'")
    try:
        repo = open_mirror(mirror)
    except MirrorError as exc:
        raise GetFileError(str(exc)) from exc
    with repo:
        full_ref, commit_id = _resolve(repo, ref, repo_name)
        obj = repo[repo[commit_id.encode()].tree]
        mode = stat.S_IFDIR
        for part in clean.split("/"):
            if not isinstance(obj, Tree) or part.encode() not in obj:
                raise GetFileError(f"no file {clean!r} in repo {repo_name!r} at {full_ref} ({commit_id[:12]}); "
                                   f"search for it with 'blobdex search' or check the ref")
            mode, sha = obj[part.encode()]
            if stat.S_ISLNK(mode) or mode & 0o170000 == 0o160000:
                break
            obj = repo[sha]
        if stat.S_ISLNK(mode):
            raise GetFileError(f"{clean!r} in repo {repo_name!r} is a symlink (to "
                               f"{repo[sha].as_raw_string().decode('utf-8', 'replace')!r}); symlinks are not followed")
        if mode & 0o170000 == 0o160000:
            raise GetFileError(f"{clean!r} in repo {repo_name!r} is a submodule; it is not part of this repo's objects")
        if isinstance(obj, Tree):
            names = ", ".join(sorted(e.path.decode("utf-8", "replace") for e in obj.iteritems())[:20])
            raise GetFileError(f"{clean!r} in repo {repo_name!r} is a directory (entries: {names}); give a file path")
        assert isinstance(obj, Blob)
        data = obj.as_raw_string()
    if len(data) > MAX_FILE_BYTES:
        raise GetFileError(f"{clean!r} is {len(data)} bytes, over the {MAX_FILE_BYTES}-byte cap of get_file")
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise GetFileError(f"{clean!r} in repo {repo_name!r} is a binary file ({len(data)} bytes); get_file returns text")
    # Lines end at "\n" only, as git counts them; a final line without one stays as it is.
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    total = len(lines)
    first = start or 1
    last = total if end is None else end
    if total and first > total:
        raise GetFileError(f"line {first} is past the end of {clean!r}, which has {total} lines")
    last = min(last, total)
    return FileText(org, repo_name, full_ref, commit_id, clean, obj.id.decode(), first, last, total,
                    b"".join(lines[first - 1:last]))
