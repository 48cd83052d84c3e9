"""Distributed indexing figures (`make bench` runs this on its own index; `python ci/bench_cluster.py` builds one
of the networkx tree with the hashing embedder, so its small runs embed with that, not the model): embedding
throughput of the bundled model on a local Ray instance with 1 and 2 workers (one actor per CPU, each on one
core) beside the same texts embedded in this process on every core; what Ray's start costs; and what it adds to
a small run (one commit) and to a run with nothing new (where Ray must not start at all). Nothing is asserted;
it prints the figures (--json writes them)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci.bench_store import commit_one_function, main  # noqa: E402
from indexer.build.cluster import Cluster  # noqa: E402
from indexer.config import load  # noqa: E402
from indexer.embed import embed_text, load_embedder, model_id_for  # noqa: E402
from indexer.snapshot import current_id, read_chunks  # noqa: E402

MODEL = "all-MiniLM-L6-v2"  # bundled; the ONNX encoder, as a default install runs it
SAMPLE = 1536  # texts embedded by each setup: six batches of 256, so two workers share them evenly


def cluster_figures(work: Path, env: dict) -> dict:
    """`work` holds a bench index (blobdex.toml, data/, the repo under src/); returns the figures."""
    cfg = load(work / "blobdex.toml")
    table = read_chunks(cfg.data_dir / "snapshots" / current_id(cfg.data_dir), vectors=False)
    texts = [embed_text(r["symbol"], r["text"]) for r in table.slice(0, SAMPLE).to_pylist()]
    embedder = load_embedder(MODEL)
    embedder.embed(texts[:16])  # warm
    started = time.monotonic()
    embedder.embed(texts)
    here = len(texts) / (time.monotonic() - started)
    figures: dict = {
        "texts": len(texts),
        "cores": len(os.sched_getaffinity(0)),
        "in_process_chunks_per_s": round(here, 1),
    }
    model_id = model_id_for(MODEL)
    for workers in (1, 2):
        cluster = Cluster("local", workers)
        try:
            started = time.monotonic()
            cluster.model_dim(MODEL, "onnx", model_id)  # ray.init, then every actor's model loaded
            ready = time.monotonic() - started
            started = time.monotonic()
            landed = sum(len(ids) for ids, _ in cluster.embed(MODEL, "onnx", model_id, list(enumerate(texts))))
            seconds = time.monotonic() - started
        finally:
            cluster.close()
        figures[f"ray_{workers}_worker"] = {"chunks_per_s": round(landed / seconds, 1), "start_s": round(ready, 2)}
    one, two = figures["ray_1_worker"]["chunks_per_s"], figures["ray_2_worker"]["chunks_per_s"]
    figures["speedup_2_over_1"] = round(two / one, 2)
    figures["runs"] = small_runs(work, env)
    return figures


def small_runs(work: Path, env: dict) -> dict:
    """Wall seconds of `blobdex index` after one commit, here and with --cluster local, and of a run with nothing
    new with --cluster local: work this small stays in the process (indexer.build.cluster.LOCAL_BLOBS, LOCAL_TEXTS), so
    the figures with --cluster should be a plain run's, not Ray's start added."""

    def index(*args: str) -> float:
        started = time.monotonic()
        blobdex = str(Path(sys.executable).parent / "blobdex")
        subprocess.run([blobdex, "index", "--quiet", *args], cwd=work, env=env, check=True)
        return round(time.monotonic() - started, 2)

    commit_one_function(work)
    here = index()
    commit_one_function(work)
    on_ray = index("--cluster", "local", "--workers", "2")
    nothing_new = index("--cluster", "local", "--workers", "2")
    return {"one_commit_s": here, "one_commit_on_ray_s": on_ray, "no_change_on_ray_s": nothing_new}


if __name__ == "__main__":
    main(__doc__, cluster_figures, "blobdex-bench-cluster-")
