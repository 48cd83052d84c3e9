"""The query server: MCP tools in memory, over streamable HTTP and over stdio; the HTTP API; live swap."""

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from dulwich.repo import Repo
from mcp import Client, StdioServerParameters

from indexer.embed import HASH_MODEL, HashEmbedder
from indexer.build import run
from indexer import tokens as bearer
from query.surfaces.app import app
from query.surfaces.mcp import TOOLS, build, started_service
from query.search import SearchRequest
from query.service import Service
from tests import gitrepo
from tests.corpus import api_files, build_corpus, private_copy
from tests.servers import BLOBDEX, MCP_ACCEPT, MCP_INITIALIZE, Server, call, structured, text


@pytest.fixture(scope="module")
def service(corpus):
    return Service(corpus.cfg, embedder=HashEmbedder())


def test_tools_are_listed_read_only_with_instructions(service):
    async def go():
        async with Client(build(service)) as client:
            return await client.list_tools()

    tools = {t.name: t for t in asyncio.run(go()).tools}
    assert set(tools) == {
        "search_code",
        "get_chunk",
        "grep",
        "get_file",
        "list_files",
        "outline",
        "route_task",
        "expand_context",
        "search_commits",
        "log",
        "blame",
        "diff",
        "list_repos",
        "sync_workspace",
        "session_status",
        "end_session",
    }
    writes = {"sync_workspace", "end_session"}
    assert all(t.annotations.read_only_hint for name, t in tools.items() if name not in writes)
    assert tools["end_session"].annotations.destructive_hint
    assert "get_chunk" in tools["search_code"].description


def test_search_code_markdown_then_get_chunk(service, corpus):
    server = build(service)
    out = text(call(server, "search_code", {"query": "renew_subscription", "repos": ["api"], "limit": 3}))
    assert out.startswith('# Search: "renew_subscription"') and "repos=['api']" in out
    caption = next(line for line in out.splitlines() if line.startswith("api:src/billing/renew.py"))
    assert "Billing.renew_subscription" in caption and " • id " in caption
    clip = int(caption.rsplit("id ", 1)[1])
    chunk = text(call(server, "get_chunk", {"ids": [clip, 999999]}))
    assert "def renew_subscription" in chunk and corpus.commits["api_main"][:12] in chunk
    assert "## id 999999" in chunk and "no chunk with id 999999" in chunk


def test_search_code_json_and_thresholds(service):
    server = build(service)
    data = structured(call(server, "search_code", {"query": "invoice", "limit": 5}))
    assert data["hits"] and {"id", "repo", "path", "signals"} <= set(data["hits"][0])
    both = call(server, "search_code", {"query": "x", "min_score": 0.1, "min_score_diff": 0.1})
    assert both.is_error and "not both" in text(both)


def test_search_code_thresholds_keep_exactly_the_hits_similar_enough(service):
    """min_score and min_score_diff act on each hit's cosine similarity to the query: the survivors are exactly
    the unfiltered hits at or over the floor, in the same order."""
    server = build(service)
    _, ranked = service.search(SearchRequest(query="invoice", org="default", limit=10))
    best = max(h.similarity for _, h in ranked)
    for args, floor in (({"min_score_diff": 0.05}, best - 0.05), ({"min_score": 0.3}, 0.3)):
        out = structured(call(server, "search_code", {"query": "invoice", **args}))
        expected = [(h.path, h.line_start) for _, h in ranked if h.similarity >= floor]
        assert 0 < len(expected) < len(ranked)  # the floor splits this ranking, so the filter is exercised
        assert [(h["path"], h["line_start"]) for h in out["hits"]] == expected


@pytest.mark.parametrize(
    "tool,args,message",
    [
        ("search_code", {"query": " "}, "the query is empty"),
        ("search_code", {"query": "x", "repos": ["nope"]}, "unknown repo 'nope'"),
        ("search_code", {"query": "x", "paths": ["[z-a]"]}, "bad path glob"),
        ("grep", {"pattern": "(a)\\1"}, "RE2 has no backreferences"),
        ("get_file", {"repo": "nope", "path": "x"}, "known: api, tools"),
        ("get_file", {"repo": "api", "path": "assets/logo.png"}, "is a binary file"),
        ("get_file", {"repo": "api", "path": "src/billing/renew.py", "start_line": 900}, "past the end"),
        (
            "get_file",
            {"repo": "api", "path": "src/billing/renew.py", "ref_or_commit": "nope"},
            "not found in repo 'api'",
        ),
        ("expand_context", {"symbol": "no_such_symbol"}, "no definition of 'no_such_symbol'"),
    ],
)
def test_bad_input_is_a_tool_error_saying_what_to_do(service, tool, args, message):
    result = call(build(service), tool, args)
    assert result.is_error and message in text(result)


def test_get_file_pages_long_files(service):
    out = text(call(build(service), "get_file", {"repo": "api", "path": "src/billing/renew.py", "end_line": 3}))
    assert "lines 1-3 of 16" in out and "call get_file again with start_line=4" in out
    assert '     1  """Subscription billing."""' in out


def test_grep_route_context_list_and_status(service, corpus):
    server = build(service)
    grep = text(call(server, "grep", {"pattern": "def (renew|cancel)", "repos": ["api"]}))
    assert "api:src/billing/renew.py:10:     def renew_subscription(self, subscription):" in grep
    assert "api:src/billing/renew.py:15:     def cancel(self, subscription):" in grep
    literal = text(call(server, "grep", {"pattern": "days=30)", "literal": True}))
    assert "renew.py:12" in literal
    routed = text(call(server, "route_task", {"task": "queue drain server health"}))
    assert routed.startswith('# Route: "queue drain server health"') and "**tools**" in routed
    assert "git sparse-checkout set" in routed and "here of" in routed
    ctx = structured(call(server, "expand_context", {"symbol": "Invoice"}))
    assert ctx["definitions"][0]["path"] == "src/billing/invoice.py"
    # renew.py imports it as billing.invoice (a namespace package under src/) and constructs one
    assert [(c["path"], c["line"], c["resolution"]) for c in ctx["callers"]] == [("src/billing/renew.py", 13, "import")]
    markdown = text(call(server, "expand_context", {"symbol": "Invoice"}))
    assert "callers: 1 (api 1); resolved by import 1\n  api:src/billing/renew.py:13  in Billing.renew_subscription" in (
        markdown
    )
    status = json.loads(text(call(server, "list_repos", {})))
    assert {r["name"] for r in status["repos"]} == {"api", "tools"}  # org default only
    assert status["serving"] == status["snapshot_id"] and status["model"] == HASH_MODEL


def test_mcp_over_streamable_http_on_a_socket(service):
    with Server(app(service)) as url:

        async def go():
            async with Client(f"{url}/mcp") as client:
                tools = await client.list_tools()
                found = await client.call_tool("search_code", {"query": "issue_refund", "ref": "dev"})
                return tools, found

        tools, found = asyncio.run(go())
    assert len(tools.tools) == len(TOOLS) and "src/billing/refund.py" in text(found)


def test_http_api_answers_and_errors_share_one_shape(service, corpus):
    with Server(app(service)) as url:
        c = httpx.Client(base_url=url)
        assert c.get("/healthz").json() == {"ok": True} and c.get("/readyz").json()["ok"]
        hits = c.post("/v1/search", json={"query": "renew_subscription", "limit": 2}).json()["hits"]
        assert hits[0]["symbol"] == "Billing.renew_subscription"
        chunk = c.get("/v1/chunks", params={"ids": f"{hits[0]['id']},abc"}).json()
        assert chunk["chunks"][0]["text"].startswith("    def renew_subscription") and chunk["errors"]
        f = c.get("/v1/file", params={"repo": "api", "path": "src/billing/invoice.py", "ref": "dev", "start": 9}).json()
        assert f["content"].startswith("    def pdf") and f["commit_id"] == corpus.commits["api_dev"]
        assert c.post("/v1/route", json={"task": "renew a subscription"}).json()["repos"][0]["repo"] == "api"
        assert c.get("/v1/context", params={"symbol": "issue_refund"}).json()["definitions"]
        assert c.post("/v1/grep", json={"pattern": "Invoice(", "literal": True}).json()["matches"]
        assert c.get("/openapi.json").json()["paths"]["/v1/search"]["post"]
        for method, path, kw, status, code in [
            ("post", "/v1/search", {"json": {"query": ""}}, 400, "bad_request"),
            ("post", "/v1/search", {"json": {"query": "x", "limit": 0}}, 400, "bad_request"),
            ("post", "/v1/search", {"content": b"{not json"}, 400, "bad_request"),
            ("post", "/v1/search", {"json": {"query": "x", "repos": "api", "lang": 5}}, 400, "bad_request"),
            ("get", "/v1/file", {"params": {"repo": "api", "path": "nope.py"}}, 404, "not_found"),
            ("get", "/v1/file", {"params": {"repo": "api", "path": "x", "start": "abc"}}, 400, "bad_request"),
            ("post", "/v1/grep", {"json": {"pattern": "(?<=x)y"}}, 400, "bad_request"),
            ("get", "/v1/repos", {"headers": {"Host": "evil.example"}}, 421, "bad_host"),
            ("get", "/v1/repos", {"headers": {"Origin": "http://evil.example"}}, 403, "bad_origin"),
            ("post", "/v1/search", {"content": b"x" * (1024 * 1024 + 1)}, 413, "too_large"),
        ]:
            r = getattr(c, method)(path, **kw)
            assert r.status_code == status and r.json()["error"]["code"] == code, (path, kw, r.text)
            assert r.json()["error"]["message"]


def test_tokens_are_stored_hashed_and_name_the_org(corpus, tmp_path):
    cfg = private_copy(corpus, tmp_path)
    acme = bearer.mint(cfg.data_dir, "acme ci", "acme")
    assert acme not in (cfg.data_dir / bearer.TOKENS_FILE).read_text()
    with Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True)) as url:
        c = httpx.Client(base_url=url)
        assert c.get("/v1/repos").status_code == 401
        assert c.get("/v1/repos", headers={"Authorization": "Bearer bdx_wrong"}).json()["error"]["code"] == "bad_token"
        auth = {"Authorization": f"Bearer {acme}"}
        assert [r["name"] for r in c.get("/v1/repos", headers=auth).json()["repos"]] == ["api"]
        hits = c.post("/v1/search", json={"query": "acme_only_renewal renew", "limit": 50}, headers=auth).json()["hits"]
        assert hits and {h["org"] for h in hits} == {"acme"}
        assert c.get("/healthz").status_code == 200
    bearer.revoke(cfg.data_dir, bearer.listing(cfg.data_dir)[-1]["id"])
    assert bearer.verify(cfg.data_dir, acme) is None


def test_mcp_over_stdio_by_spawning_blobdex_mcp(corpus):
    env = {
        **os.environ,
        "BLOBDEX_CONFIG": str(corpus.cfg.path),
        "BLOBDEX_DATA_DIR": str(corpus.cfg.data_dir),
        "BLOBDEX_MODEL": HASH_MODEL,
    }

    async def go():
        async with Client(StdioServerParameters(command=BLOBDEX, args=["mcp"], env=env)) as client:
            return await client.call_tool("search_code", {"query": "drain_queue"})

    out = text(asyncio.run(go()))
    assert "tools:queue/src/lib.rs" in out and "drain_queue" in out


def test_blobdex_mcp_answers_every_call_read_before_its_input_ends(corpus):
    """A client (or a shell pipe) that writes its calls and closes stdin still gets every answer, and the process
    exits cleanly: the SDK alone cancelled the calls still running at end of input."""
    env = {
        **os.environ,
        "BLOBDEX_CONFIG": str(corpus.cfg.path),
        "BLOBDEX_DATA_DIR": str(corpus.cfg.data_dir),
        "BLOBDEX_MODEL": HASH_MODEL,
    }
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search_code", "arguments": {}}}
    call["params"]["arguments"] = {"query": "drain_queue"}
    lines = [MCP_INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call]
    piped = "".join(json.dumps(m) + "\n" for m in lines)
    done = subprocess.run([BLOBDEX, "mcp"], input=piped, capture_output=True, text=True, env=env, timeout=120)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2] and "drain_queue" in replies[1]["result"]["content"][0]["text"]
    assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr


def test_mcp_answers_initialize_and_lists_tools_while_the_model_still_loads(corpus, monkeypatch):
    """What `blobdex mcp` does: the query engine, the snapshot and the model load in a thread while the server
    answers; a tool that needs the model waits for it."""
    import query.service as service_module

    release = threading.Event()

    def slow_model(cfg, model=None, writable=False):
        release.wait(60)
        return HashEmbedder()

    monkeypatch.setattr(service_module, "configured_embedder", slow_model)
    svc, warm = started_service(corpus.cfg)  # as cli.mcp starts it

    async def go():
        async with Client(build(svc)) as client:  # initialize
            names = [t.name for t in (await client.list_tools()).tools]
            loading = warm.is_alive()
            threading.Timer(0.5, release.set).start()  # the model "loads" half a second from now
            found = await client.call_tool("search_code", {"query": "drain_queue"})
            return names, loading, release.is_set(), found

    names, loading, model_was_loaded, found = asyncio.run(go())
    assert "search_code" in names and loading  # answered before the model had loaded
    assert model_was_loaded and "tools:queue/src/lib.rs" in text(found)  # the search waited for the model
    warm.join(5)
    assert not warm.is_alive()


def test_what_blobdex_mcp_imports_before_it_can_answer_initialize_is_the_sdk_alone():
    """The stdio server is built from the CLI and the MCP SDK; the query engine (numpy, Arrow, Lance, the search
    and service modules) is imported by started_service's thread, while initialize is answered."""
    import subprocess
    import sys

    code = (
        "import sys, query.cli; from query.surfaces.mcp import build; "
        "print([m for m in ('numpy', 'pyarrow', 'lance', 'onnxruntime', 'query.search', 'query.service') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_live_swap_under_load_has_zero_errors_and_switches_commit(tmp_path):
    built = build_corpus(tmp_path, {"api": api_files()})
    cfg, first = built.cfg, built.commits["api"]
    svc = Service(cfg, embedder=HashEmbedder())
    errors, commits = [], []
    with Server(app(svc)) as url:
        stop = threading.Event()

        def loop():
            with httpx.Client(base_url=url) as c:
                while not stop.is_set():
                    r = c.post("/v1/search", json={"query": "renew_subscription", "limit": 1})
                    if r.status_code != 200:
                        errors.append(r.text)
                    else:
                        commits.append(r.json()["hits"][0]["commit_id"])

        threads = [threading.Thread(target=loop) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        second = gitrepo.commit(
            Repo(str(tmp_path / "src" / "api")), {**api_files(), "NEWS.md": b"# News\n\nrenewals are monthly\n"}
        )
        run(cfg, show_progress=False)
        deadline = time.time() + 20
        while time.time() < deadline and (not commits or commits[-1] != second):
            time.sleep(0.1)
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert commits[0] == first and commits[-1] == second


def test_a_broken_new_snapshot_is_refused_and_the_old_one_keeps_serving(tmp_path, caplog):
    from indexer import snapshot

    built = build_corpus(tmp_path, {"api": api_files()})
    cfg, good = built.cfg, built.report.snapshot_id
    svc = Service(cfg, embedder=HashEmbedder())
    assert svc.reader().snapshot_id == good
    broken = snapshot.snapshots_dir(cfg.data_dir) / "20991231T000000000000Z-broken"
    (broken / "vectors").mkdir(parents=True)
    (broken / snapshot.MANIFEST).write_text(
        (snapshot.snapshots_dir(cfg.data_dir) / good / snapshot.MANIFEST).read_text().replace(good, broken.name)
    )
    (cfg.data_dir / snapshot.CURRENT).write_text(broken.name + "\n")
    with Server(app(svc)) as url:
        r = httpx.post(f"{url}/v1/search", json={"query": "renew_subscription"})
    assert r.status_code == 200 and r.json()["snapshot_id"] == good
    assert "the new one is refused" in caplog.text


def test_mcp_over_http_runs_in_the_org_of_its_token(corpus, tmp_path):
    cfg = private_copy(corpus, tmp_path)
    acme = bearer.mint(cfg.data_dir, "acme agent", "acme")
    with Server(app(Service(cfg, embedder=HashEmbedder()), require_token=True)) as url:

        async def go(headers):
            from mcp.client.streamable_http import streamable_http_client
            import httpx2

            transport = streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers))
            async with Client(transport) as client:
                return await client.call_tool("list_repos", {})

        repos = json.loads(text(asyncio.run(go({"Authorization": f"Bearer {acme}"}))))
        assert [r["name"] for r in repos["repos"]] == ["api"] and repos["repos"][0]["org"] == "acme"
        refused = httpx.post(f"{url}/mcp", json=MCP_INITIALIZE, headers=MCP_ACCEPT)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "token_required"


def test_search_code_can_rank_files(service):
    out = text(call(build(service), "search_code", {"query": "invoice total_with_tax", "group_by": "file"}))
    assert out.startswith('# Files: "invoice total_with_tax"')
    assert out.splitlines()[2].startswith("1. api:src/billing/invoice.py")


NUMERICS = """
import json
import faiss, numpy  # noqa: E401, F401  loaded as a server has them
from query.threads import one_thread_numerics
from threadpoolctl import threadpool_info
before = sorted({i["num_threads"] for i in threadpool_info()})
one_thread_numerics()
print(json.dumps([before, sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info()})]))
"""


def test_a_server_holds_numpys_and_faisss_threads_to_one():
    """Each search runs BM25 on its own thread beside its vector search; numpy's and faiss's thread pools (a
    thread a core) took cores from it and spun after each call (search p95 at 10M: 111 ms with them, 78-82
    without). A process of its own: the limit is process-wide."""
    done = subprocess.run(
        [sys.executable, "-c", NUMERICS],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout)
    assert 2 in before  # OpenMP's pool as the environment set it (OpenBLAS's is capped at the machine's cores)
    assert {api for api, _ in after} >= {"openblas", "openmp"} and {n for _, n in after} == {1}
