"""The protocol surfaces: thin modules over the query service, one per contract (MCP, /v1, codesearch, CIP, Lucos),
and the one way a handler's failure becomes its contract's JSON error.

Every HTTP handler that can fail is wrapped by `endpoint(shape)`: a `BlobdexError` (a `SurfaceError` included)
answers with its `status` in the contract's error body, anything else is a logged 500.
`shape(request, status, message, code)` is the only thing a contract says about errors; `route_errors(shape)` gives
its app the same body for unknown routes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
from anyio.lowlevel import RunVar
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from indexer.errors import BlobdexError, Refused
from query.surfaces import payload

log = logging.getLogger(__name__)

INTERNAL_MESSAGE = "the server failed on this request; see its log"
# A contract's error body: (request, HTTP status, message, the contract's error code or None) -> response.
Shape = Callable[[Request, int, str, "str | None"], Response]


class SurfaceError(Refused):
    """A request a query contract refuses: the HTTP status, the one-sentence message, and the contract's code if
    it has codes (Lucos, /v1)."""


def words(request: Request) -> str:
    """The surface a message names its next step for (indexer.errors.said): the CLI's when `blobdex --server`
    asks (query.remote sends X-Blobdex-Words: cli), else HTTP's."""
    return "cli" if request.headers.get("x-blobdex-words") == "cli" else "http"


def endpoint(shape: Shape):
    """Wrap a handler `async (request) -> Response | dict` so every failure answers in `shape` (a dict is JSON)."""

    def wrap(handler: Callable[[Request], Awaitable[Response | dict]]):
        @functools.wraps(handler)
        async def run(request: Request) -> Response:
            try:
                result = await handler(request)
            except BlobdexError as exc:
                return shape(request, exc.status, exc.said(words(request)), getattr(exc, "code", None))
            except Exception:  # a bug, not the caller's input: logged with its traceback
                log.exception("%s %s failed", request.method, request.url.path)
                return shape(request, 500, INTERNAL_MESSAGE, None)
            return result if isinstance(result, Response) else JSONResponse(result)

        return run

    return wrap


# A request's ranking, grep or reading runs in a worker thread, never on the event loop, with a deadline. The caps
# on what a request may ask (query_text.MAX_QUERY_CHARS, limits, RE2 patterns) keep its work far below the deadline:
# it is a backstop, so that no input an audit missed can hold a caller (or a worker) for long.
REQUEST_SECONDS = 60.0
# Such work shares HEAVY_THREADS worker threads, apart from anyio's default pool, so health checks and light
# requests never queue behind it (a thread past its deadline is abandoned, and holds its slot until it ends).
HEAVY_THREADS = 8
_heavy: RunVar[anyio.CapacityLimiter] = RunVar("blobdex_heavy_threads")


async def offload(fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)` in a heavy-work thread; SurfaceError 503 when it takes longer than REQUEST_SECONDS."""
    try:
        limiter = _heavy.get()
    except LookupError:  # one limiter per event loop (a test runs several servers)
        limiter = anyio.CapacityLimiter(HEAVY_THREADS)
        _heavy.set(limiter)
    with anyio.move_on_after(REQUEST_SECONDS):
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), abandon_on_cancel=True, limiter=limiter)
    raise SurfaceError(
        503,
        f"the request took longer than {REQUEST_SECONDS:.0f} s and was stopped; narrow it (a shorter text, fewer "
        f"repos, a tighter pattern) or try again when the server is less busy",
        "timeout",
    )


async def read_body(request: Request, fields: tuple[str, ...] | None = None) -> dict:
    """The request's JSON object (the Guard has capped its size), holding only `fields` when they are given;
    SurfaceError 400 saying what is wrong with it."""
    try:
        data = payload.parse(await request.body())
        if fields is not None:
            payload.known_fields(data, fields)
    except payload.PayloadError as exc:
        raise SurfaceError(400, str(exc)) from exc
    return data


def with_allow(response: Response, exc: HTTPException) -> Response:
    """`response` with the Allow header of a 405 (RFC 9110 section 15.5.6: a 405 says which methods work)."""
    if exc.status_code == 405 and exc.headers and "Allow" in exc.headers:
        response.headers["Allow"] = exc.headers["Allow"]
    return response


async def _unrouted(shape: Shape, request: Request, exc: HTTPException) -> Response:
    what = "no such route" if exc.status_code == 404 else exc.detail
    if exc.status_code == 405:
        what = f"method not allowed; use {exc.headers.get('Allow', 'another method')}"
    return with_allow(shape(request, exc.status_code, f"{request.method} {request.url.path}: {what}", None), exc)


async def _internal(shape: Shape, request: Request, exc: Exception) -> Response:
    return shape(request, 500, INTERNAL_MESSAGE, None)


def route_errors(shape: Shape) -> dict:
    """A contract app's exception handlers: unknown routes and methods, and a failure outside any handler."""
    return {HTTPException: partial(_unrouted, shape), Exception: partial(_internal, shape)}
