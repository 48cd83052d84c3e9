"""Sign-in an MCP client can discover (the MCP specification's authorization section): RFC 9728's protected
resource metadata, the `WWW-Authenticate: Bearer` challenge every 401 carries, and access tokens of an external
OAuth issuer (JWTs its published keys sign, meant for this server) accepted beside blobdex's own tokens.

Configured with `oauth_issuer` (the authorization server's URL, as its tokens' `iss` names it), optionally
`oauth_audience` (what their `aud` must hold; by default this server's URL or its /mcp endpoint, as RFC 8707's
resource indicator names it) and `oauth_org` (the org such a request runs in).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from dataclasses import dataclass, field

import jwt

from indexer.errors import BlobdexError

log = logging.getLogger(__name__)

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
# Asymmetric algorithms only: an issuer's public key must never be usable as an HMAC secret (algorithm confusion).
ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]
ISSUER_TIMEOUT_SECONDS = 10
MAX_METADATA_BYTES = 256 * 1024


class IssuerUnreachable(BlobdexError):
    """The issuer's metadata or keys could not be read: no token of it can be checked now."""

    status = 503


def base_url(scope) -> str:
    """This server as the client reached it: scheme and Host (the Guard has checked the Host already)."""
    host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
    return f"{scope.get('scheme', 'http')}://{host}"


def metadata_url(scope) -> str:
    return base_url(scope) + METADATA_PATH


def challenge(scope, error: str | None = None) -> str:
    """The WWW-Authenticate value of a 401 (RFC 6750 section 3, RFC 9728 section 5.1)."""
    parts = [f'resource_metadata="{metadata_url(scope)}"']
    if error:
        parts.insert(0, f'error="{error}"')
    return "Bearer " + ", ".join(parts)


@dataclass(kw_only=True)
class Issuer:
    """An external OAuth authorization server whose access tokens this server accepts."""

    url: str
    org: str = "default"
    audience: str | None = None
    _keys: jwt.PyJWKClient | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_config(cls, raw: dict) -> "Issuer | None":
        """The issuer the config's oauth_* keys name, or None without `oauth_issuer`."""
        url = raw.get("oauth_issuer")
        if not url:
            return None
        return cls(url=url, org=raw.get("oauth_org", "default"), audience=raw.get("oauth_audience"))

    def _fetch(self, url: str) -> dict:
        with urllib.request.urlopen(url, timeout=ISSUER_TIMEOUT_SECONDS) as response:  # noqa: S310 (configured)
            return json.loads(response.read(MAX_METADATA_BYTES))

    def keys(self) -> jwt.PyJWKClient:
        """The issuer's signing keys, found through its metadata once (RFC 8414, then OpenID Connect discovery);
        PyJWKClient caches them and fetches again for a key id it has not seen (a rotation)."""
        with self._lock:
            if self._keys is None:
                root, failures = self.url.rstrip("/"), []
                for well_known in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
                    try:
                        jwks_uri = self._fetch(root + well_known).get("jwks_uri")
                    except (OSError, ValueError) as exc:
                        failures.append(f"{root + well_known}: {exc}")
                        continue
                    if jwks_uri:
                        self._keys = jwt.PyJWKClient(jwks_uri, timeout=ISSUER_TIMEOUT_SECONDS)
                        break
                    failures.append(f"{root + well_known} names no jwks_uri")
                else:
                    raise IssuerUnreachable(
                        f"cannot read the signing keys of the OAuth issuer {self.url} ({'; '.join(failures)}); "
                        "check oauth_issuer in blobdex.toml and that the issuer is reachable from this server"
                    )
            return self._keys

    def audiences(self, scope) -> list[str]:
        if self.audience:
            return [self.audience]
        base = base_url(scope)
        return [base, base + "/", base + MCP_PATH]

    def verify(self, token: str, scope) -> dict | None:
        """The grant (org, id) of a valid access token of this issuer meant for this server, else None.
        Blocking on the first call (the keys are fetched): run it off the event loop."""
        try:
            if jwt.get_unverified_header(token).get("alg") not in ALGORITHMS:
                return None
        except jwt.PyJWTError:
            return None
        try:
            key = self.keys().get_signing_key_from_jwt(token).key
        except jwt.PyJWKClientConnectionError as exc:
            raise IssuerUnreachable(f"cannot read the signing keys of the OAuth issuer {self.url}: {exc}") from exc
        except jwt.PyJWKClientError:
            return None  # no key of the issuer signed it
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=ALGORITHMS,
                audience=self.audiences(scope),
                issuer=[self.url, self.url.rstrip("/"), self.url.rstrip("/") + "/"],
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            log.info("an OAuth token was refused: %s", exc)
            return None
        return {"org": self.org, "id": f"oauth:{claims.get('sub', '?')}"}


def metadata(scope, issuer: Issuer | None) -> dict:
    """RFC 9728's document for this server: the resource (its MCP endpoint) and, when one is configured, the
    authorization server that issues tokens for it. Without one, tokens come from `blobdex token mint`."""
    doc = {
        "resource": base_url(scope) + MCP_PATH,
        "bearer_methods_supported": ["header"],
        "resource_name": "blobdex",
    }
    if issuer is not None:
        doc["authorization_servers"] = [issuer.url]
    return doc
