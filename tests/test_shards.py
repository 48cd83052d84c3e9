"""Shards and their front (query/shard.py, query/front.py, query/shard_serve.py): a snapshot's repos split between
three shards answer as one server over the whole snapshot does, in exact mode: every search (each mode, filters,
pages and their cursors, thresholds, whole-chunk answers, files ranked for a task), route_task, grep with its
cursors, chunks by id, and bad input in the same sentence. First over shards in this process, then on Ray Serve on
a real Ray cluster behind the real HTTP server and MCP, the front and every shard following a bucket (a real
S3-compatible server): equal answers, each shard holding only its repos' parts, a publish that moves every shard, a
killed replica that Serve restarts (never a wrong answer meanwhile), and a shard lost for good failing the request
with a 503 that names it."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, replace

import boto3
import httpx
import pytest
from dulwich.repo import Repo
from mcp import Client

from indexer.build import run
from indexer.embed import HashEmbedder
from indexer.config import dumps
from indexer.snapshot import current_id, open_manifest, snapshots_dir
from query import front
from query.front import FrontService, LocalShards, ShardDown
from query.search import SearchError, SearchRequest
from query.service import ChunkNotFound, Service
from query.shard import Shard, ShardMismatch, owner
from query.shard_serve import ShardReplica
from tests import gitrepo
from tests.corpus import api_files, build_corpus, source_files
from query.surfaces.app import app
from query.surfaces.mcp import build
from tests.servers import AUTH, Server, call, ray_nodes, s3_server, serve_subprocess, structured

SHARDS = 3

# Requests that reach every signal and filter: a named definition (the symbol signal), each mode, repo, language,
# kind, path and ignore filters, a ref, another org, and thresholds.
REQUESTS = [
    ({"query": "renew_subscription charge the stored card"}, {}),
    ({"query": "settle_overdue_ledger close the ledger", "limit": 6}, {}),
    ({"query": "invoice total with tax", "mode": "bm25"}, {}),
    ({"query": "invoice total with tax", "mode": "vector"}, {}),
    ({"query": "Billing Invoice", "repos": ("api", "r1")}, {}),
    ({"query": "return the value", "langs": ("python",), "kind": "function"}, {}),
    ({"query": "return the value", "paths": ("pkg/**",), "ignore": ("**/*_1.py",)}, {}),
    ({"query": "subscription", "ref": "main", "limit": 3}, {}),
    ({"query": "return", "org": "acme"}, {}),
    ({"query": "renew a subscription"}, {"min_score": 0.05}),
    ({"query": "renew a subscription"}, {"min_score_diff": 0.1}),
]


def corpus_repos() -> dict[str, dict]:
    rng = random.Random(7)
    repos: dict[str, dict] = {f"r{i}": source_files(rng, 10) for i in range(6)}
    repos["api"] = api_files()
    repos["acme/api"] = source_files(rng, 5)
    return repos


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """Eight repos in two orgs, exact mode, and one server over them beside a front over three shards here. A second
    run adds a part to the first repo, so that a row's id is not its position."""
    built = build_corpus(tmp_path_factory.mktemp("shards"), corpus_repos(), exact_search=True)
    add_ledger(built)
    single = Service(built.cfg, embedder=HashEmbedder())
    shards = [Shard(built.cfg.data_dir, i, SHARDS, single.model_ids(), exact=True) for i in range(SHARDS)]
    return built, single, FrontService(built.cfg, LocalShards(shards), embedder=HashEmbedder())


def add_ledger(built) -> str:
    """Add a file defining settle_overdue_ledger to r0 and publish (r0 gets a second part); the new snapshot's id."""
    repo = Repo(str(built.root / "src" / "r0"))
    files = {**corpus_repos()["r0"], "pkg/late.py": b"def settle_overdue_ledger(ledger):\n    return ledger.close()\n"}
    gitrepo.commit(repo, files, parents=[repo.head()])
    run(built.cfg, show_progress=False)
    return current_id(built.cfg.data_dir)


def page(answer) -> list:
    return [(clip, hit.to_dict(), hit.similarity) for clip, hit in answer.hits]


def test_each_shard_opens_only_its_repos_and_every_repo_has_one(split):
    built, single, sharded = split
    held = []
    for shard in sharded.shards.shards:
        reader = shard.reader()
        repos = {(org, repo) for org, repo in zip(reader.col["org"], reader.col["repo"]) if org is not None}
        assert repos and all(owner(org, repo, SHARDS) == shard.index for org, repo in repos)
        held.append(repos)
    everyone = {(r.org, r.name) for r in single.reader().manifest.repos}
    assert set().union(*held) == everyone and sum(map(len, held)) == len(everyone)
    assert sum(len(s.reader().rows) for s in sharded.shards.shards) == len(single.reader().rows)
    reader = single.reader()
    assert any(reader.row_id(p) != p for p in range(len(reader.rows)))  # a hit's id is not its position


@pytest.mark.parametrize("asked, thresholds", REQUESTS)
def test_a_search_over_shards_is_one_servers_every_page(split, asked, thresholds):
    _, single, sharded = split
    req = SearchRequest(**{"org": "default", "limit": 4, **asked})
    one, many = single.search_page(req, **thresholds), sharded.search_page(req, **thresholds)
    assert page(one) and page(many) == page(one)
    assert (many.snapshot_id, many.next_cursor, many.applied) == (one.snapshot_id, one.next_cursor, one.applied)
    if one.next_cursor:  # the front reads one server's cursor, and the next page is that server's too
        after = single.search_page(req, cursor=one.next_cursor, **thresholds)
        assert page(sharded.search_page(req, cursor=one.next_cursor, **thresholds)) == page(after)


def test_whole_chunk_answers_and_chunks_by_id_read_as_one_servers(split):
    _, single, sharded = split
    req = SearchRequest(query="charge the stored card", org="default", limit=6)
    one, many = single.search_top(req, min_score=0.01), sharded.search_top(req, min_score=0.01)
    assert [(h.to_dict(), h.text) for h in many.hits] == [(h.to_dict(), h.text) for h in one.hits]
    assert (many.floor, many.best, many.candidates) == (one.floor, one.best, one.candidates)
    clip = page(single.search_page(req))[0][0]
    assert sharded.get_chunk("default", clip).to_dict() == single.get_chunk("default", clip).to_dict()
    for org, row in (("acme", clip), ("default", 10**9)):  # another org's id, an id no shard holds
        with pytest.raises(ChunkNotFound, match=f"no chunk with id {row} in snapshot"):
            sharded.get_chunk(org, row)


@pytest.mark.parametrize(
    "pattern, asked",
    [("return", {"limit": 7}), ("invoice", {"literal": True, "ignore_case": True}), (r"def \w+\(", {"repos": ("r1",)})],
)
def test_grep_over_shards_pages_as_one_server_does(split, pattern, asked):
    _, single, sharded = split
    cursor, pages = None, 0
    while pages < 4:
        one = single.grep("default", pattern, cursor=cursor, **asked)
        assert one.matches and sharded.grep("default", pattern, cursor=cursor, **asked) == one
        cursor, pages = one.next_cursor, pages + 1
        if cursor is None:
            break


def test_bad_input_is_refused_in_one_servers_words(split):
    _, single, sharded = split
    for asked in ({"repos": ("nope",)}, {"langs": ("cobol",)}, {"ref": "nope"}, {"mode": "fuzzy"}):
        req = SearchRequest(**{"query": "invoice", "org": "default", **asked})
        with pytest.raises(SearchError) as one:
            single.search_page(req)
        with pytest.raises(SearchError) as many:
            sharded.search_page(req)
        assert str(many.value) == str(one.value)
    with pytest.raises(SearchError) as one:
        single.route("default", "renew", limit=50)
    with pytest.raises(SearchError, match=str(one.value)):
        sharded.route("default", "renew", limit=50)


TASKS = [
    "renew a subscription and charge the stored card",
    "settle_overdue_ledger",
    "fix the invoice total with tax test",
    "billing.py: return 42 for the renewal",
]


@pytest.mark.parametrize("task", TASKS)
def test_route_task_over_shards_is_one_servers(split, task):
    _, single, sharded = split
    one, many = single.route("default", task, limit=5), sharded.route("default", task, limit=5)
    assert one[1] and [asdict(r) for r in many[1]] == [asdict(r) for r in one[1]] and many[0] == one[0]


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "vector"])
def test_files_ranked_over_shards_are_one_servers(split, mode):
    _, single, sharded = split

    def files(service) -> list:
        _, ranked = service.localize(SearchRequest(query="invoice total with tax", org="default", limit=6, mode=mode))
        return [(f.repo, f.path, f.score, f.signals, [h.to_dict() for h in f.evidence]) for f in ranked]

    assert files(single) and files(sharded) == files(single)


def test_a_search_beside_a_sessions_edits_is_one_servers(split):
    _, single, sharded = split
    edits = {
        "src/billing/renew.py": "def renew_subscription(plan):\n    return charge_the_stored_card(plan)\n",
        "notes.py": "def only_in_the_session():\n    return 'an invoice total with tax'\n",
    }
    sharded.sync_workspace("default", "s1", "api", edits, ["src/billing/invoice.py"])
    for query in ("renew_subscription charge the stored card", "only_in_the_session", "invoice total with tax"):
        req = SearchRequest(query=query, org="default", limit=6)
        one, many = single.search_page(req, session_id="s1"), sharded.search_page(req, session_id="s1")
        assert [h.to_dict() for _, h in many.hits] == [h.to_dict() for _, h in one.hits]
        assert [c for c, h in many.hits if not h.uncommitted] == [c for c, h in one.hits if not h.uncommitted]
        assert not any(h.path == "src/billing/invoice.py" for _, h in many.hits)  # deleted in the session
        assert any(h.uncommitted for _, h in many.hits)
        for clip, hit in many.hits:  # a session's hit reads back by its id through the front
            assert sharded.get_chunk("default", clip).hit.path == hit.path


def test_a_shard_replica_answers_only_its_calls_and_says_a_failure_in_one_sentence(split):
    built, single, _ = split
    replica = ShardReplica(built.cfg, 0, SHARDS, single.model_ids(), None, 1.0)  # as Ray Serve runs it
    assert replica.ask("snapshot", ()) == ("ok", current_id(built.cfg.data_dir))
    tag, message, status = replica.ask("live", ())  # an attribute, not an answer
    assert (tag, status) == ("error", 400) and message.startswith("a shard answers snapshot, languages")
    tag, message, status = replica.ask("rank", (None, "not a request", None))  # a bug's exception, in one line
    assert (tag, status) == ("error", 500) and "\n" not in message
    assert message.startswith("shard 0 of 3 failed (") and message.endswith("its Ray log says why")


# Every page and read endpoint, and every MCP read tool, as a client asks them: each answer must be one server's.
PAGES = [
    "/",
    "/?q=renew_subscription",
    "/?q=invoice&group_by=file",
    "/repos",
    "/route?task=renew+a+subscription",
    "/file/api/src/billing/renew.py",
    "/tree/api/src",
    "/symbol?name=renew_subscription",
    "/commits?q=refund",
    "/v1/status",
    "/v1/repos",
    "/v1/files?repo=api",
    "/v1/outline?repo=api&path=src/billing/renew.py",
    "/v1/context?symbol=renew_subscription",
    "/v1/references?symbol=Invoice",
    "/v1/log?repo=api",
    "/v1/blame?repo=api&path=src/billing/renew.py",
    "/v1/file?repo=api&path=src/billing/renew.py",
    "/v1/chunks?ids=1,2,40",
]
TOOL_CALLS = [
    ("search_code", {"query": "renew_subscription charge the stored card", "limit": 5}),
    ("search_code", {"query": "invoice total with tax", "group_by": "file"}),
    ("get_chunk", {"ids": [1, 40]}),
    ("grep", {"pattern": "return", "limit": 5}),
    ("get_file", {"repo": "api", "path": "src/billing/renew.py"}),
    ("list_files", {"repo": "r1"}),
    ("outline", {"repo": "api", "path": "src/billing/renew.py"}),
    ("route_task", {"task": "renew a subscription and charge the card"}),
    ("expand_context", {"symbol": "renew_subscription"}),
    ("search_commits", {"query": "refunds"}),
    ("list_repos", {}),
]


def test_every_page_endpoint_and_tool_answers_through_the_front_as_one_server(split):
    _, single, sharded = split

    def answers(service) -> list:
        with Server(app(service)) as url:
            pages = [(p, r.status_code, r.text) for p in PAGES for r in [httpx.get(url + p, timeout=60)]]
        server = build(service)
        return pages + [(tool, structured(call(server, tool, args))) for tool, args in TOOL_CALLS]

    one = answers(single)
    assert all(a[1] == 200 for a in one if len(a) == 3)
    assert answers(sharded) == one


def test_shards_that_serve_different_snapshots_are_not_mixed(split, monkeypatch):
    built, single, sharded = split
    lagging = sharded.shards.shards[1]
    with pytest.raises(ShardMismatch, match=r"shard 1 of 3 serves snapshot \S+, not 2000.*: ask again"):
        lagging.reader("20000101T000000000000Z-000000")  # a snapshot it never held
    # a replica restarted after a publish still answers for the snapshot the front pinned, while it is kept
    older = sorted(p.name for p in snapshots_dir(built.cfg.data_dir).iterdir())[0]
    restarted = Shard(built.cfg.data_dir, 1, SHARDS, single.model_ids(), exact=True)
    assert restarted.reader(older).snapshot_id == older != restarted.snapshot()
    monkeypatch.setattr(front, "AGREE_SECONDS", 0.2)
    monkeypatch.setattr(front, "AGREED_SECONDS", 0.0)
    monkeypatch.setattr(lagging, "snapshot", lambda: "20000101T000000000000Z-000000")
    with pytest.raises(ShardDown, match=r"the shards serve different snapshots \(shard 0: .*shard 1: 2000"):
        sharded.search_page(SearchRequest(query="invoice", org="default"))


# -- on Ray Serve ---------------------------------------------------------------------------------------------


BUCKET = "blobdex-shards"
KEYS = {"BLOBDEX_TEST_S3_KEY": "test", "BLOBDEX_TEST_S3_SECRET": "test"}


@pytest.fixture(scope="module")
def on_ray(tmp_path_factory):
    """The corpus indexed and published to a bucket (a real S3-compatible server), then served twice: by one
    `blobdex serve` over the indexer's data dir, and by `blobdex serve --store ... --shards 3` on a real Ray cluster
    (a head node of two CPUs, started with `ray start`) from a home of its own, the front and each shard following
    the bucket. Yields (corpus, one server's URL, the front's URL, the cluster's address, the front's data dir)."""
    root = tmp_path_factory.mktemp("ray-shards")
    with s3_server() as endpoint, pytest.MonkeyPatch.context() as patch:
        for name, value in KEYS.items():
            patch.setenv(name, value)  # before Ray starts: its workers resolve the config's references
        boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
        ).create_bucket(Bucket=BUCKET)
        keys = {"store_access_key": "env:BLOBDEX_TEST_S3_KEY", "store_secret_key": "env:BLOBDEX_TEST_S3_SECRET"}
        store = {"store": f"s3://{BUCKET}/shards", "store_endpoint": endpoint, **keys}
        built = build_corpus(root / "indexer", corpus_repos(), exact_search=True, **store)
        home = root / "front"
        home.mkdir()
        front_cfg = replace(built.cfg, path=home / "blobdex.toml", data_dir=home / "data", repos=())
        (home / "blobdex.toml").write_text(dumps(front_cfg, "data"), encoding="utf-8")
        with ray_nodes(["--num-cpus", "2"]) as (port, _):
            env = {**os.environ, **AUTH}
            address = f"127.0.0.1:{port}"
            with serve_subprocess(built.root, env) as (one, _):
                args = ("--store", store["store"], "--poll-seconds", "1", "--shards", str(SHARDS), "--cluster", address)
                with serve_subprocess(home, env, args=args) as (sharded, _):
                    yield built, one, sharded, address, front_cfg.data_dir


def search(url: str, body: dict) -> dict:
    answer = httpx.post(f"{url}/v1/search", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def mcp_search(url: str, args: dict) -> dict:
    async def go():
        async with Client(f"{url}/mcp") as client:
            return await client.call_tool("search_code", args)

    found = asyncio.run(go())
    assert not found.is_error
    return found.structured_content


def ray_call(address: str, code: str) -> str:
    """Run `code` in a process of its own joined to the cluster (`ray` and `serve` imported; `replicas(app)`: the
    names of an application's live replica actors): what it prints. The test process stays out of Ray."""
    script = (
        f"import ray\nfrom ray import serve\nray.init(address={address!r}, log_to_driver=False)\n"
        "def replicas(app):\n"
        "    return sorted(a['name'] for a in ray.util.list_named_actors(all_namespaces=True)"
        " if a['name'].startswith('SERVE_REPLICA::' + app + '#'))\n"
        f"{code}"
    )
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, **AUTH}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.cluster
@pytest.mark.s3
def test_the_front_on_ray_serve_answers_http_and_mcp_as_one_server(on_ray):
    _, one, sharded, _, _ = on_ray
    for asked, thresholds in REQUESTS:
        fields = {"lang" if k == "langs" else k: list(v) if isinstance(v, tuple) else v for k, v in asked.items()}
        body = {"limit": 4, **fields, **thresholds}
        if body.pop("org", "default") != "default":  # the org is a token's, not the body's
            continue
        assert search(sharded, body) == search(one, body)
    args = {"query": "renew_subscription charge the stored card", "limit": 5}
    assert mcp_search(sharded, args) == mcp_search(one, args)
    for path, body in (
        ("/v1/grep", {"pattern": "return", "limit": 5}),
        ("/v1/route", {"task": TASKS[0]}),
        ("/v1/search", {"query": "invoice total with tax", "group_by": "file"}),
    ):
        answers = [httpx.post(f"{url}{path}", json=body, timeout=60) for url in (one, sharded)]
        assert answers[0].status_code == 200 and answers[1].json() == answers[0].json()


@pytest.mark.cluster
@pytest.mark.s3
def test_each_shard_downloads_only_its_repos_parts(on_ray):
    built, _, _, _, data_dir = on_ray
    _, manifest = open_manifest(built.cfg.data_dir)
    for index in range(SHARDS):
        parts = data_dir / "shards" / f"{index}-of-{SHARDS}" / "parts"
        for repo in manifest.repos:
            mine = owner(repo.org, repo.name, SHARDS) == index
            for part in repo.parts:
                held = sorted(f.name for f in (parts / part).iterdir())
                assert {"part.json", "card.parquet"} <= set(held)
                assert mine or held == ["card.parquet", "part.json"]
                assert not mine or {"chunks.arrow", "grams.arrow", "paths.parquet"} <= set(held)
            assert all(not (parts / part).exists() for part in repo.history)  # the front reads history


@pytest.mark.cluster
@pytest.mark.s3
def test_a_publish_moves_every_shard_to_the_new_snapshot(on_ray):
    built, one, sharded, _, _ = on_ray
    before = current_id(built.cfg.data_dir)
    after = add_ledger(built)
    assert after != before
    body = {"query": "settle_overdue_ledger", "limit": 3}
    deadline = time.monotonic() + 60  # the front and its shards poll the bucket every second; the single
    # server opens the new snapshot in a thread while the old one answers
    while {(answer := search(sharded, body))["snapshot_id"], search(one, body)["snapshot_id"]} != {after}:
        assert time.monotonic() < deadline, "a server never served the new snapshot"
        time.sleep(0.5)
    assert answer["snapshot_id"] == after and answer == search(one, body)
    assert answer["hits"][0]["path"] == "pkg/late.py"


@pytest.mark.cluster
@pytest.mark.s3
def test_a_killed_replica_is_restarted_and_never_answers_wrong_meanwhile(on_ray):
    _, one, sharded, address, _ = on_ray
    body = {"query": "renew_subscription charge the stored card", "limit": 5}
    expected = search(one, body)
    app = "blobdex-shard-0-of-3"
    kill = f"[name] = replicas({app!r})\nray.kill(ray.get_actor(name, namespace='serve'), no_restart=True)\nprint(name)"
    killed = ray_call(address, kill).strip()
    deadline, answers = time.monotonic() + 90, []
    while time.monotonic() < deadline:
        answer = httpx.post(f"{sharded}/v1/search", json=body, timeout=60)
        answers.append(answer.status_code)
        if answer.status_code == 200:
            assert answer.json() == expected  # whole, or not at all
            break
        assert answer.status_code == 503 and "shard 0 of 3" in answer.json()["error"]["message"]
        time.sleep(1)
    assert answers[-1] == 200, answers
    assert killed not in ray_call(address, f"print(replicas({app!r}))")  # Serve started another


@pytest.mark.cluster
@pytest.mark.s3
def test_a_lost_shard_fails_the_request_in_one_sentence_naming_it(on_ray):
    _, _, sharded, address, _ = on_ray
    ray_call(address, "serve.delete('blobdex-shard-2-of-3')")
    answer = httpx.post(f"{sharded}/v1/search", json={"query": "invoice"}, timeout=60)
    assert answer.status_code == 503
    message = answer.json()["error"]["message"]
    assert message.startswith("shard 2 of 3 (blobdex-shard-2-of-3) did not answer") and "\n" not in message
    assert "would look whole and be wrong" in message
    assert httpx.get(f"{sharded}/readyz", timeout=60).status_code == 503
    assert json.loads(httpx.get(f"{sharded}/healthz", timeout=60).text) == {"ok": True}
