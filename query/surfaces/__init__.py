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

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from indexer.errors import BlobdexError
from query.surfaces import payload

log = logging.getLogger(__name__)

INTERNAL_MESSAGE = "the server failed on this request; see its log"
# A contract's error body: (request, HTTP status, message, the contract's error code or None) -> response.
Shape = Callable[[Request, int, str, "str | None"], Response]


class SurfaceError(BlobdexError):
    """A request a contract refuses: the HTTP status, the one-sentence message, and the contract's code if it has
    codes (Lucos, /v1)."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.code = status, code


def endpoint(shape: Shape):
    """Wrap a handler `async (request) -> Response | dict` so every failure answers in `shape` (a dict is JSON)."""

    def wrap(handler: Callable[[Request], Awaitable[Response | dict]]):
        @functools.wraps(handler)
        async def run(request: Request) -> Response:
            try:
                result = await handler(request)
            except BlobdexError as exc:
                return shape(request, exc.status, str(exc), getattr(exc, "code", None))
            except Exception:  # a bug, not the caller's input: logged with its traceback
                log.exception("%s %s failed", request.method, request.url.path)
                return shape(request, 500, INTERNAL_MESSAGE, None)
            return result if isinstance(result, Response) else JSONResponse(result)

        return run

    return wrap


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


async def _unrouted(shape: Shape, request: Request, exc: HTTPException) -> Response:
    what = "no such route" if exc.status_code == 404 else exc.detail
    return shape(request, exc.status_code, f"{request.method} {request.url.path}: {what}", None)


async def _internal(shape: Shape, request: Request, exc: Exception) -> Response:
    return shape(request, 500, INTERNAL_MESSAGE, None)


def route_errors(shape: Shape) -> dict:
    """A contract app's exception handlers: unknown routes and methods, and a failure outside any handler."""
    return {HTTPException: partial(_unrouted, shape), Exception: partial(_internal, shape)}
