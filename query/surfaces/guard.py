"""The door of the HTTP server, before any route: Host and Origin checks (DNS rebinding), the body cap
(bytes as they arrive), bearer tokens -> the org a request runs in, and a JSON 500 for a native panic.
The hosts it serves are also the ones MCP's transport is told (`served_hosts`, `mcp_security`)."""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlencode

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse

from indexer import tokens as bearer
from query.surfaces import oauth

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
# Paths a program asks: JSON whatever a request's Accept says (an unknown path elsewhere is a page to a browser).
API_PATHS = ("/v1/", "/mcp", "/openapi.json", "/.well-known/", "/healthz", "/readyz", "/metrics")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")  # what a browser on this machine sends as Host
HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::\d{1,5})?$")  # host[:port], nothing else
# The org of the request being served: set by the Guard, read by every surface below it.
current_org: contextvars.ContextVar[str] = contextvars.ContextVar("org", default="default")


def is_local(host: str) -> bool:
    """A bind address or host name that only this machine reaches (brackets around IPv6 or not)."""
    return host in LOCAL_HOSTS or f"[{host}]" in LOCAL_HOSTS


def served_hosts(extra: list[str] | None = None) -> list[str]:
    """The hosts (and origins) the server answers: this machine's names, then those allowed by --allow-host."""
    return list(LOCAL_HOSTS) + list(extra or [])


def mcp_security(allowed: list[str]) -> TransportSecuritySettings:
    """The same hosts as the MCP transport states them (it checks again behind the Guard): any port of each,
    origins over http or https. `*` (any host, as the Guard reads it) has no form there: the transport's own
    check is off, and the Guard's stands."""
    if "*" in allowed:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h + suffix for h in allowed for suffix in ("", ":*")],
        allowed_origins=[
            f"{scheme}://{h}{suffix}" for h in allowed for scheme in ("http", "https") for suffix in ("", ":*")
        ],
    )


SIGN_IN_COOKIE = "blobdex_token"  # the page's sign-in form keeps a read token in it (query.surfaces.web)


def _cookie(header: str, name: str) -> str | None:
    jar = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    return jar[name].value if name in jar else None


def _see_other(location: str) -> RedirectResponse:
    """Off to the sign-in form (a page, unlike the API, answers a missing token with a way to give one)."""
    return RedirectResponse(location, status_code=303, headers={"Cache-Control": "no-store"})


def error(status: int, code: str, message: str) -> JSONResponse:
    """The one error shape of this API."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _unauthorized(response: JSONResponse, scope, code: str) -> JSONResponse:
    """A 401 that says how to sign in, in the words an OAuth client reads (RFC 6750, RFC 9728)."""
    response.headers["WWW-Authenticate"] = oauth.challenge(scope, "invalid_token" if code == "bad_token" else None)
    return response


def _panicked(exc: BaseException) -> bool:
    # pyo3 (tantivy) turns a Rust panic into PanicException, which derives from BaseException, so
    # `except Exception` misses it; it is named, not imported, because pyo3 exposes no module for it.
    return type(exc).__name__ == "PanicException"


async def _capped(receive):
    """The request's body read through `receive` up to MAX_BODY_BYTES, handed on as one message; None once
    more has arrived (the rest is never read). Counts what arrives, so a chunked body is capped too."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            pending = [message]  # the client went away: the app sees that
            break
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if size > MAX_BODY_BYTES:
            return None
        if not message.get("more_body", False):
            pending = [{"type": "http.request", "body": b"".join(parts), "more_body": False}]
            break

    async def replay():
        return pending.pop() if pending else await receive()

    return replay


class Guard:
    """ASGI middleware, before any route: Host/Origin checks, the body cap (bytes as they arrive), bearer
    tokens -> org, and a JSON 500 for a native panic that every handler below lets through."""

    def __init__(
        self,
        app,
        allowed_hosts: list[str],
        require_token: bool,
        data_dir,
        default_org: str,
        exempt: tuple[str, ...] = (),
        open_paths: tuple[str, ...] = (),
        pages: tuple[str, ...] = (),
        open_pages: tuple[str, ...] = (),
        issuer: oauth.Issuer | None = None,
        shapes: tuple[tuple[str, Callable], ...] = (),
    ):
        self.app, self.allowed, self.require_token = app, allowed_hosts, require_token
        self.issuer = issuer  # an external OAuth server whose access tokens are accepted too
        self.shapes = shapes  # (path prefix, its contract's error shape): a mount's errors in its own words
        self.data_dir, self.default_org, self.exempt = data_dir, default_org, exempt
        self.open_paths = open_paths  # probes that answer without a token
        # The page for people: its token may come from the sign-in cookie, and without one it goes to the sign-in
        # form (open_pages, the form and the stylesheets, answer without a token).
        self.pages, self.open_pages = pages, open_pages

    def _error(self, scope, status: int, code: str, message: str) -> JSONResponse:
        """An error in the shape of the contract the path belongs to (the /v1 shape by default)."""
        for prefix, shape in self.shapes:
            if scope["path"].startswith(prefix):
                return shape(Request(scope), status, message, None)  # the contract's own code for the status
        return error(status, code, message)

    def _page(self, path: str, prefixes: tuple[str, ...]) -> bool:
        return any(path == p or (p != "/" and p.endswith("/") and path.startswith(p)) for p in prefixes)

    def _browsing(self, path: str, headers: dict) -> bool:
        """A browser asking a path that is no API's (an unknown page): it is answered as a page, so the sign-in
        cookie counts there too and the 404 is the site's page, not the API's 401."""
        apis = (*API_PATHS, *self.exempt, *(prefix for prefix, _ in self.shapes))
        return "text/html" in headers.get("accept", "") and not path.startswith(apis)

    def _host_ok(self, host: str) -> bool:
        match = HOST_RE.match(host)
        return match is not None and ("*" in self.allowed or host in self.allowed or match.group(1) in self.allowed)

    async def _org(self, scope, headers: dict) -> tuple[str, object | None]:
        """The org a request runs in, from its bearer token (or the page's sign-in cookie); or the answer that
        refuses it: 401 with a challenge, the sign-in form for a page, 503 when tokens cannot be checked now."""
        path = scope["path"]
        if path in self.open_paths or path.startswith(self.exempt):
            return self.default_org, None
        page = self._page(path, self.pages) or self._browsing(path, headers)
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        if token is None and page:
            token = _cookie(headers.get("cookie", ""), SIGN_IN_COOKIE)
        try:
            grant = bearer.verify(self.data_dir, token) if token else None
            if grant is None and token and self.issuer is not None and not token.startswith(bearer.PREFIX):
                grant = await anyio.to_thread.run_sync(self.issuer.verify, token, scope)
        except (bearer.TokenStoreError, oauth.IssuerUnreachable) as exc:
            log.error("%s", exc)
            code = "token_store" if isinstance(exc, bearer.TokenStoreError) else "issuer_unreachable"
            return self.default_org, self._error(scope, 503, code, str(exc))
        if grant is not None:
            return grant["org"], None
        if page and not self._page(path, self.open_pages) and (token or self.require_token):
            query = scope.get("query_string", b"").decode("latin-1")
            return self.default_org, _see_other("/signin?" + urlencode({"next": path + (f"?{query}" if query else "")}))
        if token is not None and not page:
            said = "the bearer token is not valid; mint one with 'blobdex token mint'"
            return self.default_org, _unauthorized(self._error(scope, 401, "bad_token", said), scope, "bad_token")
        if self.require_token and not page:
            said = "this server requires 'Authorization: Bearer TOKEN'; mint one with 'blobdex token mint'"
            refused = self._error(scope, 401, "token_required", said)
            return self.default_org, _unauthorized(refused, scope, "token_required")
        return self.default_org, None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        origin = headers.get("origin")
        if not HOST_RE.match(host):
            return await self._error(
                scope, 400, "bad_host", f"Host {host!r} is not host[:port]; send the name or address of this server"
            )(scope, receive, send)
        if not self._host_ok(host):
            return await self._error(
                scope,
                421,
                "bad_host",
                f"Host {host!r} is not served here; start the server with "
                f"--allow-host {host.rsplit(':', 1)[0]} to allow it",
            )(scope, receive, send)
        if origin is not None:
            origin_host = origin.split("://", 1)[-1].split("/", 1)[0]
            if not self._host_ok(origin_host):
                return await self._error(scope, 403, "bad_origin", f"Origin {origin!r} is not allowed")(
                    scope, receive, send
                )
        if int(headers.get("content-length") or 0) > MAX_BODY_BYTES:
            return await self._error(scope, 413, "too_large", f"request body over {MAX_BODY_BYTES} bytes")(
                scope, receive, send
            )
        org, refused = await self._org(scope, headers)
        if refused is not None:
            return await refused(scope, receive, send)
        body = await _capped(receive)
        if body is None:
            return await self._error(
                scope, 413, "too_large", f"request body over {MAX_BODY_BYTES} bytes; send less per request"
            )(scope, receive, send)
        started = False

        async def tracked(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        reset = current_org.set(org)
        try:
            await self.app(scope, body, tracked)
        except BaseException as exc:
            if not _panicked(exc) or started:
                raise
            log.error("%s %s failed: a panic in a native library: %s", scope.get("method"), scope["path"], exc)
            await self._error(scope, 500, "internal", "the server failed on this request; see its log")(
                scope, body, send
            )
        finally:
            current_org.reset(reset)
