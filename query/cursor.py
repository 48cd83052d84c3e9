"""Page cursors: an opaque token that says where the next page of an answer starts, so a caller pages through
search_code, grep and list_files without the server keeping state. A cursor names the snapshot it was cut from
and a digest of the request: a page is only ever continued on the same snapshot with the same request, because
another snapshot ranks and orders differently and the pages would skip or repeat rows."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json

from indexer.errors import BlobdexError

MAX_CURSOR_CHARS = 512


class CursorError(BlobdexError):
    """A cursor that cannot continue this request: malformed, of another request, or of an older snapshot."""

    status = 400


class StaleCursor(CursorError):
    """The snapshot the cursor was cut from is no longer served."""

    status = 409


def digest(request: dict) -> str:
    """A short fingerprint of the request's fields (every field but the cursor itself)."""
    text = json.dumps(request, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode(kind: str, snapshot_id: str, request: dict, position) -> str:
    body = json.dumps({"k": kind, "s": snapshot_id, "d": digest(request), "p": position}, separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def decode(cursor: str | None, kind: str, snapshot_id: str, request: dict):
    """The position a cursor continues from (None for no cursor: the first page)."""
    if not cursor:
        return None
    if len(cursor) > MAX_CURSOR_CHARS:
        raise CursorError(f"the cursor is {len(cursor)} characters: pass next_cursor from the previous page as it is")
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        kind_of, snapshot_of, digest_of, position = data["k"], data["s"], data["d"], data["p"]
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise CursorError(
            f"cursor {cursor[:40]!r} is not one blobdex gave for this index: pass next_cursor from the previous page "
            f"as it is"
        ) from None
    if kind_of != kind:
        raise CursorError(f"that cursor continues a {kind_of} answer, not a {kind} one")
    if digest_of != digest(request):
        raise CursorError(
            f"that cursor continues another {kind} request: pass the same arguments as the first page, with the cursor"
        )
    if snapshot_of != snapshot_id:
        raise StaleCursor(
            f"that cursor belongs to snapshot {snapshot_of}, and the index has been updated since (now "
            f"{snapshot_id}); ask again without a cursor: pages of different snapshots would skip or repeat results"
        )
    return position


def offset(cursor: str | None, kind: str, snapshot_id: str, request: dict, most: int) -> int:
    """The row a paged answer continues from (0 for no cursor): `decode`'s position, refused unless it is a whole
    number from 0 to `most`, so a forged cursor cannot size the work a page does."""
    start = decode(cursor, kind, snapshot_id, request)
    if start is not None and (type(start) is not int or not 0 <= start <= most):
        raise CursorError(f"that cursor's position is not one a {kind} page gives: ask again without a cursor")
    return start or 0
