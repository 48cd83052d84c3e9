"""The HTTP server: the JSON API under /v1, health checks, an OpenAPI document, and MCP at /mcp.

Binds to localhost by default and refuses requests whose Host or Origin is not local (DNS
rebinding) unless more hosts are allowed. With tokens required, every request needs a bearer
token minted by `blobdex token mint`; the token names the org the request runs in.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from dataclasses import asdict

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Mount, Route

from indexer.errors import BlobdexError
from query.surfaces import payload
from query.surfaces.guard import LOCAL_HOSTS, MAX_BODY_BYTES, Guard, error
from query.surfaces.guard import current_org as _org
from query.surfaces.cip import AuthSettings, load_settings
from query.surfaces.cip import app as cip_app
from query.surfaces.codesearch import app as codesearch_app
from query.surfaces.lucos import app as lucos_app
from query.expand_context import ContextError
from query.get_file import BadRange, CredentialFile, FileTooLarge, GetFileError
from query.surfaces.mcp import build as build_mcp
from query.surfaces.mcp import render_files, render_search
from query.overlays.sessions import SessionNotFound
from query.search import SearchRequest, keep_similar
from query.service import ChunkNotFound, Service, route_dict

log = logging.getLogger(__name__)

LUCOS_PREFIX = "/api/v1"
CIP_PREFIX = "/codebase-index"
OPEN_PATHS = ("/healthz", "/readyz", LUCOS_PREFIX + "/health/")  # probes answer without a token
NOT_FOUND = (ChunkNotFound, GetFileError, ContextError, SessionNotFound)
# Each operation's JSON body takes these fields and no others: a typo is refused, not ignored.
SEARCH_FIELDS = (
    "query",
    "repos",
    "lang",
    "paths",
    "ignore",
    "kind",
    "ref",
    "limit",
    "session_id",
    "group_by",
    "min_score",
    "min_score_diff",
    "mode",
    "format",
)
GREP_FIELDS = ("pattern", "repos", "paths", "ref", "limit", "literal", "ignore_case")
ROUTE_FIELDS = ("task", "limit")
SYNC_FIELDS = ("repo", "files", "deleted")
FILE_PARAMS, CONTEXT_PARAMS, CHUNKS_PARAMS = ("repo", "path", "ref", "start", "end"), ("symbol", "repo"), ("ids",)


async def _json(request: Request, fields: tuple[str, ...]) -> dict:
    """The request's JSON object (the Guard has capped its size), holding only `fields`."""
    try:
        data = payload.parse(await request.body())
        payload.known_fields(data, fields)
    except payload.PayloadError as exc:
        raise BlobdexError(str(exc)) from exc
    return data


def _params(request: Request, names: tuple[str, ...]):
    """The query parameters, holding only `names` (`&org=beta` is refused, not ignored)."""
    try:
        payload.known_fields(dict(request.query_params), names, "parameter")
    except payload.PayloadError as exc:
        raise BlobdexError(str(exc)) from exc
    return request.query_params


def _text(data: dict, key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise BlobdexError(f"'{key}' must be a string, got {json.dumps(value)[:80]}")
    return value


def _flag(data: dict, key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise BlobdexError(f"'{key}' must be true or false, got {json.dumps(value)[:80]}")
    return value


def _choice(data: dict, key: str, choices: tuple[str, ...]) -> str:
    value = _text(data, key) or choices[0]
    if value not in choices:
        raise BlobdexError(f"'{key}' must be one of {', '.join(choices)}, got {value!r}")
    return value


def _fraction(data: dict, key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise BlobdexError(f"'{key}' must be a number from 0 to 1, got {json.dumps(value)[:80]}")
    return float(value)


def _strs(data: dict, key: str) -> tuple[str, ...]:
    value = data.get(key) or ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise BlobdexError(f"'{key}' must be a list of strings")
    return tuple(value)


def _int(value, key: str, default: int | None = None) -> int | None:
    if value is None or value == "":
        return default
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    raise BlobdexError(f"'{key}' must be an integer, got {json.dumps(value)[:80]}")


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Unknown routes and methods answer in the one error shape, not as plain text."""
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        return error(
            405,
            "method_not_allowed",
            f"{request.method} is not allowed on {request.url.path}; use {allowed or 'another method'}",
        )
    if exc.status_code == 404:
        return error(404, "not_found", f"no route {request.url.path}; the routes are listed in /openapi.json")
    return error(exc.status_code, "bad_request", str(exc.detail))


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    return error(500, "internal", "the server failed on this request; see its log")


def app(
    service: Service,
    allowed_hosts: list[str] | None = None,
    require_token: bool = False,
    default_org: str = "default",
    codesearch_prefix: str = "/codesearch",
    lucos: bool = False,
    cip_settings: AuthSettings | None = None,
) -> Starlette:
    mcp = build_mcp(service, org=_org.get)
    allowed = list(LOCAL_HOSTS) + list(allowed_hosts or [])
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h + suffix for h in allowed for suffix in ("", ":*")],
        allowed_origins=[
            f"{scheme}://{h}{suffix}" for h in allowed for scheme in ("http", "https") for suffix in ("", ":*")
        ],
    )
    mcp_app = mcp.streamable_http_app(transport_security=security, max_request_body_size=MAX_BODY_BYTES)

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # The MCP app is mounted at "/", so a known path asked with another method ends there as a 404.
        if exc.status_code == 404:
            for r in routes:
                if isinstance(r, Route) and r.matches(request.scope)[0] is Match.PARTIAL:
                    exc = HTTPException(405, headers={"Allow": ", ".join(sorted(r.methods or ()))})
        return await _http_error(request, exc)

    mcp_app.add_exception_handler(HTTPException, http_error)  # every unknown path ends there

    def endpoint(handler):
        async def run(request: Request):
            try:
                result = await handler(request, _org.get())
                return result if isinstance(result, Response) else JSONResponse(result)
            except BadRange as exc:
                return error(400, "bad_request", str(exc))
            except CredentialFile as exc:
                return error(403, "forbidden", str(exc))
            except FileTooLarge as exc:
                return error(413, "too_large", str(exc))
            except NOT_FOUND as exc:
                return error(404, "not_found", str(exc))
            except BlobdexError as exc:
                return error(400, "bad_request", str(exc))
            except Exception:  # a bug, not the caller's input: logged with its traceback
                log.exception("%s %s failed", request.method, request.url.path)
                return error(500, "internal", "the server failed on this request; see its log")

        return run

    async def search(request: Request, org: str):
        """search_code's semantics over HTTP: the same options, thresholds, file mode and markdown."""
        d = await _json(request, SEARCH_FIELDS)
        query = _text(d, "query") or ""
        req = SearchRequest(
            query,
            org,
            _strs(d, "repos"),
            _strs(d, "lang"),
            _strs(d, "paths"),
            _strs(d, "ignore"),
            _text(d, "kind"),
            _text(d, "ref"),
            _int(d.get("limit"), "limit", 10),
            mode=_text(d, "mode") or "hybrid",
        )
        group_by, fmt = _choice(d, "group_by", ("chunk", "file")), _choice(d, "format", ("json", "markdown"))
        min_score, min_score_diff = _fraction(d, "min_score"), _fraction(d, "min_score_diff")
        if min_score is not None and min_score_diff is not None:
            raise BlobdexError("pass 'min_score' or 'min_score_diff', not both")
        session_id = _text(d, "session_id")
        if group_by == "file":
            if session_id:
                raise BlobdexError("'session_id' applies to group_by 'chunk' only")
            snapshot_id, files = await anyio.to_thread.run_sync(service.localize, req)
            if fmt == "markdown":
                return Response(render_files(query, files), media_type="text/markdown; charset=utf-8")
            return {
                "snapshot_id": snapshot_id,
                "files": [
                    {
                        "repo": f.repo,
                        "path": f.path,
                        "ref": f.ref,
                        "commit_id": f.commit_id,
                        "score": f.score,
                        "signals": f.signals,
                        "evidence": [f"{h.path}:{h.line_start}-{h.line_end} {h.symbol}" for h in f.evidence],
                    }
                    for f in files
                ],
            }
        snapshot_id, hits = await anyio.to_thread.run_sync(service.search, req, session_id)
        hits, applied = keep_similar(hits, min_score, min_score_diff)
        if fmt == "markdown":
            filters = [
                f"{name}={value}"
                for name, value in (  # as search_code names them
                    ("repos", list(req.repos)),
                    ("lang", list(req.langs)),
                    ("paths", list(req.paths)),
                    ("ignore", list(req.ignore)),
                    ("kind", req.kind),
                    ("ref", req.ref),
                    ("session", session_id),
                )
                if value
            ]
            return Response(
                render_search(query, snapshot_id, hits, filters + applied), media_type="text/markdown; charset=utf-8"
            )
        return {
            "snapshot_id": snapshot_id,
            "hits": [{"id": c, **h.to_dict()} for c, h in hits],
            **({"applied": applied} if applied else {}),
        }

    async def chunks(request: Request, org: str):
        ids = [x for x in _params(request, CHUNKS_PARAMS).get("ids", "").split(",") if x.strip()]
        if not ids:
            raise BlobdexError("give ids=1,2,3 (ids from search hits)")
        found, errors = [], []
        for raw in ids:
            try:
                found.append(service.get_chunk(_int(raw, "ids"), org))
            except BlobdexError as exc:
                errors.append({"id": raw, "message": str(exc)})
        return {"chunks": found, "errors": errors}

    async def grep(request: Request, org: str):
        d = await _json(request, GREP_FIELDS)
        pattern, repos, paths, ref = _text(d, "pattern") or "", _strs(d, "repos"), _strs(d, "paths"), _text(d, "ref")
        limit, literal, ignore_case = _int(d.get("limit"), "limit", 100), _flag(d, "literal"), _flag(d, "ignore_case")
        snapshot_id, matches, more = await anyio.to_thread.run_sync(
            lambda: service.grep(
                pattern, org, repos=repos, paths=paths, ref=ref, limit=limit, literal=literal, ignore_case=ignore_case
            )
        )
        return {"snapshot_id": snapshot_id, "matches": [asdict(m) for m in matches], "truncated": more}

    async def file(request: Request, org: str):
        q = _params(request, FILE_PARAMS)
        if not q.get("repo") or not q.get("path"):
            raise BlobdexError("give repo and path (and optionally ref, start, end)")
        f = await anyio.to_thread.run_sync(
            lambda: service.get_file(
                q["repo"], q["path"], q.get("ref"), org, _int(q.get("start"), "start"), _int(q.get("end"), "end")
            )
        )
        return {
            **{k: v for k, v in asdict(f).items() if k != "content"},
            "content": f.content.decode("utf-8", "replace"),
        }

    async def route(request: Request, org: str):
        d = await _json(request, ROUTE_FIELDS)
        snapshot_id, routes = await anyio.to_thread.run_sync(
            service.route, _text(d, "task") or "", org, _int(d.get("limit"), "limit", 5)
        )
        return {"snapshot_id": snapshot_id, "repos": [route_dict(r) for r in routes]}

    async def context(request: Request, org: str):
        q = _params(request, CONTEXT_PARAMS)
        return await anyio.to_thread.run_sync(service.context, q.get("symbol", ""), org, q.get("repo"))

    async def session_sync(request: Request, org: str):
        d = await _json(request, SYNC_FIELDS)
        files = d.get("files") or {}
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise BlobdexError("'files' must be an object of path -> content strings")
        return await anyio.to_thread.run_sync(
            service.sync_workspace,
            org,
            request.path_params["session_id"],
            _text(d, "repo") or "",
            files,
            list(_strs(d, "deleted")),
        )

    async def session(request: Request, org: str):
        sid = request.path_params["session_id"]
        if request.method == "DELETE":
            return {"session_id": sid, "ended": service.end_session(org, sid)}
        return service.session_status(org, sid)

    async def repos(request: Request, org: str):
        snapshot_id, rows = service.repos(org)
        return {"snapshot_id": snapshot_id, "repos": rows}

    async def status(request: Request, org: str):
        return service.status(org)

    async def healthz(request: Request):
        return JSONResponse({"ok": True})

    async def readyz(request: Request):
        try:
            reader = await anyio.to_thread.run_sync(service.reader)
        except BlobdexError as exc:
            return error(503, "not_ready", str(exc))
        return JSONResponse({"ok": True, "snapshot_id": reader.snapshot_id})

    async def openapi(request: Request):
        from query.surfaces.openapi import document

        return JSONResponse(document())

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async with mcp.session_manager.run():
            yield

    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/openapi.json", openapi),
        Route("/v1/search", endpoint(search), methods=["POST"]),
        Route("/v1/chunks", endpoint(chunks)),
        Route("/v1/grep", endpoint(grep), methods=["POST"]),
        Route("/v1/file", endpoint(file)),
        Route("/v1/route", endpoint(route), methods=["POST"]),
        Route("/v1/context", endpoint(context)),
        Route("/v1/repos", endpoint(repos)),
        Route("/v1/status", endpoint(status)),
        Route("/v1/sessions/{session_id}/sync", endpoint(session_sync), methods=["POST"]),
        Route("/v1/sessions/{session_id}", endpoint(session), methods=["GET", "DELETE"]),
        *([Mount(LUCOS_PREFIX, app=lucos_app(service, _org.get if require_token else None))] if lucos else []),
        Mount(codesearch_prefix, app=codesearch_app(service, _org.get)),
        Mount(CIP_PREFIX, app=cip_app(service, cip_settings or load_settings(service.cfg))),
        Mount("/", app=mcp_app),  # last: the MCP app serves /mcp itself (mounting it at /mcp redirects)
    ]
    starlette = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error, Exception: _internal}
    )
    # The Lucos routes authenticate by the gateway's trusted headers, unless tokens are required: then
    # they need one too, and its org must be the X-Org-Id they send. The Codebase Index Protocol has JWTs.
    exempt = (CIP_PREFIX + "/",) + ((LUCOS_PREFIX + "/",) if lucos and not require_token else ())
    return Guard(starlette, allowed, require_token, service.cfg.data_dir, default_org, exempt, OPEN_PATHS)
