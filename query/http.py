"""The HTTP server: the JSON API under /v1, health checks, an OpenAPI document, and MCP at /mcp.

Binds to localhost by default and refuses requests whose Host or Origin is not local (DNS
rebinding) unless more hosts are allowed. With tokens required, every request needs a bearer
token minted by `blobdex token mint`; the token names the org the request runs in.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from dataclasses import asdict

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from indexer.errors import BlobdexError
from query import payload, tokens
from query.cip import AuthSettings, load_settings
from query.cip import app as cip_app
from query.codesearch import app as codesearch_app
from query.lucos import app as lucos_app
from query.context import ContextError
from query.get_file import GetFileError
from query.mcp_server import build as build_mcp
from query.overlay import SessionNotFound
from query.search import SearchRequest
from query.service import ChunkNotFound, Service, route_dict

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
LUCOS_PREFIX = "/api/v1"
CIP_PREFIX = "/codebase-index"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_org: contextvars.ContextVar[str] = contextvars.ContextVar("org", default="default")
NOT_FOUND = (ChunkNotFound, GetFileError, ContextError, SessionNotFound)


def error(status: int, code: str, message: str) -> JSONResponse:
    """The one error shape of this API."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


class Guard:
    """ASGI middleware: Host/Origin checks, body size cap, bearer tokens -> org (before any route)."""

    def __init__(self, app, allowed_hosts: list[str], require_token: bool, data_dir, default_org: str,
                 exempt: tuple[str, ...] = ()):
        self.app, self.allowed, self.require_token = app, allowed_hosts, require_token
        self.data_dir, self.default_org, self.exempt = data_dir, default_org, exempt

    def _host_ok(self, host: str) -> bool:
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return "*" in self.allowed or host in self.allowed or name in self.allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        origin = headers.get("origin")
        if not self._host_ok(host):
            return await error(421, "bad_host", f"Host {host!r} is not served here; start the server with "
                                                f"--allow-host {host.rsplit(':', 1)[0]} to allow it")(scope, receive, send)
        if origin is not None:
            origin_host = origin.split("://", 1)[-1].split("/", 1)[0]
            if not self._host_ok(origin_host):
                return await error(403, "bad_origin", f"Origin {origin!r} is not allowed")(scope, receive, send)
        if int(headers.get("content-length") or 0) > MAX_BODY_BYTES:
            return await error(413, "too_large", f"request body over {MAX_BODY_BYTES} bytes")(scope, receive, send)
        org = self.default_org
        if scope["path"] not in ("/healthz", "/readyz") and not scope["path"].startswith(self.exempt):
            auth = headers.get("authorization", "")
            token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
            if token is not None:
                grant = tokens.verify(self.data_dir, token)
                if grant is None:
                    return await error(401, "bad_token", "the bearer token is not valid; mint one with "
                                                         "'blobdex token mint'")(scope, receive, send)
                org = grant["org"]
            elif self.require_token:
                return await error(401, "token_required", "this server requires 'Authorization: Bearer TOKEN'; "
                                                          "mint one with 'blobdex token mint'")(scope, receive, send)
        reset = _org.set(org)
        try:
            await self.app(scope, receive, send)
        finally:
            _org.reset(reset)


async def _json(request: Request) -> dict:
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise BlobdexError(f"request body over {MAX_BODY_BYTES} bytes")
    try:
        return payload.parse(body)
    except payload.PayloadError as exc:
        raise BlobdexError(str(exc)) from exc


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
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise BlobdexError(f"'{key}' must be an integer, got {value!r}") from exc


def app(service: Service, allowed_hosts: list[str] | None = None, require_token: bool = False,
        default_org: str = "default", codesearch_prefix: str = "/codesearch", lucos: bool = False,
        cip_settings: AuthSettings | None = None) -> Starlette:
    mcp = build_mcp(service, org=_org.get)
    allowed = list(LOCAL_HOSTS) + list(allowed_hosts or [])
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h + suffix for h in allowed for suffix in ("", ":*")],
        allowed_origins=[f"{scheme}://{h}{suffix}" for h in allowed for scheme in ("http", "https")
                         for suffix in ("", ":*")])
    mcp_app = mcp.streamable_http_app(transport_security=security, max_request_body_size=MAX_BODY_BYTES)

    def endpoint(handler):
        async def run(request: Request):
            try:
                return JSONResponse(await handler(request, _org.get()))
            except NOT_FOUND as exc:
                return error(404, "not_found", str(exc))
            except BlobdexError as exc:
                return error(400, "bad_request", str(exc))
            except Exception:  # a bug, not the caller's input: logged with its traceback
                log.exception("%s %s failed", request.method, request.url.path)
                return error(500, "internal", "the server failed on this request; see its log")
        return run

    async def search(request: Request, org: str):
        d = await _json(request)
        req = SearchRequest(str(d.get("query") or ""), org, _strs(d, "repos"), _strs(d, "lang"), _strs(d, "paths"),
                            _strs(d, "ignore"), d.get("kind"), d.get("ref"), _int(d.get("limit"), "limit", 10))
        snapshot_id, hits = await anyio.to_thread.run_sync(service.search, req, d.get("session_id"))
        return {"snapshot_id": snapshot_id, "hits": [{"id": c, **h.to_dict()} for c, h in hits]}

    async def chunks(request: Request, org: str):
        ids = [x for x in request.query_params.get("ids", "").split(",") if x.strip()]
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
        d = await _json(request)
        snapshot_id, matches, more = await anyio.to_thread.run_sync(lambda: service.grep(
            str(d.get("pattern") or ""), org, repos=_strs(d, "repos"), paths=_strs(d, "paths"), ref=d.get("ref"),
            limit=_int(d.get("limit"), "limit", 100), literal=bool(d.get("literal")),
            ignore_case=bool(d.get("ignore_case"))))
        return {"snapshot_id": snapshot_id, "matches": [asdict(m) for m in matches], "truncated": more}

    async def file(request: Request, org: str):
        q = request.query_params
        if not q.get("repo") or not q.get("path"):
            raise BlobdexError("give repo and path (and optionally ref, start, end)")
        f = await anyio.to_thread.run_sync(lambda: service.get_file(
            q["repo"], q["path"], q.get("ref"), org, _int(q.get("start"), "start"), _int(q.get("end"), "end")))
        return {**{k: v for k, v in asdict(f).items() if k != "content"},
                "content": f.content.decode("utf-8", "replace")}

    async def route(request: Request, org: str):
        d = await _json(request)
        snapshot_id, routes = await anyio.to_thread.run_sync(
            service.route, str(d.get("task") or ""), org, _int(d.get("limit"), "limit", 5))
        return {"snapshot_id": snapshot_id, "repos": [route_dict(r) for r in routes]}

    async def context(request: Request, org: str):
        q = request.query_params
        return await anyio.to_thread.run_sync(service.context, q.get("symbol", ""), org, q.get("repo"))

    async def session_sync(request: Request, org: str):
        d = await _json(request)
        files = d.get("files") or {}
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise BlobdexError("'files' must be an object of path -> content strings")
        return await anyio.to_thread.run_sync(service.sync_workspace, org, request.path_params["session_id"],
                                              str(d.get("repo") or ""), files, list(_strs(d, "deleted")))

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
        from query.openapi import document

        return JSONResponse(document())

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async with mcp.session_manager.run():
            yield

    routes = [
        Route("/healthz", healthz), Route("/readyz", readyz), Route("/openapi.json", openapi),
        Route("/v1/search", endpoint(search), methods=["POST"]),
        Route("/v1/chunks", endpoint(chunks)), Route("/v1/grep", endpoint(grep), methods=["POST"]),
        Route("/v1/file", endpoint(file)), Route("/v1/route", endpoint(route), methods=["POST"]),
        Route("/v1/context", endpoint(context)), Route("/v1/repos", endpoint(repos)),
        Route("/v1/status", endpoint(status)),
        Route("/v1/sessions/{session_id}/sync", endpoint(session_sync), methods=["POST"]),
        Route("/v1/sessions/{session_id}", endpoint(session), methods=["GET", "DELETE"]),
        *([Mount(LUCOS_PREFIX, app=lucos_app(service))] if lucos else []),
        Mount(codesearch_prefix, app=codesearch_app(service, _org.get)),
        Mount(CIP_PREFIX, app=cip_app(service, cip_settings or load_settings(service.cfg.path))),
        Mount("/", app=mcp_app),  # last: the MCP app serves /mcp itself (mounting it at /mcp redirects)
    ]
    starlette = Starlette(routes=routes, lifespan=lifespan)
    # The Lucos routes authenticate by the gateway's trusted headers, not by our bearer tokens.
    # The Codebase Index Protocol has JWTs of its own.
    exempt = (CIP_PREFIX + "/",) + ((LUCOS_PREFIX + "/",) if lucos else ())
    return Guard(starlette, allowed, require_token, service.cfg.data_dir, default_org, exempt)
