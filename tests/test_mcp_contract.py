"""MCP that describes itself: every tool declares an output schema and answers with structured content that the
real client receives and that validates against it (and against the whole model behind it), the same answer the
/v1 route gives; schemas carry no noise; the server names its version."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json

import jsonschema
import pytest
from mcp import Client
from pydantic import TypeAdapter
from starlette.testclient import TestClient

from indexer.build import run
from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from query.service import Service
from query.surfaces.app import app
from query.surfaces.mcp import INSTRUCTIONS, build
from tests import gitrepo
from tests.corpus import write_config

V1 = "def total(items):\n    return sum(items)\n"
V2 = "def total(items, tax=0):\n    # with tax now\n    return sum(items) * (1 + tax)\n"
PATH = "src/shop/cart.py"
MODEL_BUDGET = 6_000  # characters of tools/list in every agent's context

# One call of every tool, and the /v1 route that answers the same (None: no route, or one with another body).
CALLS = {
    "search_code": ({"query": "total items tax"}, ("post", "/v1/search", {"query": "total items tax"})),
    "get_chunk": (None, None),  # ids from search_code
    "grep": ({"pattern": "def total"}, ("post", "/v1/grep", {"pattern": "def total"})),
    "get_file": (
        {"repo": "shop", "path": PATH, "start_line": 1, "end_line": 2},
        ("get", "/v1/file", {"repo": "shop", "path": PATH, "start": 1, "end": 2}),
    ),
    "list_files": ({"repo": "shop"}, ("get", "/v1/files", {"repo": "shop"})),
    "outline": ({"repo": "shop", "path": PATH}, ("get", "/v1/outline", {"repo": "shop", "path": PATH})),
    "route_task": ({"task": "tax on the cart total"}, ("post", "/v1/route", {"task": "tax on the cart total"})),
    "expand_context": ({"symbol": "total"}, ("get", "/v1/context", {"symbol": "total"})),
    "search_commits": ({"query": "tax"}, ("post", "/v1/commits", {"query": "tax"})),
    "log": ({"repo": "shop", "path": PATH}, ("get", "/v1/log", {"repo": "shop", "path": PATH})),
    "blame": ({"repo": "shop", "path": PATH}, ("get", "/v1/blame", {"repo": "shop", "path": PATH})),
    "diff": (
        {"repo": "shop", "base": "main~1", "head": "main"},
        ("get", "/v1/diff", {"repo": "shop", "base": "main~1", "head": "main"}),
    ),
    "sync_workspace": ({"session_id": "s1", "repo": "shop", "files": {"new.py": "def added():\n    pass\n"}}, None),
    "session_status": ({"session_id": "s1"}, None),
    "end_session": ({"session_id": "s1"}, None),
    "list_repos": ({}, None),  # /v1/status: the same, but its last run's age moves between two calls
}


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    repo = gitrepo.init(root / "src" / "shop")
    gitrepo.commit(
        repo, {PATH: V1.encode(), "README.md": b"# shop\n"}, message="Add the cart total", when=1_700_000_000
    )
    gitrepo.commit(repo, {PATH: V2.encode(), "README.md": b"# shop\n"}, message="Tax on the total", when=1_700_100_000)
    cfg = write_config(root, [RepoSpec(name="shop", url=str(root / "src" / "shop"))])
    run(cfg, show_progress=False)
    return Service(cfg, embedder=HashEmbedder())


def session(service, work):
    async def go():
        async with Client(build(service)) as client:
            return await work(client)

    return asyncio.run(go())


def test_every_tool_declares_its_answer_and_every_answer_matches_it(shop):
    async def work(client):
        listed = {t.name: t for t in (await client.list_tools()).tools}
        answers = {}
        for name, (args, _) in CALLS.items():
            if args is None:
                hit = answers["search_code"].structured_content["hits"][0]["id"]
                args = {"ids": [hit, 123456789]}
            answers[name] = await client.call_tool(name, args)
        return client.server_info, listed, answers

    info, listed, answers = session(shop, work)
    assert set(listed) == set(CALLS)  # a new tool joins CALLS, so its answer is checked too
    assert info.version == importlib.metadata.version("blobdex")
    server = build(shop)
    for name, result in answers.items():
        assert not result.is_error, (name, result.content[0].text)
        data = result.structured_content
        schema = listed[name].output_schema
        assert schema and schema["type"] == "object", name
        jsonschema.validate(data, schema)  # as published in tools/list
        whole = server._tool_manager.get_tool(name).fn_metadata.output_model
        jsonschema.validate(data, TypeAdapter(whole).json_schema())  # and against the whole model, nested fields too
        assert result.content[0].text.strip(), name  # markdown (or JSON) text beside it for the model to read
    assert answers["get_chunk"].structured_content["errors"][0]["id"] == 123456789
    assert [c["subject"] for c in answers["log"].structured_content["commits"]] == [
        "Tax on the total",
        "Add the cart total",
    ]
    assert [f["path"] for f in answers["diff"].structured_content["files"]] == [PATH]


def test_structured_answers_are_the_v1_bodies(shop):
    async def work(client):
        return {name: await client.call_tool(name, args) for name, (args, route) in CALLS.items() if route}

    answers = session(shop, work)
    with TestClient(app(shop), base_url="http://127.0.0.1") as http:
        for name, (args, (method, path, params)) in ((n, CALLS[n]) for n in answers):
            body = http.post(path, json=params) if method == "post" else http.get(path, params=params)
            assert body.status_code == 200, (path, body.text)
            assert answers[name].structured_content == body.json(), name


def test_schemas_say_nothing_twice_and_the_list_stays_small(shop):
    tools = session(shop, lambda client: client.list_tools()).tools
    listed = json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools])
    assert '"title"' not in listed and '"default": null' not in listed and '{"type": "null"}' not in listed
    search = next(t for t in tools if t.name == "search_code")
    assert search.input_schema["properties"]["kind"]["enum"]  # known values are enums
    assert search.output_schema["properties"]["next_cursor"]["type"] == ["string", "null"]  # null is an answer
    # Every tool is named in the instructions, and no two descriptions open with the same sentence.
    assert all(t.name in INSTRUCTIONS for t in tools)
    openings = [t.description.split(".")[0] for t in tools]
    assert len(set(openings)) == len(openings)
    # What a model's context holds of the list (clients hand a model name, description and input schema; output
    # schemas are for the client): the issue's budget is 6,000 characters. ci/bench_tools.py checks the
    # descriptions still tell the tools apart.
    held = sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema, separators=(",", ":"))) for t in tools)
    assert held <= MODEL_BUDGET, f"tools/list puts {held} characters in a model's context, over {MODEL_BUDGET}"


def test_get_file_without_a_range_reads_a_page_and_says_where_the_next_starts(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "long")
    gitrepo.commit(repo, {"big.py": "".join(f"x{i} = {i}\n" for i in range(450)).encode()})
    cfg = write_config(tmp_path, [RepoSpec(name="long", url=str(tmp_path / "src" / "long"))])
    run(cfg, show_progress=False)
    service = Service(cfg, embedder=HashEmbedder())
    first = session(service, lambda c: c.call_tool("get_file", {"repo": "long", "path": "big.py"}))
    data = first.structured_content
    assert (data["line_start"], data["line_end"], data["total_lines"], data["next_start_line"]) == (1, 200, 450, 201)
    assert "start_line=201" in first.content[0].text
    last = session(service, lambda c: c.call_tool("get_file", {"repo": "long", "path": "big.py", "start_line": 401}))
    assert last.structured_content["next_start_line"] is None and last.structured_content["line_end"] == 450


def test_the_kind_enum_is_the_kinds_search_takes():
    from query.search import KINDS
    from query.surfaces.answers import Kind

    assert set(Kind.__args__) == KINDS


def test_the_catalog_resource_names_what_the_filters_take(shop):
    async def work(client):
        listed = (await client.list_resources()).resources
        read = await client.read_resource("blobdex://catalog")
        return listed, read

    listed, read = session(shop, work)
    assert [str(r.uri) for r in listed] == ["blobdex://catalog"] and listed[0].mime_type == "application/json"
    catalog = json.loads(read.contents[0].text)
    assert catalog["repos"] == ["shop"] and catalog["languages"] == ["markdown", "python"]
    assert set(catalog["kinds"]) >= {"function", "class", "code", "doc"}
