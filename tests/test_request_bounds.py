"""No request can stall the server: a text a request carries is read up to a stated size (query_text.MAX_QUERY_CHARS),
every pattern that scans it runs in linear time, the work runs off the event loop, and /readyz answers throughout.
The second reliability review froze a real server for over 16 minutes with one 500 KB task (quadratic regexes in
file localization held the interpreter while the event loop waited)."""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from mcp import Client

from indexer.config import dumps
from query.localize import asks_for_tests, named_files, title_scopes
from query.query_text import MAX_QUERY_CHARS, cut_note
from query.search import SearchRequest
from query.surfaces.guard import MAX_BODY_BYTES
from tests.corpus import private_copy
from tests.servers import serve_subprocess

ROOT = Path(__file__).resolve().parent.parent
# What took quadratic time before, each run long enough to hurt: word characters (the file-name and frame
# patterns), path-like runs, unclosed code fences, blank-line runs, `test.` hosts and frame openings. About 1 MB,
# and under the 1 MiB body cap once JSON-encoded.
HOSTILE = (
    "x" * 250_000
    + " "
    + "a/b." * 40_000
    + "\n"
    + "```py\n" * 5_000
    + " \t" * 20_000
    + "\n"
    + "test.local " * 15_000
    + 'File "a' * 10_000
    + "at x(" * 20_000
    + "y" * 175_000
)
# A URL's request line is read up to 16 KiB by uvicorn's HTTP parser (h11), so a page's text is at most that.
HOSTILE_URL_TEXT = "x" * 6_000 + " " + "a/b." * 1_000 + "\n" + 'File "a' * 300 + "test.local " * 100
# A health check slower than this means the server stopped answering; before the fix it was minutes.
WATCHDOG_SECONDS = 10.0
REQUEST_TIMEOUT_SECONDS = 120.0


def test_a_text_past_the_cap_is_cut_and_says_so():
    req = SearchRequest(query=HOSTILE)
    assert (
        len(HOSTILE) > 980_000
        and len(json.dumps({"task": HOSTILE})) < MAX_BODY_BYTES - 1000
        and len(req.query) == MAX_QUERY_CHARS
        and req.cut_from == len(HOSTILE)
    )
    assert req.note == cut_note(len(HOSTILE)) and f"{len(HOSTILE):,}" in req.note
    assert SearchRequest(query="renew a subscription").note is None


def test_every_reading_of_the_text_reads_the_whole_megabyte_in_one_pass():
    """Each step that reads a task text, given the whole hostile text with no cap in front of it, in a child process
    under a watchdog: Python's engine took 6 s on 32,000 characters of the old file-name pattern and grew with the
    square, so a megabyte would run for well over an hour; linear scans take well under a second each."""
    script = (
        "from tests.test_request_bounds import HOSTILE\n"
        "from query.localize import asks_for_tests, named_files, title_scopes\n"
        "from query.query_text import named_definitions, passages\n"
        "print(len(named_files(HOSTILE)), title_scopes(HOSTILE), asks_for_tests(HOSTILE),\n"
        "      'xxxx' in named_definitions(HOSTILE), len(passages(HOSTILE)) > 100)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_SECONDS * 12
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # 'a/b.a/b.…' names no file, no title scope, no test; `x…` is far past a token's length; passages split it
    assert done.stdout.split() == ["0", "[]", "False", "False", "True"]


def test_named_files_and_scopes_read_as_before():
    text = (
        'fix(parser): crash\nTraceback:\n  File "src/app/parse.py", line 3, in run\n'
        "see at com.x.Y.z(Y.java:3) and util.go:9"
    )
    assert named_files(text) == {"src/app/parse.py", "Y.java", "util.go"}
    assert title_scopes(text) == ["parser"]
    assert asks_for_tests("tests: use strict equality") and not asks_for_tests("call test.local from the client")
    assert asks_for_tests("call test.local and add tests") and not asks_for_tests("fix the retry")


@pytest.fixture(scope="module")
def server(corpus, tmp_path_factory):
    home = tmp_path_factory.mktemp("bounds")
    cfg = private_copy(corpus, home)
    (home / "blobdex.toml").write_text(dumps(cfg, str(cfg.data_dir)), encoding="utf-8")
    with serve_subprocess(home, {"PATH": "/usr/bin:/bin", "HOME": str(home)}) as (base, proc):
        yield base


def _get(base: str, target: str) -> tuple[int, str]:
    """A GET of a URL longer than httpx sends (its limit is 64 KiB), as a cross-site image or a link would."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT_SECONDS)
    try:
        conn.request("GET", target)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _mcp(base: str, tool: str, args: dict) -> str:
    async def go():
        async with Client(f"{base}/mcp") as client:
            result = await client.call_tool(tool, args)
            return result.content[0].text

    return asyncio.run(go())


def test_a_megabyte_task_on_every_entry_point_never_stalls_the_health_check(server):
    base = server
    worst, failures, stop = [0.0], [], threading.Event()

    def watchdog():
        with httpx.Client(timeout=WATCHDOG_SECONDS * 3) as client:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    if client.get(f"{base}/readyz").status_code != 200:
                        failures.append("readyz not 200")
                except httpx.HTTPError as exc:
                    failures.append(repr(exc))
                worst[0] = max(worst[0], time.monotonic() - started)
                time.sleep(0.1)

    thread = threading.Thread(target=watchdog, daemon=True)
    thread.start()
    answers = {}
    try:
        with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT_SECONDS) as client:
            answers["v1 route"] = client.post("/v1/route", json={"task": HOSTILE})
            answers["v1 files"] = client.post("/v1/search", json={"query": HOSTILE, "group_by": "file"})
            answers["v1 search"] = client.post("/v1/search", json={"query": HOSTILE})
            answers["codesearch"] = client.post("/codesearch/search", json={"query": HOSTILE})
        answers["page files"] = _get(base, "/?" + urlencode({"q": HOSTILE_URL_TEXT, "mode": "files"}))
        answers["page route"] = _get(base, "/route?" + urlencode({"task": HOSTILE_URL_TEXT}))
        answers["mcp route_task"] = _mcp(base, "route_task", {"task": HOSTILE})
        answers["mcp files"] = _mcp(base, "search_code", {"query": HOSTILE, "group_by": "file"})
    finally:
        stop.set()
        thread.join(WATCHDOG_SECONDS * 4)
    assert not failures and worst[0] < WATCHDOG_SECONDS, (failures[:3], worst[0])
    statuses = {k: v.status_code for k, v in answers.items() if isinstance(v, httpx.Response)}
    statuses |= {k: v[0] for k, v in answers.items() if isinstance(v, tuple)}
    assert set(statuses.values()) == {200}, statuses
    said = cut_note(len(HOSTILE))
    assert answers["v1 route"].json()["notes"] == [said]
    assert answers["v1 files"].json()["notes"] == [said]
    assert answers["v1 search"].json()["notes"] == [said]
    assert said in answers["mcp route_task"] and said in answers["mcp files"]
    assert '<ol class="routes">' in answers["page route"][1] and 'class="files"' in answers["page files"][1]
