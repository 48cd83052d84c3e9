"""Every surface searches through the one facade (query.service.Service): no protocol module ranks, thresholds or
reads a snapshot's stores itself, so a rule, a threshold or a reranker means the same on every door."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
from pathlib import Path

import pytest
from mcp import Client
from starlette.testclient import TestClient

from indexer.embed import HashEmbedder
from query.service import Service
from query.surfaces.app import CIP_PREFIX
from query.surfaces.app import app as server_app
from query.surfaces.cip_auth import AuthSettings, mint
from query.surfaces.mcp import build
from tests.corpus import private_copy

ROOT = Path(__file__).resolve().parents[1]
SURFACES = sorted((ROOT / "query" / "surfaces").glob("*.py"))
# The engine behind the facade: a surface may take records (SearchRequest, Hit, PushedChunk...), errors and
# constants from these modules, never a function (a ranking, a threshold, a store reader).
ENGINE = ("query.search", "query.reader", "query.localize", "query.route_task", "query.expand_context")
ENGINE += ("query.overlays", "query.rerank", "indexer.snapshot")
SECRET = "test-secret-for-hs256-signing-0123456789"
MCP_ERROR_PREFIX = "Error executing tool search_code: "


def _engine(module: str) -> bool:
    return any(module == m or module.startswith(f"{m}.") for m in ENGINE)


def _reaches_past_the_facade(path: Path) -> list[str]:
    """The engine functions (and whole engine modules) a surface module imports, wherever in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if _engine(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if _engine(f"{node.module}.{alias.name}") and not _engine(node.module):
                    found.append(f"from {node.module} import {alias.name}")  # `from query import search`
                elif _engine(node.module):
                    value = getattr(importlib.import_module(node.module), alias.name)
                    if callable(value) and not inspect.isclass(value) or inspect.ismodule(value):
                        found.append(f"from {node.module} import {alias.name}")
    return found


def test_no_surface_ranks_thresholds_or_reads_a_store_itself():
    reaching = {p.relative_to(ROOT).as_posix(): f for p in SURFACES if (f := _reaches_past_the_facade(p))}
    assert reaching == {}


def test_the_rule_sees_an_engine_function(tmp_path):
    """The structural rule can fail: a surface importing a ranking or a store reader is named."""
    module = tmp_path / "bypass.py"
    module.write_text(
        "from query.search import SearchRequest, search\nfrom indexer.snapshot import read_graph\n"
        "from query import search as ranking\n"
    )
    assert _reaches_past_the_facade(module) == [
        "from query.search import search",
        "from indexer.snapshot import read_graph",
        "from query import search",
    ]


@pytest.fixture(scope="module")
def service(corpus, tmp_path_factory):
    return Service(private_copy(corpus, tmp_path_factory.mktemp("facade")), embedder=HashEmbedder())


@pytest.fixture(scope="module")
def http(service):
    with TestClient(server_app(service, cip_settings=AuthSettings(secret=SECRET)), base_url="http://127.0.0.1") as c:
        yield c


def search_code(service, args: dict):
    async def go():
        async with Client(build(service)) as client:
            return await client.call_tool("search_code", args)

    return asyncio.run(go())


def _v1_message(http, body: dict) -> str:
    r = http.post("/v1/search", json=body)
    assert r.status_code == 400, r.text
    return r.json()["error"]["message"]


def _mcp_message(service, args: dict) -> str:
    result = search_code(service, args)
    assert result.is_error
    return result.content[0].text.removeprefix(MCP_ERROR_PREFIX)


def test_both_thresholds_are_refused_with_one_sentence_on_every_door(service, http):
    both = {"query": "invoice", "min_score": 0.1, "min_score_diff": 0.1}
    r = http.post("/codesearch/search", json=both)
    assert r.status_code == 400 and r.json()["success"] is False
    said = {
        "/v1/search": _v1_message(http, both),
        "/v1/search group_by=file": _v1_message(http, {**both, "group_by": "file"}),
        "search_code": _mcp_message(service, both),
        "search_code group_by=file": _mcp_message(service, {**both, "group_by": "file"}),
        "/codesearch/search": r.json()["error"],
    }
    assert len(set(said.values())) == 1, said
    sentence = said["/v1/search"]
    assert "min_score" in sentence and "min_score_diff" in sentence and "\n" not in sentence


def _v1_hits(http, args: dict) -> list[tuple]:
    data = http.post("/v1/search", json={"query": "invoice customer", "limit": 100, **args}).json()
    return [(h["repo"], h["path"], h["line_start"], h["line_end"]) for h in data["hits"]]


def _mcp_hits(service, args: dict) -> list[tuple]:
    result = search_code(service, {"query": "invoice customer", "limit": 100, **args})
    return [(h["repo"], h["path"], h["line_start"], h["line_end"]) for h in result.structured_content["hits"]]


def _codesearch_hits(http, args: dict) -> list[tuple]:
    body = {"query": "invoice customer", "top_k": 100, "format": "json", **args}
    results = http.post("/codesearch/search", json=body).json()["data"]["results"]
    return [(*h["filePath"].split("/", 1), h["startLine"], h["endLine"]) for h in results]


@pytest.mark.parametrize("threshold", [{"min_score": 0.3}, {"min_score_diff": 0.05}])
def test_a_threshold_keeps_the_same_hits_on_every_door(service, http, threshold):
    """Over a ranking that fits in one answer (codesearch thresholds its top_k, /v1 and MCP the whole ranking),
    the doors keep the same hits in the same order, and the threshold splits the ranking."""
    everything = _v1_hits(http, {})
    assert 0 < len(everything) < 100  # the whole ranking fits in one answer of every door
    kept = _v1_hits(http, threshold)
    assert 0 < len(kept) < len(everything)
    assert kept == _mcp_hits(service, threshold) == _codesearch_hits(http, threshold)
    assert _codesearch_hits(http, {"min_score": 0}) == everything  # no floor: the contract's order is hybrid's


def test_the_cip_search_ranks_as_v1_does(http):
    """A CIP client with nothing pushed searches the snapshot alone: the same hits, in the same order, as /v1."""
    token = {"Authorization": f"Bearer {mint(SECRET, 'alice')}"}
    r = http.post(f"{CIP_PREFIX}/search", json={"query": "invoice customer", "limit": 8}, headers=token)
    assert r.status_code == 200, r.text
    cip = [(h["repo"], h["path"], h["lineStart"], h["lineEnd"]) for h in r.json()["results"]]
    assert cip and cip == _v1_hits(http, {"limit": 8})
