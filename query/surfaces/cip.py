"""The Codebase Index Protocol (shared/seeds/codebase-index-protocol.md) under /codebase-index.

A client syncs file hashes, pushes the chunks of changed files, and searches: here it searches the
snapshot and its own pushed chunks together, its pushed or removed paths shadowing the committed
ones inside the query. Pushed chunks live per (org, user) in the pushed-chunk store.

Auth: HS256 JWTs (algorithm pinned, `exp`, `iat`, `username` required) signed with the configured
secret; 401 for a missing, malformed or expired token, 403 for a user outside the allowed list.
Tokens come from `blobdex token mint --jwt`, from /auth/github/refresh, or from the GitHub flow
(/auth/github/start -> provider -> /auth/github/callback), whose endpoints are configurable.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import anyio
import httpx
import jwt
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route

from indexer.config import Config
from indexer.errors import BlobdexError
from query.surfaces import payload
from query.surfaces.guard import is_local
from query.overlays.pushed import PushedChunk
from query.search import MAX_LIMIT, Overlay, SearchRequest, search, search_overlay

ACCESS_TTL_SECONDS = 3600
REFRESH_TTL_SECONDS = 30 * 24 * 3600
STATE_TTL_SECONDS = 600
ALGORITHM = "HS256"
SNIPPET_LINES = 15
MAX_CHUNKS = 1000
MAX_LINE = 10_000_000


@dataclass(frozen=True)
class AuthSettings:
    secret: str | None
    allowed_users: frozenset = frozenset()  # empty: every authenticated user
    org: str = "default"
    github_client_id: str | None = None
    github_client_secret: str | None = None
    github_authorize_url: str = "https://github.com/login/oauth/authorize"
    github_token_url: str = "https://github.com/login/oauth/access_token"
    github_user_url: str = "https://api.github.com/user"

    @classmethod
    def from_env(cls, raw: dict | None = None) -> "AuthSettings":
        raw = raw or {}
        return cls(
            secret=os.environ.get("BLOBDEX_JWT_SECRET") or raw.get("jwt_secret"),
            allowed_users=frozenset(raw.get("jwt_users", [])),
            org=raw.get("jwt_org", "default"),
            github_client_id=os.environ.get("BLOBDEX_GITHUB_CLIENT_ID") or raw.get("github_client_id"),
            github_client_secret=os.environ.get("BLOBDEX_GITHUB_CLIENT_SECRET"),
            github_authorize_url=raw.get("github_authorize_url", cls.github_authorize_url),
            github_token_url=raw.get("github_token_url", cls.github_token_url),
            github_user_url=raw.get("github_user_url", cls.github_user_url),
        )


def load_settings(cfg: Config) -> AuthSettings:
    """Auth settings from the environment over the config file's jwt_* / github_* keys (checked when the
    config was loaded: the one parser of blobdex.toml)."""
    return AuthSettings.from_env(cfg.protocol_auth)


class ProtocolError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def mint(secret: str, username: str, ttl: int = ACCESS_TTL_SECONDS, kind: str = "access") -> str:
    now = int(time.time())
    return jwt.encode({"username": username, "iat": now, "exp": now + ttl, "typ": kind}, secret, algorithm=ALGORITHM)


def verify(settings: AuthSettings, token: str | None, kind: str = "access") -> str:
    """The username a valid token names; ProtocolError 401/403 otherwise."""
    if not settings.secret:
        raise ProtocolError(
            401,
            "no JWT secret is configured: set BLOBDEX_JWT_SECRET (or jwt_secret in "
            "blobdex.toml) and mint tokens with 'blobdex token mint --jwt --user NAME'",
        )
    if not token:
        raise ProtocolError(401, "missing bearer token")
    try:
        claims = jwt.decode(
            token, settings.secret, algorithms=[ALGORITHM], options={"require": ["exp", "iat", "username"]}
        )
    except jwt.ExpiredSignatureError:
        raise ProtocolError(401, "token expired: refresh it") from None
    except jwt.PyJWTError as exc:
        raise ProtocolError(401, f"invalid token: {exc}") from None
    if claims.get("typ", "access") != kind or not isinstance(claims["username"], str):
        raise ProtocolError(401, f"not an {kind} token")
    if settings.allowed_users and claims["username"] not in settings.allowed_users:
        raise ProtocolError(403, f"user {claims['username']!r} is not allowed here")
    return claims["username"]


def _loopback(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and parts.hostname is not None and is_local(parts.hostname)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse(
        {
            "message": f"{request.method} {request.url.path}: "
            f"{'no such route' if exc.status_code == 404 else exc.detail}"
        },
        status_code=exc.status_code,
    )


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"message": "the server failed on this request; see its log"}, status_code=500)


def app(service, settings: AuthSettings) -> Starlette:
    def handle(fn, auth: bool = True):
        async def endpoint(request: Request):
            try:
                user = None
                if auth:
                    header = request.headers.get("authorization", "")
                    user = verify(settings, header[7:].strip() if header.lower().startswith("bearer ") else None)
                return await fn(request, user)
            except ProtocolError as exc:
                return JSONResponse({"message": str(exc)}, status_code=exc.status)
            except BlobdexError as exc:
                return JSONResponse({"message": str(exc)}, status_code=400)

        return endpoint

    async def body(request: Request) -> dict:
        try:
            return payload.parse(await request.body())
        except payload.PayloadError as exc:
            raise ProtocolError(400, str(exc)) from None

    def space(user: str) -> str:
        return f"cip:{user}"

    def committed(repo: str) -> dict[str, set[str]]:
        """path -> sha256 of the committed versions blobdex indexed for this repo (every ref)."""
        import pyarrow.compute as pc

        from indexer.snapshot import read_graph

        reader = service.reader()
        files = read_graph(reader.path, "files", columns=["org", "repo", "path", "sha256"])
        files = files.filter(pc.and_(pc.equal(files["org"], settings.org), pc.equal(files["repo"], repo)))
        out: dict[str, set[str]] = {}
        for path, digest in zip(files.column("path").to_pylist(), files.column("sha256").to_pylist()):
            out.setdefault(path, set()).add(digest)
        return out

    def _str(d: dict, key: str, where: str) -> str:
        if not isinstance(d.get(key), str) or not d[key]:
            raise ProtocolError(400, f"{where}.{key} must be a non-empty string")
        return d[key]

    async def sync(request: Request, user: str):
        d = await body(request)
        repos = d.get("repos")
        if not isinstance(repos, list):
            raise ProtocolError(400, "repos must be an array")
        store, changed, removed = service.pushed, [], []
        for n, r in enumerate(repos):
            if not isinstance(r, dict):
                raise ProtocolError(400, f"repos[{n}] must be an object")
            name, root = _str(r, "name", f"repos[{n}]"), _str(r, "rootHash", f"repos[{n}]")
            files = r.get("files")
            if files is not None and (
                not isinstance(files, list)
                or not all(
                    isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("hash"), str)
                    for f in files
                )
            ):
                raise ProtocolError(400, f"repos[{n}].files must be an array of {{path, hash}}")
            if store.get_state(settings.org, space(user), name, "root") == root:
                continue  # unchanged since the last complete sync: the cheap path
            have = committed(name)
            pushed = store.paths(settings.org, space(user), name)
            if files is None:
                todo = sorted(set(have) | pushed)
                listed = set(todo)
            else:
                listed = {f["path"] for f in files}
                todo = []
                for f in files:
                    indexed = store.get_state(settings.org, space(user), name, f"file:{f['path']}")
                    if f["hash"] not in have.get(f["path"], set()) and f["hash"] != indexed:
                        todo.append(f["path"])
                        store.set_state(settings.org, space(user), name, f"pending:{f['path']}", f["hash"])
            gone = sorted((pushed | set(have)) - listed)
            store.delete_paths(settings.org, space(user), name, gone)
            for path in gone:
                store.set_state(settings.org, space(user), name, f"shadow:{path}", "1")
            changed += [{"repo": name, "path": p} for p in todo]
            removed += [{"repo": name, "path": p} for p in gone]
            if not todo:
                store.set_state(settings.org, space(user), name, "root", root)
        return JSONResponse({"changed": changed, "removed": removed})

    async def index(request: Request, user: str):
        d = await body(request)
        raw, remove = d.get("chunks"), d.get("remove", [])
        if not isinstance(raw, list) or not isinstance(remove, list):
            raise ProtocolError(400, "chunks (and remove) must be arrays")
        if len(raw) > MAX_CHUNKS:
            raise ProtocolError(413, f"{len(raw)} chunks in one request; send at most {MAX_CHUNKS}")
        chunks = []
        for n, c in enumerate(raw):
            if not isinstance(c, dict):
                raise ProtocolError(400, f"chunks[{n}] must be an object")
            repo, path = _str(c, "repo", f"chunks[{n}]"), _str(c, "path", f"chunks[{n}]")
            content, symbol = c.get("content"), c.get("symbol")
            if not isinstance(content, str) or not isinstance(symbol, str) or not isinstance(c.get("lang"), str):
                raise ProtocolError(400, f"chunks[{n}] needs string symbol, lang and content")
            if path.startswith("/") or ".." in path.split("/"):
                raise ProtocolError(400, f"chunks[{n}].path must be repo-relative")
            start, end = c.get("lineStart", 1), c.get("lineEnd", c.get("lineStart", 1) + content.count("\n"))
            if not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_LINE for x in (start, end)):
                raise ProtocolError(400, f"chunks[{n}].lineStart/lineEnd must be integers from 1 to {MAX_LINE}")
            chunks.append(
                PushedChunk(
                    repo,
                    f"{path}#{symbol}",
                    "sha256:" + hashlib.sha256(content.encode()).hexdigest(),
                    path,
                    c["lang"],
                    symbol,
                    start,
                    max(end, start),
                    content,
                )
            )
        store = service.pushed
        org, sp = settings.org, space(user)
        for n, r in enumerate(remove):
            if not isinstance(r, dict) or not isinstance(r.get("repo"), str) or not isinstance(r.get("path"), str):
                raise ProtocolError(400, f"remove[{n}] must be {{repo, path}}")
            store.delete_paths(org, sp, r["repo"], [r["path"]])
            store.set_state(org, sp, r["repo"], f"shadow:{r['path']}", "1")
        store.replace_paths(org, sp, chunks)  # upsert by (repo, path, symbol): a re-sent file replaces its chunks
        counts = await anyio.to_thread.run_sync(store.upsert, org, sp, chunks, service.embedder)
        for repo, path in {(c.repo, c.path) for c in chunks}:
            pending = store.get_state(org, sp, repo, f"pending:{path}")
            if pending:
                store.set_state(org, sp, repo, f"file:{path}", pending)
        return JSONResponse({"indexed": counts["indexed"] + counts["skipped"]})

    async def do_search(request: Request, user: str):
        d = await body(request)
        query = d.get("query")
        if not isinstance(query, str):
            raise ProtocolError(400, "query must be a string")
        repo, lang, limit = d.get("repo"), d.get("lang"), d.get("limit", 10)
        if repo is not None and not isinstance(repo, str) or lang is not None and not isinstance(lang, str):
            raise ProtocolError(400, "repo and lang must be strings")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ProtocolError(400, f"limit must be an integer from 1 to {MAX_LIMIT}")
        if not query.strip():  # the contract's schema allows "": nothing asked, nothing found
            return JSONResponse({"results": []})
        org, sp = settings.org, space(user)
        chunks, vectors, _ = service.pushed.overlay(org, sp, (repo,) if repo else ())
        shadowed = {(r, p) for r, p in ((c.repo, c.path) for c in chunks)}
        shadowed |= {(r, k[len("shadow:") :]) for r, k in service.pushed.keys(org, sp, "shadow:")}
        overlay = Overlay(sp, frozenset(shadowed), chunks, vectors)
        reader = service.reader()
        known = {r.name for r in reader.manifest.repos if r.org == org}
        req = SearchRequest(query, org, (repo,) if repo else (), (lang,) if lang else (), limit=limit)

        def run():
            if repo and repo not in known:
                return search_overlay(service.embedder, req, overlay)
            hits = search(reader, service.embedder, req, overlay)
            qvec = service.embedder.embed([query])[0]
            return [
                (h, float(reader.vectors[h.row] @ qvec) if h.row >= 0 else h.signals.get("vector_score") or 0.0)
                for h in hits
            ]

        found = await anyio.to_thread.run_sync(run)
        results = []
        for h, score in found:
            text = h.text if h.uncommitted else reader.row(h.row)["text"]
            results.append(
                {
                    "repo": h.repo,
                    "path": h.path,
                    "symbol": h.symbol,
                    "lang": h.lang,
                    "snippet": "\n".join(text.split("\n")[:SNIPPET_LINES]),
                    "score": round(score, 4),
                    "lineStart": h.line_start,
                    "lineEnd": h.line_end,
                }
            )
        return JSONResponse({"results": results})

    async def start(request: Request, _user):
        redirect = request.query_params.get("redirect_url", "")
        if not _loopback(redirect):
            raise ProtocolError(400, "redirect_url must be a local http URL (127.0.0.1 or localhost)")
        if not settings.secret or not settings.github_client_id:
            raise ProtocolError(
                401,
                "GitHub sign-in is not configured: set BLOBDEX_JWT_SECRET, "
                "BLOBDEX_GITHUB_CLIENT_ID and BLOBDEX_GITHUB_CLIENT_SECRET",
            )
        state = jwt.encode(
            {"redirect_url": redirect, "nonce": secrets.token_hex(8), "exp": int(time.time()) + STATE_TTL_SECONDS},
            settings.secret,
            algorithm=ALGORITHM,
        )
        callback = str(request.url_for("github_callback"))
        return RedirectResponse(
            f"{settings.github_authorize_url}?"
            + urlencode(
                {"client_id": settings.github_client_id, "redirect_uri": callback, "state": state, "scope": "read:user"}
            )
        )

    async def callback(request: Request, _user):
        try:
            state = jwt.decode(
                request.query_params.get("state", ""),
                settings.secret or "",
                algorithms=[ALGORITHM],
                options={"require": ["exp"]},
            )
        except jwt.PyJWTError:
            raise ProtocolError(401, "invalid or expired sign-in state: start again") from None
        async with httpx.AsyncClient(timeout=20) as client:
            token = (
                (
                    await client.post(
                        settings.github_token_url,
                        headers={"Accept": "application/json"},
                        data={
                            "client_id": settings.github_client_id,
                            "client_secret": settings.github_client_secret,
                            "code": request.query_params.get("code", ""),
                        },
                    )
                )
                .json()
                .get("access_token")
            )
            if not token:
                raise ProtocolError(401, "the provider refused the sign-in code")
            login = (
                (await client.get(settings.github_user_url, headers={"Authorization": f"Bearer {token}"}))
                .json()
                .get("login")
            )
        if not login:
            raise ProtocolError(401, "the provider returned no user")
        if settings.allowed_users and login not in settings.allowed_users:
            raise ProtocolError(403, f"user {login!r} is not allowed here")
        query = urlencode(
            {
                "token": mint(settings.secret, login),
                "refresh_token": mint(settings.secret, login, REFRESH_TTL_SECONDS, "refresh"),
            }
        )
        return RedirectResponse(f"{state['redirect_url']}?{query}")

    async def refresh(request: Request, _user):
        d = await body(request)
        user = verify(settings, d.get("refresh_token") if isinstance(d.get("refresh_token"), str) else None, "refresh")
        return JSONResponse(
            {
                "access_token": mint(settings.secret, user),
                "refresh_token": mint(settings.secret, user, REFRESH_TTL_SECONDS, "refresh"),
                "expires_in": ACCESS_TTL_SECONDS,
            }
        )

    return Starlette(
        routes=[
            Route("/sync", handle(sync), methods=["POST"]),
            Route("/index", handle(index), methods=["POST"]),
            Route("/search", handle(do_search), methods=["POST"]),
            Route("/auth/github/start", handle(start, auth=False)),
            Route("/auth/github/callback", handle(callback, auth=False), name="github_callback"),
            Route("/auth/github/refresh", handle(refresh, auth=False), methods=["POST"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal},
    )
