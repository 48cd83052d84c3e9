"""Snapshots on object storage, against a real S3-compatible server on the loopback address (moto's, standalone):
a publish uploads only what the bucket lacks and marks the snapshot last; a replica syncs the newest snapshot
and answers searches as the local server does, through a publish, with no failed request; an unreachable store
fails the run in one sentence and loses nothing."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import replace

import boto3
import httpx
import pytest
from dulwich.repo import Repo

from indexer import store as store_module
from indexer.build import run
from indexer.config import dumps
from indexer.embed import HashEmbedder
from indexer.snapshot import current_id
from indexer.store import Store, StoreError, snapshot_files, store_for, sync, upload
from indexer.snapshot.verify import verify
from query.replica import Replica
from query.search import SearchRequest
from query.service import Service
from tests import gitrepo
from tests.corpus import RENEW_PY, api_files, build_corpus, tools_files
from tests.servers import s3_server, serve_subprocess

pytestmark = pytest.mark.s3

BUCKET = "blobdex-test"
KEYS = {"BLOBDEX_TEST_S3_KEY": "test", "BLOBDEX_TEST_S3_SECRET": "test"}
SHA_X = hashlib.sha256(b"x").hexdigest().encode()
QUERIES = ["renew subscription", "invoice total with tax", "database url", "cart items"]


@pytest.fixture(scope="module")
def endpoint():
    with s3_server() as url:
        boto3.client(
            "s3", endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
        ).create_bucket(Bucket=BUCKET)
        yield url


@pytest.fixture
def keys(monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def stored(cfg, endpoint: str, prefix: str):
    """The config with a store under `prefix` of the test bucket, its keys by reference."""
    return replace(
        cfg,
        store=f"s3://{BUCKET}/{prefix}",
        store_endpoint=endpoint,
        store_access_key="env:BLOBDEX_TEST_S3_KEY",
        store_secret_key="env:BLOBDEX_TEST_S3_SECRET",
    )


def published(tmp_path, endpoint: str, prefix: str):
    """The api corpus indexed, its config given a store under `prefix`, and a run that uploads it: (corpus,
    config, that run's report)."""
    built = build_corpus(tmp_path / "indexer", {"api": api_files()})
    cfg = stored(built.cfg, endpoint, prefix)
    return built, cfg, run(cfg, embedder=HashEmbedder(), show_progress=False)


def change_renew(built, tail: bytes) -> None:
    """One commit to api: renew.py with `tail` appended."""
    gitrepo.commit(Repo(str(built.root / "src" / "api")), {**api_files(), "src/billing/renew.py": RENEW_PY + tail})


def hits(service: Service) -> list:
    return [
        [(h.repo, h.path, h.line_start, h.score) for _, h in service.search(SearchRequest(query=q, limit=5))[1]]
        for q in QUERIES
    ]


def test_a_publish_uploads_what_the_bucket_lacks_and_a_replica_answers_alike(tmp_path, endpoint, keys):
    built, cfg, report = published(tmp_path, endpoint, "first")  # unchanged, but the bucket had nothing yet
    live = current_id(cfg.data_dir)
    files = snapshot_files(cfg.data_dir, live)
    store = store_for(cfg)
    listing = json.loads(store.get(store.key("snapshots", f"{live}.json")))
    assert sorted(listing) == sorted(files) and report.store["files"] == len(files)
    assert report.store["moved_files"] == len({sha for sha, _ in listing.values()})  # each distinct file once
    assert store.newest() == live and store.names("published") == [live]
    again = run(cfg, embedder=HashEmbedder(), show_progress=False)
    assert again.store is None  # the bucket has it: nothing to upload
    # one commit: the bucket gets the new part and what of the snapshot changed, not the rest again
    change_renew(built, b"# x\n")
    third = run(cfg, embedder=HashEmbedder(), show_progress=False)
    assert third.store["snapshot_id"] == current_id(cfg.data_dir) != live
    assert 0 < third.store["moved_files"] < third.store["files"]
    # a replica's data dir, synced from the bucket alone, answers every search as the indexer's does
    replica = replace(cfg, data_dir=tmp_path / "replica")
    moved = sync(store_for(replica), replica.data_dir)
    assert moved.snapshot_id == current_id(cfg.data_dir) and 0 < moved.moved_files <= moved.files
    assert hits(Service(replica, embedder=HashEmbedder())) == hits(Service(cfg, embedder=HashEmbedder()))
    assert sync(store_for(replica), replica.data_dir) is None  # up to date: nothing moves


def test_the_bucket_keeps_what_its_kept_snapshots_name_and_no_more(tmp_path, endpoint, keys, monkeypatch):
    monkeypatch.setattr(store_module, "KEEP_PUBLISHED", 1)
    monkeypatch.setattr(store_module, "OBJECT_GRACE_SECONDS", 0)
    built, cfg, _ = published(tmp_path, endpoint, "swept")
    store = store_for(cfg)
    first = set(store.names("objects"))
    change_renew(built, b"# y\n")
    run(cfg, embedder=HashEmbedder(), show_progress=False)
    live = current_id(cfg.data_dir)
    assert store.names("published") == [live] and store.names("snapshots") == [f"{live}.json"]
    listing = json.loads(store.get(store.key("snapshots", f"{live}.json")))
    kept = {sha for sha, _ in listing.values()}
    assert set(store.names("objects")) == kept  # the live snapshot's objects, every one, and nothing else
    assert first - kept and first & kept  # some objects went with the old snapshot, the shared ones stayed
    replica = replace(cfg, data_dir=tmp_path / "replica")
    assert sync(store_for(replica), replica.data_dir).snapshot_id == live
    # an object no listing names yet, as an upload in flight elsewhere leaves, is kept while it is young
    monkeypatch.setattr(store_module, "OBJECT_GRACE_SECONDS", 3600)
    store.put(store.key("objects", "0" * 64), b"in flight")
    change_renew(built, b"# z\n")
    run(cfg, embedder=HashEmbedder(), show_progress=False)
    assert "0" * 64 in store.names("objects")
    # a listing no marker follows (an upload in progress) keeps its objects; a day old (an upload that died)
    # it goes, and they with it
    monkeypatch.setattr(store_module, "OBJECT_GRACE_SECONDS", 0)
    store.put(store.key("objects", "3" * 64), b"listed")
    store.put(store.key("snapshots", f"{BOGUS}.json"), json.dumps({"parts/x/y": ["3" * 64, 6]}).encode())
    for n, day in enumerate((store_module.UNMARKED_LISTING_SECONDS, -1)):
        monkeypatch.setattr(store_module, "UNMARKED_LISTING_SECONDS", day)
        changed = RENEW_PY + f"# {n}\n".encode()
        gitrepo.commit(Repo(str(built.root / "src" / "api")), {**api_files(), "src/billing/renew.py": changed})
        run(cfg, embedder=HashEmbedder(), show_progress=False)
        present = ("3" * 64 in store.names("objects"), f"{BOGUS}.json" in store.names("snapshots"))
        assert present == ((True, True) if day > 0 else (False, False)), (day, present)


def test_an_unreadable_listing_stops_the_sweep_not_the_upload(tmp_path, endpoint, keys, monkeypatch, caplog):
    monkeypatch.setattr(store_module, "KEEP_PUBLISHED", 1)
    monkeypatch.setattr(store_module, "OBJECT_GRACE_SECONDS", 0)
    built, cfg, _ = published(tmp_path, endpoint, "unreadable")
    store = store_for(cfg)
    store.put(store.key("objects", "4" * 64), b"unnamed")
    store.put(store.key("snapshots", "20200101T000000000000Z-bbbbbb.json"), b"{damaged")
    change_renew(built, b"#\n")
    report = run(cfg, embedder=HashEmbedder(), show_progress=False)
    assert not report.failed and report.store["snapshot_id"] == store.newest() == current_id(cfg.data_dir)
    assert "4" * 64 in store.names("objects")  # not knowing what that listing names, nothing was deleted
    assert "is not readable; no object is deleted this time" in caplog.text
    store.put(store.key("replicas", "odd.json"), b"[]")  # a report no replica wrote: listed as unreadable
    assert store.replicas() == [{"replica": "odd", "serving": None, "at": None, "unreadable": True}]


BOGUS = "29991231T000000000000Z-ffffff"  # a snapshot id newer than any real one
FIELDS = {b"sha": SHA_X, b"id": BOGUS.encode()}


@pytest.mark.parametrize(
    "listing, error",
    [
        (b"{not json", "a listing that is not JSON"),
        (b"[1]", "a listing that is not an object"),
        (b'{"snapshots/%(id)s/../../../etc/passwd": ["%(sha)s", 1]}', "outside the snapshot and its parts"),
        (b'{"/etc/passwd": ["%(sha)s", 1]}', "outside the snapshot and its parts"),
        (b'{"": ["%(sha)s", 1]}', "outside the snapshot and its parts"),
        (b'{"snapshots/20200101T000000000000Z-aaaaaa/x": ["%(sha)s", 1]}', "outside the snapshot and its parts"),
        (b'{"parts/.x/y": ["%(sha)s", 1]}', "outside the snapshot and its parts"),
        (b'{"snapshots/%(id)s/manifest.json": ["../../../../etc/passwd", 1]}', "not [sha256, size]"),
        (b'{"snapshots/%(id)s/manifest.json": ["%(sha)s", "1"]}', "not [sha256, size]"),
        (b'{"snapshots/%(id)s/manifest.json": ["%(sha)s"]}', "not [sha256, size]"),
        (b'{"snapshots/%(id)s/manifest.json": ["' + b"2" * 64 + b'", 1]}', "cannot read"),  # not in the bucket
    ],
)
def test_a_replica_keeps_serving_through_a_bad_newest_snapshot(tmp_path, endpoint, keys, listing, error):
    """A listing is the bucket's word: a replica checks every path and object name before it downloads or
    links anything, says what is wrong, and keeps serving what it has."""
    _, cfg, _ = published(tmp_path, endpoint, f"bad-{tmp_path.name}")
    store = store_for(cfg)
    replica = Replica(store, tmp_path / "replica", poll=60, name="r1")
    replica.step()
    serving = current_id(replica.data_dir)
    store.put(store.key("objects", SHA_X.decode()), b"x")  # an object the bucket has, for the paths
    store.put(store.key("snapshots", f"{BOGUS}.json"), listing % FIELDS)
    store.put(store.key("published", BOGUS), BOGUS.encode(), once=True)
    replica.step()
    assert error in replica.last_error and current_id(replica.data_dir) == serving, replica.last_error
    assert verify(replica.data_dir)[1] == [] and not (tmp_path / "etc").exists()
    assert sorted(p.name for p in replica.data_dir.iterdir() if p.name.startswith(".sync-")) == []


def test_a_marker_that_is_not_a_snapshot_id_is_refused(tmp_path, endpoint, keys):
    _, cfg, _ = published(tmp_path, endpoint, "marker")
    store = store_for(cfg)
    store.put(store.key("published", "~..~evil"), b"x", once=True)  # sorts after every id
    with pytest.raises(StoreError, match="marks '~..~evil' published, which is not a snapshot id"):
        sync(store, tmp_path / "replica")


def test_a_replica_serves_through_a_publish_without_a_failed_request(tmp_path, endpoint, keys, blobdex):
    built, cfg, _ = published(tmp_path, endpoint, "live")
    first = current_id(cfg.data_dir)
    home = tmp_path / "replica"
    home.mkdir()
    (home / "blobdex.toml").write_text(dumps(replace(cfg, data_dir=home / "data", repos=())), encoding="utf-8")
    env = {**os.environ, **KEYS}
    args = ("--store", cfg.store, "--poll-seconds", "1")
    with serve_subprocess(home, env, args=args) as (base, _):
        assert httpx.get(f"{base}/readyz").json()["snapshot_id"] == first
        counted = {"ok": 0, "failed": 0}
        stop = threading.Event()

        answered: set[str] = set()  # the snapshots that answered

        def load() -> None:  # a loop of searches until the swap is over (at most ten minutes), every answer counted
            deadline = time.monotonic() + 600
            while not stop.is_set() and time.monotonic() < deadline:
                r = httpx.post(f"{base}/v1/search", json={"query": "renew subscription", "mode": "bm25"}, timeout=30)
                ok = r.status_code == 200 and r.json()["hits"]
                counted["ok" if ok else "failed"] += 1
                if ok:
                    answered.add(r.json()["snapshot_id"])

        loop = threading.Thread(target=load)
        loop.start()
        changed = RENEW_PY.replace(b"days=30", b"days=31")
        gitrepo.commit(Repo(str(built.root / "src" / "api")), {**api_files(), "src/billing/renew.py": changed})
        run(cfg, embedder=HashEmbedder(), show_progress=False)
        second = current_id(cfg.data_dir)
        deadline = time.monotonic() + 60
        while httpx.get(f"{base}/readyz").json()["snapshot_id"] != second and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)  # searches on the new snapshot too
        stop.set()
        loop.join()
        assert httpx.get(f"{base}/readyz").json()["snapshot_id"] == second != first
        assert counted["failed"] == 0 and answered == {first, second}, (counted, answered)  # through the swap
        local = Service(cfg, embedder=HashEmbedder())
        body = {"query": "renew subscription", "mode": "bm25", "limit": 5}
        ours = local.search(SearchRequest(query="renew subscription", mode="bm25", limit=5))[1]
        theirs = httpx.post(f"{base}/v1/search", json=body).json()["hits"]
        assert [(h["path"], h["line_start"], h["score"]) for h in theirs] == [
            (h.path, h.line_start, h.score) for _, h in ours
        ]
        listed = store_for(cfg).replicas()
        assert [r["serving"] for r in listed] == [second]
        cfg.path.write_text(dumps(cfg, "data"), encoding="utf-8")
        status = blobdex("--config", cfg.path, "status", "--replicas")
        assert status.code == 0 and f"store {cfg.store}: newest snapshot {second}" in status.out
        assert f"replica {listed[0]['replica']} serves {second}" in status.out


def test_one_indexer_publishes_to_a_store_and_never_an_older_snapshot(tmp_path, endpoint, keys):
    """A second indexer's sweep could delete an object the first had just reused, and their snapshots would
    take turns being the newest: it is refused, until the store is handed over. A snapshot older than the
    store's newest (a clock behind) would never be served: refused too."""
    _, cfg, report = published(tmp_path, endpoint, "one-publisher")
    assert report.store is not None
    first = current_id(cfg.data_dir)
    other = stored(build_corpus(tmp_path / "other", {"tools": tools_files()}).cfg, endpoint, "one-publisher")
    report = run(other, embedder=HashEmbedder(), show_progress=False)
    assert report.store is None and "is published to by another indexer" in report.store_error
    assert "delete one-publisher/publisher in the bucket to hand the store over" in report.store_error
    store = store_for(cfg)
    assert store.newest() == first
    store.delete(store.key("publisher"))  # handed over: the other indexer publishes from now on
    assert run(other, embedder=HashEmbedder(), show_progress=False).store["snapshot_id"] == store.newest()
    assert store.newest() == current_id(other.data_dir) > first
    store.delete(store.key("publisher"))  # and back: but the first one's live snapshot is older than the newest
    with pytest.raises(StoreError, match=f"snapshot {first} is older than {store.newest()}, the newest in"):
        upload(store, cfg.data_dir, first)


def test_a_broken_stream_is_a_store_error(tmp_path, endpoint, keys, monkeypatch):
    from botocore.exceptions import ReadTimeoutError

    class Broken:
        def read(self):
            raise ReadTimeoutError(endpoint_url=endpoint)

    store = store_for(stored(build_corpus(tmp_path, {"api": {"a.py": b"x = 1\n"}}).cfg, endpoint, "broken"))
    monkeypatch.setattr(store.client, "get_object", lambda **kw: {"Body": Broken()})
    with pytest.raises(StoreError, match="cannot read broken/publisher in store"):
        store.get(store.key("publisher"))


def test_a_replica_goes_back_when_the_newest_is_withdrawn_and_keeps_what_it_served(tmp_path, endpoint, keys):
    built, cfg, _ = published(tmp_path, endpoint, "withdrawn")
    before = current_id(cfg.data_dir)
    change_renew(built, b"#\n")
    run(cfg, embedder=HashEmbedder(), show_progress=False)
    bad = current_id(cfg.data_dir)
    store = store_for(cfg)
    replica = Replica(store, tmp_path / "replica", poll=60, name="r1")
    replica.step()
    assert current_id(replica.data_dir) == bad
    store.delete(store.key("published", bad))  # an operator withdraws a bad snapshot
    replica.step()
    assert current_id(replica.data_dir) == before and replica.last_error is None
    assert (replica.data_dir / "snapshots" / bad).is_dir()  # a request may still be reading it
    assert verify(replica.data_dir)[1] == []


def test_an_unreachable_store_fails_the_run_in_one_sentence_and_loses_nothing(tmp_path, endpoint, keys, blobdex):
    built = build_corpus(tmp_path, {"api": api_files()})
    cfg = stored(built.cfg, "http://127.0.0.1:9", "nowhere")  # nothing listens on the discard port
    cfg.path.write_text(dumps(cfg, "data"), encoding="utf-8")
    out = blobdex("--config", cfg.path, "index", "--quiet", "--json")
    report = json.loads(out.out)
    assert out.code == 1 and report["published"] is False and report["store"] is None
    assert report["notes"][-1].startswith(f"snapshot {current_id(cfg.data_dir)} was published here but not uploaded")
    assert "cannot list" in report["notes"][-1] and "check store_endpoint" in report["notes"][-1]
    assert Service(cfg, embedder=HashEmbedder()).reader().snapshot_id == current_id(cfg.data_dir)  # still serves
    fixed = stored(built.cfg, endpoint, "later")
    fixed.path.write_text(dumps(fixed, "data"), encoding="utf-8")
    assert blobdex("--config", fixed.path, "index", "--quiet").code == 0  # the next run uploads it
    assert store_for(fixed).newest() == current_id(cfg.data_dir)


def test_store_settings_are_refused_in_one_sentence(tmp_path, monkeypatch):
    with pytest.raises(StoreError, match="is 'https://bucket/prefix'; use an s3://BUCKET/PREFIX URL"):
        Store("https://bucket/prefix")
    for url in ("s3://AKIAKEYID:topsecretkey@bucket/prefix", "s3://AKIAKEYID:top/secretkey@bucket/prefix"):
        with pytest.raises(StoreError, match="refused in case it carries credentials") as refused:
            Store(url)  # the second parses as no credentials at all: a secret with a / in it
        assert "secretkey" not in str(refused.value) and "AKIAKEYID" not in str(refused.value)
    monkeypatch.delenv("BLOBDEX_TEST_S3_KEY", raising=False)
    cfg = stored(build_corpus(tmp_path, {"api": {"a.py": b"x = 1\n"}}).cfg, "http://127.0.0.1:9", "p")
    with pytest.raises(StoreError, match="names environment variable 'BLOBDEX_TEST_S3_KEY', which is unset"):
        store_for(cfg)
    with pytest.raises(StoreError) as refused:
        store_for(cfg, "s3://AKIAKEYID:topsecretkey@bucket/prefix")
    assert "topsecretkey" not in str(refused.value) and "AKIAKEYID" not in str(refused.value)
    replica = Replica(Store("s3://b/p", "http://127.0.0.1:9", "k", "s"), tmp_path / "r", poll=60)
    replica.step()  # an unreachable store: logged, nothing raised, nothing served yet
    assert replica.last_error.startswith("cannot list")
