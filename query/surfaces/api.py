"""The JSON API under /v1, the health probes and the OpenAPI document: top-level handlers over the query service
(`request.app.state.service`), each run in the org the Guard set (`current_org`), every error in one shape."""

from __future__ import annotations

from dataclasses import asdict

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route

from indexer.errors import BlobdexError
from indexer.fields import Fields
from query.query_text import cut_note
from query.search import SearchRequest
from query.service import Service
from query.surfaces import INTERNAL_MESSAGE, SurfaceError, endpoint, offload, payload, read_body, with_allow, words
from query.surfaces.guard import current_org, error
from query.surfaces import answers, oauth, render
from query.surfaces.openapi import (
    BLAME_PARAMS,
    CHUNKS_PARAMS,
    COMMITS_FIELDS,
    CONTEXT_PARAMS,
    DIFF_PARAMS,
    FILE_PARAMS,
    FILES_PARAMS,
    GREP_FIELDS,
    LOG_PARAMS,
    OUTLINE_PARAMS,
    REFERENCES_PARAMS,
    ROUTE_FIELDS,
    SEARCH_FIELDS,
    SYNC_FIELDS,
    document,
)
from query.surfaces.metrics import metrics

# The one error shape's code for each status a handler answers with (guard.error writes the shape).
CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "stale_cursor",
    413: "too_large",
    500: "internal",
    503: "not_ready",
}
MAX_CHUNK_IDS = 50  # as MCP get_chunk takes


def shape(request: Request, status: int, message: str, code: str | None) -> Response:
    """The one error shape of this API: {"error": {"code", "message"}}."""
    return error(status, code or CODES.get(status, "bad_request"), message)


def _service(request: Request) -> Service:
    return request.app.state.service


def _params(request: Request, names: tuple[str, ...]):
    """The query parameters, holding only `names` (`&org=beta` is refused, not ignored)."""
    try:
        payload.known_fields(dict(request.query_params), names, "parameter")
    except payload.PayloadError as exc:
        raise SurfaceError(400, str(exc)) from exc
    return request.query_params


def _fields(data) -> Fields:
    """A body's or a query string's fields, named as this API's messages name them ('limit')."""
    return Fields(data, quoted=True)


@endpoint(shape)
async def search(request: Request):
    """search_code's semantics over HTTP: the same options, thresholds, file mode and markdown."""
    service, org = _service(request), current_org.get()
    f = _fields(await read_body(request, SEARCH_FIELDS))
    query = f.text("query") or ""
    req = SearchRequest(
        query=query,
        org=org,
        repos=f.strs("repos", one=True),
        langs=f.strs("lang", one=True),
        paths=f.strs("paths", one=True),
        ignore=f.strs("ignore", one=True),
        kind=f.text("kind"),
        ref=f.text("ref"),
        limit=f.integer("limit", 10),
        mode=f.text("mode") or "hybrid",
    )
    group_by, fmt = f.choice("group_by", ("chunk", "file")), f.choice("format", ("json", "markdown"))
    # The thresholds' rules (one of the two, none for bm25) are the Service's: the same on every surface.
    min_score, min_score_diff = f.number("min_score", 0, 1), f.number("min_score_diff", 0, 1)
    session_id, cursor = f.text("session_id"), f.text("cursor")
    if group_by == "file":
        if session_id or cursor:
            raise SurfaceError(400, f"'{'session_id' if session_id else 'cursor'}' applies to group_by 'chunk' only")
        snapshot_id, files = await offload(service.localize, req, min_score, min_score_diff)
        notes = [req.note] if req.note else []
        if fmt == "markdown":
            return Response(render.files_markdown(query, files, notes), media_type="text/markdown; charset=utf-8")
        return answers.files_body(snapshot_id, files, notes)
    page = await offload(service.search_page, req, session_id, cursor, min_score, min_score_diff)
    notes = [req.note] if req.note else []
    if fmt == "markdown":
        applied = page.filters + page.applied + notes
        markdown = render.hits_markdown(query, page.snapshot_id, page.hits, applied, page.next_cursor)
        return Response(markdown, media_type="text/markdown; charset=utf-8")
    return answers.hits_body(page, notes)


@endpoint(shape)
async def chunks(request: Request):
    service, org = _service(request), current_org.get()
    ids = [x for x in _params(request, CHUNKS_PARAMS).get("ids", "").split(",") if x.strip()]
    if not ids:
        raise SurfaceError(400, "give ids=1,2,3 (ids from search hits)")
    if len(ids) > MAX_CHUNK_IDS:
        raise SurfaceError(400, f"give at most {MAX_CHUNK_IDS} ids at a time; you gave {len(ids)}")

    def read() -> dict:  # a bad id (not a number, out of range, unknown) is reported in place
        found, errors = [], []
        for raw in ids:
            try:
                found.append(service.get_chunk(org, _fields({"ids": raw}).integer("ids", loose=True)).to_dict())
            except BlobdexError as exc:
                errors.append({"id": raw, "message": exc.said(words(request))})
        return {"chunks": found, "errors": errors}

    return await offload(read)


@endpoint(shape)
async def grep(request: Request):
    service, org = _service(request), current_org.get()
    f = _fields(await read_body(request, GREP_FIELDS))
    pattern, repos, paths, ref = (
        f.text("pattern") or "",
        f.strs("repos", one=True),
        f.strs("paths", one=True),
        f.text("ref"),
    )
    limit, literal, ignore_case = f.integer("limit", 100), f.flag("literal"), f.flag("ignore_case")
    cursor = f.text("cursor")

    def run():
        return service.grep(
            org,
            pattern,
            cursor,
            repos=repos,
            paths=paths,
            ref=ref,
            limit=limit,
            literal=literal,
            ignore_case=ignore_case,
        )

    return answers.grep_body(await offload(run))


@endpoint(shape)
async def file(request: Request):
    service, org = _service(request), current_org.get()
    q = _params(request, FILE_PARAMS)
    if not q.get("repo") or not q.get("path"):
        raise SurfaceError(400, "give repo and path (and optionally ref, start, end)")
    f = _fields(q)
    start, end = f.integer("start", loose=True), f.integer("end", loose=True)
    found = await offload(lambda: service.get_file(org, q["repo"], q["path"], q.get("ref"), start, end))
    return answers.file_body(found)


@endpoint(shape)
async def files(request: Request):
    """list_files over HTTP: a repo's files at a ref, a page at a time."""
    service, org = _service(request), current_org.get()
    q = _params(request, FILES_PARAMS)
    if not q.get("repo"):
        raise SurfaceError(400, "give repo (and optionally path_glob, ref, cursor, limit)")
    limit = _fields(q).integer("limit", 200, loose=True)
    page = await offload(
        lambda: service.list_files(org, q["repo"], q.get("path_glob") or None, q.get("ref"), q.get("cursor"), limit)
    )
    return asdict(page)


@endpoint(shape)
async def outline(request: Request):
    """outline over HTTP: a file's definitions with lines and signatures."""
    service, org = _service(request), current_org.get()
    q = _params(request, OUTLINE_PARAMS)
    if not q.get("repo") or not q.get("path"):
        raise SurfaceError(400, "give repo and path (and optionally ref)")
    found = await offload(lambda: service.outline(org, q["repo"], q["path"], q.get("ref")))
    return asdict(found)


@endpoint(shape)
async def route(request: Request):
    service, org = _service(request), current_org.get()
    f = _fields(await read_body(request, ROUTE_FIELDS))
    task = f.text("task") or ""
    snapshot_id, routes = await offload(service.route, org, task, f.integer("limit", 5))
    return answers.routes_body(snapshot_id, routes, [n for n in (cut_note(len(task)),) if n])


@endpoint(shape)
async def context(request: Request):
    """expand_context over HTTP: ?symbol= (and repo), or ?repo=&path=&line=."""
    q = _params(request, CONTEXT_PARAMS)
    return await offload(lambda: _service(request).context(current_org.get(), **_pointed(q), **_caller_page(q)))


@endpoint(shape)
async def references(request: Request):
    """The callers alone over HTTP: ?symbol= (and repo), or ?repo=&path=&line=."""
    q = _params(request, REFERENCES_PARAMS)
    return await offload(lambda: _service(request).references(current_org.get(), **_pointed(q), **_caller_page(q)))


def _pointed(q) -> dict:
    """What context and references are asked about: a symbol (and repo), or a place."""
    line = _fields(q).integer("line", loose=True)
    return {"symbol": q.get("symbol"), "repo": q.get("repo"), "path": q.get("path"), "line": line}


def _caller_page(q) -> dict:
    """A caller page's parameters: name_only (true|false), cursor, limit."""
    f = _fields(q)
    return {
        "name_only": f.flag("name_only", loose=True),
        "cursor": q.get("cursor"),
        "limit": f.integer("limit", 50, loose=True),
    }


@endpoint(shape)
async def session_sync(request: Request):
    f = _fields(await read_body(request, SYNC_FIELDS))
    files = f.mapping("files", values=str, must="an object of path -> content strings")
    stored = await offload(
        _service(request).sync_workspace,
        current_org.get(),
        request.path_params["session_id"],
        f.text("repo") or "",
        files,
        list(f.strs("deleted", one=True)),
    )
    return stored.to_dict()


@endpoint(shape)
async def session(request: Request):
    service, org, session_id = _service(request), current_org.get(), request.path_params["session_id"]
    if request.method == "DELETE":
        return {"session_id": session_id, "ended": service.end_session(org, session_id)}
    return service.session_status(org, session_id).to_dict()


@endpoint(shape)
async def repos(request: Request):
    snapshot_id, rows = _service(request).repos(current_org.get())
    return {"snapshot_id": snapshot_id, "repos": [r.to_dict() for r in rows]}


@endpoint(shape)
async def status(request: Request):
    return _service(request).status(current_org.get()).to_dict()


async def healthz(request: Request):
    return JSONResponse({"ok": True})


async def protected_resource(request: Request):
    """RFC 9728: how a client signs in here (public, so that a 401 can point at it)."""
    return JSONResponse(oauth.metadata(request.scope, request.app.state.issuer))


async def readyz(request: Request):
    try:
        reader = await anyio.to_thread.run_sync(_service(request).reader)
    except BlobdexError as exc:
        return error(503, "not_ready", exc.said("http"))
    return JSONResponse({"ok": True, "snapshot_id": reader.snapshot_id})


async def openapi(request: Request):
    """The document, naming the served snapshot's repos and languages of the caller's org where it has one."""
    org = current_org.get()
    try:
        reader = await anyio.to_thread.run_sync(_service(request).reader)
    except BlobdexError:
        return JSONResponse(document())
    found = answers.catalog(reader, org)
    return JSONResponse(document(found["repos"], found["languages"]))


async def unrouted(request: Request, exc: HTTPException) -> Response:
    """Unknown routes and methods answer in the one error shape, not as plain text."""
    if exc.status_code == 404:
        # The MCP app is mounted at "/", so a known path asked with another method ends there as a 404: the
        # root router (the first to see the request) knows the path's methods.
        root = request.scope.get("router")
        for r in getattr(root, "routes", ROUTES):
            if isinstance(r, Route) and r.matches(request.scope)[0] is Match.PARTIAL:
                exc = HTTPException(405, headers={"Allow": ", ".join(sorted(r.methods or ()))})
                break
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"{request.method} is not allowed on {request.url.path}; use {allowed or 'another method'}"
        return with_allow(shape(request, 405, message, None), exc)
    if exc.status_code == 404:
        return shape(request, 404, f"no route {request.url.path}; the routes are listed in /openapi.json", None)
    return shape(request, exc.status_code, str(exc.detail), "bad_request")


async def internal(request: Request, exc: Exception) -> Response:
    return shape(request, 500, INTERNAL_MESSAGE, None)


@endpoint(shape)
async def commits(request: Request):
    """search_commits over HTTP: commits by message, changed paths and hunks, with filters."""
    service, org = _service(request), current_org.get()
    f = _fields(await read_body(request, COMMITS_FIELDS))
    asked = {
        "repos": f.strs("repos", one=True),
        "paths": f.strs("paths", one=True),
        "author": f.text("author"),
        "since": f.text("since"),
        "until": f.text("until"),
        "ref": f.text("ref"),
        "limit": f.integer("limit", 10),
    }
    query, cursor = f.text("query") or "", f.text("cursor")
    page = await offload(lambda: service.search_commits(org, query, cursor, **asked))
    return asdict(page)


@endpoint(shape)
async def log(request: Request):
    """log over HTTP: the commits that touched a path, newest first."""
    service, org = _service(request), current_org.get()
    q = _params(request, LOG_PARAMS)
    if not q.get("repo"):
        raise SurfaceError(400, "give repo (and optionally path, ref, limit, cursor)")
    limit = _fields(q).integer("limit", 20, loose=True)
    page = await offload(
        lambda: service.log(org, q["repo"], q.get("path"), q.get("ref"), limit=limit, cursor=q.get("cursor"))
    )
    return asdict(page)


@endpoint(shape)
async def blame(request: Request):
    """blame over HTTP: each line's last commit."""
    service, org = _service(request), current_org.get()
    q = _params(request, BLAME_PARAMS)
    if not q.get("repo") or not q.get("path"):
        raise SurfaceError(400, "give repo and path (and optionally ref, start, end)")
    f = _fields(q)
    start, end = f.integer("start", loose=True), f.integer("end", loose=True)
    return asdict(await offload(lambda: service.blame(org, q["repo"], q["path"], q.get("ref"), start, end)))


@endpoint(shape)
async def diff(request: Request):
    """diff over HTTP: the change between two refs or commits, a page of files at a time."""
    service, org = _service(request), current_org.get()
    q = _params(request, DIFF_PARAMS)
    if not q.get("repo") or not q.get("base") or not q.get("head"):
        raise SurfaceError(400, "give repo, base and head (and optionally path, limit, cursor)")
    limit = _fields(q).integer("limit", 20, loose=True)
    page = await offload(
        lambda: service.diff(org, q["repo"], q["base"], q["head"], q.get("path"), limit=limit, cursor=q.get("cursor"))
    )
    return asdict(page)


ROUTES = [
    Route("/healthz", healthz),
    Route("/metrics", metrics),
    Route("/readyz", readyz),
    Route("/openapi.json", openapi),
    Route(oauth.METADATA_PATH, protected_resource),
    Route(oauth.METADATA_PATH + oauth.MCP_PATH, protected_resource),
    Route("/v1/search", search, methods=["POST"]),
    Route("/v1/chunks", chunks),
    Route("/v1/grep", grep, methods=["POST"]),
    Route("/v1/file", file),
    Route("/v1/files", files),
    Route("/v1/outline", outline),
    Route("/v1/route", route, methods=["POST"]),
    Route("/v1/context", context),
    Route("/v1/references", references),
    Route("/v1/commits", commits, methods=["POST"]),
    Route("/v1/log", log),
    Route("/v1/blame", blame),
    Route("/v1/diff", diff),
    Route("/v1/repos", repos),
    Route("/v1/status", status),
    Route("/v1/sessions/{session_id}/sync", session_sync, methods=["POST"]),
    Route("/v1/sessions/{session_id}", session, methods=["GET", "DELETE"]),
]
