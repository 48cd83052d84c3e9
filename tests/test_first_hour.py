"""A new user's first hour, as one test where it can be: in a fresh folder, init, add two repos, index, search and
read a file (from a subfolder too); serve, open the page and call the MCP server by the line serve prints; break the
config and read one sentence; run on a schedule; damage a part, read which command repairs it, and let a run repair
it. `make install` and `make run` take minutes and a fresh virtualenv: they are measured by hand (see the README)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
from mcp import Client

from indexer.snapshot import open_manifest, part_file, parts_of, read_part_chunks, vector_matrix
from tests import gitrepo
from tests.corpus import api_files, tools_files
from tests.servers import BLOBDEX, free_port


def _cli(cwd: Path, env: dict, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([BLOBDEX, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == code, (args, done.stdout, done.stderr)
    return done


def test_a_new_users_first_hour(tmp_path):
    gitrepo.commit(gitrepo.init(tmp_path / "remote" / "api"), api_files())
    gitrepo.commit(gitrepo.init(tmp_path / "remote" / "tools.git", bare=True), tools_files())
    project = tmp_path / "project"
    (project / "notes" / "deep").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOBDEX_")}
    env["BLOBDEX_MODEL"] = "blobdex:hash"  # plumbing: meaning is tested with the real model elsewhere

    _cli(project, env, "init", "--no-repo")
    _cli(project, env, "repo", "add", "api", f"file://{tmp_path}/remote/api")
    _cli(project, env, "repo", "add", "tools", str(tmp_path / "remote" / "tools.git"))
    refused = _cli(project, env, "repo", "add", "api", str(tmp_path / "remote" / "tools.git"), code=2)
    assert "pass --replace" in refused.stderr
    assert json.loads(_cli(project, env, "index", "--json").stdout)["published"]

    deep = project / "notes" / "deep"  # every command finds blobdex.toml in a folder above, as git would
    hits = json.loads(_cli(deep, env, "search", "renew a subscription", "--json").stdout)["hits"]
    assert any(h["path"] == "src/billing/renew.py" for h in hits) and all("id" in h for h in hits)
    assert "def renew" in _cli(deep, env, "get-file", "api", "src/billing/renew.py").stdout
    assert "no blobdex.toml in" in _cli(tmp_path, env, "status", code=2).stderr  # outside the project: said

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as stderr:
        server = subprocess.Popen([BLOBDEX, "serve", "--port", str(port)], cwd=project, env=env, stderr=stderr)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        banner = log.read_text()
        assert f"{base}/ (search" in banner and str(project / ".blobdex") in banner
        register = next(line for line in banner.splitlines() if "claude mcp add" in line).split()[-1]
        page = httpx.get(f"{base}/", params={"q": "renew subscription"})
        assert page.status_code == 200 and "src/billing/renew.py" in page.text

        async def agent():
            async with Client(register) as client:
                return (await client.call_tool("search_code", {"query": "renew a subscription"})).content[0].text

        assert "src/billing/renew.py" in asyncio.run(agent())
    finally:
        server.terminate()
        server.wait(10)

    config = project / "blobdex.toml"
    kept = config.read_text()
    config.write_text("modle = 1\n" + kept)
    broken = _cli(deep, env, "search", "renew", code=2)
    assert "did you mean `model`" in broken.stderr and broken.stderr.count("\n") == 1
    config.write_text(kept)

    loop = subprocess.Popen(
        [BLOBDEX, "index", "--every", "30s", "--json"], cwd=project, env=env, stdout=subprocess.PIPE, text=True
    )
    assert json.loads(loop.stdout.readline())["unchanged"]
    loop.send_signal(signal.SIGTERM)
    assert loop.wait(30) == 0
    assert "(5s or 5m?)" in _cli(project, env, "index", "--every", "5", code=2).stderr

    snapshot, manifest = open_manifest(project / ".blobdex")
    part = parts_of(snapshot, manifest)[0]
    vector = vector_matrix(read_part_chunks(part))[0].tobytes()  # a bit flipped on disk, in a chunk's vector
    chunks = part_file(part, "chunks")
    raw = bytearray(chunks.read_bytes())
    at = raw.index(vector)
    raw[at : at + 16] = bytes(b ^ 0xFF for b in raw[at : at + 16])
    chunks.write_bytes(bytes(raw))
    damaged = _cli(project, env, "verify", code=1)
    assert "run 'blobdex index' to rebuild it" in damaged.stdout
    repaired = json.loads(_cli(project, env, "index", "--json").stdout)
    assert repaired["published"] and any("damaged" in n for n in repaired["notes"])
    assert "ok" in _cli(project, env, "verify").stdout
