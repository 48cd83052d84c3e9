"""Secret settings resolve one way (indexer.credentials): the file names them by reference, a reference is never a
key, keys that sign have a minimum length, and a credential goes only to the host it was configured for. The
second reliability review signed Codebase Index Protocol tokens with the public string "env:JWT_SECRET", which a
`jwt_secret = "env:JWT_SECRET"` line had made the key (B3)."""

from __future__ import annotations

import base64
import re
import threading
from dataclasses import replace
from wsgiref.simple_server import make_server

import httpx
import pytest
from dulwich.server import DictBackend
from dulwich.web import make_wsgi_chain

from indexer import config as configmod
from indexer import credentials
from indexer.addresses import store_url_problem
from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from indexer.mirror import fetch
from query.service import Service
from query.surfaces.app import app
from query.surfaces.cip_auth import load_settings, mint
from tests import gitrepo
from tests.corpus import private_copy
from tests.servers import QuietHandler, Server

KEY = "k3y-for-signing-cip-tokens-0123456789abcdef"


@pytest.mark.filterwarnings("ignore:The HMAC key is 14 bytes")  # the forged token's key is short on purpose
def test_a_jwt_secret_reference_is_resolved_and_the_reference_itself_signs_nothing(corpus, tmp_path, monkeypatch):
    monkeypatch.delenv("BLOBDEX_JWT_SECRET", raising=False)
    monkeypatch.setenv("JWT_SECRET", KEY)
    cfg = replace(private_copy(corpus, tmp_path), protocol_auth={"jwt_secret": "env:JWT_SECRET"})
    with Server(app(Service(cfg, embedder=HashEmbedder()))) as url:
        search = f"{url}/codebase-index/search"
        forged = httpx.post(
            search, json={"query": "renew"}, headers={"Authorization": f"Bearer {mint('env:JWT_SECRET', 'alice')}"}
        )
        assert forged.status_code == 401
        signed = httpx.post(search, json={"query": "renew"}, headers={"Authorization": f"Bearer {mint(KEY, 'alice')}"})
        assert signed.status_code == 200


@pytest.mark.parametrize(
    "environment, phrase",
    [
        ({"BLOBDEX_JWT_SECRET": "env:JWT_SECRET"}, "holds a reference (env:…), not a secret"),
        ({"BLOBDEX_JWT_SECRET": "short"}, "is 5 bytes; it must be at least 32 random bytes"),
        ({"BLOBDEX_GITHUB_CLIENT_SECRET": "file:/run/secret"}, "holds a reference (file:…), not a secret"),
    ],
)
def test_a_secret_in_the_environment_that_is_a_reference_or_short_stops_the_server(
    two_repos, blobdex, monkeypatch, environment, phrase
):
    cfg, _, _ = two_repos
    blobdex("--config", cfg.path, "index")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    started = blobdex("--config", cfg.path, "serve", "--port", "1")
    assert started.code == 2 and phrase in started.err and "Traceback" not in started.err
    assert started.err.count("\n") == 1 and "short" not in started.err.replace("is 5 bytes", "")


def test_a_jwt_secret_file_names_the_key_and_a_literal_in_the_file_is_refused_unshown(tmp_path, monkeypatch):
    monkeypatch.delenv("BLOBDEX_JWT_SECRET", raising=False)
    key = tmp_path / "jwt.key"
    key.write_text(KEY + "\n")
    path = tmp_path / "blobdex.toml"
    path.write_text(f'jwt_secret = "file:{key}"\n', encoding="utf-8")
    assert load_settings(configmod.load(path)).secret == KEY
    path.write_text(f'jwt_secret = "{KEY}"\n', encoding="utf-8")
    with pytest.raises(configmod.ConfigError, match="`jwt_secret` is not a reference") as err:
        configmod.load(path)
    assert KEY not in str(err.value)


def test_a_literal_repo_credential_in_the_file_is_refused_unshown(tmp_path):
    path = tmp_path / "blobdex.toml"
    path.write_text('[[repo]]\nname = "a"\nurl = "https://h/a.git"\ncredential = "ghp_literal_value"\n')
    with pytest.raises(configmod.ConfigError, match="`credential` is not a reference") as err:
        configmod.load(path)
    assert "ghp_literal_value" not in str(err.value)


@pytest.mark.parametrize(
    "reference, value, phrase",
    [
        ("env:WEBHOOK", "", "which is unset or empty"),
        ("env:WEBHOOK", "env:OTHER", "holds a reference (env:…)"),
        ("env:WEBHOOK", "tiny", "is 4 bytes; it must be at least 16"),
        ("file:/nonexistent/blobdex-secret", None, "cannot read '/nonexistent/blobdex-secret'"),
        ("vault:x", None, "not understood"),
    ],
)
def test_every_secret_setting_resolves_through_one_checker(monkeypatch, reference, value, phrase):
    monkeypatch.setenv("WEBHOOK", value or "")
    with pytest.raises(credentials.CredentialError, match=re.escape(phrase)) as err:
        credentials.resolve(reference, "webhook_secret")
    assert str(err.value).startswith("webhook_secret: ")
    monkeypatch.setenv("WEBHOOK", "a-webhook-secret-long-enough")
    assert credentials.resolve("env:WEBHOOK", "webhook_secret") == "a-webhook-secret-long-enough"


def test_a_store_url_with_a_query_string_is_refused_without_being_shown():
    for url in ("s3://bkt/x?X-Amz-Signature=SECRETSIG123", "s3://bkt/x#SECRETSIG123"):
        problem = store_url_problem(url)
        assert problem and "query string" in problem and "SECRETSIG123" not in problem
    assert store_url_problem("s3://bkt/prefix") is None


def test_a_credential_never_follows_a_redirect_to_another_host(tmp_path, monkeypatch):
    """A configured https remote that redirects elsewhere: the other host gets the request, never the password
    (urllib3 drops Authorization on a cross-host redirect; this keeps it so)."""
    upstream = gitrepo.init(tmp_path / "upstream", bare=True)
    head = gitrepo.commit(upstream, {"a.py": b"x = 1\n"})
    git = make_wsgi_chain(DictBackend({"/": upstream}))
    seen = []

    def elsewhere(environ, start_response):
        seen.append(("elsewhere", environ.get("HTTP_AUTHORIZATION")))
        return git(environ, start_response)

    other = make_server("127.0.0.1", 0, elsewhere, handler_class=QuietHandler)

    def configured(environ, start_response):
        seen.append(("configured", environ.get("HTTP_AUTHORIZATION")))
        target = f"http://localhost:{other.server_port}{environ['PATH_INFO']}?{environ.get('QUERY_STRING', '')}"
        start_response("302 Found", [("Location", target)])
        return [b""]

    origin = make_server("127.0.0.1", 0, configured, handler_class=QuietHandler)
    for server in (other, origin):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("GIT_TOKEN", "redirect-probe-token")
    try:
        spec = RepoSpec(name="svc", url=f"http://127.0.0.1:{origin.server_port}/", credential="env:GIT_TOKEN")
        mirror = fetch(tmp_path / "data", spec)
    finally:
        other.shutdown()
        origin.shutdown()
    assert (mirror / "refs" / "heads" / "main").read_text().strip() == head or head
    sent = "Basic " + base64.b64encode(b"git:redirect-probe-token").decode()
    assert ("configured", sent) in seen
    assert [auth for where, auth in seen if where == "elsewhere"] and all(
        auth is None for where, auth in seen if where == "elsewhere"
    )
