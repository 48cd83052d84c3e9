"""Fast-first runs with the real bundled model: the static tier is published first, the model's vectors are
backfilled (in one run, or over several when backfill_seconds stops one), queries follow the tier served."""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import replace

import numpy as np
import pytest

from indexer.build import vectors
from indexer.build import run
from indexer.config import DEFAULT_MODEL, RepoSpec
from indexer.embed import GRAPHS_DIR, load_embedder, model_id_for
from indexer.build.cache import Cache
from indexer.runs import read_backfill
from indexer.snapshot import SnapshotError, open_manifest, read_chunks, vector_matrix
from indexer.snapshot import published as published_ids
from indexer.snapshot.verify import verify
from query.eval.scratch import index_scratch
from query.reader import SnapshotReader
from query.search import SearchRequest
from query.service import Service
from query.surfaces import render
from tests import gitrepo
from tests.corpus import write_config

STATIC_ID = "all-MiniLM-L6-v2+static@1"
TOPICS = [
    "renew the customer's subscription for another billing period",
    "refund an invoice that was paid twice",
    "parse command line flags into options",
    "resize an image to fit a thumbnail",
    "retry a webhook delivery with exponential backoff",
    "hash a password with a random salt",
    "render a markdown document as html",
    "schedule a nightly database backup",
    "validate an email address before signup",
    "compute the shipping cost for a parcel",
    "rotate the log files when they grow too large",
    "translate a message into the user's language",
]

REFUNDS = ("app/mod_1.py", "app/mod_13.py")  # the refund topic's files among _files(24)


def _files(n: int) -> dict[str, bytes]:
    """Python files of one function each (one chunk each), about distinct topics."""
    files = {}
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        name = "_".join(topic.split()[:3]).replace("'", "") + f"_{i}"
        files[f"app/mod_{i}.py"] = f'def {name}(value):\n    """{topic}."""\n    return value + {i}\n'.encode()
    return files


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """The bundled model's ONNX graph and static table, built once and copied into each test's data dir (the
    distillation takes seconds)."""
    cache = tmp_path_factory.mktemp("cache")
    load_embedder(DEFAULT_MODEL, cache=cache, writable=True)
    load_embedder(DEFAULT_MODEL + "+static", cache=cache, writable=True)
    return cache / GRAPHS_DIR


def _configured(tmp_path, encoders, files: dict, **config):
    repo = gitrepo.init(tmp_path / "src" / "api")
    gitrepo.commit(repo, files)
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))], model=DEFAULT_MODEL)
    shutil.copytree(encoders, cfg.data_dir / "cache" / GRAPHS_DIR)
    return replace(cfg, **config), repo


class Recording:
    """The bundled model, recording every text it embeds; `pause` seconds before each batch."""

    def __init__(self, cfg, pause: float = 0.0):
        self.inner = load_embedder(DEFAULT_MODEL, cache=cfg.data_dir / "cache")
        self.model_id, self.dim, self.pause = self.inner.model_id, self.inner.dim, pause
        self.texts: list[str] = []

    def fits(self, text: str) -> bool:
        return self.inner.fits(text)

    def embed(self, texts: list[str]) -> np.ndarray:
        time.sleep(self.pause)
        self.texts += texts
        return self.inner.embed(texts)


def test_a_fast_first_run_publishes_static_vectors_first_then_converges_to_the_model(
    tmp_path, encoders, monkeypatch, blobdex
):
    monkeypatch.setattr(vectors, "FAST_FIRST_CHUNKS", 5)
    cfg, repo = _configured(tmp_path, encoders, _files(12))
    done = blobdex("--config", cfg.path, "index", "--json")
    assert done.code == 0, done.err
    report = json.loads(done.out)
    assert [(s["tier"], s["model"]) for s in report["snapshots"]] == [("fast", STATIC_ID), ("full", DEFAULT_MODEL)]
    first, second = report["snapshots"]
    _, fast = open_manifest(cfg.data_dir, first["snapshot_id"])
    assert (fast.model_id, fast.dim, fast.backfill_model_id, fast.backlog) == (STATIC_ID, 256, DEFAULT_MODEL, 12)
    _, live = open_manifest(cfg.data_dir)
    assert (live.snapshot_id, live.model_id, live.dim, live.backfill_model_id) == (
        second["snapshot_id"],
        DEFAULT_MODEL,
        384,
        "",
    )
    assert report["totals"]["chunks_embedded"] == 12 and report["backlog"] == 0
    assert not (cfg.data_dir / "backfill.json").exists()
    status = blobdex("--config", cfg.path, "status")
    assert f"vectors {DEFAULT_MODEL} (full tier, 384 dims)" in status.out and "backfill" not in status.out

    # The backfilled snapshot is the model's own: the vectors a run without fast_first publishes.
    plain_cfg, _ = _configured(tmp_path / "plain", encoders, _files(12), fast_first=False)
    plain = run(plain_cfg, show_progress=False)
    assert [s["tier"] for s in plain.snapshots] == ["full"]
    ours, theirs = (read_chunks(open_manifest(c.data_dir)[0]) for c in (cfg, plain_cfg))
    assert ours.column("text").to_pylist() == theirs.column("text").to_pylist()
    assert np.allclose(vector_matrix(ours), vector_matrix(theirs), atol=1e-5)

    # A lost cache: the model's vectors are read back from the live snapshot, never replaced by static ones.
    for lost in (cfg.data_dir / "cache").glob("cache.sqlite*"):
        lost.unlink()
    rebuilt = json.loads(blobdex("--config", cfg.path, "index", "--full", "--json").out)
    assert [s["tier"] for s in rebuilt["snapshots"]] == ["full"] and rebuilt["totals"]["chunks_embedded"] == 0

    # A commit with less to embed than FAST_FIRST_CHUNKS goes straight to the model.
    gitrepo.commit(repo, {**_files(12), "app/extra.py": b"def extra():\n    return 'one more chunk'\n"})
    again = json.loads(blobdex("--config", cfg.path, "index", "--json").out)
    assert [s["tier"] for s in again["snapshots"]] == ["full"] and again["totals"]["chunks_embedded"] == 1


def test_a_backfill_cut_short_serves_the_static_tier_and_the_next_run_goes_on(tmp_path, encoders, monkeypatch, blobdex):
    monkeypatch.setattr(vectors, "FAST_FIRST_CHUNKS", 5)
    monkeypatch.setattr(vectors, "EMBED_BATCH", 4)
    cfg, _ = _configured(tmp_path, encoders, _files(24), backfill_seconds=1)
    slow = Recording(cfg, pause=0.6)  # at most two batches of four start within the second: the run stops early
    report = run(cfg, embedder=slow, show_progress=False)
    assert [s["tier"] for s in report.snapshots] == ["fast"] and report.published
    # the history stage embedded the repo's one commit message ("change") first, with the model: not a chunk
    chunks_seen = [t for t in slow.texts if t != "change"]
    assert len(chunks_seen) == len(slow.texts) - 1
    assert 0 < report.backlog < 24 and report.backlog == 24 - len(chunks_seen)
    assert "the next 'blobdex index' goes on" in report.notes[-1]
    assert (
        f"chunks 24 ({24 - report.backlog} embedded, 0 from cache, {report.backlog} still to embed)" in report.to_text()
    )
    _, live = open_manifest(cfg.data_dir)
    assert live.model_id == STATIC_ID and live.backlog == 24
    assert read_backfill(cfg.data_dir, live.snapshot_id)["left"] == report.backlog
    with pytest.raises(SnapshotError, match=r"holds the static vectors .* run 'blobdex index' to finish"):
        SnapshotReader(cfg.data_dir).check_model(DEFAULT_MODEL)  # what an eval of the model itself hears

    service = Service(cfg)
    _, hits = service.search(SearchRequest(query="pay back an invoice charged twice", org="default"))
    assert hits and {h.signals.vector_tier for _, h in hits} == {"fast"}
    assert hits[0][1].path in REFUNDS
    assert render.FAST_TIER_NOTE in render.hits_markdown("pay back", "s", hits, [])  # what an agent reads
    caption = render.hits_text([hits[0][1]])[0]  # every chunk of 24 has a vector rank
    assert re.search(r"\(vec #\d+ [\d.]+ fast \| bm25", caption), caption
    status = service.status("default")
    assert (status.model, status.vectors["tier"]) == (STATIC_ID, "fast")
    assert status.vectors["backfill"] == {
        "model": DEFAULT_MODEL,
        "chunks_left": report.backlog,
        "of": 24,
        "updated_at": status.vectors["backfill"]["updated_at"],
    }
    shown = blobdex("--config", cfg.path, "status").out
    assert f"vectors {STATIC_ID} (fast tier, 256 dims); backfill with {DEFAULT_MODEL}: {report.backlog} of 24" in shown
    # A session's edits (stored with the model's vectors) are searched beside the static tier in its space.
    edit = {"app/new.py": "def purge_stale_sessions(store):\n    return store.clear_expired()\n"}
    service.sync_workspace("default", "s1", "api", edit, [])
    _, hits = service.search(SearchRequest(query="purge stale sessions", org="default"), session_id="s1")
    assert hits[0][1].uncommitted and hits[0][1].path == "app/new.py" and hits[0][1].signals.vector_tier == "fast"

    # Nothing changed upstream: the next run publishes no static tier again, embeds only what was left.
    rest = Recording(cfg)
    resumed = run(replace(cfg, backfill_seconds=0), embedder=rest, show_progress=False)
    assert [s["tier"] for s in resumed.snapshots] == ["full"] and resumed.chunks_embedded == report.backlog
    assert not set(rest.texts) & set(slow.texts)  # no chunk embedded twice
    assert read_backfill(cfg.data_dir, live.snapshot_id) is None

    # The same server swaps to the model's snapshot: queries, sessions and status follow it.
    _, hits = service.search(SearchRequest(query="pay back an invoice charged twice", org="default"))
    assert {h.signals.vector_tier for _, h in hits} == {"full"} and hits[0][1].path in REFUNDS
    _, hits = service.search(SearchRequest(query="purge stale sessions", org="default"), session_id="s1")
    assert hits[0][1].uncommitted and hits[0][1].signals.vector_tier == "full"
    status = service.status("default")
    assert (status.model, status.vectors["tier"], status.vectors["backfill"]) == (DEFAULT_MODEL, "full", None)


def test_what_publishes_once_and_what_is_refused(tmp_path, encoders, monkeypatch, blobdex):
    from indexer.config import ConfigError, load

    monkeypatch.setattr(vectors, "FAST_FIRST_CHUNKS", 1)
    cfg, _ = _configured(tmp_path, encoders, _files(3))
    once = blobdex("--config", cfg.path, "index", "--no-fast-first", "--json")
    assert [s["tier"] for s in json.loads(once.out)["snapshots"]] == ["full"]
    refused = blobdex("--config", cfg.path, "index", "--backfill-seconds", "-5")
    assert refused.code == 2 and "--backfill-seconds" in refused.err and "Traceback" not in refused.err
    fast_cfg = replace(cfg, model="fast")  # static already: nothing faster to publish first
    assert [s["tier"] for s in run(fast_cfg, show_progress=False).snapshots] == ["fast"]
    assert model_id_for("fast") == STATIC_ID
    cfg.path.write_text("fast_first = 1\n" + cfg.path.read_text())
    with pytest.raises(ConfigError, match=r"`fast_first` is a whole number, but it must be a boolean"):
        load(cfg.path)


def test_an_eval_measures_the_model_never_its_static_tier(tmp_path, encoders, monkeypatch):
    monkeypatch.setattr(vectors, "FAST_FIRST_CHUNKS", 1)
    cfg, _ = _configured(tmp_path, encoders, _files(3))
    run(replace(cfg, fast_first=False), show_progress=False)  # the mirror the eval reads
    int8 = DEFAULT_MODEL + "+int8"  # no vector of it cached: a plain run would go fast first
    scratch = index_scratch(replace(cfg, model=int8), "api", "default", load_embedder(int8, cache=tmp_path / "g"))
    assert scratch.manifest.model_id == model_id_for(int8)
    cache = Cache(cfg.data_dir / "cache")
    # 3 chunks, 1 card, 1 commit message
    assert cache.count_vectors(STATIC_ID) == 0 and cache.count_vectors(model_id_for(int8)) == 5


def test_a_repo_that_fails_keeps_serving_through_both_tiers(tmp_path, encoders, monkeypatch):
    monkeypatch.setattr(vectors, "FAST_FIRST_CHUNKS", 5)
    cfg, api = _configured(tmp_path, encoders, _files(4), fast_first=False)
    tools = gitrepo.init(tmp_path / "src" / "tools")
    gitrepo.commit(tools, {"cli.py": b"def rotate_logs(path):\n    return path + '.1'\n"})
    cfg = replace(cfg, repos=cfg.repos + (RepoSpec(name="tools", url=str(tmp_path / "src" / "tools")),))
    run(cfg, show_progress=False)  # the model's vectors for both repos
    gitrepo.commit(api, _files(12))  # eight new chunks: the static tier goes first
    shutil.move(tmp_path / "src" / "tools", tmp_path / "src" / "tools-moved")
    report = run(replace(cfg, fast_first=True), show_progress=False)
    assert [s["tier"] for s in report.snapshots] == ["fast", "full"] and report.failed
    for published in report.snapshots:  # carried into the static tier too, with its texts embedded there
        path, manifest = open_manifest(cfg.data_dir, published["snapshot_id"])
        chunks = read_chunks(path)
        rows = [r for r in chunks.select(["repo", "path"]).to_pylist() if r["repo"] == "tools"]
        assert rows == [{"repo": "tools", "path": "cli.py"}] and manifest.repo("default", "tools").status == "stale"
        assert vector_matrix(chunks).shape == (13, manifest.dim) and not np.isnan(vector_matrix(chunks)).any()


def test_a_large_addition_is_published_against_the_base_even_when_one_snapshot_is_kept(tmp_path, encoders, monkeypatch):
    """The model's snapshot lists the base's parts of the repos the run did not change, which the static tier
    (every repo written again with static vectors) does not: old snapshots are pruned only when the run is done."""
    monkeypatch.setattr(vectors, "FAST_FIRST_CHUNKS", 5)
    cfg, api = _configured(tmp_path, encoders, _files(4), fast_first=False, keep_snapshots=1)
    tools = gitrepo.init(tmp_path / "src" / "tools")
    gitrepo.commit(tools, {"cli.py": b"def rotate_logs(path):\n    return path + '.1'\n"})
    cfg = replace(cfg, repos=cfg.repos + (RepoSpec(name="tools", url=str(tmp_path / "src" / "tools")),))
    run(cfg, show_progress=False)
    tools_parts = open_manifest(cfg.data_dir)[1].repo("default", "tools").parts
    gitrepo.commit(api, _files(12))  # eight new chunks: the static tier goes first
    report = run(replace(cfg, fast_first=True), show_progress=False)
    assert [s["tier"] for s in report.snapshots] == ["fast", "full"]
    _, live = open_manifest(cfg.data_dir)
    assert live.repo("default", "tools").parts == tools_parts  # listed as it was, not written again
    assert published_ids(cfg.data_dir) == [report.snapshot_id] and verify(cfg.data_dir)[1] == []
