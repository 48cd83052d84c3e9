"""Bearer tokens: minted once, stored only as sha256 in `<data_dir>/tokens.json`. A read token names the org its
requests run in (the query server); an admin token works the control API of `blobdex webhooks --control` and
nothing else, inside its org unless it was minted global; a read token never works the control API.

A token's id (what `token list` shows and `token revoke` takes) is random, never a part of the token. The file is
replaced whole (written beside, then renamed), so a reader never sees half of it; a file that is damaged anyway is
one sentence (TokenStoreError) wherever it is read, never a 500."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

from indexer.config import check_name
from indexer.errors import BlobdexError
from indexer.snapshot import now_iso

TOKENS_FILE = "tokens.json"
PREFIX = "bdx_"
ID_PREFIX = "tok_"
READ, ADMIN = "read", "admin"  # a token's scope; a row without one is a read token (minted before scopes)


class TokenStoreError(BlobdexError):
    """The token store cannot be read; no request that needs it can be answered until it is repaired."""

    status = 503


def _path(data_dir: Path) -> Path:
    return data_dir / TOKENS_FILE


def _load(data_dir: Path) -> list[dict]:
    path = _path(data_dir)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TokenStoreError(_damaged(path, exc)) from exc
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and isinstance(r.get("sha256"), str) and isinstance(r.get("id"), str) for r in rows
    ):
        raise TokenStoreError(_damaged(path, "it is not a list of token rows"))
    return rows


def _damaged(path: Path, why) -> str:
    return (
        f"the token store {str(path)!r} is damaged ({why}): restore it from a backup, or move it aside and mint "
        f"the tokens again with 'blobdex token mint'; until then no token is accepted"
    )


def _save(data_dir: Path, rows: list[dict]) -> None:
    """Replace the file whole, readable by its owner only."""
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = _path(data_dir).with_suffix(".tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        f.write(json.dumps(rows, indent=1))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, _path(data_dir))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check(data_dir: Path) -> None:
    """Raise TokenStoreError when the store cannot be read (a server says so when it starts)."""
    _load(data_dir)


def mint(data_dir: Path, name: str, org: str, scope: str = READ, every_org: bool = False) -> str:
    """A new token for `org`; an admin token acts inside `org` only, unless `every_org` (a global admin). The
    plaintext is returned once and never stored."""
    check_name("org", org)
    rows = _load(data_dir)
    token = PREFIX + secrets.token_urlsafe(32)
    taken = {r["id"] for r in rows}
    token_id = ID_PREFIX + secrets.token_hex(4)
    while token_id in taken:  # one in 4 billion; never two rows with one id
        token_id = ID_PREFIX + secrets.token_hex(4)
    row = {"id": token_id, "name": name, "org": org, "sha256": _digest(token), "created_at": now_iso(), "scope": scope}
    if scope == ADMIN and every_org:
        row["every_org"] = True
    _save(data_dir, rows + [row])
    return token


def verify(data_dir: Path, token: str, scope: str = READ) -> dict | None:
    """The token's row when it is known and of `scope`, else None (constant-time comparison of the digests)."""
    digest = _digest(token)
    for row in _load(data_dir):
        if secrets.compare_digest(row["sha256"], digest) and row.get("scope", READ) == scope:
            return row
    return None


def listing(data_dir: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "sha256"} for row in _load(data_dir)]


def revoke(data_dir: Path, token_id: str) -> bool:
    rows = _load(data_dir)
    kept = [r for r in rows if r["id"] != token_id]
    if len(kept) != len(rows):
        _save(data_dir, kept)
    return len(kept) != len(rows)
