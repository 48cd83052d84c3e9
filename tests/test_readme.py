"""The README's walkthrough, run line by line through the installed `blobdex` console script, and its MCP
registration, started. A tested block is found by its `<!-- tested: NAME -->` marker in README.md or docs/*.md,
so it is run wherever it lives."""

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests import gitrepo
from tests.corpus import HIT_JSON_FIELDS, RENEW_PY, tools_files
from tests.servers import BLOBDEX, MCP_ACCEPT, MCP_INITIALIZE, serve_subprocess

ROOT = Path(__file__).resolve().parent.parent
# Hosts and paths in the README that do not exist here, and the fixture repos that stand in for them.
STAND_INS = {"https://host/acme/api.git": "{api}", "/srv/git/tools.git": "{tools}"}


def documents() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]


def marked(name: str) -> str:
    """The text after the one `<!-- tested: NAME` marker of the documentation (the block it marks comes next)."""
    found = [text.split(f"<!-- tested: {name}", 1)[1] for text in documents() if f"<!-- tested: {name}" in text]
    assert len(found) == 1, f"{len(found)} documents mark a '{name}' block; exactly one must"
    return found[0]


def walkthrough() -> list[str]:
    block = marked("walkthrough").split("```", 2)[1]
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.startswith("blobdex ")]


def cli(args, cwd, env, check=True):
    proc = subprocess.run([BLOBDEX, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    renew = RENEW_PY + b"".join(b"\n\ndef helper_%d():\n    return %d\n" % (i, i) for i in range(30))
    api = gitrepo.init(root / "remote" / "api")
    gitrepo.commit(api, {"src/billing/renew.py": renew})
    tools = gitrepo.init(root / "remote" / "tools.git", bare=True)
    gitrepo.commit(tools, tools_files())
    work = root / "work"
    work.mkdir()
    env = {**os.environ, "BLOBDEX_MODEL": "blobdex:hash"}  # plumbing; meaning is tested in test_meaning
    env.pop("BLOBDEX_CONFIG", None)
    env.pop("BLOBDEX_DATA_DIR", None)
    outputs = {}
    for line in walkthrough():
        for original, stand_in in STAND_INS.items():
            line = line.replace(
                original, stand_in.format(api=f"file://{root}/remote/api", tools=f"{root}/remote/tools.git")
            )
        args = shlex.split(line)[1:]
        outputs[line] = cli(args, work, env)
    return root, work, env, outputs, renew


def test_walkthrough_covers_a_first_run():
    """The parser found the walkthrough, and it takes a new user from init to a verified snapshot (each line is
    run by the test below); its exact list is the README's to change."""
    commands = [shlex.split(x)[1] for x in walkthrough()]
    assert commands[0] == "init" and commands[-1] == "verify"
    assert {"repo", "index", "search", "get-file", "status"} <= set(commands)


def test_walkthrough_runs_and_search_json_has_the_contract(workdir):
    _, work, env, outputs, _ = workdir
    hits = json.loads(next(v.stdout for k, v in outputs.items() if "--json" in k))["hits"]
    assert hits and hits[0]["path"] == "src/billing/renew.py"
    assert set(hits[0]) >= HIT_JSON_FIELDS
    assert (work / "blobdex.toml").exists() and (work / ".blobdex" / "CURRENT").exists()


def test_get_file_prints_exactly_the_lines(workdir):
    _, _, _, outputs, renew = workdir
    out = next(v.stdout for k, v in outputs.items() if k.startswith("blobdex get-file"))
    assert out.encode() == b"".join(renew.splitlines(keepends=True)[39:90])


@pytest.fixture
def in_workdir(workdir, blobdex, monkeypatch):
    """The in-process `blobdex` in the walkthrough's directory and environment: CLI behaviour beyond the
    walkthrough is tested without paying a process (and its imports) per command."""
    _, work, env, _, _ = workdir
    monkeypatch.chdir(work)
    for name in ("BLOBDEX_CONFIG", "BLOBDEX_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BLOBDEX_MODEL", env["BLOBDEX_MODEL"])
    return blobdex


def test_index_json_and_status_json(in_workdir):
    report = json.loads(in_workdir("index", "--json").out)
    assert report["unchanged"] and report["totals"]["chunks_embedded"] == 0
    assert {r["name"] for r in report["repos"]} == {"api", "tools"}
    status = json.loads(in_workdir("status", "--json").out)
    assert {r["name"]: r["status"] for r in status["repos"]} == {"api": "ok", "tools": "ok"}
    assert all(not ref["behind"] for r in status["repos"] for ref in r["refs"])


def test_errors_are_one_sentence_on_stderr_with_nonzero_exit(in_workdir):
    for args, message in [
        (["get-file", "nope", "x.py"], "unknown repo 'nope'"),
        (["search", "x", "--repo", "nope"], "unknown repo 'nope'"),
        (["get-file", "api", "src/billing/renew.py", "--lines", "x-y"], "bad line range"),
        (["repo", "add", "bad/name", "/tmp"], "invalid repo name"),
        (["repo", "add", "x", "https://h/x.git", "--credential", "ghp_plaintoken"], "is not a reference"),
    ]:
        run = in_workdir(*args)
        assert run.code == 2 and run.out == ""
        assert run.err.startswith("blobdex: error: ") and message in run.err
        assert run.err.count("\n") == 1


def test_search_refuses_a_snapshot_built_with_another_model(in_workdir, monkeypatch):
    monkeypatch.setenv("BLOBDEX_MODEL", "all-MiniLM-L6-v2")
    run = in_workdir("search", "renew")
    assert run.code == 2
    assert "built with model 'blobdex:hash'" in run.err and "blobdex index --full" in run.err


def test_failed_repo_gives_exit_code_1_and_previous_content_keeps_serving(workdir, in_workdir):
    root = workdir[0]
    (root / "remote" / "tools.git").rename(root / "remote" / "tools-gone.git")
    try:
        run = in_workdir("index", "--json")
        assert run.code == 1
        report = json.loads(run.out)
        tools = next(r for r in report["repos"] if r["name"] == "tools")
        assert tools["status"] == "stale" and "does not exist" in tools["error"]
        found = in_workdir("search", "drain_queue", "--json", "--repo", "tools")
        hits = json.loads(found.out)["hits"]
        assert hits[0]["symbol"] == "drain_queue"
    finally:
        (root / "remote" / "tools-gone.git").rename(root / "remote" / "tools.git")


def test_a_cli_hit_id_reads_the_whole_chunk_back(workdir, in_workdir):
    hit = json.loads(in_workdir("search", "drain_queue", "--json", "--repo", "tools").out)["hits"][0]
    read = in_workdir("chunk", str(hit["id"]), "--json")
    (chunk,) = json.loads(read.out)["chunks"]
    assert (
        read.code == 0 and chunk["id"] == hit["id"] and (chunk["path"], chunk["symbol"]) == (hit["path"], "drain_queue")
    )
    assert "fn drain_queue" in chunk["text"] and "drain_queue" in in_workdir("chunk", str(hit["id"])).out
    missing = in_workdir("chunk", "999999")
    assert missing.code == 2 and "no chunk with id 999999" in missing.err


# The read commands beyond the walkthrough's, asked of the same index both ways.
MORE_READS = [
    ["grep", "def renew", "--repo", "api"],
    ["grep", "-F", "-i", "DRAIN_QUEUE", "--json"],
    ["route", "renew a subscription"],
    ["search", "renew a subscription", "--files"],
    ["search", "renew a subscription", "--files", "--json"],
    ["chunk", "1", "2", "--json"],
    ["context", "renew_subscription"],
    ["references", "renew_subscription", "--json"],
    ["commits", "--json"],
    ["log", "api", "src/billing/renew.py"],
    ["blame", "api", "src/billing/renew.py", "--lines", "1-5"],
    ["diff", "api", "main", "main"],
    ["files", "tools", "--json"],
    ["outline", "api", "src/billing/renew.py", "--json"],
    ["status", "--json"],
]


def test_the_walkthrough_against_a_running_server_prints_what_it_prints_locally(workdir, in_workdir, monkeypatch):
    _, work, env, _, _ = workdir
    reading = ("search", "get-file", "files", "outline", "status")
    reads = [shlex.split(x)[1:] for x in walkthrough() if shlex.split(x)[1] in reading]
    token = in_workdir("token", "mint", "--name", "cli").out.split()[-1]
    with serve_subprocess(work, env, args=("--require-token",)) as (base, _):
        monkeypatch.setenv("BLOBDEX_TOKEN", token)
        for args in reads + MORE_READS:
            here, there = in_workdir(*args), in_workdir("--server", base, *args)
            assert (there.code, there.out, there.err) == (here.code, here.out, here.err), args
        missing = in_workdir("--server", base, "get-file", "api", "src/nope.py")
        assert missing.code == 2 and missing.err == in_workdir("get-file", "api", "src/nope.py").err
        # `server` in blobdex.toml does what --server does (without a token, the server refuses); secrets and sql
        # read this machine's index only
        config = work / "blobdex.toml"
        kept = config.read_text()
        config.write_text(f'server = "{base}"\n' + kept)
        try:
            assert in_workdir("grep", "def renew").out == in_workdir("--server", base, "grep", "def renew").out
            assert in_workdir("sql", "SELECT count(*) AS n FROM files").code == 0
            monkeypatch.delenv("BLOBDEX_TOKEN")
            tokenless = in_workdir("grep", "def renew")
            assert tokenless.code == 2 and "wants a token: set BLOBDEX_TOKEN" in tokenless.err
        finally:
            config.write_text(kept)
        refused = in_workdir("--server", base, "sql", "SELECT 1")
        assert refused.code == 2 and "reads this machine's index; run it without --server" in refused.err
        other_org = in_workdir("--server", base, "search", "renew", "--org", "acme")
        assert other_org.code == 2 and "answers in the org of your token" in other_org.err
        monkeypatch.setenv("BLOBDEX_TOKEN", "bdx_not_a_token")
        wrong = in_workdir("--server", base, "status")
        assert wrong.code == 2 and wrong.err.count("\n") == 1 and "(the one set was refused)" in wrong.err
    gone = in_workdir("--server", base, "status")
    assert gone.code == 2 and gone.err.startswith(f"blobdex: error: cannot reach the server at {base}")
    assert gone.err.count("\n") == 1


def test_readme_mcp_config_starts_a_working_stdio_server(workdir):
    import asyncio

    from mcp import Client, StdioServerParameters

    _, work, env, _, _ = workdir
    block = marked("mcp-config").split("```json", 1)[1].split("```", 1)[0]
    server = json.loads(block)["mcpServers"]["blobdex"]
    command = server["command"].replace("/path/to/blobdex/.venv/bin/blobdex", BLOBDEX)
    args = [a.replace("/path/to/blobdex/blobdex.toml", str(work / "blobdex.toml")) for a in server["args"]]

    async def go():
        async with Client(StdioServerParameters(command=command, args=args, env=env, cwd=str(work))) as client:
            tools = await client.list_tools()
            found = await client.call_tool("search_code", {"query": "renew_subscription", "limit": 1})
            return tools, found

    tools, found = asyncio.run(go())
    assert "route_task" in {t.name for t in tools.tools}
    assert "src/billing/renew.py" in found.content[0].text


def test_readme_http_registration_url_is_what_serve_listens_on(workdir):
    import socket

    import httpx

    _, work, env, _, _ = workdir
    lines = [x for text in documents() for x in text.splitlines() if x.startswith("claude mcp add --transport http")]
    assert len(lines) == 1, lines  # one registration line, the one this test serves
    line = lines[0]
    url = line.split()[-1]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as s:
        free = s.connect_ex(("127.0.0.1", port)) != 0
    # the documented port, unless it is taken on this machine: then serve the same path on another one
    with serve_subprocess(work, env, port if free else None) as (base, _):
        r = httpx.post(f"{base}/mcp", json=MCP_INITIALIZE, headers=MCP_ACCEPT)
        assert r.status_code == 200 and "blobdex" in r.text
