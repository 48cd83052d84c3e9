"""`make bench-recall`: recall@10 of blobdex's approximate vector search against exact, on a real model's vectors
of up to a million chunks of real code, and what a query's candidates cost.

The corpus: the source files under --source (by default the packages this project installs, .venv's
site-packages, and Python's standard library: hundreds of real projects, about 600k chunks), chunked by
blobdex's chunker and embedded once by --model (`fast`, the bundled model's static tier, by default: thousands of
chunks a second on a CPU), cached in --work. The index is
built as a server builds it: a codebook trained by indexer.snapshot.ann on a sample, every code joined through
query.approximate.Shared (4-bit codes in mapped lists), asked at several (lists probed, candidates rescored)
settings, the default one first; an 8-bit codebook (those trained before) beside it. Queries: names of definitions,
first lines of chunks and a few tasks, embedded as the vector signal embeds them (query_vectors). A hit is a
chunk whose cosine reaches the exact 10th's (ties count). One thread, as a request runs. Nothing is asserted.

    make bench-recall ARGS="--rows 1000000 --work /tmp/recall"
    make bench-recall ARGS="--source .venv/lib/python3.11 .tools/node_modules /usr/include"  (more code)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = [
    "parse command line arguments",
    "read a file in chunks",
    "retry an http request with backoff",
    "compute a hash of a file",
    "convert a tensor to a numpy array",
    "tokenize a string",
    "merge two sorted lists",
    "serialize an object to json",
    "open a zip archive",
    "validate an email address",
    "import a module lazily",
    "run tasks on a thread pool",
    "format a date and time",
    "compress data with gzip",
    "parse a version string",
    "walk a directory tree",
    "multiply two matrices",
    "seed the random number generator",
    "log a warning message",
    "connect to a database",
]
SETTINGS_4BIT = [(256, 2_000), (96, 500), (256, 1_000), (384, 1_000), (256, 1_500)]  # the default first
SETTINGS_8BIT = [(96, 500), (192, 1_000)]
MAX_FILE_BYTES = 200_000
BATCH = 4_096


def corpus(sources: list[Path], rows: int, embedder, seed: int = 0) -> tuple[np.ndarray, list[str], list[str]]:
    """(vectors of up to `rows` chunks, definition names, first lines of chunks): files in a seeded order."""
    from indexer.chunk import chunk_text
    from indexer.embed import embed_text
    from indexer.languages import GRAMMARS, language_for

    found = {p.resolve() for s in sources for p in s.rglob("*") if p.is_file() and language_for(p.name) in GRAMMARS}
    files = sorted(found)
    random.Random(seed).shuffle(files)
    vectors, texts, names, lines, taken = [], [], [], [], 0
    started = time.monotonic()
    for path in files:
        if taken >= rows:
            break
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        chunks, _ = chunk_text(text, language_for(path.name))
        for chunk in chunks[: rows - taken]:
            texts.append(embed_text(chunk.symbol, chunk.text))
            names.append(chunk.symbol.rsplit(".", 1)[-1])
            lines.append(chunk.text.strip().split("\n", 1)[0].strip()[:80])
        taken += min(len(chunks), rows - taken)
        while len(texts) >= BATCH:
            vectors.append(np.asarray(embedder.embed(texts[:BATCH]), dtype=np.float32))
            del texts[:BATCH]
            done = BATCH * len(vectors)
            print(f"bench-recall: {done:,} chunks embedded, {time.monotonic() - started:.0f} s", file=sys.stderr)
    if texts:
        vectors.append(np.asarray(embedder.embed(texts), dtype=np.float32))
    if taken < 1_000:
        shown = ", ".join(map(str, sources))
        sys.exit(f"bench-recall: {taken} chunks under {shown}; give --source trees of code blobdex chunks")
    rng = random.Random(seed + 1)
    named = sorted({n for n in names if len(n) > 6})
    names = rng.sample(named, min(len(named), 150))
    lines = [line for line in rng.sample(lines, min(len(lines), 600)) if len(line) > 20][:150]
    return np.concatenate(vectors), names, lines


def recall(view, base: np.ndarray, asked: list[np.ndarray], settings: list[tuple[int, int]]) -> list[dict]:
    """For each (lists probed, candidates) setting: recall@10 against exact and the candidates' ms a query."""
    from query.search.signals import cosines

    everything = np.ones(len(base), dtype=bool)
    nth = [np.partition(cosines(base, q), len(base) - 10)[len(base) - 10] for q in asked]
    out = []
    for probed, rescored in settings:
        view.shared.nprobe = probed
        hits, seconds = 0, []
        for q, tenth in zip(asked, nth):
            started = time.perf_counter()
            near = view.candidates(q, everything, rescored)
            seconds.append(time.perf_counter() - started)
            top = np.sort(cosines(base[near], q))[::-1][:10]
            hits += int(np.count_nonzero(top >= tenth - 1e-6))
        out.append(
            {
                "lists_probed": probed,
                "rescored": rescored,
                "recall_at_10": round(hits / (10 * len(asked)), 4),
                "candidates_p50_ms": round(float(np.median(seconds)) * 1000, 2),
            }
        )
    return out


def index_8bit(sample: np.ndarray):
    """A codebook of 8-bit codes, as blobdex trained them before 4-bit ones (48 sub-vectors of 8 dimensions)."""
    import faiss

    from indexer.snapshot import ann
    from indexer.snapshot.ann import Codebook

    dim = sample.shape[1]
    index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, ann.LISTS, dim // 8, 8, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = 36
    index.train(sample)
    return Codebook(faiss.serialize_index(index).tobytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    sources = [Path(sys.prefix) / "lib" / version / "site-packages", Path(sys.base_prefix) / "lib" / version]
    parser.add_argument("--source", type=Path, nargs="+", default=sources, help="source trees")
    parser.add_argument("--rows", type=int, default=1_000_000, help="chunks to embed (at most)")
    parser.add_argument("--model", default="fast", help="the embedding model (default: the static tier)")
    parser.add_argument("--work", type=Path, default=ROOT / ".blobdex" / "bench-recall", help="cache and lists")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    args = parser.parse_args()

    import faiss

    from indexer.embed import load_embedder
    from indexer.snapshot import ann
    from indexer.snapshot.ann import Codebook
    from query import approximate
    from query.search.signals import query_vectors

    faiss.omp_set_num_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    embedder = load_embedder(args.model, cache=args.work, writable=True)
    named = hashlib.sha256(json.dumps([args.rows, args.model, sorted(map(str, args.source))]).encode()).hexdigest()
    cached = args.work / f"corpus-{named[:12]}.npz"
    if cached.exists():
        held = np.load(cached)
        base, names, lines = held["vectors"], list(held["names"]), list(held["lines"])
    else:
        base, names, lines = corpus(args.source, args.rows, embedder)
        np.savez(cached, vectors=base, names=np.array(names), lines=np.array(lines))
    asked = [query_vectors(embedder, q) for q in TASKS + names + lines]
    sample = base[np.random.default_rng(36).choice(len(base), min(len(base), ann.SAMPLE), replace=False)]
    figures = {"chunks": len(base), "dim": int(base.shape[1]), "model": args.model, "queries": len(asked)}

    class Part:  # every chunk in one part: what the index holds does not depend on how parts split it
        key = "corpus"

        def __init__(self, codebook: Codebook):
            self.codes = (codebook.encode(base), codebook.digest)

        def __len__(self) -> int:
            return len(base)

    for name, codebook, settings in (
        ("4-bit", Codebook(ann.train(sample)), SETTINGS_4BIT),
        ("8-bit", index_8bit(sample), SETTINGS_8BIT),
    ):
        started = time.monotonic()
        view = approximate.Shared(codebook, args.work).view([Part(codebook)], np.array([0, len(base)]))
        built = time.monotonic() - started
        figures[name] = {"built_s": round(built, 1), "settings": recall(view, base, asked, settings)}
        print(f"bench-recall: {name} done", file=sys.stderr)
    print(json.dumps(figures))
    print(f"\n{figures['chunks']:,} chunks ({args.model}, {figures['dim']} dimensions), {len(asked)} queries")
    print("| codes | lists probed / candidates rescored | recall@10 | candidates p50 |\n|---|---|---|---|")
    for name in ("4-bit", "8-bit"):
        for s in figures[name]["settings"]:
            print(
                f"| {name} | {s['lists_probed']} / {s['rescored']:,} | {s['recall_at_10']:.3f} | "
                f"{s['candidates_p50_ms']} ms |"
            )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
