"""`make bench`: index a real codebase cold (fast first: how soon a search answers), again unchanged, again after
one commit; time queries, start-up and each encoder; index it cold once more with the fast profile.

The codebase is a source tree turned into a git repo at bench time (default: the `networkx`
package installed beside torch, ~550 Python files); pass --source DIR for another tree, or
--repo PATH_OR_URL for an existing repository. Nothing here is asserted: it prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOBDEX = str(Path(sys.executable).parent / "blobdex")
QUERY_COUNT = 120


def run_index(env: dict, cwd: Path) -> tuple[dict, float]:
    """(report, wall seconds) of one `blobdex index --json` in its own process."""
    started = time.monotonic()
    proc = subprocess.run([BLOBDEX, "index", "--json", "--quiet"], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"bench: blobdex index failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout), wall


def first_search(env: dict, cwd: Path, query: str) -> tuple[dict, float, float]:
    """A cold `blobdex index --json` in its own process, with a CLI search asked as soon as CURRENT names a
    snapshot: (report, wall seconds of the run, seconds from its start until that search answered)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [BLOBDEX, "index", "--json", "--quiet"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    answered = None
    while answered is None and proc.poll() is None:
        if (cwd / "data" / "CURRENT").exists():
            search = subprocess.run([BLOBDEX, "search", query, "-n", "5"], cwd=cwd, env=env, capture_output=True)
            if search.returncode == 0 and search.stdout.strip():
                answered = time.monotonic() - started
        time.sleep(0.2)
    out, err = proc.communicate()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"bench: blobdex index failed ({proc.returncode}): {err.decode().strip()}")
    return json.loads(out), wall, answered if answered is not None else wall


def percentiles(values: list[float]) -> dict:
    values = sorted(values)

    def pick(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return {
        "p50_ms": round(pick(0.50) * 1000, 1),
        "p95_ms": round(pick(0.95) * 1000, 1),
        "mean_ms": round(statistics.mean(values) * 1000, 1),
        "n": len(values),
    }


def words_of(symbol: str) -> str:
    name = symbol.rsplit(".", 1)[-1]
    parts = re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+", name)
    return " ".join(p.lower() for p in parts)


def query_latency(data_dir: Path, repo_name: str) -> dict:
    from indexer.config import DEFAULT_MODEL
    from indexer.embed import load_embedder
    from query.get_file import get_file
    from query.reader import SnapshotReader
    from query.search import SearchRequest, search

    t0 = time.monotonic()
    reader = SnapshotReader(data_dir)
    load_reader = time.monotonic() - t0
    t0 = time.monotonic()
    embedder = load_embedder(DEFAULT_MODEL, cache=data_dir / "cache")
    load_model = time.monotonic() - t0
    rng = random.Random(0)
    symbols = sorted({s for s in reader.rows.column("symbol").to_pylist() if s})
    picked = rng.sample(symbols, min(QUERY_COUNT, len(symbols)))
    # Half natural-language (symbol names as words), half identifiers as pasted by an agent.
    queries = [words_of(s) if i % 2 else s.rsplit(".", 1)[-1] for i, s in enumerate(picked)]
    search(reader, embedder, SearchRequest(query="warm up"))
    timings, filtered = [], []
    for q in queries:
        t0 = time.monotonic()
        search(reader, embedder, SearchRequest(query=q or "graph", limit=10))
        timings.append(time.monotonic() - t0)
    for q in queries[:40]:
        t0 = time.monotonic()
        search(
            reader, embedder, SearchRequest(query=q or "graph", limit=10, paths=("**/algorithms/**",), kind="function")
        )
        filtered.append(time.monotonic() - t0)
    paths = sorted(set(reader.rows.column("path").to_pylist()))
    reads = []
    for path in rng.sample(paths, min(QUERY_COUNT, len(paths))):
        t0 = time.monotonic()
        get_file(data_dir, repo_name, path, start=1, end=200)
        reads.append(time.monotonic() - t0)
    sample = rng.sample(paths, min(QUERY_COUNT, len(paths)))
    return (
        {
            "search": percentiles(timings),
            "search_filtered": percentiles(filtered),
            "get_file": percentiles(reads),
            "open_snapshot_s": round(load_reader, 2),
            "load_model_s": round(load_model, 2),
            "rows": reader.rows.num_rows,
        },
        queries,
        sample,
    )


def timed_calls(client, calls: list[tuple[str, str, dict]]) -> dict:
    """Percentiles of (method, url, httpx keywords) calls made one after another; a failed one ends the bench."""
    seconds = []
    for method, url, kw in calls:
        t0 = time.monotonic()
        r = getattr(client, method)(url, **kw)
        seconds.append(time.monotonic() - t0)
        if r.status_code != 200:
            sys.exit(f"bench: {url} answered {r.status_code}: {r.text[:200]}")
    return percentiles(seconds)


def http_latency(work: Path, env: dict, queries: list[str], paths: list[str], repo_name: str) -> dict:
    """search, route and get_file through `blobdex serve` on a real socket; RSS of that process."""
    import httpx

    from tests.servers import serve_subprocess

    with serve_subprocess(work, env) as (base, proc):
        client = httpx.Client(base_url=base, timeout=60)
        client.post("/v1/search", json={"query": "warm up"})
        timed = partial(timed_calls, client)
        out = {
            "search": timed([("post", "/v1/search", {"json": {"query": q or "graph", "limit": 10}}) for q in queries]),
            "route_task": timed([("post", "/v1/route", {"json": {"task": q or "graph"}}) for q in queries[:60]]),
            "get_file": timed(
                [("get", "/v1/file", {"params": {"repo": repo_name, "path": p, "start": 1, "end": 200}}) for p in paths]
            ),
            **page_figures(timed, client, queries, paths, repo_name),
        }
        status = Path(f"/proc/{proc.pid}/status").read_text()
        out["rss_mib"] = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024
        out["peak_rss_mib"] = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) // 1024
        return out


def page_figures(timed, client, queries: list[str], paths: list[str], repo_name: str) -> dict:
    """The page for people beside the /v1 calls it renders: the search page with results (the same query as a
    /v1 search), the file view (the whole page of lines, highlighted, calls linked) and the tree view over HTTP,
    and what the search page
    weighs before results (its HTML, stylesheets and script)."""
    from urllib.parse import quote

    pages = {
        "search_page": timed([("get", "/", {"params": {"q": q or "graph", "limit": 10}}) for q in queries]),
        "file_page": timed([("get", f"/file/{repo_name}/{quote(p)}", {}) for p in paths]),
        # a folder of each file (its tree view) and the repo's root with its README, read again as people do
        "tree_page": timed([("get", f"/tree/{repo_name}/{quote(p.rpartition('/')[0])}", {}) for p in paths]),
        "tree_root_page": timed([("get", f"/tree/{repo_name}", {})] * 20),
        "file_v1_whole": timed([("get", "/v1/file", {"params": {"repo": repo_name, "path": p}}) for p in paths]),
    }
    assets = ("/", "/static/blobdex.css", "/static/pygments.css", "/static/blobdex.js")
    pages["search_page_bytes"] = sum(len(client.get(a).content) for a in assets)
    return pages


ENCODER_SAMPLE = 600  # chunks embedded by each encoder (the same texts, in the snapshot's order)


def encoder_throughput(data_dir: Path) -> dict:
    """Chunks/s of each way to embed the same chunks, and how close each one's vectors are to torch's."""
    import numpy as np

    from indexer.embed import embed_text, load_embedder
    from indexer.snapshot import read_chunks

    table = read_chunks(data_dir / "snapshots" / (data_dir / "CURRENT").read_text().strip(), vectors=False)
    rows = table.slice(0, ENCODER_SAMPLE).to_pylist()
    texts = [embed_text(r["symbol"], r["text"]) for r in rows]
    cache = data_dir / "cache"
    out, reference = {}, None
    for label, name, encoder in (
        ("torch", "all-MiniLM-L6-v2", "torch"),
        ("onnx", "all-MiniLM-L6-v2", "onnx"),
        ("onnx_int8", "all-MiniLM-L6-v2+int8", "onnx"),
        ("fast", "fast", "onnx"),
    ):
        t0 = time.monotonic()
        embedder = load_embedder(name, encoder, cache, writable=True)  # builds (and keeps) a graph once
        loaded = time.monotonic() - t0
        embedder.embed(texts[:16])  # warm
        t0 = time.monotonic()
        vectors = embedder.embed(texts)
        seconds = time.monotonic() - t0
        out[label] = {"chunks_per_s": round(len(texts) / seconds, 1), "load_s": round(loaded, 2), "dim": embedder.dim}
        if reference is None:
            reference = vectors
        elif vectors.shape == reference.shape:
            cos = (vectors * reference).sum(axis=1)
            out[label]["cosine_to_torch"] = {"min": round(float(cos.min()), 5), "mean": round(float(np.mean(cos)), 5)}
    base = out["torch"]["chunks_per_s"]
    for entry in out.values():
        entry["speedup"] = round(entry["chunks_per_s"] / base, 2)
    return {"chunks": len(texts), **out}


def startup(work: Path, env: dict, query: str) -> dict:
    """Wall seconds a fresh process takes: CLI search (hybrid and BM25 alone, median of 3), and `blobdex mcp`
    over stdio from spawn to its `initialize` answer and to its first search_code answer."""
    import asyncio

    from mcp import Client, StdioServerParameters

    def cli(*args) -> float:
        walls = []
        for _ in range(3):
            t0 = time.monotonic()
            subprocess.run(
                [BLOBDEX, "search", query, "-n", "5", *args], cwd=work, env=env, capture_output=True, check=True
            )
            walls.append(time.monotonic() - t0)
        return round(statistics.median(walls), 2)

    async def mcp() -> tuple[float, float, list]:
        t0 = time.monotonic()
        params = StdioServerParameters(command=BLOBDEX, args=["mcp"], env=env, cwd=str(work))
        async with Client(params) as client:
            initialized = time.monotonic() - t0
            await client.call_tool("search_code", {"query": query})
            searched = time.monotonic() - t0
            tools = [
                t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in (await client.list_tools()).tools
            ]
            return round(initialized, 2), round(searched, 2), tools

    initialize, first_search, tools = asyncio.run(mcp())
    compact = {"separators": (",", ":")}
    from ci.bench_tools import tool_choice
    from indexer.config import DEFAULT_MODEL
    from indexer.embed import load_embedder

    return {
        "cli_search_s": cli(),
        "cli_search_bm25_s": cli("--mode", "bm25"),
        "mcp_initialize_s": initialize,
        "mcp_first_search_s": first_search,
        # tools/list as sent (every session reads it), and the part a model's context holds (name, description,
        # input schema; output schemas are for the client)
        "mcp_tools_list_chars": len(json.dumps({"tools": tools}, **compact)),
        "mcp_tools_model_chars": sum(
            len(t["name"]) + len(t["description"]) + len(json.dumps(t["inputSchema"], **compact)) for t in tools
        ),
        "mcp_tool_choice": tool_choice(tools, load_embedder(DEFAULT_MODEL, cache=work / "data" / "cache")),
    }


def venv_mib() -> int:
    """The virtualenv's size on disk (this one: torch included when `make bench` installed it)."""
    total = sum(p.stat().st_size for p in Path(sys.prefix).rglob("*") if p.is_file() and not p.is_symlink())
    return total // 2**20


def extraction_throughput(data_dir: Path) -> dict:
    """Parse + extract every indexed file with an extractor, single-threaded, from the mirror's blobs."""
    from indexer.chunk import GRAMMARS, parse
    from indexer.extract import FAMILY, extract
    from indexer.mirror import mirror_dir
    from indexer.snapshot import open_manifest, read_graph
    from dulwich.repo import Repo

    path, _ = open_manifest(data_dir)
    files = [f for f in read_graph(path, "files").to_pylist() if f["skip"] is None and f["lang"] in FAMILY]
    seen, blobs = set(), []
    for f in files:
        if f["blob_id"] not in seen:
            seen.add(f["blob_id"])
            repo = Repo(str(mirror_dir(data_dir, f["org"], f["repo"])))
            blobs.append((repo[f["blob_id"].encode()].as_raw_string(), f["lang"]))
    started = time.monotonic()
    rows = 0
    for data, lang in blobs:
        src = data.decode("utf-8", "replace").encode("utf-8")
        facts = extract((parse(src, GRAMMARS[lang].name), src), lang)
        rows += sum(len(getattr(facts, t)) for t in facts.TABLES)
    seconds = time.monotonic() - started
    size = sum(len(d) for d, _ in blobs)
    return {
        "files": len(blobs),
        "mb": round(size / 1e6, 2),
        "seconds": round(seconds, 2),
        "files_per_s": round(len(blobs) / seconds, 1),
        "mb_per_s": round(size / 1e6 / seconds, 2),
        "fact_rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a source tree to turn into a git repo (default: networkx)")
    parser.add_argument("--repo", help="an existing git repository (path or URL) instead of --source")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="blobdex-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from ci.bench_repo import default_source, make_repo

    if args.repo:
        url, name = args.repo, "bench"
    else:
        source = args.source or default_source()
        make_repo(source, work / "src")
        url, name = str(work / "src"), source.name
    (work / "blobdex.toml").write_text(f'data_dir = "data"\n\n[[repo]]\nname = "{name}"\nurl = "{url}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOBDEX_")}
    print(f"bench: indexing {url} in {work}", file=sys.stderr)

    cold, cold_wall, to_first_search = first_search(env, work, "shortest path between two nodes")
    again, again_wall = run_index(env, work)
    one_commit = None
    if not args.repo:
        from dulwich.object_store import iter_tree_contents
        from dulwich.repo import Repo

        from tests import gitrepo

        repo = Repo(str(work / "src"))
        tree = repo[repo[repo.refs[b"refs/heads/main"]].tree]
        files = {}
        for entry in iter_tree_contents(repo.object_store, tree.id):
            files[entry.path.decode()] = repo[entry.sha].as_raw_string()
        target = sorted(p for p in files if p.endswith(".py"))[len(files) // 3]
        files[target] += b'\n\ndef bench_added_function(graph):\n    """Count the nodes."""\n    return len(graph)\n'
        gitrepo.commit(repo, files, message="one more function")
        one_commit, one_wall = run_index(env, work)
    latency, queries, paths = query_latency(work / "data", name)
    over_http = http_latency(work, env, queries, paths, name)
    extraction = extraction_throughput(work / "data")
    started = startup(work, env, queries[1] or "graph")
    encoders = encoder_throughput(work / "data")
    fast_dir = work / "fast"
    fast_dir.mkdir(exist_ok=True)
    (fast_dir / "blobdex.toml").write_text(
        f'data_dir = "data"\nmodel = "fast"\n\n[[repo]]\nname = "{name}"\nurl = "{url}"\n'
    )
    fast_cold, fast_wall = run_index(env, fast_dir)

    t = cold["totals"]
    embed_share = cold["seconds"]["embed"] / max(sum(cold["seconds"].values()), 1e-9)
    figures = {
        "codebase": url,
        "files": t["files"],
        "files_indexed": t["files_indexed"],
        "chunks": t["chunks"],
        "cold": {
            "wall_s": round(cold_wall, 1),
            "seconds": cold["seconds"],
            "embed_share": round(embed_share, 3),
            "chunks_per_s_embedding": round(t["chunks_embedded"] / max(cold["seconds"]["embed"], 1e-9), 1),
            "peak_rss_mib": cold["peak_rss_mib"],
            "snapshots": cold["snapshots"],  # fast first: the static tier, then the model's
            "first_search_s": round(to_first_search, 1),  # from an empty data dir to a CLI search's answer
        },
        "no_change": {
            "wall_s": round(again_wall, 1),
            "ratio_to_cold": round(again_wall / cold_wall, 4),
            "published": again["published"],
            "chunks_embedded": again["totals"]["chunks_embedded"],
            "peak_rss_mib": again["peak_rss_mib"],
        },
        "fast_profile_cold": {
            "wall_s": round(fast_wall, 1),
            "seconds": fast_cold["seconds"],
            "chunks_per_s_embedding": round(
                fast_cold["totals"]["chunks_embedded"] / max(fast_cold["seconds"]["embed"], 1e-9), 1
            ),
        },
        "encoders": encoders,
        "startup": started,
        "venv_mib": venv_mib(),
        "queries": latency,
        "http": over_http,
        "extraction_parse_and_extract": extraction,
        "graph": cold["totals"]["graph"],
    }
    if one_commit:
        figures["one_commit"] = {
            "wall_s": round(one_wall, 1),
            "ratio_to_cold": round(one_wall / cold_wall, 4),
            "blobs_new": one_commit["totals"]["blobs_new"],
            "chunks_embedded": one_commit["totals"]["chunks_embedded"],
            "seconds": one_commit["seconds"],
            "peak_rss_mib": one_commit["peak_rss_mib"],
        }
    from ci.bench_store import store_figures  # after the rest: it adds commits to the bench repo

    if (work / "src").exists():  # a tree the bench made a repo of: commits can be added to it
        from ci.bench_cluster import cluster_figures

        figures["object_store"] = store_figures(work, env)
        figures["cluster"] = cluster_figures(work, env)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
