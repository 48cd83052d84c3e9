"""get_file: any file of a mirrored repo at any ref or commit, read from git objects (no clone)."""

from __future__ import annotations

import re
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

from dulwich.objects import Blob, Commit, Tag, Tree
from dulwich.objectspec import parse_object
from dulwich.repo import Repo

from indexer.errors import BlobdexError
from indexer.ignore import BINARY_SNIFF_BYTES, SkipReason, skip_for_path, validate_path
from indexer.mirror import MirrorError, mirror_dir, mirrors_dir, open_mirror
from indexer.scan import ScanError, resolve_ref
from indexer.secrets import withheld_lines

WITHHELD_MARKER = "[blobdex: line withheld, it holds credential material]"
MAX_FILE_BYTES = 25 * 1024 * 1024  # reading more than this is not what a caller of get_file wants
SHORT_HEX_RE = re.compile(r"^[0-9a-f]{4,39}$")
LINES_RE = re.compile(r"^(\d+)?(?:(-)(\d+)?)?$")
HEADER_READ_BYTES = 4096  # an object's header, a delta's base reference and a few compressed bytes fit in this
PACK_OFS_DELTA, PACK_REF_DELTA = 6, 7  # pack entry types (git's Documentation/gitformat-pack.txt)


class GetFileError(BlobdexError):
    """The file cannot be returned as asked; the message says why and what to try."""

    status = 404


class BadRequest(GetFileError):
    """Asked for what cannot be answered as asked: a path that is not a repo path or names no text file (a
    directory, a symlink, a submodule, a binary file), a commit prefix that names several commits; for
    list_files and outline (query.browse) also a limit out of range."""

    status = 400


class BadRange(BadRequest):
    """The line range asked for is not one (malformed, zero, inverted, past the end)."""


class CredentialFile(GetFileError):
    """The path names a credential file, which no reader serves."""

    status = 403


class FileTooLarge(GetFileError):
    """The blob is over MAX_FILE_BYTES; known from its object header, before it is inflated."""

    status = 413


@dataclass(frozen=True, kw_only=True)
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
    content: bytes  # exactly the requested lines, with their original line endings (withheld lines marked)
    withheld: tuple[tuple[int, str], ...] = ()  # (line, kind) of lines replaced because they hold credentials


def parse_lines(spec: str | None) -> tuple[int | None, int | None]:
    """`40-90`, `40-`, `-90` or `40` (1-based, inclusive) to (start, end)."""
    if not spec:
        return None, None
    m = LINES_RE.match(spec.strip())
    if not m or not (m.group(1) or m.group(3)):
        raise BadRange(f"bad line range {spec!r}: use A-B (1-based, inclusive), A-, -B or A")
    start = int(m.group(1)) if m.group(1) else 1
    end = int(m.group(3)) if m.group(3) else (None if m.group(2) else start)
    if start < 1 or (end is not None and end < start):
        raise BadRange(f"bad line range {spec!r}: lines start at 1 and the end may not precede the start")
    return start, end


def check_range(start: int | None, end: int | None) -> None:
    """The one range rule of every surface: lines start at 1 and the end may not precede the start."""
    if (start is not None and start < 1) or (end is not None and end < max(start or 1, 1)):
        raise BadRange(
            f"bad line range start={start}, end={end}: lines start at 1 (inclusive) "
            f"and the end may not precede the start"
        )


def refuse_credentials(path: str, repo_name: str) -> None:
    """Refuse a credential file by its name, as the indexer skips it (indexer/ignore.py).

    Only the last component is asked: `vendor/.env` is vendored to the indexer but still a credential."""
    name = path.rsplit("/", 1)[-1]
    if skip_for_path(name) is SkipReason.CREDENTIALS:
        raise CredentialFile(
            f"{path!r} in repo {repo_name!r} is a credential file (by its name); "
            f"blobdex never reads or serves credential files"
        )


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A delta header's size: 7 bits a byte, least significant first, high bit for 'more'."""
    size = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return size, pos


def blob_size(repo: Repo, blob_id: bytes) -> int | None:
    """A blob's size from its object header, inflating a few bytes, never the blob (a 150 MB blob of one
    letter is 150 KB compressed). None when it is neither packed nor loose in this store (alternates)."""
    store = repo.object_store
    for pack in store.packs:
        try:
            offset = pack.index.object_offset(blob_id)
        except KeyError:
            continue
        with open(pack.data.path, "rb") as fh:
            fh.seek(offset)
            head = fh.read(HEADER_READ_BYTES)
        kind, size, pos = (head[0] >> 4) & 0x07, head[0] & 0x0F, 1
        shift = 4
        while head[pos - 1] & 0x80:
            size |= (head[pos] & 0x7F) << shift
            shift += 7
            pos += 1
        if kind not in (PACK_OFS_DELTA, PACK_REF_DELTA):
            return size
        # A delta's header size is the delta's; the blob's is the delta's second varint (after the base's).
        if kind == PACK_OFS_DELTA:
            while head[pos] & 0x80:
                pos += 1
            pos += 1
        else:
            pos += 20
        delta = zlib.decompressobj().decompress(head[pos:], 32)
        return _varint(delta, _varint(delta, 0)[1])[0]
    hex_id = blob_id.decode("ascii")
    loose = Path(store.path) / hex_id[:2] / hex_id[2:]
    if loose.is_file():
        with open(loose, "rb") as fh:
            header = zlib.decompressobj().decompress(fh.read(HEADER_READ_BYTES), 64)
        return int(header.split(b"\x00", 1)[0].split(b" ", 1)[1])
    return None


def known_repos(data_dir: Path, org: str) -> list[str]:
    root = mirrors_dir(data_dir, org)
    return sorted(p.name[:-4] for p in root.glob("*.git")) if root.exists() else []


def _resolve(repo: Repo, ref: str | None, repo_name: str) -> tuple[str, str]:
    try:
        return resolve_ref(repo, ref, repo_name, "⟦ref⟧")
    except ScanError as exc:
        if not ref:
            raise GetFileError(exc.message) from exc
        try:  # abbreviated commit ids and revision expressions (`main~1`)
            if SHORT_HEX_RE.match(ref):
                matches = list(repo.object_store.iter_prefix(ref.encode()))
                if len(matches) > 1:
                    raise BadRequest(f"commit id prefix {ref!r} is ambiguous in repo {repo_name!r}; give more digits")
                obj = repo[matches[0]]
            else:
                obj = parse_object(repo, ref.encode())
            while isinstance(obj, Tag):
                obj = repo[obj.object[1]]
        except GetFileError:
            raise
        except Exception:
            raise GetFileError(exc.message) from exc
        if not isinstance(obj, Commit):
            raise GetFileError(f"{ref!r} in repo {repo_name!r} is not a commit") from exc
        return ref, obj.id.decode()


def _too_large(clean: str, repo_name: str, size: int) -> FileTooLarge:
    return FileTooLarge(
        f"{clean!r} in repo {repo_name!r} is {size} bytes, over the {MAX_FILE_BYTES}-byte cap of a file read; "
        "read it with git from a clone"
    )


def _blob_at(repo, commit_id: str, clean: str, repo_name: str, full_ref: str) -> Blob:
    """The blob at `clean` in the commit's tree; GetFileError naming what is there instead (nothing, a symlink, a
    submodule, a directory, an object of another type), FileTooLarge when its header says it is over the cap."""
    tree = repo[repo[commit_id.encode()].tree]
    mode, sha, parts = stat.S_IFDIR, b"", clean.split("/")
    for n, part in enumerate(parts):
        if not isinstance(tree, Tree) or part.encode() not in tree:
            raise GetFileError(
                f"no file {clean!r} in repo {repo_name!r} at {full_ref} ({commit_id[:12]}); ⟦find_it⟧ or ⟦check_ref⟧"
            )
        mode, sha = tree[part.encode()]
        if stat.S_ISLNK(mode) or mode & 0o170000 == 0o160000:
            break
        if stat.S_ISDIR(mode):
            tree = repo[sha]
        elif n < len(parts) - 1:
            tree = None  # a file where a directory was named: the next part is not found
    if stat.S_ISLNK(mode):
        raise BadRequest(
            f"{clean!r} in repo {repo_name!r} is a symlink (to "
            f"{repo[sha].as_raw_string().decode('utf-8', 'replace')!r}); symlinks are not followed"
        )
    if mode & 0o170000 == 0o160000:
        raise BadRequest(f"{clean!r} in repo {repo_name!r} is a submodule; it is not part of this repo's objects")
    if stat.S_ISDIR(mode):
        names = ", ".join(
            sorted(e.path.decode("utf-8", "replace") for e in tree.iteritems())[:20] if isinstance(tree, Tree) else []
        )
        raise BadRequest(f"{clean!r} in repo {repo_name!r} is a directory (entries: {names}); give a file path")
    # Only a blob is left, and it is not read yet: its size comes from its header first.
    try:
        size = blob_size(repo, sha)
    except (IndexError, ValueError, zlib.error):  # a header we cannot parse: the full read below decides
        size = None
    if size is not None and size > MAX_FILE_BYTES:
        raise _too_large(clean, repo_name, size)
    obj = repo[sha]
    if not isinstance(obj, Blob):
        raise BadRequest(
            f"{clean!r} in repo {repo_name!r} is not a file (a hostile tree names a "
            f"{obj.type_name.decode()} with a file's mode)"
        )
    return obj


def repo_path(path: str) -> str:
    """A repo-relative path as a request names it (slashes around it dropped); BadRequest for one that leaves the
    repo, names .git or holds a control character."""
    clean = validate_path(path.strip("/").encode("utf-8", "surrogateescape"))
    if clean is None:
        raise BadRequest(f"invalid path {path!r}: give a repo-relative path without '..' or '.git'")
    return clean


def get_file(
    data_dir: Path,
    repo_name: str,
    path: str,
    ref: str | None = None,
    org: str = "default",
    start: int | None = None,
    end: int | None = None,
    releases: tuple = (),
) -> FileText:
    """`releases`: the config's `[[release]]` tables (config.Release); a line they release at this path is served
    as the index keeps it."""
    mirror = mirror_dir(data_dir, org, repo_name)
    if "/" in repo_name or repo_name.startswith(".") or not mirror.exists():
        known = ", ".join(known_repos(data_dir, org)) or "none"
        raise GetFileError(f"unknown repo {repo_name!r} in org {org!r} (known: {known}); ⟦add_repo⟧")
    clean = repo_path(path)
    refuse_credentials(clean, repo_name)  # before any ref is resolved or object read: no ref gets around it
    check_range(start, end)
    try:
        repo = open_mirror(mirror)
    except MirrorError as exc:
        raise GetFileError(exc.message) from exc
    with repo:
        full_ref, commit_id = _resolve(repo, ref, repo_name)
        blob = _blob_at(repo, commit_id, clean, repo_name, full_ref)
        data, blob_id = blob.as_raw_string(), blob.id.decode()
    if len(data) > MAX_FILE_BYTES:  # a blob whose size no header told (one from an alternate store)
        raise _too_large(clean, repo_name, len(data))
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise BadRequest(f"{clean!r} in repo {repo_name!r} is a binary file ({len(data)} bytes); get_file returns text")
    # Lines end at "\n" only, as git counts them; a final line without one stays as it is.
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    total = len(lines)
    first = start or 1
    last = total if end is None else end
    if total and first > total:
        raise BadRange(f"line {first} is past the end of {clean!r}, which has {total} lines")
    last = min(last, total)
    # What the index holds back as credentials is not served here either: such a line is replaced by a
    # marker of the same line, so line numbers stay true and the reply says which lines were withheld.
    text_lines = [line.decode("utf-8", "replace").rstrip("\n") for line in lines]
    released = frozenset(r.line for r in releases if (r.org, r.repo, r.path) == (org, repo_name, clean))
    held = withheld_lines(text_lines, first, last, released)
    for n, kind in held.items():
        ending = b"\n" if lines[n - 1].endswith(b"\n") else b""
        lines[n - 1] = f"{WITHHELD_MARKER} ({kind})".encode() + ending
    return FileText(
        org=org,
        repo=repo_name,
        ref=full_ref,
        commit_id=commit_id,
        path=clean,
        blob_id=blob_id,
        line_start=first,
        line_end=last,
        total_lines=total,
        content=b"".join(lines[first - 1 : last]),
        withheld=tuple(sorted(held.items())),
    )


def blob_lines(data_dir: Path, org: str, repo: str, commit_id: str, path: str) -> list[str]:
    """The lines of `path` at `commit_id` in the repo's mirror ([] when the mirror or the file is gone), unredacted:
    for the operator's listing of held-back lines (Service.held_back), never for a request's answer."""
    from dulwich.object_store import tree_lookup_path

    try:
        with open_mirror(mirror_dir(data_dir, org, repo)) as git:
            _, blob_id = tree_lookup_path(git.__getitem__, git[commit_id.encode()].tree, path.encode())
            return git[blob_id].as_raw_string().decode("utf-8", "replace").split("\n")
    except (BlobdexError, KeyError, OSError):
        return []
