"""Browsing and paging: list_files and outline at indexed and other refs, cursors on search_code, grep and
list_files (pages add up to the one long answer; a cursor of another request or an older snapshot is refused
in one sentence), on MCP and HTTP alike, over real repos and mirrors."""

from __future__ import annotations

import asyncio

import pytest
from dulwich.repo import Repo
from mcp import Client
from starlette.testclient import TestClient

from indexer.build import run
from indexer.embed import HashEmbedder
from indexer.mirror import mirror_dir
from query.cursor import CursorError
from query.cursor import encode as cursor_encode
from query.search import SearchRequest
from query.service import Service
from query.surfaces.app import app
from query.surfaces.mcp import build
from tests import gitrepo
from tests.corpus import RENEW_PY, api_files, build_corpus, tools_files

API_MAIN_FILES = [
    # (path, lang, bytes, why it is not indexed)
    (".env", "text", None, "credentials"),
    ("README.md", "markdown", 164, None),
    ("a/../evil.py", "text", None, "bad_path"),
    ("assets/blob.dat2", "text", 70, "binary"),
    ("assets/logo.png", "text", None, "binary"),
    ("data/huge.txt", "text", 21294, "too_large"),
    ("deploy/server.pem", "text", None, "credentials"),
    ("link.py", "python", None, "symlink"),
    ("node_modules/left-pad/index.js", "javascript", None, "vendored"),
    ("package-lock.json", "json", None, "lockfile"),
    ("src/billing/invoice.py", "python", 196, None),
    ("src/billing/renew.py", "python", 496, None),
    ("src/config/settings.py", "python", 197, None),
    ("static/app.min.js", "javascript", None, "minified"),
    ("vendor-sub", "text", None, "submodule"),
    ("web/app.js", "javascript", 228, None),
]
TOOLS_LANGS = [("docs/guide.md", "markdown"), ("queue/src/lib.rs", "rust"), ("server/server.go", "go")]
RENEW_OUTLINE = [
    ("class", "Billing", 7, 16, "class Billing", "Charges customers for their plans."),
    (
        "method",
        "Billing.renew_subscription",
        10,
        13,
        "def renew_subscription(self, subscription)",
        "Extend a subscription by one period and charge the stored card.",
    ),
    ("method", "Billing.cancel", 15, 16, "def cancel(self, subscription)", ""),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("browse"), {"api": api_files(), "tools": tools_files()})


@pytest.fixture(scope="module")
def service(corpus):
    return Service(corpus.cfg, embedder=HashEmbedder())


@pytest.fixture(scope="module")
def http(service):
    with TestClient(app(service), base_url="http://127.0.0.1") as client:
        yield client


def answer(service, tool: str, args: dict):
    async def go():
        async with Client(build(service)) as client:
            return await client.call_tool(tool, args)

    return asyncio.run(go())


def call(service, tool: str, args: dict) -> tuple[bool, str]:
    result = answer(service, tool, args)
    return result.is_error, result.content[0].text


def mcp_json(service, tool: str, args: dict) -> dict:
    result = answer(service, tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


def rows(files: list[dict]) -> list[tuple]:
    return [(f["path"], f["lang"], f["bytes"], f["skip"]) for f in files]


def test_list_files_shows_every_path_of_the_indexed_ref_with_why_it_was_skipped(service, http, corpus):
    page = mcp_json(service, "list_files", {"repo": "api"})
    assert rows(page["files"]) == API_MAIN_FILES
    assert (page["ref"], page["commit_id"], page["total"], page["next_cursor"]) == (
        "refs/heads/main",
        corpus.commits["api"],
        16,
        None,
    )
    assert http.get("/v1/files", params={"repo": "api"}).json() == page  # one answer on both surfaces
    markdown = call(service, "list_files", {"repo": "api", "path_glob": "src/**/*.py"})[1]
    assert markdown.splitlines()[0] == f"# api at refs/heads/main ({corpus.commits['api'][:12]}): 3 file(s)"
    assert "src/billing/renew.py  python  496 B" in markdown and "README" not in markdown


def test_list_files_pages_add_up_to_the_whole_listing_and_cursors_are_checked(service, http):
    pages, cursor = [], None
    while True:
        args = {"repo": "api", "limit": 5, **({"cursor": cursor} if cursor else {})}
        page = mcp_json(service, "list_files", args)
        assert page["total"] == 16
        pages.append(page["files"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [5, 5, 5, 1]
    assert rows([f for p in pages for f in p]) == API_MAIN_FILES
    first = mcp_json(service, "list_files", {"repo": "api", "limit": 5})
    failed, text = call(service, "list_files", {"repo": "api", "limit": 6, "cursor": first["next_cursor"]})
    assert failed and text.endswith(
        ": that cursor continues another list_files request: pass the same arguments as the first page, with the cursor"
    )
    r = http.get("/v1/files", params={"repo": "api", "cursor": "not-a-cursor"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("cursor 'not-a-cursor' is not one")
    r = http.get("/v1/files", params={"repo": "nope"})
    assert r.status_code == 404 and "unknown repo 'nope' in org 'default'; indexed repos: api, tools" in r.text


def test_outline_lists_definitions_with_lines_signatures_and_docs(service, http, corpus):
    found = mcp_json(service, "outline", {"repo": "api", "path": "src/billing/renew.py"})
    assert [
        (s["kind"], s["qualified_name"], s["line"], s["line_end"], s["signature"], s["doc"]) for s in found["symbols"]
    ] == (RENEW_OUTLINE)
    assert http.get("/v1/outline", params={"repo": "api", "path": "src/billing/renew.py"}).json() == found
    markdown = call(service, "outline", {"repo": "api", "path": "src/billing/renew.py"})[1]
    assert "\n  - method Billing.cancel (15-16): `def cancel(self, subscription)`\n" in markdown
    go = mcp_json(service, "outline", {"repo": "tools", "path": "server/server.go"})
    assert [(s["kind"], s["qualified_name"], s["line"]) for s in go["symbols"]] == [
        ("type", "Server", 5),
        ("method", "Server.HandleHealth", 9),
        ("function", "NewServer", 13),
    ]
    failed, text = call(service, "outline", {"repo": "api", "path": "src/billing/nope.py"})
    assert failed and ": no file 'src/billing/nope.py' in repo 'api' at refs/heads/main" in text


def test_browsing_a_ref_that_was_never_indexed_reads_the_mirror(service, corpus):
    """A branch pushed to the mirror after the run: listed from its git tree, outlined by parsing it now."""
    mirror = Repo(str(mirror_dir(corpus.cfg.data_dir, "default", "tools")))
    edited = RENEW_PY.replace(
        b"    def cancel(self, subscription):",
        b"    def pause(self):\n        pass\n\n    def cancel(self, subscription):",
    )
    commit = gitrepo.commit(mirror, {**tools_files(), "billing/renew.py": edited}, "feature", "pause")
    page = mcp_json(service, "list_files", {"repo": "tools", "ref": "feature"})
    assert (page["ref"], page["commit_id"]) == ("refs/heads/feature", commit)
    assert rows(page["files"]) == [
        ("billing/renew.py", "python", len(edited), None),
        *[(path, lang, len(tools_files()[path]), None) for path, lang in TOOLS_LANGS],
    ]
    found = mcp_json(service, "outline", {"repo": "tools", "path": "billing/renew.py", "ref": commit[:10]})
    assert [(s["qualified_name"], s["line"]) for s in found["symbols"]] == [
        ("Billing", 7),
        ("Billing.renew_subscription", 10),
        ("Billing.pause", 15),
        ("Billing.cancel", 18),
    ]
    failed, text = call(service, "list_files", {"repo": "tools", "ref": "no-such-branch"})
    assert failed and ": ref 'no-such-branch' not found in repo 'tools' (branches: feature, main" in text


def search_ids(service, query: str, **kw) -> list[int]:
    return [c for c, _ in service.search_page(SearchRequest(query=query, **kw)).hits]


def test_search_pages_add_up_to_the_long_answer_on_mcp_and_http(service, http):
    whole = search_ids(service, "billing invoice subscription", limit=9)
    assert len(whole) == 9
    seen, cursor = [], None
    for _ in range(3):
        args = {"query": "billing invoice subscription", "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = mcp_json(service, "search_code", args)
        seen += [h["id"] for h in page["hits"]]
        cursor = page["next_cursor"]
    assert seen == whole and cursor
    body = {"query": "billing invoice subscription", "limit": 3}
    first = http.post("/v1/search", json=body).json()
    second = http.post("/v1/search", json={**body, "cursor": first["next_cursor"]}).json()
    assert [h["id"] for h in first["hits"] + second["hits"]] == whole[:6]
    r = http.post("/v1/search", json={**body, "query": "refund", "cursor": first["next_cursor"]})
    assert r.status_code == 400 and "continues another search request" in r.json()["error"]["message"]
    failed, text = call(service, "search_code", {**body, "group_by": "file", "cursor": first["next_cursor"]})
    assert failed and "group_by='file' answers in one page" in text


def test_grep_pages_add_up_to_the_long_answer(service, http):
    """Pages of 1 end inside a chunk with more matching lines: the next page goes on from the next line."""
    whole = http.post("/v1/grep", json={"pattern": "def |function ", "limit": 50}).json()
    assert not whole["truncated"] and len(whole["matches"]) == 6
    assert len({(m["path"], m["blob_id"]) for m in whole["matches"]}) < 6  # some chunk holds two of them
    for limit in (1, 4):
        seen, body = [], {"pattern": "def |function ", "limit": limit}
        page = http.post("/v1/grep", json=body).json()
        while True:
            seen += page["matches"]
            if not page["next_cursor"]:
                break
            assert page["truncated"]
            page = http.post("/v1/grep", json={**body, "cursor": page["next_cursor"]}).json()
        assert seen == whole["matches"]
    failed, text = call(service, "grep", {"pattern": "def ", "limit": 1})
    assert not failed and text.endswith("or narrow with repos/paths)") and "cursor='" in text


def test_a_cursor_of_an_older_snapshot_is_refused_and_ids_outlive_the_publish(corpus, tmp_path):
    root = tmp_path
    cfg_corpus = build_corpus(root, {"api": api_files()})
    service = Service(cfg_corpus.cfg, embedder=HashEmbedder())
    page = service.search_page(SearchRequest(query="renew subscription", limit=1))
    clip, hit = page.hits[0]
    api = Repo(str(root / "src" / "api"))
    gitrepo.commit(
        api, {**api_files(), "NOTES.md": b"# Notes\n\nnothing to see\n"}, "main", "notes", parents=[api.head()]
    )
    run(cfg_corpus.cfg, embedder=HashEmbedder(), show_progress=False)
    with TestClient(app(service), base_url="http://127.0.0.1") as http:
        r = http.post("/v1/search", json={"query": "renew subscription", "limit": 1, "cursor": page.next_cursor})
        assert r.status_code == 409 and r.json()["error"]["code"] == "stale_cursor"
        assert r.json()["error"]["message"].startswith(f"that cursor belongs to snapshot {page.snapshot_id}")
        chunk = http.get("/v1/chunks", params={"ids": str(clip)}).json()["chunks"][0]
    assert chunk["path"] == hit.path and chunk["snapshot_id"] != page.snapshot_id  # the row kept its id


@pytest.mark.parametrize("position", ["x", [1], [1, "2"], [-1, 0], {"a": 1}])
def test_a_grep_cursor_whose_digest_holds_but_position_does_not_is_refused(service, position):
    """A cursor's digest is of the request, not a secret: one made by hand with a bad position is a 400, never
    a crash inside grep."""
    sid = service.reader().snapshot_id
    forged = cursor_encode("grep", sid, {"org": "default", "pattern": "def", "limit": 5}, position)
    with pytest.raises(CursorError, match="not one a grep page gives"):
        service.grep("default", "def", forged, limit=5)
    assert service.grep("default", "def", None, limit=5).matches  # the same request without it answers
