"""Session overlays: uncommitted edits searchable in one session, shadowing inside the query."""

import asyncio
import json
import time

import pytest
from mcp import Client

from indexer.embed import HashEmbedder
from indexer.snapshot import open_manifest
from query.surfaces.mcp import build
from query.overlays.sessions import OverlayError, OverlayStore, git_blob_id
from query.search import SearchRequest
from query.service import Service
from tests.corpus import RENEW_PY, api_files, build_corpus

EDITED = RENEW_PY.replace(b"def cancel(self, subscription):", b"def pause_subscription(self, subscription):").decode()


@pytest.fixture
def service(tmp_path):
    built = build_corpus(tmp_path, {"api": api_files(), "acme/api": {"x.py": b"def acme_thing():\n    return 1\n"}})
    return Service(built.cfg, embedder=HashEmbedder())


def paths(service, query, session=None, **kw):
    _, hits = service.search(SearchRequest(query=query, limit=50, **kw), session)
    return [(h.path, h.uncommitted, h.symbol) for _, h in hits]


def test_session_edits_are_searched_and_deleted_files_shadowed_inside_the_query(service):
    before = open_manifest(service.cfg.data_dir)[1].to_json()
    result = service.sync_workspace(
        "default", "fix-1", "api", {"src/billing/renew.py": EDITED}, ["src/billing/invoice.py"]
    )
    assert result.chunks > 0 and result.deleted == 1
    with_session = paths(service, "pause_subscription total_with_tax Invoice", "fix-1")
    assert ("src/billing/renew.py", True, "Billing.pause_subscription") in with_session
    assert not any(p == "src/billing/invoice.py" for p, _, _ in with_session)  # deleted: never its committed chunks
    assert not any(p == "src/billing/renew.py" and not u for p, u, _ in with_session)  # edited: only the edit
    without = paths(service, "pause_subscription total_with_tax Invoice cancel")
    assert any(p == "src/billing/invoice.py" for p, _, _ in without)
    assert not any(u for _, u, _ in without) and ("src/billing/renew.py", False, "Billing.cancel") in without
    assert open_manifest(service.cfg.data_dir)[1].to_json() == before  # committed counts untouched


def test_overlay_hits_carry_git_identity_and_read_back_by_id(service):
    service.sync_workspace("default", "s", "api", {"notes/todo.md": "# Todo\n\nrefund flow rework\n"}, [])
    _, hits = service.search(SearchRequest(query="refund flow rework"), "s")
    clip, hit = next((c, h) for c, h in hits if h.uncommitted)
    assert hit.blob_id == git_blob_id(b"# Todo\n\nrefund flow rework\n") and hit.ref == "session:s"
    assert service.get_chunk("default", clip).text.endswith("refund flow rework")


def test_sessions_are_per_org_and_end(service):
    service.sync_workspace("default", "s", "api", {"new.py": "def only_in_default_session():\n    pass\n"}, [])
    with pytest.raises(OverlayError, match="no session 's'"):
        service.search(SearchRequest(query="only_in_default_session", org="acme"), "s")
    status = service.session_status("default", "s")
    assert [f["path"] for f in status.files] == ["new.py"] and status.chunks == 1
    assert service.end_session("default", "s") is True
    with pytest.raises(OverlayError, match="no session 's'"):
        service.search(SearchRequest(query="x"), "s")


@pytest.mark.parametrize(
    "files,deleted,message",
    [
        ({"../escape.py": "x"}, [], "invalid path"),
        ({".git/hooks/pre-commit": "x"}, [], "invalid path"),
        ({}, ["/etc/passwd"], "invalid path"),
        ({f"f{i}.py": "x" for i in range(201)}, [], "send at most 200"),
    ],
)
def test_bad_syncs_are_refused_and_write_nothing(service, files, deleted, message):
    with pytest.raises(OverlayError, match=message):
        service.sync_workspace("default", "s", "api", files, deleted)
    with pytest.raises(OverlayError, match="no session"):
        service.session_status("default", "s")


def test_unknown_repo_and_bad_session_id(service):
    with pytest.raises(OverlayError, match="unknown repo 'nope'"):
        service.sync_workspace("default", "s", "nope", {"a.py": "x = 1\n"}, [])
    with pytest.raises(OverlayError, match="invalid session_id"):
        service.sync_workspace("default", "../x", "api", {"a.py": "x = 1\n"}, [])


def test_secrets_in_synced_files_are_held_back(service):
    result = service.sync_workspace(
        "default",
        "s",
        "api",
        {
            "cfg.py": 'def key():\n    return "AKIAABCDEFGHIJKLMNOP"\n\n\ndef fine():\n    return 1\n',
            ".env": "TOKEN=abc\n",
        },
        [],
    )
    assert result.secrets_held_back == 1 and result.skipped == {".env": "credentials"}
    _, hits = service.search(SearchRequest(query="key fine AKIAABCDEFGHIJKLMNOP"), "s")
    assert not any("AKIA" in (h.text or "") for _, h in hits)


def test_idle_sessions_are_swept(tmp_path):
    store = OverlayStore(tmp_path, idle_seconds=60)
    store.sync("default", "old", "api", {"a.md": "# A\n\nx\n"}, [], HashEmbedder(), 1 << 20)
    assert store.sweep(now=time.time() + 30) == 0
    assert store.sweep(now=time.time() + 120) == 1
    assert store.chunks("default", "old")[0] == []


def test_session_tools_over_mcp(service):
    server = build(service)

    async def go():
        async with Client(server) as client:
            synced = await client.call_tool(
                "sync_workspace", {"session_id": "t", "repo": "api", "files": {"src/billing/renew.py": EDITED}}
            )
            found = await client.call_tool("search_code", {"query": "pause_subscription", "session_id": "t"})
            status = await client.call_tool("session_status", {"session_id": "t"})
            ended = await client.call_tool("end_session", {"session_id": "t"})
            gone = await client.call_tool("search_code", {"query": "x", "session_id": "t"})
            return synced, found, status, ended, gone

    synced, found, status, ended, gone = asyncio.run(go())
    assert "search_code(query, session_id='t')" in synced.content[0].text
    assert "• uncommitted" in found.content[0].text and "session=t" in found.content[0].text
    assert json.loads(status.content[0].text)["files"][0]["path"] == "src/billing/renew.py"
    assert "ended" in ended.content[0].text
    assert gone.is_error and "sync_workspace creates one" in gone.content[0].text


def test_session_endpoints_over_http(service):
    import httpx

    from query.surfaces.app import app
    from tests.servers import Server

    with Server(app(service)) as url:
        c = httpx.Client(base_url=url)
        r = c.post(
            "/v1/sessions/h1/sync",
            json={"repo": "api", "files": {"src/billing/renew.py": EDITED}, "deleted": ["web/app.js"]},
        )
        assert r.status_code == 200 and r.json()["chunks"] > 0
        hits = c.post("/v1/search", json={"query": "pause_subscription loadCart", "session_id": "h1"}).json()["hits"]
        assert hits[0]["uncommitted"] and not any(h["path"] == "web/app.js" for h in hits)
        assert c.get("/v1/sessions/h1").json()["files"][1]["deleted"] is True
        assert c.delete("/v1/sessions/h1").json()["ended"] is True
        assert c.get("/v1/sessions/h1").status_code == 404
        bad = c.post("/v1/sessions/h2/sync", json={"repo": "api", "files": {"a.py": 5}})
        assert bad.status_code == 400 and "path -> content" in bad.json()["error"]["message"]
