"""The Lucos indexing & retrieval API: trusted headers, chunk upload, status, retrieval with path filters."""

import hashlib

import httpx
import pytest

from indexer.embed import HashEmbedder
from query.surfaces.app import app
from query.service import Service
from tests.corpus import private_copy
from tests.servers import Server

REPO = "lucos:ws:" + hashlib.sha256(b"/home/dev/shop").hexdigest()[:16]
OTHER = "lucos:ws:" + "0" * 16
HEADERS = {"X-Request-Id": "req-1", "X-Org-Id": "default", "X-User-Id": "u1"}


def chunk(cid, path, content, start=1, source="repo_code", **kw):
    return {
        "chunk_id": cid,
        "chunk_hash": "sha256:" + hashlib.sha256(content.encode()).hexdigest(),
        "file_path": path,
        "start_line": start,
        "end_line": start + content.count("\n"),
        "content": content,
        "source_type": source,
        "language": "typescript",
        **kw,
    }


@pytest.fixture
def client(corpus, tmp_path):
    svc = Service(private_copy(corpus, tmp_path), embedder=HashEmbedder())
    with Server(app(svc, lucos=True)) as url:  # gateway mode: the trusted headers are the whole context
        yield httpx.Client(base_url=f"{url}/api/v1", headers=HEADERS)


def test_require_token_covers_the_lucos_routes_and_pins_the_org(corpus, tmp_path):
    from indexer import tokens as bearer

    cfg = private_copy(corpus, tmp_path)
    default, acme = bearer.mint(cfg.data_dir, "gateway", "default"), bearer.mint(cfg.data_dir, "acme gateway", "acme")
    body = {"repo_id": REPO, "chunks": [chunk("c1", "a.ts", "export const tokenOnly = 1;")]}
    with Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True, lucos=True)) as url:
        c = httpx.Client(base_url=f"{url}/api/v1", headers=HEADERS)
        r = c.post("/indexing/chunks", json=body)  # forged trusted headers alone no longer do
        assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"  # in the contract's shape
        assert "requires 'Authorization: Bearer TOKEN'" in r.json()["message"]
        r = c.post("/indexing/chunks", json=body, headers={"Authorization": "Bearer bdx_forged"})
        assert r.status_code == 401 and "not valid" in r.json()["message"]
        r = c.post("/indexing/chunks", json=body, headers={"Authorization": f"Bearer {acme}"})  # X-Org-Id default
        assert r.status_code == 403 and r.json()["code"] == "ORG_FORBIDDEN"
        ok = c.post("/indexing/chunks", json=body, headers={"Authorization": f"Bearer {default}"})
        assert ok.status_code == 200 and ok.json()["counts"]["indexed"] == 1
        found = c.post(
            "/retrieval/search",
            json={"repo_ids": [REPO], "query": "tokenOnly"},
            headers={"Authorization": f"Bearer {default}"},
        ).json()["results"]
        assert [x["chunk_id"] for x in found] == ["c1"]
        assert c.get("/health/").json() == {"status": "ok"}  # a probe needs no token


def test_upload_status_search_delete_flow(client):
    body = {
        "repo_id": REPO,
        "commit_sha": "abc123",
        "chunks": [
            chunk(
                "c1",
                "src/auth/middleware.ts",
                "export function authMiddleware(req) {\n  return verifyJwt(req);\n}",
                10,
                symbol_name="authMiddleware",
            ),
            chunk("c2", "docs/auth.md", "# Auth\nTokens are verified by the middleware.", source="repo_doc"),
            chunk("c3", "src/cart/total.ts", "export const cartTotal = (items) => items.length;"),
        ],
    }
    r = client.post("/indexing/chunks", json=body)
    assert r.status_code == 200 and r.json()["counts"] == {"indexed": 3, "skipped": 0, "failed": 0}
    assert r.json()["request_id"] == "req-1"
    again = client.post("/indexing/chunks", json=body).json()["counts"]
    assert again == {"indexed": 0, "skipped": 3, "failed": 0}  # dedup by chunk_hash
    status = client.get("/indexing/status", params={"repo_id": REPO}).json()
    assert status["state"] == "ready" and status["chunks_total"] == 3 and status["files_total"] == 3
    found = client.post(
        "/retrieval/search",
        json={"repo_ids": [REPO], "query": "auth middleware verifyJwt", "top_k": 5, "filters": {"paths": ["src/**"]}},
    ).json()["results"]
    assert found[0]["file_path"] == "src/auth/middleware.ts" and found[0]["chunk_id"] == "c1"
    assert found[0]["start_line"] == 10 and found[0]["source_type"] == "repo_code"
    assert all(x["file_path"].startswith("src/") for x in found)
    client.post("/indexing/chunks", json={"repo_id": REPO, "chunks": [], "deleted_chunk_ids": ["c1"]})
    gone = client.post("/retrieval/search", json={"repo_ids": [REPO], "query": "auth middleware"}).json()["results"]
    assert "c1" not in [x["chunk_id"] for x in gone]


def test_trusted_headers_are_required_and_scope_everything(client):
    r = httpx.post(
        f"{str(client.base_url).rstrip('/')}/indexing/chunks",
        json={"repo_id": REPO, "chunks": []},
        headers={"X-Org-Id": "default"},
    )
    assert r.status_code == 401 and r.json()["code"] == "TRUSTED_CONTEXT_REQUIRED"
    client.post(
        "/indexing/chunks", json={"repo_id": REPO, "chunks": [chunk("c1", "a.ts", "export const secretSauce = 1;")]}
    )
    other_org = client.post(
        "/retrieval/search", headers={**HEADERS, "X-Org-Id": "acme"}, json={"repo_ids": [REPO], "query": "secretSauce"}
    ).json()["results"]
    assert other_org == []
    team = {**HEADERS, "X-Repo-Ids": OTHER}
    r = client.post("/retrieval/search", headers=team, json={"repo_ids": [REPO], "query": "secretSauce"})
    assert r.status_code == 403
    assert client.get("/indexing/status", params={"repo_id": REPO}, headers=team).status_code == 403


@pytest.mark.parametrize(
    "body,message",
    [
        ({"repo_id": "github:acme/api", "chunks": []}, "lucos:ws:"),
        ({"repo_id": REPO, "chunks": [{"chunk_id": "x"}]}, "chunks[0].chunk_hash is required"),
        ({"repo_id": REPO, "chunks": [chunk("x", "a.ts", "a", source="binary")]}, "source_type must be"),
        ({"repo_id": REPO, "chunks": [chunk("x", "../a.ts", "a")]}, "repo-relative"),
        ({"repo_id": REPO, "chunks": [chunk(str(i), "a.ts", "a") for i in range(201)]}, "at most 200"),
    ],
)
def test_invalid_payloads_are_400(client, body, message):
    r = client.post("/indexing/chunks", json=body)
    assert r.status_code == 400 and r.json()["code"] == "INVALID_PAYLOAD" and message in r.json()["message"]


def test_oversized_and_secret_chunks_fail_individually(client):
    r = client.post(
        "/indexing/chunks",
        json={
            "repo_id": REPO,
            "chunks": [
                chunk("big", "a.ts", "x" * (64 * 1024 + 1)),
                chunk("key", "b.ts", 'const k = "AKIAABCDEFGHIJKLMNOP";'),
                chunk("ok", "c.ts", "export const fine = 1;"),
            ],
        },
    )
    assert r.json()["counts"] == {"indexed": 1, "skipped": 0, "failed": 2}


def test_health_and_version(client):
    assert httpx.get(f"{str(client.base_url).rstrip('/')}/health/").json() == {"status": "ok"}
    assert httpx.get(f"{str(client.base_url).rstrip('/')}/version").json()["version"]
    assert client.get("/indexing/status", params={"repo_id": OTHER}).json()["state"] == "pending"


def test_pushed_chunks_survive_a_restart_and_big_bodies_are_413(corpus, tmp_path):
    cfg = private_copy(corpus, tmp_path)
    with Server(app(Service(cfg, embedder=HashEmbedder()), lucos=True)) as url:
        c = httpx.Client(base_url=f"{url}/api/v1", headers=HEADERS)
        c.post("/indexing/chunks", json={"repo_id": REPO, "chunks": [chunk("k", "k.ts", "export const kept = 1;")]})
        huge = c.post(
            "/indexing/chunks", content=b"{" + b" " * (1024 * 1024) + b"}", headers={"Content-Type": "application/json"}
        )
        assert huge.status_code == 413
    with Server(app(Service(cfg, embedder=HashEmbedder()), lucos=True)) as url:  # a new process, same data dir
        c = httpx.Client(base_url=f"{url}/api/v1", headers=HEADERS)
        found = c.post("/retrieval/search", json={"repo_ids": [REPO], "query": "kept"}).json()["results"]
        assert [x["chunk_id"] for x in found] == ["k"]
