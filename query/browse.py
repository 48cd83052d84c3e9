"""Browsing a repo without a clone: its files as a paged listing (list_files), one folder's entries (folder, the
page's tree view) and a file's definitions (outline). At a ref the snapshot indexed they read the snapshot's
tables; at any other ref or commit they read the mirror's git objects (the tree, and the file parsed now), as
get_file does."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc

from indexer.errors import BlobdexError
from indexer.ignore import skip_for_path, validate_path
from indexer.languages import language_for
from indexer.mirror import MirrorError, mirror_dir, open_mirror
from indexer.prepare import prepare
from indexer.snapshot import FACT_COLUMNS, Manifest, read_graph
from indexer.scan import _walk
from query.cursor import CursorError
from query.cursor import decode as cursor_decode
from query.cursor import encode as cursor_encode
from query.get_file import BadRequest, _resolve, blob_size, get_file, refuse_credentials, repo_path
from query.reader import SnapshotReader
from query.search import globs

MAX_FILES_PER_PAGE = 1000
MAX_OUTLINE_BYTES = 1024 * 1024  # a file parsed now, at a ref the snapshot did not index
OUTLINE_FIELDS = ("name", "qualified_name", "kind", "parent", "line", "line_end", "signature", "doc")


class BrowseError(BlobdexError):
    """A listing or an outline that cannot be given as asked; the message says why and what to try."""

    status = 404


@dataclass(frozen=True, kw_only=True)
class Where:
    """The commit a listing or an outline reads: an indexed ref (read from the snapshot) or any other."""

    ref: str
    commit_id: str
    indexed: bool


@dataclass(frozen=True, kw_only=True)
class FilePage:
    org: str
    repo: str
    ref: str
    commit_id: str
    files: list[dict]  # path, bytes, lang, blob_id, skip (why it is not indexed; None when it is, or unknown)
    total: int  # files matching the glob, on every page
    next_cursor: str | None


@dataclass(frozen=True, kw_only=True)
class Outline:
    org: str
    repo: str
    ref: str
    commit_id: str
    path: str
    blob_id: str
    lang: str
    symbols: list[dict]  # OUTLINE_FIELDS, in line order


def where(data_dir: Path, manifest: Manifest, org: str, repo: str, ref: str | None) -> Where:
    """The commit `ref` names in `repo`: one the snapshot indexed when it is (its name, short or full, or its
    commit id), else whatever the mirror resolves it to. No ref: the first ref indexed."""
    state = manifest.repo(org, repo)
    if state is None:
        known = sorted(r.name for r in manifest.repos if r.org == org)
        raise BrowseError(
            f"unknown repo {repo!r} in org {org!r}; indexed repos: {', '.join(known) or 'none'}; ⟦list_repos⟧"
        )
    for x in state.refs:
        short = x.ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
        if ref in (None, "", x.ref, short) or (len(ref) >= 7 and x.commit_id.startswith(ref)):
            return Where(ref=x.ref, commit_id=x.commit_id, indexed=True)
    try:
        with open_mirror(mirror_dir(data_dir, org, repo)) as git:
            full, commit_id = _resolve(git, ref, repo)
    except MirrorError as exc:
        raise BrowseError(exc.message) from exc
    return Where(ref=full, commit_id=commit_id, indexed=False)


def list_files(
    data_dir: Path,
    reader: SnapshotReader,
    org: str,
    repo: str,
    path_glob: str | None = None,
    ref: str | None = None,
    cursor: str | None = None,
    limit: int = 200,
) -> FilePage:
    """A repo's files at a ref in path order, `limit` a page, with sizes and languages."""
    if not 1 <= limit <= MAX_FILES_PER_PAGE:
        raise BadRequest(f"limit {limit} is out of range: use 1 to {MAX_FILES_PER_PAGE}")
    spot = where(data_dir, reader.manifest, org, repo, ref)
    asked = {"org": org, "repo": repo, "path_glob": path_glob, "ref": spot.ref, "limit": limit}
    # A listing continues by path, so a cursor is cut from the commit listed, not from the snapshot.
    after = cursor_decode(cursor, "list_files", spot.commit_id, asked)
    if after is not None and not isinstance(after, str):
        raise CursorError("that cursor's position is not a path: ask again without a cursor")
    files = (
        _indexed_files(reader, org, repo, spot.ref) if spot.indexed else _tree_files(data_dir, reader, org, repo, spot)
    )
    spec = globs((path_glob,), "path_glob") if path_glob else None
    if spec is not None:
        files = [f for f in files if spec.match_file(f["path"])]
    start = 0
    if after is not None:
        start = next((i for i, f in enumerate(files) if f["path"] > after), len(files))
    page = files[start : start + limit]
    more = start + limit < len(files)
    return FilePage(
        org=org,
        repo=repo,
        ref=spot.ref,
        commit_id=spot.commit_id,
        files=page,
        total=len(files),
        next_cursor=cursor_encode("list_files", spot.commit_id, asked, page[-1]["path"]) if more else None,
    )


@dataclass(frozen=True, kw_only=True)
class Folder:
    """A folder at a commit: the folders in it (with how many files each holds, at any depth), then its files
    (path, name, bytes, lang, blob_id and skip: why the index left the file out, None when it did not)."""

    org: str
    repo: str
    ref: str
    commit_id: str
    path: str  # "" for the repo's root
    folders: list[dict]  # name, files
    files: list[dict]


def folder(
    data_dir: Path, reader: SnapshotReader, org: str, repo: str, path: str = "", ref: str | None = None
) -> Folder:
    """The entries of one folder of a repo at a ref, read as list_files reads the repo's files."""
    spot = where(data_dir, reader.manifest, org, repo, ref)
    clean = repo_path(path) if path.strip("/") else ""
    files = (
        _indexed_files(reader, org, repo, spot.ref) if spot.indexed else _tree_files(data_dir, reader, org, repo, spot)
    )
    prefix = clean + "/" if clean else ""
    under = [f for f in files if f["path"].startswith(prefix)]
    if clean and not under:
        raise BrowseError(f"no folder {clean!r} in repo {repo!r} at {spot.ref} ({spot.commit_id[:12]}); ⟦list_files⟧")
    folders: dict[str, int] = {}
    entries = []
    for f in under:
        if f["skip"] == "bad_path":  # `a/../x`: a hostile tree's path, shown whole at the root, never walked into
            entries += [{**f, "name": f["path"]}] if not clean else []
            continue
        head, sep, _ = f["path"][len(prefix) :].partition("/")
        if sep:
            folders[head] = folders.get(head, 0) + 1
        else:
            entries.append({**f, "name": head})
    listed = [{"name": name, "files": n} for name, n in sorted(folders.items())]
    return Folder(org=org, repo=repo, ref=spot.ref, commit_id=spot.commit_id, path=clean, folders=listed, files=entries)


def _indexed_files(reader: SnapshotReader, org: str, repo: str, ref: str) -> list[dict]:
    def load() -> list[dict]:
        table = read_graph(
            reader.path, "files", {(org, repo)}, columns=["ref", "path", "bytes", "lang", "blob_id", "skip"]
        )
        table = table.filter(pc.equal(table["ref"], ref)).drop_columns(["ref"]).sort_by("path")
        return table.to_pylist()

    return reader.cached(f"list_files:{org}/{repo}@{ref}", load)


def _tree_files(data_dir: Path, reader: SnapshotReader, org: str, repo: str, spot: Where) -> list[dict]:
    def load() -> list[dict]:
        out = []
        with open_mirror(mirror_dir(data_dir, org, repo)) as git:
            tree = git[spot.commit_id.encode()].tree
            for raw, mode, sha in _walk(git, tree):
                path = validate_path(raw)
                if path is None or not stat.S_ISREG(mode):
                    continue
                size = blob_size(git, sha)
                skip = skip_for_path(path)
                out.append(
                    {
                        "path": path,
                        "bytes": size,
                        "lang": language_for(path),
                        "blob_id": sha.decode(),
                        "skip": skip.value if skip is not None else None,
                    }
                )
        return sorted(out, key=lambda f: f["path"])

    return reader.cached(f"list_files:{org}/{repo}@{spot.commit_id}", load)


def outline(data_dir: Path, reader: SnapshotReader, org: str, repo: str, path: str, ref: str | None = None) -> Outline:
    """A file's definitions (functions, classes, methods) with their lines and signatures, in line order."""
    spot = where(data_dir, reader.manifest, org, repo, ref)
    clean = repo_path(path)
    refuse_credentials(clean, repo)  # as get_file: 403 at any ref, not an empty outline
    if spot.indexed:
        files = [f for f in _indexed_files(reader, org, repo, spot.ref) if f["path"] == clean]
        if not files:
            raise BrowseError(f"no file {clean!r} in repo {repo!r} at {spot.ref} ({spot.commit_id[:12]}); ⟦list_files⟧")
        blob_id, lang = files[0]["blob_id"], files[0]["lang"]
        table = read_graph(reader.path, "symbols", {(org, repo)}, filters=[("path", "=", clean)])
        table = table.filter(pc.equal(table["blob_id"], blob_id))
        symbols = table.select(list(OUTLINE_FIELDS)).to_pylist()
    else:
        # credentials withheld, as get_file serves; its errors (a directory 400, a missing file 404) stand as they are
        found = get_file(data_dir, repo, clean, spot.commit_id, org)
        blob_id, lang = found.blob_id, language_for(clean)
        entry = prepare(found.content, lang, MAX_OUTLINE_BYTES)
        lang = entry.lang or lang  # a script's #! line names its language
        if entry.skip is not None:
            raise BrowseError(f"{clean!r} in repo {repo!r} at {spot.ref} is not parsed for an outline: {entry.skip}")
        columns = FACT_COLUMNS["symbols"]
        rows = [dict(zip(columns, r)) for r in (entry.facts or {}).get("symbols", [])]
        symbols = [{k: r[k] for k in OUTLINE_FIELDS} for r in rows]
    return Outline(
        org=org,
        repo=repo,
        ref=spot.ref,
        commit_id=spot.commit_id,
        path=clean,
        blob_id=blob_id,
        lang=lang,
        symbols=sorted(symbols, key=lambda s: (s["line"], -s["line_end"])),  # outer definitions before inner
    )


DEFINITION_KINDS = frozenset({"function", "method", "class", "type", "definition"})


def definitions_at(reader, org: str, repo: str, path: str, blob_id: str) -> dict[int, str]:
    """A file's definitions the reader's snapshot indexed at `blob_id`: first line -> symbol (the page's file view
    links each to its callers)."""
    found: dict[int, str] = {}
    for row in reader.rows_at(org, repo, path):
        r = reader.row(row)
        if r["blob_id"] == blob_id and r["kind"] in DEFINITION_KINDS and r["symbol"]:
            found.setdefault(r["line_start"], r["symbol"])
    return found
