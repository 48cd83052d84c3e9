"""What every read answers, as typed models: the one declaration that MCP's output schemas are generated from, that
a structured answer is checked against before it leaves, and that names the /v1 bodies (the same answers). Each
model forbids fields it does not declare, so an answer that grows a field fails its tests until it is declared.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from query.surfaces.render import file_record

Scalar = int | float | bool | str | None
Signals = dict[str, Scalar | list[int]]  # a ranking's signals by name; which ones depends on the mode


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# search_code, get_chunk
class Located(Model):
    """Where a chunk lies: what a hit and a whole chunk share."""

    id: int = Field(description="Pass to get_chunk; stable while the chunk lives.")
    org: str
    repo: str
    ref: str | None
    commit_id: str | None
    path: str
    blob_id: str
    chunk_index: int
    symbol: str | None
    kind: str
    lang: str
    line_start: int
    line_end: int
    uncommitted: bool = Field(description="From a session's uncommitted edits.")


class Hit(Located):
    snippet: str
    score: float
    signals: Signals


class FileHit(Model):
    repo: str
    path: str
    ref: str | None
    commit_id: str | None
    score: float
    signals: Signals
    evidence: list[str] = Field(description="The file's best chunks: repo:path:lines.")


class Search(Model):
    snapshot_id: str
    applied: list[str] | None = Field(None, description="Filters and thresholds the answer applied.")
    notes: list[str] | None = Field(None, description="What was not read in full.")
    hits: list[Hit] | None = Field(None, description="group_by='chunk'.")
    files: list[FileHit] | None = Field(None, description="group_by='file'.")
    next_cursor: str | None = None


class Chunk(Located):
    text: str
    snapshot_id: str | None


class ChunkError(Model):
    id: int | str
    message: str


class Chunks(Model):
    chunks: list[Chunk]
    errors: list[ChunkError]


# grep
class GrepMatch(Model):
    org: str
    repo: str
    ref: str | None
    path: str
    blob_id: str
    line: int
    text: str


class Grep(Model):
    snapshot_id: str
    matches: list[GrepMatch]
    truncated: bool
    next_cursor: str | None


# get_file, list_files, outline
class Lines(Model):
    """Which lines of which file at which commit: what get_file and blame share."""

    org: str
    repo: str
    ref: str | None
    commit_id: str
    path: str
    blob_id: str
    line_start: int
    line_end: int
    total_lines: int


class File(Lines):
    withheld: list[tuple[int, str]] = Field(description="[line, kind] of lines replaced: they hold credentials.")
    content: str
    next_start_line: int | None = Field(None, description="Where the next page of the file starts, if any.")


class FileEntry(Model):
    path: str
    bytes: int | None  # None where the mirror lacks the blob
    lang: str | None
    blob_id: str
    skip: str | None = Field(description="Why the index skipped it (vendored, generated, too_large...).")


class Files(Model):
    org: str
    repo: str
    ref: str
    commit_id: str
    files: list[FileEntry]
    total: int
    next_cursor: str | None


class Definition(Model):
    name: str
    qualified_name: str
    kind: str
    parent: str | None
    line: int
    line_end: int
    signature: str | None
    doc: str | None


class Outline(Model):
    org: str
    repo: str
    ref: str
    commit_id: str
    path: str
    blob_id: str
    lang: str
    symbols: list[Definition]


# route_task
class Evidence(Model):
    path: str
    line_start: int
    line_end: int
    symbol: str | None
    relevance: float


class Edge(Model):
    org: str | None = None
    kind: str
    key: str
    confidence: float
    from_repo: str
    from_path: str
    from_line: int | None
    from_evidence: str | None
    to_repo: str
    to_path: str
    to_line: int | None
    to_evidence: str | None
    detail: str | None


class Checkout(Model):
    directories: list[str]
    command: str


class Route(Model):
    org: str
    repo: str
    score: float
    signals: Signals
    evidence: list[Evidence]
    edges: list[Edge]
    edges_total: int
    checkout: Checkout | dict


class Routes(Model):
    snapshot_id: str
    repos: list[Route]
    notes: list[str] | None = None


# expand_context (/v1/context), /v1/references
class Defined(Model):
    repo: str
    path: str
    line: int
    line_end: int
    qualified_name: str
    kind: str
    signature: str | None
    doc: str | None


class Call(Model):
    repo: str
    path: str
    line: int
    caller: str | None
    receiver: str | None
    resolution: str = Field(description="exact, import, receiver or name (a guess by name only).")


class RouteFact(Model):
    repo: str
    path: str
    line: int
    method: str | None
    pattern: str
    handler: str | None


class EnvKey(Model):
    repo: str
    path: str
    line: int
    key: str
    how: str


class References(Model):
    snapshot_id: str
    definitions: list[Defined]
    definitions_total: int
    callers: list[Call]
    callers_total: int
    callers_by_repo: dict[str, int]
    callers_by_resolution: dict[str, int]
    name_only_total: int
    name_only_included: bool
    next_cursor: str | None


class Context(References):
    symbol: str
    org: str
    routes: list[RouteFact]
    env_keys: list[EnvKey]
    edges: list[Edge]


# search_commits, log, blame, diff
class ChangedPath(Model):
    path: str
    old_path: str | None = None
    change: str
    added: int
    removed: int


class Commit(Model):
    org: str
    repo: str
    commit_id: str
    parents: list[str]
    author: str
    author_email: str
    date: str
    committed: str
    subject: str
    message: str
    files_changed: int
    added: int
    removed: int
    paths: list[ChangedPath]
    paths_total: int | None = None
    score: float | None = None


class Commits(Model):
    snapshot_id: str
    commits: list[Commit]
    next_cursor: str | None


class BlameLine(Model):
    line: int
    commit_id: str | None
    boundary: bool | None = None
    text: str


class Blamed(Model):
    author: str
    author_email: str
    date: str
    subject: str


class Blame(Lines):
    lines: list[BlameLine]
    commits: dict[str, Blamed]


class FileDiff(Model):
    path: str
    old_path: str | None = None
    change: str
    added: int
    removed: int
    hunks: str
    truncated: bool | None = None
    held_back: bool | None = None
    note: str | None = None


class Diff(Model):
    org: str
    repo: str
    base: str
    base_commit: str
    head: str
    head_commit: str
    files: list[FileDiff]
    total: int
    next_cursor: str | None


# sessions
class Synced(Model):
    session_id: str
    repo: str
    files: int
    deleted: int
    chunks: int
    secrets_held_back: int
    skipped: dict[str, str]


class Touched(Model):
    repo: str
    path: str
    deleted: bool
    skip: str | None


class Session(Model):
    session_id: str
    created: float
    idle_seconds: float
    expires_in_seconds: float
    chunks: int
    files: list[Touched]


class Ended(Model):
    session_id: str
    ended: bool


# list_repos (/v1/status), /v1/repos
class RefState(Model):
    ref: str
    commit_id: str
    behind: bool | None


class Repo(Model):
    org: str
    name: str
    url: str
    configured: bool
    status: str
    error: str | None
    indexed_at: str | None
    files: int
    files_indexed: int
    chunks: int
    files_skipped: dict[str, int]
    secrets_held_back: int
    refs: list[RefState]


class Repos(Model):
    snapshot_id: str | None
    repos: list[Repo]


class Status(Model):
    snapshot_id: str | None
    serving: str | None
    model: str | None
    vectors: dict[str, Any] | None
    repos: list[Repo]
    last_run: dict[str, Any] | None


# search_code's `kind`: a category or a chunk kind (query.search.request.KINDS; a test holds the two equal).
Kind = Literal["code", "doc", "function", "method", "class", "definition", "module", "section", "text"]


# The answers built from what the service returns, for MCP's structured content and the /v1 bodies alike.
def hits_body(page, notes: list[str]) -> dict:
    """search_code's chunks: a page of hits, the filters and thresholds it applied, and the next page's cursor."""
    applied = page.filters + page.applied
    return {
        "snapshot_id": page.snapshot_id,
        "hits": [{"id": c, **h.to_dict()} for c, h in page.hits],
        **({"applied": applied} if applied else {}),
        **({"notes": notes} if notes else {}),
        "next_cursor": page.next_cursor,
    }


def files_body(snapshot_id: str, files: list, notes: list[str]) -> dict:
    """search_code's files (group_by='file')."""
    return {"snapshot_id": snapshot_id, "files": [file_record(f) for f in files], **({"notes": notes} if notes else {})}


def grep_body(page) -> dict:
    return {
        "snapshot_id": page.snapshot_id,
        "matches": [asdict(m) for m in page.matches],
        "truncated": page.next_cursor is not None,
        "next_cursor": page.next_cursor,
    }


def file_body(found) -> dict:
    """get_file's lines as text, and where the next page starts when the file goes on."""
    more = found.line_end + 1 if found.line_end < found.total_lines else None
    return {
        **{k: v for k, v in asdict(found).items() if k != "content"},
        "content": found.content.decode("utf-8", "replace"),
        "next_start_line": more,
    }


def route_dict(r) -> dict:
    """One route of route_task's answer (a query.route_task.RepoRoute), its evidence without snapshot rows."""
    d = asdict(r)
    for e in d["evidence"]:
        e.pop("row", None)
    return d


def routes_body(snapshot_id: str, routes: list, notes: list[str]) -> dict:

    return {"snapshot_id": snapshot_id, "repos": [route_dict(r) for r in routes], **({"notes": notes} if notes else {})}


def catalog(reader, org: str) -> dict:
    """What an org's filters can name in the served snapshot (MCP's blobdex://catalog)."""
    kinds = list(Kind.__args__)
    return {
        "snapshot_id": reader.snapshot_id,
        "repos": reader.repo_names(org),
        "languages": sorted(reader.languages(org)),
        "kinds": kinds,
    }
