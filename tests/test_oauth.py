"""Sign-in an MCP client can discover: the 401 challenge, RFC 9728's metadata, and the whole OAuth flow of the MCP
SDK's own client against an authorization server built from the SDK's own server routes, whose JWTs blobdex
verifies by the issuer's published keys."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken, AuthorizationCode, construct_redirect_uri
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from indexer import tokens as bearer
from indexer.embed import HashEmbedder
from query.service import Service
from query.surfaces.app import app
from tests.corpus import private_copy
from tests.servers import MCP_ACCEPT, MCP_INITIALIZE, Server, free_port, text

REDIRECT = "http://127.0.0.1:1/callback"  # never reached: the test reads the code from the redirect itself


class Issuer:
    """An OAuth authorization server as the SDK builds one (registration, authorize with PKCE, token), approving
    every request at once, and signing its access tokens (RS256 JWTs) with a key it publishes at /jwks."""

    def __init__(self, url: str, audience_of=lambda resource: resource):
        self.url, self.audience_of = url, audience_of
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.clients, self.codes, self.issued = {}, {}, []

    def asgi(self) -> Starlette:
        issuer = AnyHttpUrl(self.url)
        options = ClientRegistrationOptions(enabled=True)
        meta = build_metadata(issuer, None, options, RevocationOptions()).model_dump(mode="json", exclude_none=True)
        meta["issuer"], meta["jwks_uri"] = self.url, self.url + "/jwks"  # the issuer exactly as tokens name it
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))

        async def metadata(_request):
            return JSONResponse(meta)

        async def jwks(_request):
            return JSONResponse({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})

        sdk = [
            r
            for r in create_auth_routes(self, issuer, client_registration_options=options)
            if "well-known" not in r.path
        ]
        return Starlette(
            routes=[Route("/.well-known/oauth-authorization-server", metadata), Route("/jwks", jwks), *sdk]
        )

    # OAuthAuthorizationServerProvider, in memory
    async def get_client(self, client_id):
        return self.clients.get(client_id)

    async def register_client(self, client_info):
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client, params):
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject="alice",
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, code):
        return self.codes.get(code)

    async def exchange_authorization_code(self, client, code):
        del self.codes[code.code]
        now = int(time.time())
        claims = {"iss": self.url, "sub": "alice", "aud": self.audience_of(code.resource), "iat": now, "exp": now + 600}
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "k1"})
        self.issued.append(claims)
        return OAuthToken(access_token=token, token_type="Bearer", expires_in=600)

    async def load_access_token(self, token):
        return AccessToken(token=token, client_id="?", scopes=[])

    async def load_refresh_token(self, client, refresh_token):
        return None

    async def revoke_token(self, token):
        pass


class Memory:
    """The client's token storage."""

    def __init__(self):
        self.tokens = self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


def oauth_client(mcp_url: str) -> OAuthClientProvider:
    """The SDK's OAuth client, its browser step played by following the authorize URL to its redirect."""
    redirected: list[str] = []

    async def redirect_handler(url: str) -> None:
        async with httpx2.AsyncClient() as c:
            redirected.append((await c.get(url)).headers["location"])

    async def callback_handler():
        query = parse_qs(urlsplit(redirected.pop()).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0])

    return OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=OAuthClientMetadata(redirect_uris=[REDIRECT], client_name="test agent"),
        storage=Memory(),
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )


def list_repos(mcp_url: str, auth) -> dict:
    async def go():
        async with Client(streamable_http_client(mcp_url, http_client=httpx2.AsyncClient(auth=auth))) as client:
            return await client.call_tool("list_repos", {})

    return json.loads(text(asyncio.run(go())))


def test_a_401_says_where_sign_in_is_described_and_that_page_is_public(corpus, tmp_path):
    cfg = private_copy(corpus, tmp_path)
    with Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True)) as url:
        refused = httpx.post(f"{url}/mcp", json=MCP_INITIALIZE, headers=MCP_ACCEPT)
        assert refused.status_code == 401
        assert (
            refused.headers["www-authenticate"]
            == f'Bearer resource_metadata="{url}/.well-known/oauth-protected-resource"'
        )
        wrong = httpx.get(f"{url}/v1/repos", headers={"Authorization": "Bearer bdx_wrong"})
        assert wrong.headers["www-authenticate"].startswith('Bearer error="invalid_token", resource_metadata=')
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            doc = httpx.get(url + path)
            assert doc.status_code == 200, path
            # No authorization server is configured: tokens come from `blobdex token mint`, and none is named.
            assert doc.json() == {
                "resource": f"{url}/mcp",
                "bearer_methods_supported": ["header"],
                "resource_name": "blobdex",
            }


def test_an_mcp_client_signs_in_through_the_issuer_a_401_names(corpus, tmp_path):
    issuer = Issuer(f"http://127.0.0.1:{free_port()}")
    cfg = private_copy(corpus, tmp_path)
    cfg = replace(cfg, protocol_auth={**cfg.protocol_auth, "oauth_issuer": issuer.url, "oauth_org": "acme"})
    with (
        Server(issuer.asgi(), port=int(issuer.url.rsplit(":", 1)[1])),
        Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True)) as url,
    ):
        doc = httpx.get(f"{url}/.well-known/oauth-protected-resource").json()
        assert doc["authorization_servers"] == [issuer.url]
        repos = list_repos(f"{url}/mcp", oauth_client(f"{url}/mcp"))
        # The token the SDK's client obtained by itself runs in the configured org, and was meant for this server.
        assert [r["name"] for r in repos["repos"]] == ["api"] and repos["repos"][0]["org"] == "acme"
        assert [c["aud"] for c in issuer.issued] == [f"{url}/mcp"]
        # blobdex's own tokens still work beside the issuer's.
        own = bearer.mint(cfg.data_dir, "ci", "default")
        assert httpx.get(f"{url}/v1/repos", headers={"Authorization": f"Bearer {own}"}).status_code == 200


@pytest.mark.parametrize("forged", ["another key", "another audience", "hs256 with the public key", "expired"])
def test_tokens_the_issuer_did_not_sign_for_this_server_are_refused(corpus, tmp_path, forged):
    issuer = Issuer(f"http://127.0.0.1:{free_port()}")
    cfg = private_copy(corpus, tmp_path)
    cfg = replace(cfg, protocol_auth={**cfg.protocol_auth, "oauth_issuer": issuer.url})
    with (
        Server(issuer.asgi(), port=int(issuer.url.rsplit(":", 1)[1])),
        Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True)) as url,
    ):
        now = int(time.time())
        claims = {"iss": issuer.url, "sub": "mallory", "aud": f"{url}/mcp", "iat": now, "exp": now + 600}
        key = issuer.key
        if forged == "another key":
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif forged == "another audience":
            claims["aud"] = "https://elsewhere.example/mcp"
        elif forged == "expired":
            claims["exp"] = now - 60
        if forged == "hs256 with the public key":
            token = _hmac_token(claims, jwt.algorithms.RSAAlgorithm.to_jwk(issuer.key.public_key()))
        else:
            token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
        refused = httpx.get(f"{url}/v1/repos", headers={"Authorization": f"Bearer {token}"})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "bad_token"
        assert 'error="invalid_token"' in refused.headers["www-authenticate"]


def _hmac_token(claims: dict, secret: str) -> str:
    """An HS256 JWT signed with `secret` by hand (the algorithm-confusion attack PyJWT will not write for us)."""
    import base64
    import hashlib
    import hmac

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def test_an_unreachable_issuer_is_one_sentence_and_a_503(corpus, tmp_path):
    cfg = private_copy(corpus, tmp_path)
    gone = f"http://127.0.0.1:{free_port()}"
    cfg = replace(cfg, protocol_auth={**cfg.protocol_auth, "oauth_issuer": gone})
    with Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True)) as url:
        token = jwt.encode(
            {"iss": gone, "aud": f"{url}/mcp", "exp": int(time.time()) + 60}, "x" * 48, algorithm="HS384"
        )
        # An HMAC token is refused before any key is fetched: only asymmetric algorithms are taken.
        assert httpx.get(f"{url}/v1/repos", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        signed = jwt.encode({"iss": gone, "aud": f"{url}/mcp", "exp": int(time.time()) + 60}, key, algorithm="RS256")
        answer = httpx.get(f"{url}/v1/repos", headers={"Authorization": f"Bearer {signed}"})
        assert answer.status_code == 503
        message = answer.json()["error"]["message"]
        assert message.startswith(f"cannot read the signing keys of the OAuth issuer {gone}") and "\n" not in message


def test_blobdex_toml_names_the_issuer_and_a_misspelt_key_is_refused(tmp_path):
    from indexer.config import ConfigError, load
    from query.surfaces import oauth

    path = tmp_path / "blobdex.toml"
    path.write_text('oauth_issuer = "https://auth.example.com"\noauth_org = "acme"\n')
    issuer = oauth.Issuer.from_config(load(path).protocol_auth)
    assert (issuer.url, issuer.org, issuer.audience) == ("https://auth.example.com", "acme", None)
    path.write_text('oauth_isuer = "https://auth.example.com"\n')
    with pytest.raises(ConfigError, match="oauth_isuer"):
        load(path)
