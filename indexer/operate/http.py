"""What the webhooks process's routes share: the one JSON error body, the error they raise (each with its own
status), a body read with a cap."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse

from indexer.errors import BlobdexError, Refused

log = logging.getLogger(__name__)

INTERNAL_MESSAGE = "the server failed on this request; see its log"
# The code of an error that names none, by its status: the body always carries one.
CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    503: "unavailable",
}


class HookError(Refused):
    """A delivery or a control request that is refused: its HTTP status, the sentence, and the error's code."""


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def refusal(exc: BlobdexError) -> JSONResponse:
    """Any error as the one body, with its own status (ConfigError 400, SnapshotError's, a HookError's...)."""
    code = getattr(exc, "code", None) or CODES.get(exc.status, "bad_request")
    return error(exc.status, code, exc.said("http"))


def internal(request: Request) -> JSONResponse:
    """A bug, not the caller's input: logged with its traceback, answered without it."""
    log.exception("%s %s failed", request.method, request.url.path)
    return error(500, "internal", INTERNAL_MESSAGE)


async def capped_body(request: Request, limit: int) -> bytes:
    """The body, counted as it arrives (a chunked one too): HookError 413 past `limit` bytes."""
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise HookError(413, f"the request's body is over {limit} bytes", "too_large")
        parts.append(part)
    return b"".join(parts)
