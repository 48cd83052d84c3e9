"""Who may use the Codebase Index Protocol: its settings, HS256 JWTs (mint, verify) and the GitHub sign-in
(/auth/github/start -> provider -> /auth/github/callback, and /auth/github/refresh), whose endpoints are configurable.

Tokens have the algorithm pinned and `exp`, `iat`, `username` required; 401 for a missing, malformed or expired
token, 403 for a user outside the allowed list. They come from `blobdex token mint --jwt`, from a refresh, or
from the GitHub flow.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import httpx
import jwt
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse

from indexer import credentials
from indexer.config import Config
from query.surfaces import SurfaceError, read_body
from query.surfaces.guard import is_local

ACCESS_TTL_SECONDS = 3600
REFRESH_TTL_SECONDS = 30 * 24 * 3600
STATE_TTL_SECONDS = 600
ALGORITHM = "HS256"
PROVIDER_TIMEOUT_SECONDS = 20


@dataclass(frozen=True, kw_only=True)
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
        """The settings, secrets resolved and checked now (indexer.credentials): a server starts with a key anyone
        could guess (a reference used as written, a short one) never, and says so in one sentence."""
        raw = raw or {}
        secret = credentials.from_environment("BLOBDEX_JWT_SECRET", "jwt_secret")
        if secret is None and raw.get("jwt_secret"):
            secret = credentials.resolve(raw.get("jwt_secret"), "jwt_secret")
        return cls(
            secret=secret,
            allowed_users=frozenset(raw.get("jwt_users", [])),
            org=raw.get("jwt_org", "default"),
            github_client_id=os.environ.get("BLOBDEX_GITHUB_CLIENT_ID") or raw.get("github_client_id"),
            github_client_secret=credentials.from_environment("BLOBDEX_GITHUB_CLIENT_SECRET", "github_client_secret"),
            github_authorize_url=raw.get("github_authorize_url", cls.github_authorize_url),
            github_token_url=raw.get("github_token_url", cls.github_token_url),
            github_user_url=raw.get("github_user_url", cls.github_user_url),
        )


def load_settings(cfg: Config) -> AuthSettings:
    """Auth settings from the environment over the config file's jwt_* / github_* keys (checked when the
    config was loaded: the one parser of blobdex.toml)."""
    return AuthSettings.from_env(cfg.protocol_auth)


def mint(secret: str, username: str, ttl: int = ACCESS_TTL_SECONDS, kind: str = "access") -> str:
    now = int(time.time())
    return jwt.encode({"username": username, "iat": now, "exp": now + ttl, "typ": kind}, secret, algorithm=ALGORITHM)


def verify(settings: AuthSettings, token: str | None, kind: str = "access") -> str:
    """The username a valid token names; SurfaceError 401/403 otherwise."""
    if not settings.secret:
        raise SurfaceError(
            401,
            "no JWT secret is configured: set BLOBDEX_JWT_SECRET (or jwt_secret in "
            "blobdex.toml) and mint tokens with 'blobdex token mint --jwt --user NAME'",
        )
    if not token:
        raise SurfaceError(401, "missing bearer token")
    try:
        claims = jwt.decode(
            token, settings.secret, algorithms=[ALGORITHM], options={"require": ["exp", "iat", "username"]}
        )
    except jwt.ExpiredSignatureError:
        raise SurfaceError(401, "token expired: refresh it") from None
    except jwt.PyJWTError as exc:
        raise SurfaceError(401, f"invalid token: {exc}") from None
    if claims.get("typ", "access") != kind or not isinstance(claims["username"], str):
        raise SurfaceError(401, f"not an {kind} token")
    if settings.allowed_users and claims["username"] not in settings.allowed_users:
        raise SurfaceError(403, f"user {claims['username']!r} is not allowed here")
    return claims["username"]


def user(request: Request) -> str:
    """The user the request's bearer token names (SurfaceError 401/403 otherwise)."""
    header = request.headers.get("authorization", "")
    return verify(request.app.state.settings, header[7:].strip() if header.lower().startswith("bearer ") else None)


def _loopback(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and parts.hostname is not None and is_local(parts.hostname)


def _tokens(settings: AuthSettings, login: str) -> dict:
    return {
        "access_token": mint(settings.secret, login),
        "refresh_token": mint(settings.secret, login, REFRESH_TTL_SECONDS, "refresh"),
    }


async def start(request: Request):
    """Send the browser to the provider, carrying where to come back to in a signed, short-lived state."""
    settings: AuthSettings = request.app.state.settings
    redirect = request.query_params.get("redirect_url", "")
    if not _loopback(redirect):
        raise SurfaceError(400, "redirect_url must be a local http URL (127.0.0.1 or localhost)")
    if not settings.secret or not settings.github_client_id:
        raise SurfaceError(
            401,
            "GitHub sign-in is not configured: set BLOBDEX_JWT_SECRET, "
            "BLOBDEX_GITHUB_CLIENT_ID and BLOBDEX_GITHUB_CLIENT_SECRET",
        )
    state = jwt.encode(
        {"redirect_url": redirect, "nonce": secrets.token_hex(8), "exp": int(time.time()) + STATE_TTL_SECONDS},
        settings.secret,
        algorithm=ALGORITHM,
    )
    query = {
        "client_id": settings.github_client_id,
        "redirect_uri": str(request.url_for("github_callback")),
        "state": state,
        "scope": "read:user",
    }
    return RedirectResponse(f"{settings.github_authorize_url}?{urlencode(query)}")


async def _github_login(settings: AuthSettings, code: str) -> str | None:
    """The provider's login for a sign-in code (SurfaceError 401 when it refuses the code)."""
    async with httpx.AsyncClient(timeout=PROVIDER_TIMEOUT_SECONDS) as client:
        answer = await client.post(
            settings.github_token_url,
            headers={"Accept": "application/json"},
            data={
                "client_id": settings.github_client_id,
                "client_secret": settings.github_client_secret,
                "code": code,
            },
        )
        token = answer.json().get("access_token")
        if not token:
            raise SurfaceError(401, "the provider refused the sign-in code")
        return (
            (await client.get(settings.github_user_url, headers={"Authorization": f"Bearer {token}"}))
            .json()
            .get("login")
        )


async def callback(request: Request):
    """Back from the provider: check the state, ask who signed in, and hand the local client its tokens."""
    settings: AuthSettings = request.app.state.settings
    try:
        state = jwt.decode(
            request.query_params.get("state", ""),
            settings.secret or "",
            algorithms=[ALGORITHM],
            options={"require": ["exp"]},
        )
    except jwt.PyJWTError:
        raise SurfaceError(401, "invalid or expired sign-in state: start again") from None
    login = await _github_login(settings, request.query_params.get("code", ""))
    if not login:
        raise SurfaceError(401, "the provider returned no user")
    if settings.allowed_users and login not in settings.allowed_users:
        raise SurfaceError(403, f"user {login!r} is not allowed here")
    tokens = _tokens(settings, login)
    query = urlencode({"token": tokens["access_token"], "refresh_token": tokens["refresh_token"]})
    return RedirectResponse(f"{state['redirect_url']}?{query}")


async def refresh(request: Request):
    settings: AuthSettings = request.app.state.settings
    d = await read_body(request)
    token = d.get("refresh_token") if isinstance(d.get("refresh_token"), str) else None
    login = verify(settings, token, "refresh")
    return JSONResponse({**_tokens(settings, login), "expires_in": ACCESS_TTL_SECONDS})
