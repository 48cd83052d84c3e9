"""Servers on a real local socket and their clients, for tests and ci/bench.py: the ASGI app under uvicorn in a
thread, `blobdex serve` as its own process and an S3 server, each returned only once it answers; the request handler
and password of the tests' smart-HTTP git server; an MCP tool call on a server in memory; and a Ray cluster of
`ray start` nodes."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler

import httpx
import pytest
import uvicorn
from mcp import Client

BLOBDEX = str(Path(sys.executable).parent / "blobdex")
RAY = str(Path(sys.executable).parent / "ray")
READY_SECONDS = 60  # a cold `blobdex serve` imports the web stack and opens the snapshot before /readyz answers
# The first message of an MCP client over streamable HTTP, and the Accept header the transport requires.
MCP_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
}
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
TOKEN = "s3cret-token-value"  # the password the smart-HTTP git server (conftest's http_remote) wants


# One token for every test cluster of a session, as an operator shares one among nodes: a process keeps the token
# it first read.
AUTH = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


@contextmanager
def ray_nodes(head: list[str], others: int = 0) -> Iterator[tuple[int, int]]:
    """A head node started with `head` (its resources) and `others` more nodes of one CPU, with token
    authentication; yields the head's port and its Ray Client port. `ray stop` stops every Ray process of
    this user on the machine: CI runs none of its own. Ray's sockets live under RAY_TMPDIR, whose path must
    be short (a socket path has at most 107 bytes)."""
    port, client = free_port(), free_port()
    temp = tempfile.mkdtemp(prefix="blobdex-ray-")
    env = {**os.environ, **AUTH, "RAY_TMPDIR": temp}
    common = ["--object-store-memory", str(256 << 20), "--disable-usage-stats"]
    with pytest.MonkeyPatch.context() as patch:
        for name, value in AUTH.items():
            patch.setenv(name, value)
        try:
            start = [RAY, "start", "--head", "--port", str(port), "--ray-client-server-port", str(client)]
            subprocess.run(start + ["--include-dashboard", "false", *head, *common], check=True, env=env)
            for _ in range(others):
                node = [RAY, "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", *common]
                subprocess.run(node, check=True, env=env, capture_output=True)
            yield port, client
        finally:
            subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True)
            shutil.rmtree(temp, ignore_errors=True)


class QuietHandler(WSGIRequestHandler):
    """A WSGI server's request handler that logs no line per request."""

    def log_message(self, *args):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The real ASGI app on a real socket, in a thread: `with Server(app) as url: …`."""

    def __init__(self, asgi, port: int | None = None):
        self.port = port or free_port()
        self.server = uvicorn.Server(uvicorn.Config(asgi, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return f"http://127.0.0.1:{self.port}"
            time.sleep(0.05)
        raise RuntimeError("server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


@contextmanager
def serve_subprocess(
    cwd: Path, env: dict, port: int | None = None, args: tuple[str, ...] = ()
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run `blobdex serve --port PORT [args]` (a free port by default) in `cwd` until the block ends; yields its
    base URL and process once GET /readyz answers 200. Its stderr goes to a file (a pipe nobody reads can fill
    and stall the server) and is quoted if it exits or never becomes ready."""
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [BLOBDEX, "serve", "--port", str(port), *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            deadline = time.monotonic() + READY_SECONDS
            while not _ready(f"{base}/readyz"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    stderr.seek(0)
                    raise RuntimeError(f"blobdex serve on {base} never became ready: {stderr.read().decode()[-2000:]}")
                time.sleep(0.1)
            yield base, proc
        finally:
            proc.terminate()
            proc.wait(10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def s3_server() -> Iterator[str]:
    """A real S3-compatible server on the loopback address (moto's, in its standalone mode, its own process)
    until the block ends; yields its endpoint URL once it answers. Any access key is accepted."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + READY_SECONDS
            while not _ready(f"{endpoint}/moto-api/"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    stderr.seek(0)
                    raise RuntimeError(f"the S3 server never answered: {stderr.read().decode()[-2000:]}")
                time.sleep(0.1)
            yield endpoint
        finally:
            proc.terminate()
            proc.wait(10)


def call(server, tool, args):
    """Call one MCP tool on a server in memory (as query.surfaces.mcp.build makes); tool errors are results too."""

    async def go():
        async with Client(server) as client:
            return await client.call_tool(tool, args)

    return asyncio.run(go())


def text(result) -> str:
    return result.content[0].text


def structured(result) -> dict:
    """A tool's structured answer (what its outputSchema describes); the text beside it is markdown."""
    assert not result.is_error, text(result)
    return result.structured_content
