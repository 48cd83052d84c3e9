"""What every HTTP surface promises a caller who is careless or hostile: no credential file is served, a body
or a blob is never read past its cap, every bad input gets a 4xx with one sentence in the surface's error
shape (never a 500 or plain text), and a Host header is host[:port] or refused."""

import asyncio
import json
import re
from dataclasses import replace

import httpx
import pytest
from click.testing import CliRunner
from mcp import Client

from indexer.embed import HashEmbedder
from query.cli import cli
from query.get_file import CredentialFile
from query.surfaces.app import app
from query.surfaces.guard import MAX_BODY_BYTES
from query.surfaces.mcp import build
from query.service import Service
from tests.servers import MCP_INITIALIZE, Server

CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def service(corpus):
    return Service(corpus.cfg, embedder=HashEmbedder())


@pytest.fixture(scope="module")
def url(service):
    with Server(app(service)) as base:
        yield base


def mcp_call(service, tool, args):
    async def go():
        async with Client(build(service)) as client:
            return await client.call_tool(tool, args)

    return asyncio.run(go())


# -- credential files -----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [".env", "deploy/server.pem", "/.env", ".ENV", ".env/"])
def test_every_reader_refuses_a_credential_file(service, corpus, url, path):
    secret = "hunter2hunter2"
    r = httpx.get(f"{url}/v1/file", params={"repo": "api", "path": path, "ref": "dev"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    message = r.json()["error"]["message"]
    assert "credential file (by its name); blobdex never reads or serves credential files" in message
    r = httpx.post(f"{url}/codesearch/read", json={"filePath": f"api/{path.strip('/')}"})
    assert r.status_code == 403 and r.json()["success"] is False and "credential file" in r.json()["error"]
    tool = mcp_call(service, "get_file", {"repo": "api", "path": path, "ref_or_commit": corpus.commits["api_main"]})
    assert tool.is_error and "credential file" in tool.content[0].text
    out = CliRunner().invoke(cli, ["--config", str(corpus.cfg.path), "get-file", "api", path], catch_exceptions=True)
    assert isinstance(out.exception, CredentialFile) and secret not in out.output and "RSA" not in out.output
    for ref in ("main", corpus.commits["api_main"]):  # outline too, indexed ref or not (it answered an empty 200)
        r = httpx.get(f"{url}/v1/outline", params={"repo": "api", "path": path, "ref": ref})
        assert r.status_code == 403 and "credential file" in r.json()["error"]["message"]


def test_the_cli_reads_through_the_same_reader(corpus):
    out = CliRunner().invoke(cli, ["--config", str(corpus.cfg.path), "get-file", "api", "src/billing/invoice.py"])
    assert out.exit_code == 0 and out.output.startswith("class Invoice")


# -- blobs over the cap ---------------------------------------------------------------------------------
def test_a_blob_over_the_cap_is_413_on_http_and_codesearch(corpus, big_mirror):
    root, _, _ = big_mirror
    svc = Service(replace(corpus.cfg, data_dir=root), embedder=HashEmbedder())
    with Server(app(svc)) as base:
        for ref, path in (("main", "big.txt"), ("packed", "old.txt")):
            r = httpx.get(f"{base}/v1/file", params={"repo": "big", "path": path, "ref": ref})
            assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
            assert "over the 26214400-byte cap of a file read" in r.json()["error"]["message"]
        r = httpx.post(f"{base}/codesearch/read", json={"filePath": "big/old.txt"})  # at HEAD, the first branch made
        assert r.status_code == 413 and r.json()["success"] is False


# -- the body cap counts what arrives ------------------------------------------------------------------
def asgi_request(asgi, method: str, path: str, chunks: list[bytes], headers=()) -> tuple[int, bytes, int]:
    """Call the ASGI app as a server would with a chunked body; return status, body and bytes it pulled."""
    pulled, sent, queue = 0, [], list(chunks)

    async def receive():
        nonlocal pulled
        if not queue:
            return {"type": "http.disconnect"}
        chunk = queue.pop(0)
        pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(queue)}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 40000),
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"transfer-encoding", b"chunked"),
            (b"content-type", b"application/json"),
            *headers,
        ],
    }
    asyncio.run(asgi(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), pulled


@pytest.mark.parametrize(
    "path",
    [
        "/v1/search",
        "/v1/grep",
        "/codesearch/clips",
        "/codesearch/search",
        "/codebase-index/search",
        "/api/v1/retrieval/search",
        "/mcp",
    ],
)
def test_a_chunked_body_is_cut_off_at_the_cap_on_every_mount(service, path):
    body = [b" " * CHUNK] * (8 * MAX_BODY_BYTES // CHUNK)  # 8 MiB, no Content-Length
    status, answer, pulled = asgi_request(app(service, lucos=True), "POST", path, body)
    assert status == 413 and "over 1048576 bytes" in answer.decode()  # in the mount's own error shape (test_methods)
    assert pulled <= MAX_BODY_BYTES + CHUNK


def test_a_chunked_body_under_the_cap_is_read_whole(service):
    raw = json.dumps({"query": "renew_subscription", "limit": 1}).encode()
    status, answer, _ = asgi_request(app(service), "POST", "/v1/search", [raw[:10], raw[10:]])
    assert status == 200 and json.loads(answer)["hits"][0]["symbol"] == "Billing.renew_subscription"


def test_a_chunked_body_over_the_cap_on_a_real_socket_is_413(url):
    def body():
        for _ in range(2 * MAX_BODY_BYTES // CHUNK):
            yield b" " * CHUNK

    r = httpx.post(f"{url}/v1/grep", content=body(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"


# -- caller's faults are 400, never 500 -----------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000,
        b'{"a":' * 100_000,
        b'{"query":' + b"[" * 500_000 + b"]" * 500_000 + b"}",
        b'{"query":"x","limit":1e309}',
        b'{"query":"x","limit":2.5}',
        b'{"query":"x","kind":["a"]}',
        b'{"query":"x","ref":{"a":1}}',
        b'{"query":"x","session_id":7}',
    ],
)
def test_bad_search_bodies_are_400_with_one_sentence(url, raw):
    r = httpx.post(f"{url}/v1/search", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request", r.text
    message = r.json()["error"]["message"]
    assert message and "\n" not in message and "Traceback" not in message


@pytest.mark.parametrize(
    "path,raw,message",
    [
        ("/v1/grep", b'{"pattern":"x","literal":"yes"}', "'literal' must be true or false"),
        ("/v1/grep", b'{"pattern":"x","ref":["main"]}', "'ref' must be a string"),
        ("/v1/route", b'{"task":{"a":1}}', "'task' must be a string"),
    ],
)
def test_bad_types_in_other_bodies_are_400(url, path, raw, message):
    r = httpx.post(f"{url}{path}", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and message in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/references?repo=api&path=src/billing/renew.py&line=" + "1" * 31,
        "/v1/file?repo=api&path=src/billing/renew.py&start=" + "9" * 25,
        "/v1/chunks?ids=" + ",".join(["1"] * 51),
    ],
)
def test_huge_integers_and_too_many_ids_are_400_not_500(url, path):
    r = httpx.get(f"{url}{path}")
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request", r.text


def test_a_huge_chunk_id_is_reported_in_place_as_a_bad_one_is(url):
    r = httpx.get(f"{url}/v1/chunks", params={"ids": "1," + "1" * 40 + ",abc"})
    assert r.status_code == 200 and [e["id"] for e in r.json()["errors"]] == ["1" * 40, "abc"]
    assert "out of range" in r.json()["errors"][0]["message"]


@pytest.mark.parametrize(
    "tool, args, phrase",
    [
        ("get_chunk", {"ids": [10**40]}, "ids[0]"),
        (
            "expand_context",
            {"repo": "api", "path": "src/billing/renew.py", "line": 10**30},
            "line should be less than or equal to",
        ),
        (
            "get_file",
            {"repo": "api", "path": "src/billing/renew.py", "start_line": 10**20},
            "start_line should be less than or equal",
        ),
    ],
)
def test_huge_integers_are_one_sentence_for_the_model(service, tool, args, phrase):
    result = mcp_call(service, tool, args)
    text = result.content[0].text
    assert result.is_error and phrase in text and "Traceback" not in text and "\n" not in text, text


def test_a_native_panic_on_damaged_bytes_is_one_sentence_never_a_500(tmp_path):
    # Flipped bytes in Tantivy's term files make every lexical lookup panic (pyo3's PanicException is a
    # BaseException, past `except Exception` and past Starlette's own 500 handler): the reader turns it into a
    # DamagedSnapshot, 503 in the surface's shape, saying what repairs it (no older snapshot is kept here).
    from indexer.config import RepoSpec
    from indexer.build import run
    from indexer.snapshot import open_manifest
    from tests import gitrepo
    from tests.corpus import api_files, write_config

    gitrepo.commit(gitrepo.init(tmp_path / "src" / "api"), api_files())
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))])
    run(cfg, show_progress=False)
    for term in (open_manifest(cfg.data_dir)[0] / "lexical").glob("*.term"):
        data = bytearray(term.read_bytes())
        middle = len(data) // 2
        data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
        term.write_bytes(bytes(data))
    with Server(app(Service(cfg, embedder=HashEmbedder()))) as base:
        for path, body in (
            ("/v1/search", {"query": "renew_subscription"}),
            ("/codesearch/search", {"query": "renew_subscription"}),
        ):
            r = httpx.post(f"{base}{path}", json=body)
            assert r.status_code == 503 and "is damaged" in r.text and "blobdex index" in r.text, r.text
        assert httpx.get(f"{base}/healthz").json() == {"ok": True}


# -- /v1/file ranges are the CLI's ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "params", [{"start": "-3"}, {"start": "1", "end": "-1"}, {"start": "3", "end": "1"}, {"start": "0"}]
)
def test_v1_file_refuses_ranges_the_cli_refuses(url, params):
    r = httpx.get(f"{url}/v1/file", params={"repo": "api", "path": "src/billing/invoice.py", **params})
    assert r.status_code == 400 and "bad line range" in r.json()["error"]["message"]


# -- /v1 bodies: unknown fields, and search_code's options ----------------------------------------------
@pytest.mark.parametrize(
    "path,body,message",
    [
        ("/v1/search", {"qeury": "x"}, "unknown field 'qeury'; did you mean 'query'?"),
        ("/v1/search", {"query": "x", "group": "file"}, "unknown field 'group'; did you mean 'group_by'?"),
        ("/v1/grep", {"patern": "x"}, "unknown field 'patern'; did you mean 'pattern'?"),
        ("/v1/route", {"tsak": "x"}, "unknown field 'tsak'; did you mean 'task'?"),
        ("/v1/sessions/s1/sync", {"repo": "api", "file": {}}, "unknown field 'file'; did you mean 'files'?"),
        ("/v1/search", {"query": "x", "group_by": "repo"}, "'group_by' must be one of chunk, file"),
        ("/v1/search", {"query": "x", "format": "xml"}, "'format' must be one of json, markdown"),
        ("/v1/search", {"query": "x", "mode": "magic"}, "unknown mode 'magic'"),
        ("/v1/search", {"query": "x", "min_score": 2}, "'min_score' must be a number from 0 to 1"),
        ("/v1/search", {"query": "x", "min_score": 0.1, "min_score_diff": 0.1}, "not both"),
        ("/v1/search", {"query": "x", "mode": "bm25", "min_score": 0.1}, "which mode 'bm25' does not compute"),
    ],
)
def test_v1_bodies_refuse_what_they_do_not_take(url, path, body, message):
    r = httpx.post(f"{url}{path}", json=body)
    assert r.status_code == 400 and message in r.json()["error"]["message"], r.text


@pytest.mark.parametrize(
    "path,params,message",
    [
        ("/v1/file", {"repo": "api", "path": "x", "org": "acme"}, "unknown parameter 'org'; accepted parameters"),
        ("/v1/file", {"repo": "api", "paht": "x"}, "unknown parameter 'paht'; did you mean 'path'?"),
        ("/v1/context", {"symbl": "Invoice"}, "did you mean 'symbol'?"),
        ("/v1/context", {}, "give a symbol (like `Session.get`), or repo, path and line"),
        ("/v1/context", {"symbol": " "}, "the symbol is empty"),
        ("/v1/references", {"symbol": "x", "limit": "0"}, "limit 0 is out of range"),
    ],
)
def test_v1_query_parameters_refuse_what_they_do_not_take(url, path, params, message):
    r = httpx.get(f"{url}{path}", params=params)
    assert r.status_code == 400 and message in r.json()["error"]["message"], r.text


def test_v1_search_has_search_codes_options_and_agrees_with_it(service, url):
    files = httpx.post(f"{url}/v1/search", json={"query": "invoice total_with_tax", "group_by": "file"}).json()
    assert files["files"][0]["repo"] == "api" and files["files"][0]["path"] == "src/billing/invoice.py"
    for args in (
        {"query": "invoice total_with_tax", "group_by": "file"},
        {"query": "renew_subscription", "repos": ["api"], "limit": 3, "min_score_diff": 0.05},
    ):
        r = httpx.post(f"{url}/v1/search", json={**args, "format": "markdown"})
        assert r.headers["content-type"].startswith("text/markdown")
        tool = mcp_call(service, "search_code", args).content[0].text
        assert re.sub(r"id \d+", "id N", r.text) == re.sub(r"id \d+", "id N", tool)
    loose = httpx.post(f"{url}/v1/search", json={"query": "invoice", "limit": 10}).json()
    strict = httpx.post(f"{url}/v1/search", json={"query": "invoice", "limit": 10, "min_score": 0.99}).json()
    assert len(strict["hits"]) < len(loose["hits"]) and strict["applied"][0].startswith("min_score=0.99 dropped")
    lexical = httpx.post(f"{url}/v1/search", json={"query": "renew_subscription", "mode": "bm25"}).json()
    assert lexical["hits"][0]["signals"].get("vector_rank") is None


@pytest.mark.parametrize(
    "method,path,status,code",
    [
        ("get", "/v1/nope", 404, "not_found"),
        ("get", "/nope", 404, "not_found"),
        ("get", "/v1/search", 405, "method_not_allowed"),
        ("delete", "/v1/repos", 405, "method_not_allowed"),
    ],
)
def test_unknown_routes_and_methods_answer_json(url, method, path, status, code):
    r = getattr(httpx, method)(f"{url}{path}")
    assert r.status_code == status and r.json()["error"]["code"] == code and r.json()["error"]["message"]


def test_compat_surfaces_answer_unknown_routes_in_their_own_shape(url):
    r = httpx.get(f"{url}/codesearch/nope")
    assert r.status_code == 404 and r.json()["success"] is False
    r = httpx.get(f"{url}/codebase-index/nope")
    assert r.status_code == 404 and "no such route" in r.json()["message"]


# -- Host ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "host,status",
    [
        ("localhost:80@evil.com", 400),
        ("localhost@evil.com", 400),
        ("127.0.0.1:80/x", 400),
        ("localhost:", 400),
        ("evil.com", 421),
        ("localhost:8080", 200),
        ("127.0.0.1", 200),
        ("[::1]:9", 200),
    ],
)
def test_host_must_be_host_and_port(url, host, status):
    for path in ("/v1/repos", "/codesearch/stats"):
        r = httpx.get(f"{url}{path}", headers={"Host": host})
        assert r.status_code == status, (path, r.text)


def test_the_openapi_document_states_the_new_search_options_and_statuses(url):
    doc = httpx.get(f"{url}/openapi.json").json()["paths"]
    search = doc["/v1/search"]["post"]
    schema = search["requestBody"]["content"]["application/json"]["schema"]
    assert schema["additionalProperties"] is False
    assert {"group_by", "min_score", "min_score_diff", "mode", "format"} <= set(schema["properties"])
    assert {"403", "413"} <= set(doc["/v1/file"]["get"]["responses"]) and "text/markdown" in search["responses"]["200"][
        "content"
    ]


@pytest.mark.parametrize(
    "allowed,host,status",
    [
        (["code.example.com"], "code.example.com", 200),
        (["code.example.com"], "code.example.com:8765", 200),
        (["code.example.com"], "other.example.com", 421),
        (["*"], "any.example.org:9", 200),
    ],
)
def test_an_allowed_host_reaches_every_surface_mcp_included(service, allowed, host, status):
    """--allow-host admits the same hosts on /v1 and /mcp: the MCP transport checks hosts again behind the Guard,
    and must agree with it (a `*` too)."""
    with Server(app(service, allowed_hosts=allowed)) as base:
        headers = {"Host": host, "Accept": "application/json, text/event-stream"}
        v1 = httpx.get(f"{base}/v1/repos", headers={"Host": host})
        mcp = httpx.post(f"{base}/mcp", json=MCP_INITIALIZE, headers=headers)
    assert (v1.status_code, mcp.status_code) == (status, status), (v1.text, mcp.text)


@pytest.mark.parametrize(
    "repo,path,status,phrase",
    [
        ("nope", "x.py", 404, "unknown repo 'nope'"),
        ("api", "missing.py", 404, "no file 'missing.py' in repo 'api'"),
        ("api", "assets/logo.png", 400, "is a binary file"),
        ("api", "link.py", 400, "is a symlink"),
        ("api", "vendor-sub", 400, "is a submodule"),
        ("api", "src/billing", 400, "is a directory (entries: invoice.py, renew.py)"),
    ],
)
def test_a_file_request_fails_alike_on_v1_and_codesearch(url, repo, path, status, phrase):
    """The same status and sentence on both HTTP surfaces: a missing thing 404, a request asked wrongly 400.
    (A path that climbs out is 403 on codesearch, whose contract reads paths as a workspace's.)"""
    v1 = httpx.get(f"{url}/v1/file", params={"repo": repo, "path": path})
    read = httpx.post(f"{url}/codesearch/read", json={"filePath": f"{repo}/{path}"})
    assert v1.status_code == read.status_code == status, (v1.text, read.text)
    assert phrase in v1.json()["error"]["message"] and phrase in read.json()["error"]
