"""`make bench-scale`: what a run and the server cost as the corpus grows, with the hashing embedder (so no
model time) over copies of a real source tree, added repo by repo until each step's chunk count is reached,
and, with --real, over real repositories first (every step holds them all; copies top it up).

Copy k of the tree (default: the networkx package, ~10,800 chunks) renames every `def` and `class` with a
`_k<k>` suffix, so its chunks are texts of its own. At each step: the run that adds the new repos, a run with
nothing changed, runs after one commit each that adds one function to copy 0 (--commits, 10: enough that a
merge of the repo's deltas falls among them; median and max wall, peak RSS, mean and max bytes added under
the data dir), as many pushes of one commit each drained as a long-lived indexer drains its queue (only the
pushed repo fetched; median and max), then `blobdex serve` on the snapshot: time to ready, RSS, search /
route / get_file p50 and p95 over HTTP, grep over HTTP for patterns only one copy matches (GREPS), the same
greps in process with and without the parts' trigram indexes, and the searches from the next publish until the new
snapshot has answered a few (the swap: the slowest of them, and when the new one first answered). With
--real-model, the real repositories are also indexed alone with that model, and the approximate index's recall@10
against exact is measured on their vectors (a real model's, not hashed). With --shards N, each step is also served
by a front over N shards on Ray Serve (sharded_figures). Nothing is asserted; it prints a
table with the issue's goals beside it (and --json writes the figures).

--serve-only serves what an earlier bench left in --work alone, without the bench's own memory beside the server.

A step adds its copies over runs of at most --run-rows rows (a cold run holds about 10 KB a chunk until it writes:
one run of 9M new chunks would not fit this machine). With --distinct N, copy k past N repeats copy k % N's texts
under its own name: their blobs are already chunked, so a run costs fetching, scanning, history and writing, which
is how a 10M step fits a 2-core machine's evening. A --work that an earlier bench left copies in goes on from them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci.bench import run_index, timed_calls  # noqa: E402
from ci.bench_repo import default_source  # noqa: E402

STEPS = (100_000, 300_000, 1_000_000)
RUN_ROWS = 1_000_000  # rows one run adds at most: a cold run holds about 10 KB a chunk until it writes
DISTINCT = [0]  # --distinct: copies with texts of their own (0: every copy)
DEFINITION = re.compile(rb"\b(def|class)\s+([A-Za-z_]\w*)")
QUERIES = [
    "shortest path between two nodes",
    "graph isomorphism",
    "add an edge with attributes",
    "degree centrality",
    "read an edge list from a file",
    "minimum spanning tree",
    "connected components",
    "random graph generator",
    "draw the graph with matplotlib",
    "topological sort of a directed graph",
]
# Tasks of the kind the real repositories hold (--real): web frameworks, CLIs, HTTP clients, serialization.
REAL_QUERIES = [
    "parse command line arguments into options",
    "retry an http request with exponential backoff",
    "serialize an object to json",
    "route a request to its handler by path",
    "validate a field and raise a validation error",
    "read the configuration from environment variables",
    "render a template with a context",
    "stream the response body in chunks",
    "compare two strings ignoring case",
    "escape html in user input",
]
# (pattern, literal, ignore_case) for copy k: each names what one copy alone defines (its defs carry `_k<k>`), so
# a page holds its few matches and grep must find them among every repo's rows.
GREPS = (
    ("all_pairs_shortest_path_length_k{k}", True, False),
    ("ALL_PAIRS_SHORTEST_PATH_LENGTH_K{k}", True, True),
    (r"def dijkstra_path_k{k}\(G", False, False),
    (r"(is_connected|is_biconnected)_k{k}\b", False, False),
    (r"bench_scale_added_\d+", False, False),
)
GOALS = {  # issue 36's, for 10M chunks on one machine unless a step is named
    "one_commit_s": "<= 2 s",
    "search_p95_ms": "<= 30 ms at 1M, <= 100 ms at 10M with recall@10 >= 0.95",
    "grep_p95_ms": "<= 200 ms for a selective pattern",
    "route_p95_ms": "<= 150 ms at 1M, <= 400 ms at 10M",
    "serve_rss_mib": "<= 6 GB, anonymous <= 1 GB",
    "swap_s": "<= 1 s",
    "bytes_per_chunk": "no more than before approximate search and grep's index (~2,570)",
}


def tree_files(source: Path) -> dict[str, bytes]:
    return {
        f"{source.name}/{p.relative_to(source).as_posix()}": p.read_bytes()
        for p in sorted(source.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def make_copy(files: dict[str, bytes], k: int, dest: Path, distinct: int = 0) -> None:
    """Copy k of the tree, its definitions renamed `_k<k>`; with `distinct`, copy k holds copy k % distinct's
    texts (a repo of its own whose blobs an earlier copy's run already chunked)."""
    from tests import gitrepo

    suffix = k % distinct if distinct else k
    renamed = {path: DEFINITION.sub(rb"\1 \2_k%d" % suffix, data) for path, data in files.items()}
    gitrepo.commit(gitrepo.init(dest), renamed, message=f"copy {k}")


def resumed_copies(work: Path) -> tuple[int, int, int] | None:
    """(copies, chunks of one, commits copy 0 holds) of what an earlier bench (without --real) published in
    `work`, or None."""
    from dulwich.repo import Repo

    try:
        data = work / "data"
        manifest = json.loads(
            (data / "snapshots" / (data / "CURRENT").read_text().strip() / "manifest.json").read_text()
        )
    except (OSError, ValueError):
        return None
    chunks = {r["name"]: r["chunks"] for r in manifest["repos"]}
    copies = sum(1 for name in chunks if name.startswith("copy"))
    if not copies or len(chunks) != copies:
        return None
    commits = sum(1 for _ in Repo(str(work / "src" / "copy0")).get_walker())
    return copies, chunks.get("copy1", chunks["copy0"]), commits


def real_repos(listing: Path) -> list[tuple[str, Path, str]]:
    """(name, git dir, ref) of each line `GIT_DIR [REF]` of a listing (`#` starts a comment): real repositories,
    bare or not, indexed at that ref (default: their HEAD). A repository's name is its folder's (its parent's
    for a folder named `repo` or `.git`)."""
    found = []
    for line in listing.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        path = Path(fields[0])
        folder = path.parent if path.name in ("repo", ".git") else path
        name = re.sub(r"[^A-Za-z0-9._-]", "-", folder.name.removesuffix(".git")).lstrip("._-")
        found.append((name, path, fields[1] if len(fields) > 1 else ""))
    if len({name for name, _, _ in found}) < len(found):
        raise SystemExit(f"{listing}: two repositories have the same folder name; give them distinct folders")
    return found


def write_config(work: Path, copies: int, real: list[tuple[str, Path, str]] = ()) -> None:
    lines = ['data_dir = "data"', 'model = "blobdex:hash"', "fast_first = false", ""]
    for k in range(copies):
        lines += ["[[repo]]", f'name = "copy{k}"', f'url = "{work / "src" / f"copy{k}"}"', ""]
    for name, path, ref in real:
        lines += ["[[repo]]", f'name = "{name}"', f'url = "{path}"', *([f'refs = ["{ref}"]'] if ref else []), ""]
    (work / "blobdex.toml").write_text("\n".join(lines))


def tree_bytes(*paths: Path) -> int:
    """Bytes of the files under `paths`, each file once however many hard links name it (a snapshot's lexical
    index links the previous one's files)."""
    seen = {}
    for path in paths:
        for p in path.rglob("*"):
            if p.is_file() and not p.is_symlink():
                st = p.stat()
                seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def snapshot_bytes(data: Path, snapshot_id: str) -> int:
    """What one snapshot holds: its own directory and the parts its manifest lists."""
    manifest = json.loads((data / "snapshots" / snapshot_id / "manifest.json").read_text())
    parts = [data / "parts" / p for r in manifest["repos"] for p in r.get("parts", [])]
    return tree_bytes(data / "snapshots" / snapshot_id, *parts)


def one_commit(work: Path, n: int) -> None:
    """Add one small function to one file of copy 0."""
    from dulwich.object_store import iter_tree_contents
    from dulwich.repo import Repo

    from tests import gitrepo

    repo = Repo(str(work / "src" / "copy0"))
    tree = repo[repo[repo.refs[b"refs/heads/main"]].tree]
    files = {e.path.decode(): repo[e.sha].as_raw_string() for e in iter_tree_contents(repo.object_store, tree.id)}
    target = sorted(p for p in files if p.endswith(".py"))[len(files) // 3]
    files[target] += b"\n\ndef bench_scale_added_%d(graph):\n    return len(graph)\n" % n
    gitrepo.commit(repo, files, message=f"one more function {n}")


def push_runs(work: Path, commits: list[int], n: int) -> dict:
    """The run a push starts: one commit to copy 0, queued as a webhook queues it, drained in this process as
    a long-lived indexer (`blobdex index --every`) drains its queue: it fetches and scans the pushed repo only.
    The first drain pays the imports a long-lived indexer paid at its start, and is not counted."""
    from indexer.config import load
    from indexer.operate.queue import Queue
    from indexer.operate.schedule import drain

    walls, report = [], None
    for _ in range(n + 1):
        commits[0] += 1
        one_commit(work, commits[0])
        cfg = load(work / "blobdex.toml")
        t0 = time.monotonic()
        with Queue(cfg.data_dir) as queue:
            queue.enqueue("default", "copy0")
        report = drain(cfg, show_progress=False)
        walls.append(time.monotonic() - t0)
    return {
        "median_s": round(statistics.median(walls[1:]), 2),
        "max_s": round(max(walls[1:]), 2),
        "seconds": {k: round(v, 2) for k, v in report.seconds.items()},
        "repos_calls_read": report.repos_calls_read,
    }


def grep_calls(copies: int) -> list[dict]:
    """Patterns that one copy's texts match (with --distinct, every copy that repeats them)."""
    copies = min(copies, DISTINCT[0] or copies)
    spread = sorted({0, copies // 3, copies // 2, copies - 1})
    return [
        {"pattern": pattern.format(k=k), "literal": literal, "ignore_case": folded, "limit": 100}
        for k in spread
        for pattern, literal, folded in GREPS
    ]


def grep_without_index(data: Path, copies: int) -> dict:
    """In this process: the same greps with every part's trigram index and with none (every allowed row read)."""
    from query.grep import grep
    from query.reader import SnapshotReader

    reader = SnapshotReader(data)
    rows = len(reader.live)
    indexed = [p.grams for p in reader.parts]
    out = {
        "grams_mb": round(sum(p.grams.values.nbytes + p.grams.keys.nbytes for p in reader.parts if p.grams) / 2**20, 1)
    }
    for name, held in (("indexed", indexed), ("scan", [None] * len(indexed))):
        for part, grams in zip(reader.parts, held):
            part.grams = grams
        seconds = []
        for asked in grep_calls(copies)[:10]:
            t0 = time.monotonic()
            grep(reader, **asked)
            seconds.append(time.monotonic() - t0)
        out[name] = {"p50_ms": round(statistics.median(seconds) * 1000, 1), "max_ms": round(max(seconds) * 1000, 1)}
    out["grams_bytes_per_chunk"] = round(out["grams_mb"] * 2**20 / rows)
    return out


def vectors_in_process(data: Path, embedder=None, queries: list[str] = QUERIES) -> dict:
    """In this process: vector search (the vector signal alone, `queries` x 3) through the snapshot's approximate
    index and exact, recall@10 of the first against the second (ties counted: copies share vectors), and route
    with each. The hashing embedder unless another is given (the snapshot's own model)."""
    from indexer.embed import HashEmbedder
    from query.reader import SnapshotReader
    from query.route_task import route
    from query.search import SearchRequest, row_mask
    from query.search.signals import query_vectors, vector_ranks

    embedder, out = embedder or HashEmbedder(), {}
    readers = {"approximate": SnapshotReader(data), "exact": SnapshotReader(data, exact=True)}
    out["codebook"] = readers["approximate"].approximate is not None
    ranked = {}
    for name, reader in readers.items():
        seconds, routes, ranked[name] = [], [], []
        for q in queries * 3:
            mask = row_mask(SearchRequest(query=q, org="default"), reader)
            t0 = time.monotonic()
            ranked[name].append(vector_ranks(reader, query_vectors(embedder, q + " "), mask, depth=10))
            seconds.append(time.monotonic() - t0)
        for q in queries:
            t0 = time.monotonic()
            route(reader, embedder, q)
            routes.append(time.monotonic() - t0)
        out[name] = {
            "vector_p50_ms": _ms(seconds, 0.5),
            "vector_p95_ms": _ms(seconds, 0.95),
            "route_p95_ms": _ms(routes, 0.95),
        }
    hits = sum(
        sum(1 for _, score in near if score >= exact[-1][1] - 1e-6)
        for near, exact in zip(ranked["approximate"], ranked["exact"])
    )
    out["recall_at_10"] = round(hits / (10 * len(ranked["exact"])), 4)
    return out


def real_model_recall(work: Path, env: dict, real: list[tuple[str, Path, str]], model: str) -> dict:
    """The real repositories alone indexed with a real model (its vectors, not hashed ones: `fast`, the default
    model's static tier, embeds 160k chunks in about a minute; the run reads every history again), in
    work/real-model with the bench's mirrors and chunk cache linked in; then vectors_in_process over it with
    that model, asked QUERIES, REAL_QUERIES, 100 definition names and 100 first lines of chunks (seeded)."""
    import random

    from indexer.config import load
    from indexer.embed import configured_embedder
    from indexer.mirror import MIRRORS_DIR
    from query.reader import SnapshotReader

    root, data = work / "real-model", work / "data"
    if not (root / "data" / "CURRENT").exists():
        for folder in (MIRRORS_DIR, "cache"):  # linked: the cache is content-addressed, a model's vectors its own
            shutil.copytree(data / folder, root / "data" / folder, copy_function=os.link, dirs_exist_ok=True)
        write_config(root, 0, real)
        config = (root / "blobdex.toml").read_text().replace('model = "blobdex:hash"', f'model = "{model}"')
        (root / "blobdex.toml").write_text(config)
        report, wall = run_index(env, root)
        print(
            f"bench-scale: {report['totals']['chunks']:,} chunks embedded by {model} in {wall:.0f} s", file=sys.stderr
        )
    embedder = configured_embedder(load(root / "blobdex.toml"))
    rows, rng = SnapshotReader(root / "data").rows, random.Random(0)
    names = rng.sample([s for s in rows.column("symbol").to_pylist() if s and len(s) > 6], 100)
    lines = [t.strip().split("\n")[0][:80] for t in rng.sample(rows.column("text").to_pylist(), 400)]
    asked = QUERIES + REAL_QUERIES + names + [line for line in lines if len(line) > 20][:100]
    return {"model": model, "queries": len(asked), **vectors_in_process(root / "data", embedder, asked)}


def _ms(seconds: list[float], share: float) -> float:
    ordered = sorted(seconds)
    return round(ordered[int(share * (len(ordered) - 1))] * 1000, 1)


def serve_figures(work: Path, env: dict, paths: list[str], commits: list[int], copies: int) -> dict:
    import httpx

    from indexer.snapshot import current_id
    from tests.servers import serve_subprocess

    t0 = time.monotonic()
    with serve_subprocess(work, env) as (base, proc):
        ready = time.monotonic() - t0
        client = httpx.Client(base_url=base, timeout=120)
        client.post("/v1/search", json={"query": "warm up"})
        client.post("/v1/route", json={"task": "warm up"})  # its first call loads per-snapshot caches
        timed = partial(timed_calls, client)
        queries = QUERIES * 6
        out = {
            "ready_s": round(ready, 2),
            "search": timed([("post", "/v1/search", {"json": {"query": q, "limit": 10}}) for q in queries]),
            "route_task": timed([("post", "/v1/route", {"json": {"task": q}}) for q in QUERIES * 2]),
            "get_file": timed(
                [("get", "/v1/file", {"params": {"repo": "copy0", "path": p, "start": 1, "end": 200}}) for p in paths]
            ),
            "grep": timed([("post", "/v1/grep", {"json": asked}) for asked in grep_calls(copies) * 2]),
        }
        status = Path(f"/proc/{proc.pid}/status").read_text()
        out["rss_mib"] = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024
        out["anon_mib"] = int(re.search(r"RssAnon:\s+(\d+)", status).group(1)) // 1024  # the rest is mapped files
        commits[0] += 1
        one_commit(work, commits[0])
        run_index(env, work)  # publishes while the server runs, which opens it in a thread while the old answers
        out.update(swap_figures(client, current_id(work / "data")))
        status = Path(f"/proc/{proc.pid}/status").read_text()
        out["rss_after_swap_mib"] = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024
        out["anon_after_swap_mib"] = int(re.search(r"RssAnon:\s+(\d+)", status).group(1)) // 1024
        return out


def swap_figures(client, published: str) -> dict:
    """Searches one after another from a publish until the new snapshot has answered five: the slowest of them
    (what the swap cost a request: `swap_s`) and when the new snapshot first answered (`swap_served_s`)."""
    t0, seconds, served = time.monotonic(), [], None
    while len(seconds) < 10_000 and (served is None or len(seconds) < served[1] + 5):
        t = time.monotonic()
        answer = client.post("/v1/search", json={"query": QUERIES[len(seconds) % len(QUERIES)], "limit": 10})
        seconds.append(time.monotonic() - t)
        if served is None and answer.json().get("snapshot_id") == published:
            served = (time.monotonic() - t0, len(seconds))
        if served is None and time.monotonic() - t0 > 600:
            break
    return {
        "swap_s": round(max(seconds), 2),
        "swap_served_s": round(served[0], 2) if served else None,
        "swap_requests": len(seconds),
    }


def sharded_figures(work: Path, env: dict, count: int, copies: int) -> dict:
    """The same snapshot behind `blobdex serve --shards COUNT --cluster local` (Ray started by the front): time to
    ready, search / route / grep p50 and p95 over HTTP, the RSS of the front and of the shards' replicas, and how
    many of the searches and routes answer what one server over the whole snapshot answers (its top 10 hits' places,
    its routes' repos: with the approximate index each shard asks its own, so they may differ)."""
    import httpx

    from tests.servers import serve_subprocess

    def places(client, path: str, body: dict) -> list:
        answer = client.post(path, json=body).json()
        return (
            [(h["repo"], h["path"], h["chunk_index"]) for h in answer["hits"]]
            if "hits" in answer
            else [r["repo"] for r in answer["repos"]]
        )

    calls = [("/v1/search", {"query": q, "limit": 10}) for q in QUERIES] + [("/v1/route", {"task": q}) for q in QUERIES]
    with serve_subprocess(work, env) as (single, _):
        one = httpx.Client(base_url=single, timeout=120)
        expected = [places(one, path, body) for path, body in calls]
    t0 = time.monotonic()
    args = ("--shards", str(count), "--cluster", "local")
    with serve_subprocess(work, env, args=args) as (base, proc):
        ready = time.monotonic() - t0
        client = httpx.Client(base_url=base, timeout=120)
        client.post("/v1/search", json={"query": "warm up"})
        client.post("/v1/route", json={"task": "warm up"})
        timed = partial(timed_calls, client)
        out = {
            "shards": count,
            "ready_s": round(ready, 2),
            "search": timed([("post", "/v1/search", {"json": {"query": q, "limit": 10}}) for q in QUERIES * 6]),
            "route_task": timed([("post", "/v1/route", {"json": {"task": q}}) for q in QUERIES * 2]),
            "grep": timed([("post", "/v1/grep", {"json": asked}) for asked in grep_calls(copies) * 2]),
            "same_answers": sum(places(client, path, body) == e for (path, body), e in zip(calls, expected)),
            "of": len(calls),
            "front_rss_mib": _rss_mib(proc.pid),
            "shards_rss_mib": sum(_rss_mib(pid) for pid in _pids_of(b"ServeReplica:blobdex-shard")),
        }
    return out


def _rss_mib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"VmRSS:\s+(\d+)", status)
    return int(found.group(1)) // 1024 if found else 0


def _pids_of(needle: bytes) -> list[int]:
    """The processes whose command line holds `needle` (Ray names a replica's worker after its deployment)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _setting(args) -> tuple[dict, dict, list[str]]:
    """The runs' environment (no BLOBDEX_ variable of this shell), the tree copied, and the paths get_file asks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOBDEX_")}
    files = tree_files(args.source or default_source())
    return env, files, sorted(p for p in files if p.endswith(".py"))[:60]


def serve_alone(args) -> None:
    """--serve-only: `serve_figures` on --work's snapshot (its swap after one more commit to copy 0)."""
    resumed = resumed_copies(args.work) if args.work else None
    if resumed is None:
        sys.exit(f"bench-scale: --serve-only needs a --work an earlier bench left copies in, not {args.work}")
    DISTINCT[0] = args.distinct
    env, files, paths = _setting(args)
    figures = serve_figures(args.work, env, paths, [resumed[2]], resumed[0])
    print(json.dumps(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default=",".join(map(str, STEPS)), help="chunk counts, comma-separated")
    parser.add_argument("--source", type=Path, help="the source tree to copy (default: networkx)")
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--commits", type=int, default=10, help="one-commit runs per step (median and max shown)")
    parser.add_argument(
        "--real-model",
        help="with --real: also index the real repositories alone with this model (e.g. all-MiniLM-L6-v2+static) "
        "and report the approximate index's recall@10 on its vectors",
    )
    parser.add_argument(
        "--real",
        type=Path,
        help="a file listing real repositories, one `GIT_DIR [REF]` a line: each step holds them all, topped up "
        "with copies of the source tree",
    )
    parser.add_argument(
        "--distinct",
        type=int,
        default=0,
        help="copies with texts of their own; copy k past them repeats copy k %% N's texts (its blobs already "
        "chunked: how a 10M step fits this machine's hours); 0: every copy its own",
    )
    parser.add_argument(
        "--run-rows",
        type=int,
        default=RUN_ROWS,
        help="rows one run adds at most: a step adds its copies over as many runs as that takes",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        help="also serve each step from this many shards on Ray Serve (blobdex serve --shards) and time it",
    )
    parser.add_argument(
        "--serve-only",
        action="store_true",
        help="serve the snapshot an earlier bench left in --work alone (no runs, no bench process beside the "
        "server) and print its figures: what a serve costs without the bench's own memory",
    )
    args = parser.parse_args()
    if args.serve_only:
        serve_alone(args)
        return
    steps = [int(s) for s in args.steps.split(",") if s.strip()]
    work = args.work or Path(tempfile.mkdtemp(prefix="blobdex-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    env, files, paths = _setting(args)
    print(f"bench-scale: copies of {len(files)} files in {work}", file=sys.stderr)

    resumed = resumed_copies(work)
    if resumed is None:
        make_copy(files, 0, work / "src" / "copy0")
        write_config(work, 1)
        first, _ = run_index(env, work)
        per_copy = first["totals"]["chunks"]
    else:  # the copies an earlier bench left in this --work go on serving: a step only adds
        per_copy = resumed[1]
        print(f"bench-scale: going on from the {resumed[0]} copies in {work}", file=sys.stderr)
    real = real_repos(args.real) if args.real else []
    real_chunks, cold = 0, None
    if real:  # indexed once, all of them: copies top each step up
        write_config(work, 1, real)
        cold, cold_wall = run_index(env, work)
        real_chunks = cold["totals"]["chunks"] - per_copy
        cold = {"repos": len(real), "chunks": real_chunks, "wall_s": round(cold_wall, 1), "seconds": cold["seconds"]}
        print(f"bench-scale: {len(real)} real repositories: {json.dumps(cold)}", file=sys.stderr)
        if args.real_model:
            cold["model_vectors"] = real_model_recall(work, env, real, args.real_model)
    copies, commits, rows = (resumed or (1,))[0], [resumed[2] if resumed else 0], []
    DISTINCT[0] = args.distinct
    for step in steps:
        want = max(1, math.ceil((step - real_chunks) / per_copy))
        added_wall, added = 0.0, {"seconds": {}}
        while copies < want or not added["seconds"]:  # runs of at most --run-rows rows each
            upto = min(want, copies + max(1, args.run_rows // per_copy))
            for k in range(copies, upto):
                make_copy(files, k, work / "src" / f"copy{k}", args.distinct)
            copies = max(copies, upto)
            write_config(work, copies, real)
            print(f"bench-scale: {copies} copies and {len(real)} real repositories", file=sys.stderr)
            report, wall = run_index(env, work)
            added_wall += wall
            added["seconds"] = {k: added["seconds"].get(k, 0) + t for k, t in report["seconds"].items()}
        _, unchanged_wall = run_index(env, work)
        walls, grown, changed = [], [], None
        for _ in range(args.commits):  # enough runs that a merge of deltas falls among them
            before = tree_bytes(work / "data")
            commits[0] += 1
            one_commit(work, commits[0])
            changed, wall = run_index(env, work)
            walls.append(wall)
            grown.append(tree_bytes(work / "data") - before)  # net of what keep_snapshots pruned
        snapshot = snapshot_bytes(work / "data", changed["snapshot_id"])  # before pushes publish (and prune) more
        pushed = push_runs(work, commits, args.commits)
        row = {
            "chunks": changed["totals"]["chunks"],
            "repos": copies + len(real),
            "copies": copies,
            "add_run_s": round(added_wall, 1),
            "no_change_s": round(unchanged_wall, 1),
            "one_commit_s": round(statistics.median(walls), 2),
            "one_commit_max_s": round(max(walls), 2),
            "one_commit_seconds": changed["seconds"],
            "one_commit_peak_rss_mib": changed["peak_rss_mib"],
            "push": pushed,
            "bytes_added_mb": round(statistics.mean(grown) / 2**20, 3),
            "bytes_added_max_mb": round(max(grown) / 2**20, 3),
            "snapshot_mb": round(snapshot / 2**20, 1),
            "data_dir_mb": round(tree_bytes(work / "data") / 2**20, 1),
            "serve": serve_figures(work, env, paths, commits, copies),
            "grep_in_process": grep_without_index(work / "data", copies),
            "vectors_in_process": vectors_in_process(work / "data"),
            "add_run_seconds": added["seconds"],
            "bytes_per_chunk": round(snapshot / changed["totals"]["chunks"]),
        }
        if args.shards:
            row["sharded"] = sharded_figures(work, env, args.shards, copies)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    columns = (
        "chunks, one-commit run (median / max), of which write, peak RSS, push run (median / max), no-change run, "
        "snapshot, "
        "added per run (mean / max), serve ready, serve RSS, search p50 / p95, route p95, get_file p95, "
        "grep p50 / p95, grep without its index (p50 / max), trigram index per chunk, swap"
    ).split(", ")
    header = "| " + " | ".join(columns) + " |"
    print(header)
    print("|" + "---|" * len(columns))
    for r in rows:
        s, g = r["serve"], r["grep_in_process"]
        print(
            f"| {r['chunks']:,} | {r['one_commit_s']} / {r['one_commit_max_s']} s | "
            f"{r['one_commit_seconds']['write']:.1f} s | {r['one_commit_peak_rss_mib']} MiB | "
            f"{r['push']['median_s']} / {r['push']['max_s']} s | {r['no_change_s']} s | "
            f"{r['snapshot_mb']} MB | {r['bytes_added_mb']} / {r['bytes_added_max_mb']} MB | "
            f"{s['ready_s']} s | "
            f"{s['rss_mib']} MiB (anonymous {s['anon_mib']}) | "
            f"{s['search']['p50_ms']:.0f} / {s['search']['p95_ms']:.0f} ms | "
            f"{s['route_task']['p95_ms']:.0f} ms | {s['get_file']['p95_ms']:.1f} ms | "
            f"{s['grep']['p50_ms']:.0f} / {s['grep']['p95_ms']:.0f} ms | "
            f"{g['scan']['p50_ms']:.0f} / {g['scan']['max_ms']:.0f} ms | {g['grams_bytes_per_chunk']} B | "
            f"{s['swap_s']} s (served after {s['swap_served_s']} s) |"
        )
    print()
    print(
        "| chunks | vector search p50 / p95, approximate | exact | recall@10 | route p95 in process, approximate / "
        "exact | bytes on disk per chunk | the run that added repos: seconds by stage |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        v = r["vectors_in_process"]
        a, e = v["approximate"], v["exact"]
        stages = ", ".join(f"{k} {t:.0f}" for k, t in r["add_run_seconds"].items() if t >= 0.5)
        print(
            f"| {r['chunks']:,} | {a['vector_p50_ms']} / {a['vector_p95_ms']} ms | {e['vector_p50_ms']} / "
            f"{e['vector_p95_ms']} ms | {v['recall_at_10']} | {a['route_p95_ms']} / {e['route_p95_ms']} ms | "
            f"{r['bytes_per_chunk']:,} | {stages} |"
        )
    if any("sharded" in r for r in rows):
        print(
            "\n| chunks | shards | ready | search p50 / p95 | route p95 | grep p50 / p95 | answers as one server's | "
            "RSS: front, shards |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            if "sharded" in r:
                h = r["sharded"]
                print(
                    f"| {r['chunks']:,} | {h['shards']} | {h['ready_s']} s | {h['search']['p50_ms']:.0f} / "
                    f"{h['search']['p95_ms']:.0f} ms | {h['route_task']['p95_ms']:.0f} ms | "
                    f"{h['grep']['p50_ms']:.0f} / {h['grep']['p95_ms']:.0f} ms | {h['same_answers']} of {h['of']} | "
                    f"{h['front_rss_mib']}, {h['shards_rss_mib']} MiB |"
                )
    if cold:
        print(
            f"\nreal repositories ({cold['repos']}, {cold['chunks']:,} chunks), the cold run: {cold['wall_s']} s; "
            + ", ".join(f"{k} {t:.0f}" for k, t in cold["seconds"].items() if t >= 0.5)
        )
    if cold and "model_vectors" in cold:
        v = cold["model_vectors"]
        print(
            f"their vectors by {v['model']}: recall@10 {v['recall_at_10']} ({v['queries']} queries), vector p50 / p95 "
            f"{v['approximate']['vector_p50_ms']} / {v['approximate']['vector_p95_ms']} ms approximate, "
            f"{v['exact']['vector_p50_ms']} / {v['exact']['vector_p95_ms']} ms exact"
        )
    print("goals: " + "; ".join(f"{k} {v}" for k, v in GOALS.items()))
    if args.json:
        args.json.write_text(json.dumps({"steps": rows, "real": cold, "goals": GOALS}, indent=2))


if __name__ == "__main__":
    main()
