"""The MCP server: read-only tools over the query service, written for the calling model.

Tool descriptions are instructions to an agent: what the tool answers, when to reach for it,
and what to do next. Errors come back as tool errors whose text says how to recover: every tool is registered
through `answering`, the one place a BlobdexError becomes a tool error (as `surfaces.endpoint` is for HTTP).
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import json
import logging
import threading
import time
from dataclasses import asdict
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver import server as mcpserver_module
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from indexer.errors import BlobdexError
from indexer.fields import MAX_INT
from indexer.observe import TOOL_SECONDS
from query import MAX_LIMIT
from query.surfaces import answers, render, stdio
from query.surfaces.payload import PayloadError, known_fields
from query.surfaces.schemas import compact, shallow

if TYPE_CHECKING:
    from query.service import Service

logger = logging.getLogger(__name__)
FILE_LINES_PER_CALL = 500  # the most lines one get_file call reads
FILE_LINES_BY_DEFAULT = 200  # without end_line: about 8 KB of an ordinary file, and the reply says how to read on
INSTRUCTIONS = """blobdex indexes many git repositories at their published commits. Reach for the tools in this
order: route_task (which repos own a task) -> search_code (relevant code across repos) -> get_chunk / get_file
(read more, at any commit, without cloning) -> expand_context (a definition's callers in every repo, its routes and
config keys). grep finds exact text; list_files and outline map a repo and a file without reading them.
search_commits, log, blame and diff read history: when and why something changed, and who changed it. list_repos
says what is indexed and how fresh it is. To search your own uncommitted edits, sync_workspace them into a session
and pass session_id to search_code (session_status shows it, end_session drops it). `repo` is a name list_repos
shows, `path` is relative to the repo's root, `ref` is a branch, tag or commit (default: what was indexed), globs
are gitignore syntax, and an answer with more ends with next_cursor: pass it as `cursor` with the same arguments.
blobdex://catalog lists the org's repos, languages and chunk kinds."""
# The spec reads destructive and idempotent hints only when a tool is not read-only: they are left out there.
CATALOG = "The org's indexed repos, the languages of their chunks and the kinds: what search_code's filters name."
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DISCARDS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


BOUNDS = {"greater_than_equal", "less_than_equal", "greater_than", "less_than"}


def argument_error(tool: str, exc: ValidationError, schema: dict) -> str:
    """One sentence for the first argument pydantic rejected: which argument, what it must be, what came.
    pydantic's own text (a block with a documentation URL) is written for Python programmers."""
    errors = exc.errors()
    e = errors[0]
    loc = [str(x) for x in e["loc"]] or ["arguments"]
    name = loc[0] + "".join(f"[{x}]" for x in loc[1:])
    prop = schema.get("properties", {}).get(loc[0], {})
    limits = [prop, *prop.get("anyOf", [])]
    low = next((x["minimum"] for x in limits if "minimum" in x), None)
    high = next((x["maximum"] for x in limits if "maximum" in x and x["maximum"] < MAX_INT), None)  # MAX_INT: no range
    if e["type"] == "missing":
        what = f"{tool} needs the argument {name}"
    elif e["type"] in BOUNDS and low is not None and high is not None and len(loc) == 1:
        what = f"{name} must be between {low} and {high}"
    else:
        msg = e["msg"]
        what = f"{name} {msg[len('Input ') :]}" if msg.startswith("Input ") else f"{name}: {msg[:1].lower()}{msg[1:]}"
    given = "" if e["type"] == "missing" else f"; you passed {json.dumps(e.get('input'), default=str)[:80]}"
    more = f" ({len(errors) - 1} more argument problem(s) after this one)" if len(errors) > 1 else ""
    return f"{what}{given}{more}"


def _version() -> str:
    """blobdex's version as installed (serverInfo.version); a source tree that was never installed has none."""
    try:
        return importlib.metadata.version("blobdex")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


class Server(MCPServer):
    """MCPServer as the calling model should see it: descriptions without the docstrings' indentation,
    and a rejected argument answered with one sentence (argument_error). It holds the service the tools
    call and `org`, which names the org of the current request."""

    def __init__(self, service: Service | Future, org: Callable[[], str], **kw):
        # The SDK's logging set-up imports rich (0.1 s before `initialize` can be answered) for a handler that
        # logging.basicConfig then drops: blobdex's own handler is on the root logger already.
        mcpserver_module.configure_logging = lambda level="INFO": None
        super().__init__("blobdex", version=_version(), instructions=INSTRUCTIONS, log_level="WARNING", **kw)
        self._service = service
        self.org = org

    async def run_stdio_async(self) -> None:
        await stdio.serve(self._lowlevel_server)  # answers every call read before input ended

    @property
    def service(self) -> Service:
        """The service; while `blobdex mcp` still starts it (a Future, see started_service), a tool waits."""
        return self._service.result() if isinstance(self._service, Future) else self._service

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        **kw,
    ) -> None:
        super().add_tool(
            fn, name=name, title=title, description=description or inspect.cleandoc(fn.__doc__ or ""), **kw
        )

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        started, outcome = time.perf_counter(), "error"
        try:
            tool = self._tool_manager.get_tool(name)
            if tool is not None:  # the SDK drops an argument a tool does not take: `ref` for `ref_or_commit`
                try:  # would read another commit than the one asked for, without a word
                    known_fields(arguments or {}, tuple(tool.parameters.get("properties", {})), noun="argument")
                except PayloadError as exc:
                    raise ToolError(f"{name}: {exc}") from None
            result = await super().call_tool(name, arguments, context)
            outcome = "ok"
            return result
        except UnexpectedToolError as exc:  # a crash, or an answer its model refuses: the server's fault
            logger.error("%s failed: %r", name, exc.__cause__)
            raise
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            tool = self._tool_manager.get_tool(name)
            raise ToolError(argument_error(name, exc.__cause__, tool.parameters if tool else {})) from exc.__cause__
        finally:
            known = name if self._tool_manager.get_tool(name) else "unknown"  # a label per tool, not per guess
            TOOL_SECONDS.labels(known, outcome).observe(time.perf_counter() - started)


def _scope(ctx: Context) -> tuple[Service, str]:
    """The service the tools call and the org of the current request."""
    server = ctx.mcp_server
    return server.service, server.org()


def answering(tool: Callable[..., CallToolResult]) -> Callable[..., CallToolResult]:
    """`tool` as it is registered: the same name, signature and description (the SDK reads them through
    functools.wraps), and a BlobdexError it raises answered as a tool error in MCP's words."""

    @functools.wraps(tool)
    def answer(*args, **kwargs) -> CallToolResult:
        try:
            return tool(*args, **kwargs)
        except BlobdexError as exc:
            raise ToolError(exc.said("mcp")) from exc

    return answer


def _answer(markdown: str, data: dict) -> CallToolResult:
    """A tool's reply: markdown for the model to read, and the same answer as structured content, which the SDK
    checks against the tool's model (query.surfaces.answers) before it leaves."""
    return CallToolResult(content=[TextContent(type="text", text=markdown)], structured_content=data)


# What every tool's arguments share (repo, path, ref, globs, cursor) INSTRUCTIONS says once: tools/list is in
# every agent's context, so a description is written only where a name does not say enough.
Cursor = str | None  # next_cursor of the previous page


def search_code(
    ctx: Context,
    query: Annotated[str, Field(description="Behaviour in words, or identifiers")],
    repos: list[str] | None = None,
    lang: list[str] | None = None,
    paths: list[str] | None = None,
    ignore: Annotated[list[str] | None, Field(description="Globs to drop, e.g. tests/")] = None,
    kind: answers.Kind | None = None,
    ref: str | None = None,
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = 10,
    min_score: Annotated[float | None, Field(ge=0, le=1)] = None,
    min_score_diff: Annotated[float | None, Field(ge=0, le=1, description="Most similarity below the best")] = None,
    session_id: Annotated[str | None, Field(description="Also search this session's edits")] = None,
    group_by: Literal["chunk", "file"] = "chunk",
    cursor: Cursor = None,
) -> Annotated[CallToolResult, answers.Search]:
    """Search code and docs across every repo by meaning and identifiers. Hits have ids for get_chunk.
    group_by='file' ranks the files an issue text or stack trace involves."""
    if cursor and group_by == "file":
        raise ToolError("cursor pages hits (group_by='chunk'); group_by='file' answers in one page")
    service, org = _scope(ctx)
    # Imported once the service exists: started_service's thread imports the query engine, and two threads
    # importing pyarrow at once can see it half-initialised (CPython's import deadlock detection lets one go on).
    from query.search import SearchRequest

    req = SearchRequest(
        query=query,
        org=org,
        repos=tuple(repos or ()),
        langs=tuple(lang or ()),
        paths=tuple(paths or ()),
        ignore=tuple(ignore or ()),
        kind=kind,
        ref=ref,
        limit=limit,
    )
    notes = [req.note] if req.note else []
    if group_by == "file":  # thresholds are checked, and a file has no one similarity to apply them to
        snapshot_id, files = service.localize(req, min_score, min_score_diff)
        return _answer(render.files_markdown(query, files, notes), answers.files_body(snapshot_id, files, notes))
    page = service.search_page(req, session_id, cursor, min_score, min_score_diff)
    markdown = render.hits_markdown(
        query, page.snapshot_id, page.hits, page.filters + page.applied + notes, page.next_cursor
    )
    return _answer(markdown, answers.hits_body(page, notes))


def get_chunk(
    ctx: Context,
    ids: Annotated[
        list[Annotated[int, Field(ge=-MAX_INT, le=MAX_INT)]],
        Field(min_length=1, max_length=50),
    ],
) -> Annotated[CallToolResult, answers.Chunks]:
    """The full text of search hits by id, with repo, path, lines and commit."""
    service, org = _scope(ctx)
    out, found, errors = [], [], []
    for clip in ids:
        try:
            chunk = service.get_chunk(org, clip)
        except BlobdexError as exc:
            out.append(f"## id {clip}\n\nerror: {exc.said('mcp')}\n")
            errors.append({"id": clip, "message": exc.said("mcp")})
            continue
        out.append(render.chunk_markdown(chunk))
        found.append(chunk.to_dict())
    return _answer("\n".join(out), {"chunks": found, "errors": errors})


def grep(
    ctx: Context,
    pattern: Annotated[str, Field(description="RE2 regex, or plain text with literal")],
    repos: list[str] | None = None,
    paths: list[str] | None = None,
    ref: str | None = None,
    limit: Annotated[int, Field(ge=1, le=500)] = 100,
    literal: bool = False,
    ignore_case: bool = False,
    cursor: Cursor = None,
) -> Annotated[CallToolResult, answers.Grep]:
    """Lines matching exact text or a regex in every repo: identifiers, error strings, config keys."""
    service, org = _scope(ctx)
    page = service.grep(
        org,
        pattern,
        cursor,
        repos=tuple(repos or ()),
        paths=tuple(paths or ()),
        ref=ref,
        limit=limit,
        literal=literal,
        ignore_case=ignore_case,
    )
    return _answer(render.grep_markdown(page.snapshot_id, page.matches, page.next_cursor), answers.grep_body(page))


def get_file(
    ctx: Context,
    repo: str,
    path: str,
    ref_or_commit: Annotated[str | None, Field(description="e.g. a hit's commit, main~1")] = None,
    start_line: Annotated[int | None, Field(ge=1, le=MAX_INT)] = None,
    end_line: Annotated[int | None, Field(ge=1, le=MAX_INT)] = None,
) -> Annotated[CallToolResult, answers.File]:
    """A file at any ref or commit, read from git without a clone: 200 lines unless end_line, 500 at most."""
    start = start_line or 1
    end = end_line if end_line is not None else start + FILE_LINES_BY_DEFAULT - 1
    if end < start:
        raise ToolError(f"end_line {end} is before start_line {start}")
    end = min(end, start + FILE_LINES_PER_CALL - 1)
    service, org = _scope(ctx)
    found = service.get_file(org, repo, path, ref_or_commit, start, end)
    return _answer(render.file_markdown(found), answers.file_body(found))


def list_files(
    ctx: Context,
    repo: str,
    path_glob: Annotated[str | None, Field(description="e.g. src/**/*.py")] = None,
    ref: str | None = None,
    cursor: Cursor = None,
    limit: Annotated[int, Field(ge=1, le=1000)] = 200,
) -> Annotated[CallToolResult, answers.Files]:
    """A repo's files with language and size, and why the index skipped any: a map before reading."""
    service, org = _scope(ctx)
    page = service.list_files(org, repo, path_glob, ref, cursor, limit)
    return _answer(render.files_page_markdown(page), asdict(page))


def outline(
    ctx: Context,
    repo: str,
    path: str,
    ref: str | None = None,
) -> Annotated[CallToolResult, answers.Outline]:
    """A file's classes, functions and methods with lines, signatures and doc lines, without reading it."""
    service, org = _scope(ctx)
    found = service.outline(org, repo, path, ref)
    return _answer(render.outline_markdown(found), asdict(found))


def route_task(
    ctx: Context,
    task: Annotated[str, Field(description="An issue, bug report or feature request")],
    limit: Annotated[int, Field(ge=1, le=20)] = 5,
) -> Annotated[CallToolResult, answers.Routes]:
    """Which repos own a task, ranked, with evidence and a sparse-checkout plan. Call it first."""
    service, org = _scope(ctx)
    from query.query_text import cut_note  # once the service exists (see search_code)

    snapshot_id, routes = service.route(org, task, limit)
    notes = [n for n in (cut_note(len(task)),) if n]
    return _answer(
        render.routes_markdown(task, snapshot_id, routes, notes), answers.routes_body(snapshot_id, routes, notes)
    )


def expand_context(
    ctx: Context,
    symbol: Annotated[str | None, Field(description="e.g. Billing.renew; or repo, path, line")] = None,
    repo: str | None = None,
    path: str | None = None,
    line: Annotated[int | None, Field(ge=1, le=MAX_INT)] = None,
    name_only: Annotated[bool, Field(description="Add unresolved calls of the name")] = False,
    cursor: Cursor = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 50,
) -> Annotated[CallToolResult, answers.Context]:
    """Find references: a definition's resolved callers in every repo, its routes, env keys and cross-repo edges."""
    service, org = _scope(ctx)
    asked = {"symbol": symbol, "repo": repo, "path": path, "line": line}
    data = service.context(org, **asked, name_only=name_only, cursor=cursor, limit=limit)
    return _answer("\n".join(render.context_text(data)), data)


def sync_workspace(
    ctx: Context,
    session_id: Annotated[str, Field(description="Your name for it, e.g. the branch")],
    repo: str,
    files: Annotated[dict[str, str] | None, Field(description="path -> full new content")] = None,
    deleted: list[str] | None = None,
) -> Annotated[CallToolResult, answers.Synced]:
    """Make uncommitted edits searchable by search_code(session_id) alone: send changed files whole."""
    service, org = _scope(ctx)
    data = service.sync_workspace(org, session_id, repo, files or {}, deleted or []).to_dict()
    return _answer(json.dumps(data, indent=1) + f"\n\nNext: search_code(query, session_id={session_id!r})", data)


def session_status(ctx: Context, session_id: str) -> Annotated[CallToolResult, answers.Session]:
    """A session's edited files, chunks and expiry."""
    service, org = _scope(ctx)
    data = service.session_status(org, session_id).to_dict()
    return _answer(json.dumps(data, indent=1), data)


def end_session(ctx: Context, session_id: str) -> Annotated[CallToolResult, answers.Ended]:
    """Drop a session's edits from the index."""
    service, org = _scope(ctx)
    existed = service.end_session(org, session_id)
    said = f"session {session_id!r} ended" if existed else f"no session {session_id!r} (nothing to end)"
    return _answer(said, {"session_id": session_id, "ended": existed})


def list_repos(ctx: Context) -> Annotated[CallToolResult, answers.Status]:
    """What is indexed: per repo its refs, commits, counts and freshness."""
    service, org = _scope(ctx)
    data = service.status(org).to_dict()
    return _answer(json.dumps(data, indent=1), data)


def search_commits(
    ctx: Context,
    query: Annotated[str, Field(description="Words of the change; empty: newest")] = "",
    repos: list[str] | None = None,
    paths: list[str] | None = None,
    author: Annotated[str | None, Field(description="Part of name or email")] = None,
    since: Annotated[str | None, Field(description="e.g. 2024-01-31")] = None,
    until: str | None = None,
    ref: str | None = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 10,
    cursor: Cursor = None,
) -> Annotated[CallToolResult, answers.Commits]:
    """Commits in every repo by words of the change, path, author or date: when and why code changed."""
    service, org = _scope(ctx)
    filters = {"repos": tuple(repos or ()), "paths": tuple(paths or ()), "limit": limit}
    page = service.search_commits(org, query, cursor, author=author, since=since, until=until, ref=ref, **filters)
    title = f"commits matching {query!r}" if query else "newest commits"
    markdown = render.commits_markdown(title, page.snapshot_id, page.commits, page.next_cursor, "search_commits")
    return _answer(markdown, asdict(page))


def log(
    ctx: Context,
    repo: str,
    path: str | None = None,
    ref: str | None = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
    cursor: Cursor = None,
) -> Annotated[CallToolResult, answers.Commits]:
    """One repo's commits, or a file's or folder's following renames, newest first."""
    service, org = _scope(ctx)
    page = service.log(org, repo, path, ref, limit=limit, cursor=cursor)
    title = f"log of {repo}:{path}" if path else f"log of {repo}"
    return _answer(
        render.commits_markdown(title, page.snapshot_id, page.commits, page.next_cursor, "log"), asdict(page)
    )


def blame(
    ctx: Context,
    repo: str,
    path: str,
    ref: str | None = None,
    start_line: Annotated[int | None, Field(ge=1)] = None,
    end_line: Annotated[int | None, Field(ge=1)] = None,
) -> Annotated[CallToolResult, answers.Blame]:
    """Per line of a file, the commit, author and date that last changed it."""
    service, org = _scope(ctx)
    found = service.blame(org, repo, path, ref, start_line, end_line)
    return _answer(render.blame_markdown(found), asdict(found))


def diff(
    ctx: Context,
    repo: str,
    base: str,
    head: str,
    path: str | None = None,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
    cursor: Cursor = None,
) -> Annotated[CallToolResult, answers.Diff]:
    """Changes between two refs, file by file with hunks; base id~1, head id shows one commit."""
    service, org = _scope(ctx)
    found = service.diff(org, repo, base, head, path, limit=limit, cursor=cursor)
    return _answer(render.diff_markdown(found), asdict(found))


# Every tool, in the order list_tools shows them, with what it may do to the server's state.
TOOLS = (
    (search_code, READ_ONLY),
    (get_chunk, READ_ONLY),
    (grep, READ_ONLY),
    (get_file, READ_ONLY),
    (list_files, READ_ONLY),
    (outline, READ_ONLY),
    (route_task, READ_ONLY),
    (expand_context, READ_ONLY),
    (search_commits, READ_ONLY),
    (log, READ_ONLY),
    (blame, READ_ONLY),
    (diff, READ_ONLY),
    (sync_workspace, WRITES),
    (session_status, READ_ONLY),
    (end_session, DISCARDS),
    (list_repos, READ_ONLY),
)


def started_service(cfg) -> tuple[Future, threading.Thread]:
    """`blobdex mcp`'s service, made in a thread: this module imports only the MCP SDK, so initialize and
    tools/list are answered while the thread imports the query engine (numpy, Arrow: 0.3 s), builds the
    Service and warms it (the snapshot, the model). A tool called meanwhile waits (Server.service)."""
    ready: Future = Future()

    def start() -> None:
        try:
            from query.service import Service

            service = Service(cfg, prepare=True)
        except Exception as exc:  # the first tool call raises it, in its own words; no traceback on stderr
            ready.set_exception(exc)
            return
        ready.set_result(service)
        service.warm()

    thread = threading.Thread(target=start, name="blobdex-warm", daemon=True)
    thread.start()
    return ready, thread


def build(service: Service | Future, org: Callable[[], str] = lambda: "default") -> MCPServer:
    """An MCP server whose every tool runs inside the org that `org()` names for the current request."""
    mcp = Server(service, org)
    for tool, hints in TOOLS:
        mcp.add_tool(answering(tool), annotations=hints, structured_output=True)
        # What every session reads: lean schemas, answers one level deep (the whole model checks every answer).
        info = mcp._tool_manager.get_tool(tool.__name__)
        info.parameters = compact(info.parameters)
        info.fn_metadata.output_schema = shallow(info.fn_metadata.output_schema)

    @mcp.resource("blobdex://catalog", mime_type="application/json", description=CATALOG)
    def catalog() -> str:
        return json.dumps(answers.catalog(mcp.service.reader(), mcp.org()))

    return mcp
