"""History benchmark: what keeping history costs a run (seconds per 10,000 commits, snapshot bytes) and how fast
search_commits, log, blame and diff answer.

By default it synthesizes a history with `git fast-import` (COMMITS commits over a tree of FILES Python files:
each commit changes one to four files, some rename one, authors and subjects from small vocabularies); --repo
measures a real repository instead (a path or URL blobdex can fetch). Vectors come from the hashing embedder
unless --model names a real one: by default this measures reading history, not a model; with the bundled
model the history stage also embeds each commit's subject and first paragraph (its vector), and the
difference between the two is what that costs. Prints JSON (and writes it with --json).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMITS, FILES = 10_000, 400
HASH = "blobdex:hash"
QUERIES = 200  # search_commits queries timed; log, blame and diff take a quarter each
WORDS = (
    "fix handle parse cache retry timeout config render route token session invoice refund export import "
    "report upload download schedule queue worker index search filter sort page limit error crash leak"
).split()
AUTHORS = ("Ada <ada@example.com>", "Lin <lin@example.com>", "Sam <sam@example.com>", "Kim <kim@example.com>")


def synthesize(path: Path, commits: int, files: int, seed: int = 0) -> None:
    """A repository of `commits` commits made with git fast-import (seconds for 10,000)."""
    rng = random.Random(seed)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    names = [f"pkg{i % 20}/mod_{i}.py" for i in range(files)]
    lines = {n: [f"def f_{i}_{k}():\n    return {k}\n" for k in range(5)] for i, n in enumerate(names)}
    out, when = [], 1_600_000_000
    for c in range(commits):
        author = AUTHORS[c % len(AUTHORS)]
        subject = " ".join(rng.sample(WORDS, 4)).capitalize()
        message = f"{subject}\n\n{' '.join(rng.choices(WORDS, k=20))}\n".encode()
        out.append(b"commit refs/heads/main\n")
        out.append(f"committer {author} {when + c * 3600} +0000\n".encode())
        out.append(b"data %d\n%s\n" % (len(message), message))
        if c == 0:
            for n in names:
                data = "".join(lines[n]).encode()
                out.append(b"M 100644 inline %s\ndata %d\n%s\n" % (n.encode(), len(data), data))
            continue
        for n in rng.sample(names, rng.randint(1, 4)):
            lines[n].append(f"def g_{c}():\n    return '{rng.choice(WORDS)}'\n")
            data = "".join(lines[n]).encode()
            out.append(b"M 100644 inline %s\ndata %d\n%s\n" % (n.encode(), len(data), data))
        if c % 500 == 0:  # now and then a file moves
            old = rng.choice(names)
            new = old.replace("mod_", f"moved{c}_")
            names[names.index(old)] = new
            lines[new] = lines.pop(old)
            out.append(f"R {old} {new}\n".encode())
    subprocess.run(["git", "fast-import", "--quiet"], input=b"".join(out), cwd=path, check=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=path, check=True)


def index(work: Path, url: str, history: str, model: str) -> tuple[dict, float, Path]:
    """Index `url` with `model` and `history`; (the run report, wall seconds, the data dir)."""
    sys.path.insert(0, str(ROOT))
    from indexer.build import run
    from indexer.config import load

    work.mkdir(parents=True, exist_ok=True)
    (work / "blobdex.toml").write_text(
        f'data_dir = "data"\nmodel = "{model}"\nfast_first = false\nhistory = "{history}"\n\n'
        f'[[repo]]\nname = "r"\nurl = "{url}"\n'
    )
    cfg = load(work / "blobdex.toml")
    t0 = time.monotonic()
    report = run(cfg, show_progress=False)
    return report.to_dict(), time.monotonic() - t0, cfg.data_dir


def history_bytes(data_dir: Path) -> dict:
    from indexer.snapshot import open_manifest

    path, manifest = open_manifest(data_dir)
    parts = sum(f.stat().st_size for r in manifest.repos for p in r.history for f in (data_dir / "parts" / p).iterdir())
    index = sum(f.stat().st_size for f in (path / "history").iterdir()) if (path / "history").is_dir() else 0
    return {"parts_mib": round(parts / 2**20, 2), "commits_index_mib": round(index / 2**20, 2)}


def percentiles(values: list[float]) -> dict:
    values = sorted(values)
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values) * 1000, 1),
        "p95_ms": round(values[max(0, int(0.95 * len(values)) - 1)] * 1000, 1),
    }


def timed(calls) -> dict:
    spent = []
    for call in calls:
        t0 = time.monotonic()
        call()
        spent.append(time.monotonic() - t0)
    return percentiles(spent)


def query_figures(data_dir: Path, model: str) -> dict:
    from indexer.config import load
    from indexer.embed import HashEmbedder
    from query.history import history_of
    from query.service import Service

    hashing = HashEmbedder() if model == HASH else None
    service = Service(load(data_dir.parent / "blobdex.toml"), embedder=hashing)
    t0 = time.monotonic()
    hist = history_of(service.reader())
    load_s = time.monotonic() - t0
    rng = random.Random(1)
    subjects = hist.commits.column("subject").to_pylist()
    paths = sorted({p for changed in hist.paths for p, _, change, _, _ in changed if change != "delete"})
    live = service.reader().files("default")
    paths = [p for p in paths if ("r", p) in live] or paths
    ids = hist.commits.column("commit_id").to_pylist()
    queries = [" ".join(rng.sample(s.split(), min(2, len(s.split())))) for s in rng.sample(subjects, QUERIES)]
    return {
        "load_history_s": round(load_s, 2),
        "search_commits": timed([lambda q=q: service.search_commits("default", q) for q in queries]),
        "search_commits_filtered": timed(
            [lambda q=q: service.search_commits("default", q, author="lin", since="2020-09-01") for q in queries[:50]]
        ),
        "log_path": timed([lambda p=p: service.log("default", "r", p) for p in rng.sample(paths, QUERIES // 4)]),
        "blame": timed([lambda p=p: service.blame("default", "r", p) for p in rng.sample(paths, QUERIES // 8)]),
        "diff_one_commit": timed(
            [lambda c=c: service.diff("default", "r", f"{c}~1", c) for c in rng.sample(ids[:-1], QUERIES // 4)]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", help="a repository with history (path or URL) instead of a synthesized one")
    parser.add_argument("--commits", type=int, default=COMMITS, help="commits to synthesize")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--model", default=HASH, help="the embedding model (default: the hashing embedder)")
    parser.add_argument("--modes", default="off,messages,diffs", help="the history modes to index, in order")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="blobdex-bench-history-"))
    try:
        url = args.repo
        if url is None:
            t0 = time.monotonic()
            synthesize(work / "src", args.commits, FILES)
            print(f"bench-history: synthesized {args.commits} commits in {time.monotonic() - t0:.1f}s", file=sys.stderr)
            url = str(work / "src")
        figures = {"codebase": url, "model": args.model}
        for mode in args.modes.split(","):
            report, wall, data_dir = index(work / mode, url, mode, args.model)
            seconds = report["seconds"]
            commits = report["totals"]["commits"]
            figures[mode] = {
                "wall_s": round(wall, 1),
                "history_s": seconds["history"],
                "history_share": round(seconds["history"] / max(sum(seconds.values()), 1e-9), 3),
                "commits": commits,
                "s_per_10k_commits": round(seconds["history"] / max(commits, 1) * 10_000, 1) if commits else None,
                **(history_bytes(data_dir) if commits else {}),
            }
            print(f"bench-history: {mode}: {json.dumps(figures[mode])}", file=sys.stderr)
        if "messages" in figures:
            again, wall, data_dir = index(work / "messages", url, "messages", args.model)
            figures["messages"]["no_change_wall_s"] = round(wall, 2)
            figures["queries"] = query_figures(work / "messages" / "data", args.model)
        print(json.dumps(figures, indent=2))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
