"""Each surface speaks its own words (indexer.errors.said): the CLI names commands and flags, MCP tools and
arguments, HTTP endpoints and fields, the page its pages. The second newcomer review found CLI errors naming MCP
tools ("list_files shows…"), the page naming a shell command, and a bad --ref on get-file advising 'repo add'."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from mcp import Client

from indexer.embed import HashEmbedder
from indexer.errors import ACTION_RE, ACTIONS, SURFACES, said
from query.service import Service
from query.surfaces.app import app
from query.surfaces.mcp import build
from tests.corpus import private_copy
from tests.servers import Server

ROOT = Path(__file__).resolve().parents[1]
# Each surface's vocabulary, as another surface must never say it.
TOOLS = re.compile(
    r"\b(list_files|list_repos|get_file|search_code|find_references|expand_context|get_chunk|sync_workspace|"
    r"index_status|ref_or_commit|route_task)\b|literal=true"
)
CLI_READING = re.compile(r"'blobdex (search|files|outline|status|chunk|get-file|references|context)\b|--ref\b")
ENDPOINTS = re.compile(r"\b(GET|POST) /v1/")
FOREIGN = {
    "cli": (TOOLS, ENDPOINTS),
    "mcp": (CLI_READING, ENDPOINTS),
    "http": (TOOLS, CLI_READING),
    "web": (TOOLS, CLI_READING, ENDPOINTS),
}
RENEW = "src/billing/renew.py"


def test_every_action_a_message_names_is_worded_for_every_surface_and_stays_in_its_words():
    files = [p for d in ("indexer", "query") for p in (ROOT / d).rglob("*.py") if p != ROOT / "indexer" / "errors.py"]
    named = set(ACTION_RE.findall("\n".join(p.read_text(encoding="utf-8") for p in files)))
    assert named == set(ACTIONS), named ^ set(ACTIONS)  # none unworded, none unused
    for name, words in ACTIONS.items():
        assert len(words) == len(SURFACES)
        for surface, text in zip(SURFACES, words):
            assert not any(p.search(text) for p in FOREIGN[surface]), (name, surface, text)
    assert said("run 'blobdex index' first", "mcp") == "ask the user to run 'blobdex index' first"


@pytest.fixture(scope="module")
def service(corpus, tmp_path_factory):
    return Service(private_copy(corpus, tmp_path_factory.mktemp("words")), embedder=HashEmbedder())


def _mcp(service, tool: str, args: dict) -> str:
    async def go():
        async with Client(build(service)) as client:
            result = await client.call_tool(tool, args)
            assert result.is_error, (tool, args)
            return result.content[0].text

    return asyncio.run(go())


def test_no_surface_names_another_surfaces_commands(service, corpus, blobdex):
    cfg = ("--config", corpus.cfg.path)  # the CLI reads the shared corpus: nothing it runs here writes
    cli = [
        blobdex(*cfg, "get-file", "nope", RENEW),
        blobdex(*cfg, "get-file", "api", "src/nope.py"),
        blobdex(*cfg, "get-file", "api", RENEW, "--ref", "nosuch"),
        blobdex(*cfg, "files", "nope"),
        blobdex(*cfg, "outline", "api", "src/nope.py"),
        blobdex(*cfg, "references", "--repo", "api", "--path", RENEW, "--line", "99999"),
        blobdex(*cfg, "context", "no_such_symbol_anywhere"),
        blobdex(*cfg, "chunk", "999999"),
    ]
    assert all(r.code != 0 and r.err.startswith("blobdex: error: ") for r in cli), cli
    mcp = [
        _mcp(service, "get_file", {"repo": "nope", "path": RENEW}),
        _mcp(service, "get_file", {"repo": "api", "path": "src/nope.py"}),
        _mcp(service, "get_file", {"repo": "api", "path": RENEW, "ref_or_commit": "nosuch"}),
        _mcp(service, "list_files", {"repo": "nope"}),
        _mcp(service, "outline", {"repo": "api", "path": "src/nope.py"}),
        _mcp(service, "expand_context", {"repo": "api", "path": RENEW, "line": 99999}),
        _mcp(service, "expand_context", {"symbol": "no_such_symbol_anywhere"}),
        _mcp(service, "grep", {"pattern": "(unclosed"}),
        _mcp(service, "search_code", {"query": "x", "session_id": "no-such-session"}),
    ]
    with Server(app(service)) as url:
        http = [
            httpx.get(f"{url}/v1/file", params={"repo": "nope", "path": RENEW}),
            httpx.get(f"{url}/v1/file", params={"repo": "api", "path": "src/nope.py"}),
            httpx.get(f"{url}/v1/file", params={"repo": "api", "path": RENEW, "ref": "nosuch"}),
            httpx.get(f"{url}/v1/files", params={"repo": "nope"}),
            httpx.get(f"{url}/v1/outline", params={"repo": "api", "path": "src/nope.py"}),
            httpx.get(f"{url}/v1/references", params={"repo": "api", "path": RENEW, "line": 99999}),
            httpx.get(f"{url}/v1/context", params={"symbol": "no_such_symbol_anywhere"}),
            httpx.post(f"{url}/v1/grep", json={"pattern": "(unclosed"}),
            httpx.post(f"{url}/v1/search", json={"query": "x", "session_id": "no-such-session"}),
        ]
        web = [
            httpx.get(f"{url}/file/api/src/nope.py"),
            httpx.get(f"{url}/file/api/{RENEW}", params={"ref": "nosuch"}),
            httpx.get(f"{url}/symbol", params={"name": "no_such_symbol_anywhere"}),
            httpx.get(f"{url}/", params={"q": "(unclosed", "mode": "grep"}),
        ]
    assert all(r.status_code >= 400 for r in http + web), [(r.url, r.status_code) for r in http + web]
    answers = {
        "cli": [r.err for r in cli],
        "mcp": mcp,
        "http": [r.json()["error"]["message"] for r in http],
        "web": [r.text for r in web],
    }
    for surface, texts in answers.items():
        for text in texts:
            assert not any(p.search(text) for p in FOREIGN[surface]), (surface, text)
    # and each says what to do in its own words
    assert "'blobdex files REPO'" in answers["cli"][4] and "pass one with --ref" in answers["cli"][2]
    assert "pass one as ref_or_commit" in mcp[2] and "list_files lists" in mcp[4] and "sync_workspace" in mcp[8]
    assert "GET /v1/repos" in answers["http"][0] and 'send "literal": true' in answers["http"][7]
    assert "search for it on the search page" in answers["web"][0]
