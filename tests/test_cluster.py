"""Distributed indexing on a real Ray cluster on this machine: a head node and a second node (`ray start`, two
raylets, separate worker processes). A run spread over it publishes what a local run publishes; an embedding
worker killed mid-batch costs that batch again and loses nothing; a run with nothing new never starts Ray."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from dulwich.repo import Repo

from indexer import cluster
from indexer.build import run
from indexer.cluster import Cluster, ClusterError
from indexer.snapshot import open_manifest
from indexer.verify import verify
from tests import gitrepo
from tests.corpus import api_files, build_corpus, tools_files
from tests.servers import free_port
from tests.test_config import assert_one_sentence_error
from tests.test_incremental import content

ROOT = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).parent / "ray")
BUNDLED = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A head node and one more node, each with one CPU, with token authentication (a token of this test's own,
    which the nodes and this process share through the environment, as an operator's would); yields the head's
    address and its Ray Client address. `ray stop` stops every Ray process of this user on the machine: CI runs
    none of its own."""
    port, client = free_port(), free_port()
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env = {**os.environ, **auth, "RAY_TMPDIR": str(tmp_path_factory.mktemp("ray"))}
    common = ["--num-cpus", "1", "--object-store-memory", str(256 << 20), "--disable-usage-stats"]
    with pytest.MonkeyPatch.context() as patch:
        for name, value in auth.items():
            patch.setenv(name, value)
        try:
            subprocess.run(
                [RAY, "start", "--head", "--port", str(port), "--ray-client-server-port", str(client)]
                + ["--include-dashboard", "false", *common],
                check=True,
                env=env,
                capture_output=True,
            )
            subprocess.run(
                [RAY, "start", "--address", f"127.0.0.1:{port}", *common], check=True, env=env, capture_output=True
            )
            yield {"node": f"127.0.0.1:{port}", "client": f"ray://127.0.0.1:{client}"}
        finally:
            subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True)


def corpus_files() -> dict:
    """Real code with enough chunks for several embedding batches: this project's own query modules."""
    return {f"query/{p.name}": p.read_bytes() for p in sorted((ROOT / "query").glob("*.py"))}


@pytest.fixture
def every_batch_on_the_cluster(monkeypatch):
    """Small fixtures' work sent to the cluster as a big run's is (a run this small stays here otherwise)."""
    monkeypatch.setattr(cluster, "LOCAL_BLOBS", 0)
    monkeypatch.setattr(cluster, "LOCAL_TEXTS", 0)


@pytest.mark.parametrize("joined_as", ["node", "client"])
def test_a_run_on_the_cluster_publishes_what_a_local_run_does(
    tmp_path, ray_cluster, every_batch_on_the_cluster, joined_as
):
    local = build_corpus(tmp_path / "local", {"api": api_files(), "tools": tools_files()})
    address = ray_cluster[joined_as]
    spread = replace(local.cfg, data_dir=tmp_path / "spread", cluster=address)
    report = run(spread, show_progress=False)
    assert report.published and report.blobs_new == local.report.blobs_new
    texts = report.chunks_embedded + 2  # and each repo's card
    assert report.cluster == {"address": address, "workers": 2, "blobs": report.blobs_new, "texts": texts}
    assert content(spread.data_dir) == content(local.cfg.data_dir)
    assert open_manifest(spread.data_dir)[1].content_key() == open_manifest(local.cfg.data_dir)[1].content_key()
    assert verify(spread.data_dir)[1] == []
    again = run(spread, show_progress=False)  # nothing new: Ray is not asked for anything
    assert again.unchanged and again.cluster is None


def encoder_pids() -> list[int]:
    """The processes of the embedding actors while they embed (Ray names them `ray::_Encoder.embed`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::_Encoder.embed"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_an_embedding_worker_killed_mid_batch_loses_nothing(tmp_path, ray_cluster, every_batch_on_the_cluster):
    """With the bundled model: a batch takes seconds on one core, so the kill lands while one is being embedded."""
    local = build_corpus(tmp_path / "local", {"code": corpus_files()}, model=BUNDLED, fast_first=False)
    spread = replace(local.cfg, data_dir=tmp_path / "spread", cluster=ray_cluster["node"])
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 300
        while not killed and time.monotonic() < deadline:
            pids = encoder_pids()
            if pids:
                time.sleep(0.5)  # well inside the batch
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one)
    killer.start()
    report = run(spread, show_progress=False)
    killer.join()
    assert killed, "no embedding worker was seen at work"
    assert report.published and report.chunks_embedded == local.report.chunks_embedded
    assert content(spread.data_dir) == content(local.cfg.data_dir)  # every row, every vector (to 5 places)
    assert verify(spread.data_dir)[1] == []


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
