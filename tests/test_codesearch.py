"""The codebase-semantic-search HTTP contract, served from the blobdex index (client flow and validation)."""

import shutil

import httpx
import pytest

from indexer.embed import HashEmbedder
from indexer.mirror import mirror_dir
from query.surfaces.codesearch import ignore_regex
from query.surfaces.app import app
from query.service import Service
from tests.corpus import RENEW_PY, private_copy
from tests.servers import Server


@pytest.fixture(scope="module")
def client(corpus):
    with Server(app(Service(corpus.cfg, embedder=HashEmbedder()))) as url:
        yield httpx.Client(base_url=f"{url}/codesearch")


def test_search_markdown_by_default(client):
    r = client.post("/search", json={"query": "renew_subscription"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/markdown")
    lines = r.text.splitlines()
    assert lines[0] == '# Search: "renew_subscription"'
    assert "top_k: 100" in lines[2] and "min_score_diff: 0.1" in lines[2] and "clip store:" in lines[2]
    assert "---" in lines and "```python" in lines
    caption = next(x for x in lines if x.startswith("api/src/billing/renew.py:10-13"))
    assert "Billing.renew_subscription" in caption and "score: " in caption and "id: " in caption


def test_search_json_echoes_thresholds_and_includes(client):
    data = client.post(
        "/search",
        json={"query": "invoice customer", "format": "json", "min_score_diff": 0.5, "include": ["module", "language"]},
    ).json()["data"]
    assert data["minScoreDiff"] == 0.5 and data["appliedThreshold"] == round(data["maxScore"] - 0.5, 4)
    assert data["includedFields"] == ["module", "language"]
    hit = data["results"][0]
    assert set(hit) == {
        "id",
        "filePath",
        "symbolName",
        "score",
        "startLine",
        "endLine",
        "content",
        "module",
        "language",
    }
    assert 0 <= hit["score"] <= 1 and all(h["score"] >= data["appliedThreshold"] for h in data["results"])
    strict = client.post("/search", json={"query": "invoice customer", "format": "json", "min_score": 0.99}).json()
    assert strict["data"]["minScore"] == 0.99 and strict["data"]["count"] <= strict["data"]["candidatesBeforeFilter"]


def test_ignore_is_applied_before_top_k(client):
    data = client.post(
        "/search",
        json={"query": "invoice customer renew", "format": "json", "top_k": 5, "ignore": ["src/"], "min_score_diff": 1},
    ).json()["data"]
    assert data["results"] and not any(h["filePath"].startswith("api/src/") for h in data["results"])
    assert data["ignored"] == ["src/"] and data["ignoreSource"] == "request"
    assert (
        ignore_regex(["docs/", "*.md", "server/**/README.md", "a_b%"])
        == "^docs/|^.*\\.md$|^server/.*/README\\.md$|^a_b%(/|$)"
    )


@pytest.mark.parametrize(
    "body,message",
    [
        ({"query": "x", "limit": 5}, 'unknown field: "limit" (did you mean "top_k"?)'),
        ({"query": "x", "languge": "go"}, 'did you mean "language"?'),
        ({}, "query is required"),
        ({"query": "x", "top_k": 101}, "top_k must be an integer from 1 to 100"),
        ({"query": "x", "min_score": 0.5, "min_score_diff": 0.1}, "mutually exclusive"),
        ({"query": "x", "min_score": 2}, "min_score must be a finite number in [0, 1]"),
        ({"query": "x", "include": ["path"]}, "include must be an array of: chunkType, module, language"),
        ({"query": "x", "ignore": ["a"] * 21}, "at most 20 patterns"),
        ({"query": "x", "ignore": "docs/"}, "ignore must be an array"),
        ({"query": "x", "format": "xml"}, 'format must be "markdown" or "json"'),
    ],
)
def test_search_validation_is_a_400_naming_the_problem(client, body, message):
    r = client.post("/search", json=body)
    assert r.status_code == 400 and r.json()["success"] is False and message in r.json()["error"]


def test_client_flow_search_clip_read(client):
    first = client.post("/search", json={"query": "renew_subscription", "format": "json"}).json()["data"]["results"]
    hit = next(h for h in first if h["symbolName"] == "Billing.renew_subscription")
    again = client.post("/search", json={"query": "renew_subscription cancel", "format": "json"}).json()
    assert hit["id"] in [h["id"] for h in again["data"]["results"]]  # same chunk, same id
    clip = client.get(f"/clip/{hit['id']}").json()["data"]
    expected = b"".join(RENEW_PY.splitlines(keepends=True)[9:13]).decode()
    assert clip["content"] == expected and clip["totalLines"] == 16 and clip["filePath"] == "api/src/billing/renew.py"
    batch = client.get("/clips", params=[("ids", f"{hit['id']},99999"), ("ids", "abc")]).json()["data"]
    assert (batch["requested"], batch["succeeded"], batch["failed"]) == (3, 1, 2)
    assert batch["results"][1]["error"].startswith("id not found or expired")
    posted = client.post("/clips", json={"ids": [hit["id"]]}).json()["data"]
    assert posted["results"][0]["content"] == expected
    assert client.post("/clips", json={"ids": list(range(501))}).status_code == 400
    wider = client.post("/read", json={"filePath": "api/src/billing/renew.py", "startLine": 8, "endLine": 14}).json()
    assert wider["data"]["content"].startswith('    """Charges customers') and wider["data"]["endLine"] == 14


@pytest.mark.parametrize(
    "body,status",
    [
        ({"filePath": "/etc/passwd", "startLine": 1, "endLine": 2}, 403),
        ({"filePath": "api/../../etc/passwd", "startLine": 1, "endLine": 2}, 403),
        ({"filePath": "api/missing.py", "startLine": 1, "endLine": 2}, 404),
        ({"filePath": "nope/x.py", "startLine": 1, "endLine": 2}, 404),
        ({"filePath": "api/src/billing/renew.py", "startLine": 5, "endLine": 2}, 400),
    ],
)
def test_read_errors(client, body, status):
    r = client.post("/read", json=body)
    assert r.status_code == status and r.json()["success"] is False


def test_read_caps_ranges_at_500_lines(client):
    data = client.post("/read", json={"filePath": "api/src/billing/renew.py", "startLine": 1, "endLine": 900}).json()
    assert data["data"]["rangeRequested"] == {"startLine": 1, "endLine": 900} and data["data"]["endLine"] == 16


def test_health_and_stats(client):
    assert client.get("/health").json() == {"success": True, "data": {"status": "ok"}}
    stats = client.get("/stats").json()["data"]
    assert stats["repos"] == 2 and stats["chunks"] > 0


def test_clip_ids_of_another_org_are_plainly_not_found(corpus, tmp_path):
    from indexer import tokens as bearer

    cfg = private_copy(corpus, tmp_path)
    default, acme = bearer.mint(cfg.data_dir, "default", "default"), bearer.mint(cfg.data_dir, "acme", "acme")
    with Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True)) as url:
        ours = httpx.Client(base_url=f"{url}/codesearch", headers={"Authorization": f"Bearer {default}"})
        theirs = httpx.Client(base_url=f"{url}/codesearch", headers={"Authorization": f"Bearer {acme}"})
        hits = ours.post(
            "/search", json={"query": "renew_subscription drain_queue", "format": "json", "min_score": 0}
        ).json()["data"]["results"]
        ids = [h["id"] for h in hits]
        assert {h["filePath"].split("/")[0] for h in hits} == {"api", "tools"}  # api exists in acme too
        batch = theirs.get("/clips", params={"ids": ",".join(map(str, ids))})
        assert batch.json()["data"]["succeeded"] == 0
        assert {r["error"] for r in batch.json()["data"]["results"]} == {
            "id not found or expired. Re-run /search to get a fresh id."
        }
        one = theirs.get(f"/clip/{ids[0]}")
        assert one.status_code == 404 and "tools" not in batch.text + one.text and "known" not in batch.text
        assert ours.get(f"/clip/{ids[0]}").json()["success"] is True
        mine = theirs.post("/search", json={"query": "acme_only_renewal", "format": "json"}).json()["data"]["results"]
        assert mine[0]["id"] not in ids and mine[0]["filePath"] == "api/billing.py"


def test_a_clip_whose_file_cannot_be_read_fails_only_itself_in_a_batch(corpus, tmp_path):
    cfg = private_copy(corpus, tmp_path)
    with Server(app(Service(cfg, embedder=HashEmbedder()))) as url:
        client = httpx.Client(base_url=f"{url}/codesearch")

        def first(query: str, repo: str) -> dict:
            hits = client.post("/search", json={"query": query, "format": "json"}).json()["data"]["results"]
            return next(h for h in hits if h["filePath"].startswith(f"{repo}/"))

        ours, tools = first("renew_subscription", "api"), first("drain the queue safely", "tools")
        shutil.rmtree(mirror_dir(cfg.data_dir, "default", "api"))  # the repo was removed and its mirror swept
        r = client.get("/clips", params={"ids": f"{ours['id']},{tools['id']}"})
    assert r.status_code == 200
    data = r.json()["data"]
    assert (data["succeeded"], data["failed"]) == (1, 1)
    assert data["results"][0]["success"] is False and "unknown repo 'api'" in data["results"][0]["error"]
    assert data["results"][1]["success"] is True and data["results"][1]["filePath"] == tools["filePath"]
