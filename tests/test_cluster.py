"""Distributed indexing on a real Ray cluster on this machine: a head node and a second node (`ray start`, two
raylets, separate worker processes). A run spread over it publishes what a local run publishes; an embedding
worker killed mid-batch costs that batch again and loses nothing; a run with nothing new never starts Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from dulwich.repo import Repo

from indexer.build import cluster
from indexer.build import run
from indexer.config import dumps
from indexer.build.cluster import Cluster, ClusterError
from indexer.history import commit_text
from indexer.snapshot import open_manifest, read_chunks, read_history
from indexer.snapshot.verify import verify
from tests import gitrepo
from tests.checks import assert_one_sentence_error
from tests.corpus import api_files, build_corpus, content, tools_files
from tests.servers import free_port, ray_nodes

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def ray_cluster():
    """A head node and one more node, each with one CPU: the addresses to join it as a node and as a client."""
    with ray_nodes(["--num-cpus", "1"], others=1) as (port, client):
        yield {"node": f"127.0.0.1:{port}", "client": f"ray://127.0.0.1:{client}"}


def corpus_files() -> dict:
    """Real code with enough chunks for several embedding batches: this project's own query modules."""
    return {f"query/{p.name}": p.read_bytes() for p in sorted((ROOT / "query").glob("*.py"))}


@pytest.fixture
def every_batch_on_the_cluster(monkeypatch):
    """Small fixtures' work sent to the cluster as a big run's is (a run this small stays here otherwise)."""
    monkeypatch.setattr(cluster, "LOCAL_BLOBS", 0)
    monkeypatch.setattr(cluster, "LOCAL_ROWS", 0)
    monkeypatch.setattr(cluster, "LOCAL_TEXTS", 0)


# `blobdex` in its own process with every batch sent to the cluster (as every_batch_on_the_cluster does here).
SPREAD_ALL = (
    "from indexer.build import cluster; cluster.LOCAL_BLOBS = cluster.LOCAL_TEXTS = cluster.LOCAL_ROWS = 0; "
    "from query.cli import main; main()"
)


@pytest.mark.parametrize("joined_as", ["node", "client"])
def test_a_run_on_the_cluster_publishes_what_a_local_run_does(
    tmp_path, ray_cluster, every_batch_on_the_cluster, joined_as
):
    """Joined as a node, in this process; through Ray Client, as `blobdex index` in a process of its own, as a
    user outside the cluster runs it."""
    local = build_corpus(tmp_path / "local", {"api": api_files(), "tools": tools_files()})
    address = ray_cluster[joined_as]
    # two workers named: the free CPUs a run counts by default lag a moment behind the last run's actors
    spread = replace(local.cfg, data_dir=tmp_path / "spread", cluster=address, cluster_workers=2)
    if joined_as == "node":
        report = run(spread, show_progress=False).to_dict()
    else:
        (tmp_path / "spread.toml").write_text(dumps(spread, str(spread.data_dir)), encoding="utf-8")
        args = ["--config", str(tmp_path / "spread.toml"), "index", "--json"]
        ran = subprocess.run([sys.executable, "-c", SPREAD_ALL, *args], capture_output=True, text=True)
        assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
        report = json.loads(ran.stdout)
    totals = report["totals"]
    assert report["published"] and totals["blobs_new"] == local.report.blobs_new
    # and each repo's card, and the history's distinct commit texts (embedded there too, after the blobs)
    history = read_history(*open_manifest(local.cfg.data_dir), "commits").column("message").to_pylist()
    texts = totals["chunks_embedded"] + 2 + len({commit_text(m) for m in history})
    blobs = totals["blobs_new"]
    parts = len(report["repos"])  # every repo's part built there too (its files and codes), placed here
    assert report["cluster"] == {
        "address": address,
        "workers": 2,
        "gpus": 0,
        "blobs": blobs,
        "texts": texts,
        "parts": parts,
    }
    assert content(spread.data_dir) == content(local.cfg.data_dir)
    assert open_manifest(spread.data_dir)[1].content_key() == open_manifest(local.cfg.data_dir)[1].content_key()
    assert verify(spread.data_dir)[1] == []
    again = run(spread, show_progress=False)  # nothing new: Ray is not asked for anything
    assert again.unchanged and again.cluster is None


def embedding(pid: int) -> bool:
    """Whether a process of this user is an embedding actor embedding now (Ray titles it `ray::_Encoder.embed`
    during the call)."""
    entry = Path("/proc") / str(pid)
    try:
        return entry.stat().st_uid == os.getuid() and (entry / "cmdline").read_bytes().startswith(
            b"ray::_Encoder.embed"
        )
    except OSError:
        return False


def test_an_embedding_worker_killed_mid_batch_loses_nothing(tmp_path, ray_cluster, every_batch_on_the_cluster):
    """With the bundled model: a batch takes seconds on one core, so the kill lands while one is being embedded."""
    local = build_corpus(tmp_path / "local", {"code": corpus_files()}, model=BUNDLED, fast_first=False)
    spread = replace(local.cfg, data_dir=tmp_path / "spread", cluster=ray_cluster["node"], cluster_workers=2)
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 300
        while not killed and time.monotonic() < deadline:
            for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and embedding(int(p.name))):
                time.sleep(0.2)  # inside the batch (a batch takes seconds on one core)
                if embedding(pid):  # still inside its batch: the kill costs that batch, which must be retried
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one)
    killer.start()
    report = run(spread, show_progress=False)
    killer.join()
    assert killed, "no embedding worker was seen at work"
    assert report.published and report.chunks_embedded == local.report.chunks_embedded
    assert content(spread.data_dir) == content(local.cfg.data_dir)  # every row, every vector (to 5 places)
    assert verify(spread.data_dir)[1] == []


def test_workers_of_another_blobdex_version_are_refused(ray_cluster, monkeypatch):
    """Entries or vectors made by other tools than the driver's would be cached under the driver's versions."""
    from indexer.versions import TOOLS

    spread = Cluster(ray_cluster["node"])
    try:
        with pytest.raises(ClusterError, match="embeds with 'blobdex:hash', this indexer with 'blobdex:hash@9'"):
            spread.model_dim("blobdex:hash", "onnx", "blobdex:hash@9")
        monkeypatch.setattr(cluster, "TOOLS", replace(TOOLS, chunker_version=TOOLS.chunker_version + 1))
        with pytest.raises(ClusterError, match="a Ray worker prepares blobs with tools p"):
            list(spread.prepare(iter([[("k", b"def f():\n    return 1\n", "python")]]), 1 << 20))
    finally:
        spread.close()


def test_a_small_run_stays_here_and_never_starts_ray(tmp_path, blobdex):
    """One commit's work is less than Ray's start costs: the run succeeds against an address nothing listens on."""
    built = build_corpus(tmp_path, {"api": api_files()})
    gitrepo.commit(Repo(str(tmp_path / "src" / "api")), {**api_files(), "src/more.py": b"def more():\n    return 2\n"})
    ran = blobdex("--config", built.cfg.path, "index", "--json", "--cluster", f"ray://127.0.0.1:{free_port()}")
    assert ran.code == 0 and json.loads(ran.out)["totals"]["blobs_new"] == 1, ran
    assert json.loads(ran.out)["cluster"] is None  # all its work done here
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_an_unreachable_cluster_is_one_sentence_and_the_last_snapshot_keeps_serving(
    tmp_path, blobdex, every_batch_on_the_cluster
):
    built = build_corpus(tmp_path, {"api": api_files()})
    gitrepo.commit(Repo(str(tmp_path / "src" / "api")), {**api_files(), "src/more.py": b"def more():\n    return 2\n"})
    before = open_manifest(built.cfg.data_dir)[0]
    port = free_port()  # nothing listens there
    ran = blobdex("--config", built.cfg.path, "index", "--quiet", "--cluster", f"ray://127.0.0.1:{port}")
    assert_one_sentence_error(ran, f"cannot reach the Ray cluster at 'ray://127.0.0.1:{port}'", "ray start --head")
    shown = blobdex("--config", built.cfg.path, "index", "--cluster", f"ray://127.0.0.1:{port}").err.splitlines()
    assert shown[0] == "chunk: 1 to do" and shown[1].startswith("chunk: stopped at 0/1 after "), shown  # not "done"
    assert shown[2].startswith("blobdex: error: cannot reach the Ray cluster") and len(shown) == 3
    assert open_manifest(built.cfg.data_dir)[0] == before and verify(built.cfg.data_dir)[1] == []
    with pytest.raises(ClusterError, match="--cluster is 'head'; use \"local\""):
        Cluster("head")


def test_a_cluster_with_a_gpu_embeds_there_with_torch_in_bigger_batches(tmp_path, every_batch_on_the_cluster):
    """A head that declares one GPU (Ray schedules by what a node declares; this machine has none, so torch runs
    on its CPU) and a run whose encoder is torch: one embedding actor, on the GPU, whose vectors are a local torch
    run's. With the default encoder (ONNX) the same cluster embeds on its CPUs: every vector of a run comes
    from the encoder the run names."""
    local = build_corpus(tmp_path / "local", {"api": api_files()}, model=BUNDLED, fast_first=False, encoder="torch")
    with ray_nodes(["--num-cpus", "2", "--num-gpus", "1"]) as (port, _):
        spread = replace(local.cfg, data_dir=tmp_path / "spread", cluster=f"127.0.0.1:{port}")
        report = run(spread, show_progress=False)
        on_cpus = run(replace(spread, data_dir=tmp_path / "onnx", encoder="onnx"), show_progress=False)
    # the chunks, the repo's card and its one commit's message
    assert report.cluster["gpus"] == 1 and report.cluster["texts"] == local.report.chunks_embedded + 2
    # on CPUs (as many as were free: Ray frees a killed actor's CPU a moment later)
    assert on_cpus.cluster["gpus"] == 0 and on_cpus.cluster["texts"] == report.cluster["texts"]
    ours, theirs = (read_chunks(open_manifest(c.data_dir)[0]) for c in (spread, local.cfg))
    key = [("path", "ascending"), ("line_start", "ascending"), ("chunk_index", "ascending")]
    ours, theirs = ours.sort_by(key), theirs.sort_by(key)
    assert ours.drop_columns(["row", "vector"]).to_pylist() == theirs.drop_columns(["row", "vector"]).to_pylist()
    vectors = [np.stack(t.column("vector").to_numpy(zero_copy_only=False)) for t in (ours, theirs)]
    assert (vectors[0] * vectors[1]).sum(axis=1).min() > 0.99999
