"""Bearer tokens: minted once, stored only as sha256 in `<data_dir>/tokens.json`. A read token names the org its
requests run in (the query server); an admin token works the control API of `blobdex webhooks --control` and
nothing else, and a read token never works it."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

from indexer.config import check_name
from indexer.snapshot import now_iso

TOKENS_FILE = "tokens.json"
PREFIX = "bdx_"


def _path(data_dir: Path) -> Path:
    return data_dir / TOKENS_FILE


def _load(data_dir: Path) -> list[dict]:
    try:
        return json.loads(_path(data_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


READ, ADMIN = "read", "admin"  # a token's scope; a row without one is a read token (minted before scopes)


def mint(data_dir: Path, name: str, org: str, scope: str = READ) -> str:
    """A new token for `org` (an admin token's org is the default for repos it adds); the plaintext is returned
    once and never stored."""
    check_name("org", org)
    token = PREFIX + secrets.token_urlsafe(32)
    row = {"id": token[: len(PREFIX) + 6], "name": name, "org": org, "sha256": _digest(token), "created_at": now_iso()}
    rows = _load(data_dir) + [{**row, "scope": scope}]
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = _path(data_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, _path(data_dir))
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
        _path(data_dir).write_text(json.dumps(kept, indent=1), encoding="utf-8")
    return len(kept) != len(rows)
