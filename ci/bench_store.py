"""Object storage figures (`make bench` runs this on its own index; `python ci/bench_store.py` builds one of the
networkx tree with the hashing embedder, whose vectors are as large as the model's): against moto's S3 server
on the loopback address, the upload of a cold snapshot (files, bytes, seconds), the upload after one commit,
a replica's first sync, and a replica's swap after a publish (from the upload's end until the replica's
/readyz names the new snapshot). Nothing is asserted; it prints the figures (--json writes them)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import httpx  # noqa: E402

from indexer.config import dumps, load  # noqa: E402
from indexer.snapshot import current_id  # noqa: E402
from indexer.store import store_for, sync, upload  # noqa: E402
from tests.servers import s3_server, serve_subprocess  # noqa: E402

BUCKET = "blobdex-bench"


def store_figures(work: Path, env: dict) -> dict:
    """`work` holds a bench index (blobdex.toml, data/, the repo under src/ or repo/); returns the figures."""
    keys = {"BLOBDEX_BENCH_S3_KEY": "bench", "BLOBDEX_BENCH_S3_SECRET": "bench"}
    os.environ.update(keys)
    with s3_server() as endpoint:
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)
        cfg = replace(
            load(work / "blobdex.toml"),
            store=f"s3://{BUCKET}/bench",
            store_endpoint=endpoint,
            store_access_key="env:BLOBDEX_BENCH_S3_KEY",
            store_secret_key="env:BLOBDEX_BENCH_S3_SECRET",
        )
        store = store_for(cfg)
        cold = upload(store, cfg.data_dir, current_id(cfg.data_dir)).to_dict()
        replica_home = work / "replica"
        replica_home.mkdir(exist_ok=True)
        replica = replace(cfg, data_dir=replica_home / "data", repos=())
        (replica_home / "blobdex.toml").write_text(dumps(replica, "data"), encoding="utf-8")
        first_sync = sync(store_for(replica), replica.data_dir).to_dict()
        one = _commit_and_index(work, cfg, env)
        delta = upload(store, cfg.data_dir, current_id(cfg.data_dir)).to_dict()
        with serve_subprocess(replica_home, {**env, **keys}, args=("--store", cfg.store, "--poll-seconds", "1")) as (
            base,
            _,
        ):
            _commit_and_index(work, cfg, env)
            started = time.monotonic()
            newer = upload(store, cfg.data_dir, current_id(cfg.data_dir))
            uploaded = time.monotonic() - started
            while httpx.get(f"{base}/readyz").json().get("snapshot_id") != newer.snapshot_id:
                time.sleep(0.05)
            swap = time.monotonic() - started - uploaded
    return {
        "cold_upload": cold,
        "replica_first_sync": first_sync,
        "one_commit_index_s": one,
        "one_commit_upload": delta,
        "replica_swap_after_upload_s": round(swap, 2),
        "poll_seconds": 1,
    }


def _commit_and_index(work: Path, cfg, env: dict) -> float:
    """Commit one more function to the bench repo and index; the run's wall seconds."""
    import subprocess

    commit_one_function(work)
    started = time.monotonic()
    subprocess.run(
        [str(Path(sys.executable).parent / "blobdex"), "--config", str(cfg.path), "index", "--quiet"],
        cwd=work,
        env=env,
        check=True,
    )
    return round(time.monotonic() - started, 2)


def commit_one_function(work: Path) -> None:
    """Add one function to the first Python file of the bench repo (under work/src/ or work/repo/) and commit."""
    from dulwich.repo import Repo

    from tests import gitrepo

    source = next(p for p in (work / "src", work / "repo") if p.exists())
    repo = Repo(str(source if (source / ".git").exists() else next(source.iterdir())))
    files = {}

    def walk(tree, prefix=""):
        for entry in repo[tree].items():
            path = prefix + entry.path.decode()
            if entry.mode & 0o040000:
                walk(entry.sha, path + "/")
            else:
                files[path] = repo[entry.sha].as_raw_string()

    walk(repo[repo.head()].tree)
    target = next(p for p in sorted(files) if p.endswith(".py"))
    files[target] += f"\n\ndef bench_commit_{time.time_ns()}():\n    return 1\n".encode()
    gitrepo.commit(repo, files, message="bench: one more function", parents=[repo.head()])


def main(doc: str = __doc__, figures_of=None, prefix: str = "blobdex-bench-store-") -> None:
    """A bench script's command line: figures of `--work` (a bench work dir with an index), or of an index of the
    networkx tree built now with the hashing embedder; printed, and written to `--json`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--work", type=Path, help="a bench work dir with an index (default: build one)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOBDEX_")}
    work = args.work
    if work is None:
        import subprocess

        from ci.bench_repo import default_source, make_repo

        work = Path(tempfile.mkdtemp(prefix=prefix))
        make_repo(default_source(), work / "src" / "networkx")
        (work / "blobdex.toml").write_text(
            'data_dir = "data"\nmodel = "blobdex:hash"\nfast_first = false\n\n[[repo]]\nname = "networkx"\n'
            f'url = "{work / "src" / "networkx"}"\n',
            encoding="utf-8",
        )
        subprocess.run(
            [str(Path(sys.executable).parent / "blobdex"), "index", "--quiet"], cwd=work, env=env, check=True
        )
    figures = (figures_of or store_figures)(work, env)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
