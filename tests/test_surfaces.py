"""Every HTTP contract answers every refused request in its own one error shape (datasette's
tests/test_error_shape.py): one assert_<contract>_error per contract, applied to a bad request on each of
its routes, and a check that the table names every route, so a route that escapes the mechanism fails here."""

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from indexer.embed import HashEmbedder
from query.service import Service
from query.surfaces import SurfaceError, endpoint, read_body
from query.surfaces.app import CIP_PREFIX, LUCOS_PREFIX
from query.surfaces import history_pages, web
from query.surfaces.app import app as server_app
from query.surfaces.cip_auth import AuthSettings, mint
from tests.corpus import private_copy
from tests.servers import MCP_ACCEPT, MCP_INITIALIZE

SECRET = "test-secret-for-hs256-signing-0123456789"
LUCOS_HEADERS = {"X-Request-Id": "req-1", "X-Org-Id": "default", "X-User-Id": "u1"}
REPO_ID = "lucos:ws:0123456789abcdef"


@pytest.fixture(scope="module")
def server(corpus, tmp_path_factory):
    service = Service(private_copy(corpus, tmp_path_factory.mktemp("surfaces")), embedder=HashEmbedder())
    asgi = server_app(service, lucos=True, cip_settings=AuthSettings(secret=SECRET))
    with TestClient(asgi, base_url="http://127.0.0.1") as client:
        yield client


def one_sentence(message) -> None:
    assert isinstance(message, str) and message.strip(), message
    assert "\n" not in message and "Traceback" not in message, message


def assert_v1_error(r, status: int, code: str) -> None:
    """/v1: {"error": {"code", "message"}}, nothing else."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    one_sentence(body["error"]["message"])


def assert_codesearch_error(r, status: int) -> None:
    """codesearch: {"success": false, "error": message}."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"success", "error"} and body["success"] is False, body
    one_sentence(body["error"])


def assert_lucos_error(r, status: int, code: str) -> None:
    """Lucos: {"code", "message", "request_id"}, the request id echoed."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"code", "message", "request_id"} and body["code"] == code, body
    assert body["request_id"] == r.request.headers.get("X-Request-Id")
    one_sentence(body["message"])


def assert_cip_error(r, status: int) -> None:
    """The Codebase Index Protocol: {"message"}."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"message"}, body
    one_sentence(body["message"])


BAD_JSON = {"content": b"{not json", "headers": {"Content-Type": "application/json"}}
# (route as the app declares it, method, path asked, request arguments, status, code)
V1 = [
    ("/healthz", "POST", "/healthz", {}, 405, "method_not_allowed"),
    ("/metrics", "POST", "/metrics", {}, 405, "method_not_allowed"),
    ("/readyz", "POST", "/readyz", {}, 405, "method_not_allowed"),
    ("/openapi.json", "DELETE", "/openapi.json", {}, 405, "method_not_allowed"),
    (
        "/.well-known/oauth-protected-resource",
        "POST",
        "/.well-known/oauth-protected-resource",
        {},
        405,
        "method_not_allowed",
    ),
    (
        "/.well-known/oauth-protected-resource/mcp",
        "PUT",
        "/.well-known/oauth-protected-resource/mcp",
        {},
        405,
        "method_not_allowed",
    ),
    ("/v1/search", "POST", "/v1/search", BAD_JSON, 400, "bad_request"),
    ("/v1/chunks", "GET", "/v1/chunks", {"params": {"idz": "1"}}, 400, "bad_request"),
    ("/v1/grep", "POST", "/v1/grep", {"json": {"pattern": "x", "limit": "many"}}, 400, "bad_request"),
    ("/v1/grep", "POST", "/v1/grep", {"json": {"pattern": "x", "cursor": "garbage"}}, 400, "bad_request"),
    ("/v1/file", "GET", "/v1/file", {"params": {"repo": "api", "path": "src/no_such_file.py"}}, 404, "not_found"),
    ("/v1/files", "GET", "/v1/files", {"params": {"repo": "api", "limit": "0"}}, 400, "bad_request"),
    ("/v1/outline", "GET", "/v1/outline", {"params": {"repo": "api", "path": "nope.py"}}, 404, "not_found"),
    ("/v1/route", "POST", "/v1/route", {"json": {"task": 7}}, 400, "bad_request"),
    ("/v1/context", "GET", "/v1/context", {"params": {"symbol": "no_such_symbol_anywhere"}}, 404, "not_found"),
    ("/v1/context", "GET", "/v1/context", {"params": {"symbol": "Invoice", "name_only": "maybe"}}, 400, "bad_request"),
    ("/v1/references", "GET", "/v1/references", {"params": {"repo": "api"}}, 400, "bad_request"),
    ("/v1/commits", "POST", "/v1/commits", {"json": {"query": "x", "since": "soon"}}, 400, "bad_request"),
    ("/v1/log", "GET", "/v1/log", {"params": {"repo": "no-such-repo"}}, 404, "not_found"),
    ("/v1/blame", "GET", "/v1/blame", {"params": {"repo": "api", "path": "nope.py"}}, 404, "not_found"),
    ("/v1/diff", "GET", "/v1/diff", {"params": {"repo": "api", "base": "main"}}, 400, "bad_request"),
    ("/v1/repos", "DELETE", "/v1/repos", {}, 405, "method_not_allowed"),
    ("/v1/status", "POST", "/v1/status", {}, 405, "method_not_allowed"),
    ("/v1/sessions/{session_id}/sync", "POST", "/v1/sessions/s1/sync", {"json": {"files": []}}, 400, "bad_request"),
    ("/v1/sessions/{session_id}", "GET", "/v1/sessions/no-such-session", {}, 404, "not_found"),
    (None, "GET", "/v1/no-such-route", {}, 404, "not_found"),
]
CODESEARCH = [
    ("/search", "POST", "/search", BAD_JSON, 400),
    ("/clip/{clip}", "GET", "/clip/999999", {}, 404),
    ("/clips", "GET", "/clips", {}, 400),
    ("/read", "POST", "/read", {"json": {"filePath": "/etc/passwd", "startLine": 1}}, 403),
    ("/health", "POST", "/health", {}, 405),
    ("/stats", "DELETE", "/stats", {}, 405),
    ("/openapi.json", "POST", "/openapi.json", {}, 405),
    (None, "GET", "/no-such-route", {}, 404),
]
LUCOS = [
    ("/indexing/chunks", "POST", "/indexing/chunks", {"json": {"repo_id": REPO_ID}}, 401, "TRUSTED_CONTEXT_REQUIRED"),
    ("/indexing/chunks", "POST", "/indexing/chunks", {**BAD_JSON, "lucos": True}, 400, "INVALID_PAYLOAD"),
    (
        "/indexing/status",
        "GET",
        "/indexing/status",
        {"params": {"repo_id": "x"}, "lucos": True},
        400,
        "INVALID_PAYLOAD",
    ),
    ("/retrieval/search", "POST", "/retrieval/search", {"json": {"query": "x"}, "lucos": True}, 400, "INVALID_PAYLOAD"),
    ("/health/", "POST", "/health/", {"lucos": True}, 405, "METHOD_NOT_ALLOWED"),
    ("/version", "POST", "/version", {"lucos": True}, 405, "METHOD_NOT_ALLOWED"),
    ("/openapi.json", "PUT", "/openapi.json", {"lucos": True}, 405, "METHOD_NOT_ALLOWED"),
    (None, "GET", "/no-such-route", {"lucos": True}, 404, "NOT_FOUND"),
]
CIP = [
    ("/sync", "POST", "/sync", {"json": {"repos": []}}, 401),
    ("/sync", "POST", "/sync", {**BAD_JSON, "token": True}, 400),
    ("/index", "POST", "/index", {"json": {"chunks": {}}, "token": True}, 400),
    ("/search", "POST", "/search", {"json": {"query": 7}, "token": True}, 400),
    ("/auth/github/start", "GET", "/auth/github/start", {"params": {"redirect_url": "http://evil.example/"}}, 400),
    ("/auth/github/callback", "GET", "/auth/github/callback", {"params": {"state": "forged"}}, 401),
    ("/auth/github/refresh", "POST", "/auth/github/refresh", {"json": {"refresh_token": "forged"}}, 401),
    ("/openapi.json", "POST", "/openapi.json", {}, 405),
    (None, "GET", "/no-such-route", {}, 404),
]


def _request(server, method: str, path: str, args: dict):
    args = dict(args)
    headers = dict(args.pop("headers", {}))
    if args.pop("lucos", False):
        headers.update(LUCOS_HEADERS)
    if args.pop("token", False):
        headers["Authorization"] = f"Bearer {mint(SECRET, 'alice')}"
    return server.request(method, path, headers=headers, **args)


def _root(server):
    """The Starlette the surfaces are mounted in, under the request log and the Guard."""
    app = server.app
    while not hasattr(app, "routes"):
        app = app.app
    return app


def _mounted(server, prefix: str):
    root = _root(server)
    return next(m.app for m in root.routes if isinstance(m, Mount) and m.path == prefix)


def _declared(routes) -> set[str]:
    return {r.path for r in routes if isinstance(r, Route)}


@pytest.mark.parametrize("route,method,path,args,status,code", V1, ids=[f"{m} {p}" for _, m, p, *_ in V1])
def test_every_v1_route_errors_in_the_v1_shape(server, route, method, path, args, status, code):
    assert_v1_error(_request(server, method, path, args), status, code)


@pytest.mark.parametrize("route,method,path,args,status", CODESEARCH, ids=[f"{m} {p}" for _, m, p, *_ in CODESEARCH])
def test_every_codesearch_route_errors_in_its_contract_shape(server, route, method, path, args, status):
    assert_codesearch_error(_request(server, method, "/codesearch" + path, args), status)


@pytest.mark.parametrize("route,method,path,args,status,code", LUCOS, ids=[f"{m} {p}" for _, m, p, *_ in LUCOS])
def test_every_lucos_route_errors_in_its_contract_shape(server, route, method, path, args, status, code):
    assert_lucos_error(_request(server, method, LUCOS_PREFIX + path, args), status, code)


@pytest.mark.parametrize("route,method,path,args,status", CIP, ids=[f"{m} {p}" for _, m, p, *_ in CIP])
def test_every_cip_route_errors_in_its_contract_shape(server, route, method, path, args, status):
    assert_cip_error(_request(server, method, CIP_PREFIX + path, args), status)


def test_the_tables_name_every_route_of_every_contract(server):
    root = _root(server)
    pages = _declared(web.ROUTES + history_pages.ROUTES)  # HTML for people: tests/test_web.py
    assert {r[0] for r in V1} - {None} == _declared(root.routes) - pages
    for prefix, table in (("/codesearch", CODESEARCH), (LUCOS_PREFIX, LUCOS), (CIP_PREFIX, CIP)):
        assert {r[0] for r in table} - {None} == _declared(_mounted(server, prefix).routes), prefix


def test_endpoint_answers_a_status_its_error_carries_and_hides_a_bug(tmp_path):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse

    def shape(request, status, message, code):
        return JSONResponse({"status": status, "message": message, "code": code}, status_code=status)

    @endpoint(shape)
    async def refuse(request):
        body = await read_body(request, ("name",))
        if body.get("name") == "bug":
            raise RuntimeError("a secret detail of the failure")
        raise SurfaceError(409, f"{body.get('name')!r} is taken; pick another name", "TAKEN")

    @endpoint(shape)
    async def answer(request):
        return {"ok": True}

    client = TestClient(Starlette(routes=[Route("/refuse", refuse, methods=["POST"]), Route("/answer", answer)]))
    assert client.post("/refuse", json={"name": "x"}).json() == {
        "status": 409,
        "message": "'x' is taken; pick another name",
        "code": "TAKEN",
    }
    typo = client.post("/refuse", json={"nmae": "x"})
    assert typo.status_code == 400 and "did you mean 'name'?" in typo.json()["message"]
    bug = client.post("/refuse", json={"name": "bug"})
    assert bug.status_code == 500 and "secret" not in bug.text and bug.json()["code"] is None
    assert client.get("/answer").json() == {"ok": True}


def test_the_guard_and_mcp_allow_the_same_hosts(corpus, tmp_path):
    service = Service(private_copy(corpus, tmp_path), embedder=HashEmbedder())
    initialize, headers = MCP_INITIALIZE, {**MCP_ACCEPT, "Origin": "https://code.example.org"}
    with TestClient(
        server_app(service, allowed_hosts=["code.example.org"]), base_url="http://code.example.org:8080"
    ) as c:
        assert c.post("/mcp", json=initialize, headers=headers).status_code == 200  # past the Guard and MCP's check
        refused = c.post("/mcp", json=initialize, headers={**headers, "Origin": "https://elsewhere.example"})
        assert_v1_error(refused, 403, "bad_origin")  # the Guard answers first, in the one shape
