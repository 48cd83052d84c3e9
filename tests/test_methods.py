"""Every mount answers the same way, each in its own contract's error shape: a wrong method is a 405 naming the
methods that work (RFC 9110), an unknown path a 404, a body over the cap a 413, bad JSON and unknown fields a 400.
Every route of the real server is walked with every method, so a route added later is checked too."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from indexer.embed import HashEmbedder
from query.service import Service
from query.surfaces.app import app
from query.surfaces.guard import MAX_BODY_BYTES
from tests.servers import Server

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
LUCOS_HEADERS = {"X-Request-Id": "r1", "X-Org-Id": "default", "X-User-Id": "u1"}


def v1(body) -> bool:
    return set(body) == {"error"} and set(body["error"]) == {"code", "message"}


def codesearch(body) -> bool:
    return body.get("success") is False and set(body) == {"success", "error"}


def cip(body) -> bool:
    return set(body) == {"message"}


def lucos(body) -> bool:
    return set(body) == {"code", "message", "request_id"} and body["code"].isupper()


# Each mount's prefix and the shape of its errors; the rest of the server (/v1, the pages, probes) is v1's.
SHAPES = {"/codesearch": codesearch, "/codebase-index": cip, "/api/v1": lucos}


def shape_of(path: str):
    return next((check for prefix, check in SHAPES.items() if path.startswith(prefix + "/")), v1)


def routes(asgi) -> list[tuple[str, set[str] | None]]:
    """Every route of the server as (concrete path, methods); None for a route that takes every method."""
    while not isinstance(asgi, Starlette):  # through the request log and the Guard
        asgi = asgi.app

    def walk(items, prefix=""):
        for r in items:
            if isinstance(r, Mount):
                yield from walk(r.routes, prefix + r.path)
            elif isinstance(r, Route):
                path = (prefix + r.path).replace("{path:path}", "src/app.py")
                yield path.replace("{", "").replace("}", ""), r.methods

    return list(walk(asgi.routes))


@pytest.fixture(scope="module")
def server(corpus):
    asgi = app(Service(corpus.cfg, embedder=HashEmbedder()), lucos=True)
    with Server(asgi) as url:
        yield url, routes(asgi)


def test_every_wrong_method_on_every_route_is_a_405_with_allow_in_its_contracts_shape(server):
    url, table = server
    walked = 0
    assert {p for p, _ in table} >= {"/v1/search", "/codesearch/search", "/codebase-index/search", "/api/v1/version"}
    for path, methods in table:
        for method in METHODS:
            if methods is None or method in methods:
                continue
            answer = httpx.request(method, url + path, headers=LUCOS_HEADERS)
            assert answer.status_code == 405, (method, path, answer.text)
            assert set(answer.headers["allow"].split(", ")) == methods, (method, path)
            assert shape_of(path)(answer.json()), (method, path, answer.text)
            walked += 1
    assert walked > 150
    mcp = httpx.put(f"{url}/mcp")  # the MCP transport answers its own 405, also with Allow
    assert mcp.status_code == 405 and set(mcp.headers["allow"].split(", ")) == {"GET", "POST", "DELETE"}


@pytest.mark.parametrize("prefix", ["/v1", "/codesearch", "/codebase-index", "/api/v1", ""])
def test_an_unknown_path_and_a_body_over_the_cap_answer_in_the_mounts_shape(server, prefix):
    url, _ = server
    check = shape_of(prefix + "/")
    missing = httpx.get(f"{url}{prefix}/no-such-route", headers=LUCOS_HEADERS)
    assert missing.status_code == 404 and check(missing.json()), missing.text
    big = b'{"query": "' + b"x" * MAX_BODY_BYTES + b'"}'
    over = httpx.post(f"{url}{prefix}/search", content=big, headers={"content-type": "application/json"})
    assert over.status_code == 413 and check(over.json()), over.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/search", b"{nope"),
        ("/v1/search", b'{"query": "x", "bogus": 1}'),
        ("/codesearch/search", b"{nope"),
        ("/codesearch/search", b'{"query": "x", "bogus": 1}'),
        ("/api/v1/retrieval/search", b"{nope"),
        ("/api/v1/retrieval/search", b'{"query": "x", "repo_ids": ["api"], "bogus": 1}'),
    ],
)
def test_bad_json_and_unknown_fields_are_a_400_in_the_mounts_shape(server, path, body):
    url, _ = server
    answer = httpx.post(url + path, content=body, headers={"content-type": "application/json", **LUCOS_HEADERS})
    assert answer.status_code == 400 and shape_of(path)(answer.json()), answer.text
    message = answer.json().get("message") or answer.json().get("error")
    message = message["message"] if isinstance(message, dict) else message
    assert ("not JSON" in message or "bogus" in message) and "\n" not in message
