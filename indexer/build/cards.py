"""Repo cards: one short text per repo (README head, languages, layout, top symbols and routes),
embedded like a chunk. route_task uses a card as the prior: it matches a task's vocabulary when
no single chunk stands out."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from indexer.languages import category

README_CHARS = 700  # about 180 tokens: the card must fit the model's 256 with room for the rest
TOP_SYMBOLS = 30
TOP_ROUTES = 15
TOP_DIRS = 8


def card_text(repo: str, files: pa.Table, chunks: pa.Table, facts: dict[str, pa.Table]) -> str:
    """The card of one repo from its live rows (files: path, lang, skip; chunks: path, chunk_index, text; the fact
    tables symbols, calls and routes); "" for a repo with no indexed file and no README, which has no card."""
    langs: Counter = Counter()
    dirs: Counter = Counter()
    for path, lang, skip in zip(*(files.column(c).to_pylist() for c in ("path", "lang", "skip"))):
        if skip is None:
            langs[lang] += 1
            dirs[path.split("/", 1)[0] + ("/" if "/" in path else "")] += 1
    paths, order = chunks.column("path").to_pylist(), chunks.column("chunk_index").to_pylist()
    at_root = sorted(
        (i for i, p in enumerate(paths) if "/" not in p and p.lower().startswith("readme")),
        key=lambda i: (paths[i], order[i]),
    )
    readme = chunks.column("text").take(at_root).to_pylist() if at_root else []
    if not langs and not readme:
        return ""
    called = Counter(facts["calls"].column("callee").to_pylist())
    symbols: Counter = Counter()
    sym = facts["symbols"]
    for name, kind, parent in zip(*(sym.column(c).to_pylist() for c in ("name", "kind", "parent"))):
        if not parent and kind in ("class", "function", "type"):
            symbols[name] = 1 + called[name]
    r = facts["routes"]
    routes = [f"{m} {p}" for m, p in zip(r.column("method").to_pylist(), r.column("pattern").to_pylist())]
    total = sum(langs.values()) or 1
    lines = [f"repository {repo}"]
    head = " ".join(" ".join(readme).split())[:README_CHARS]
    if head:
        lines.append(head)
    code = [f"{lang} {100 * n // total}%" for lang, n in _top(langs, 5) if category(lang) == "code"]
    if code:
        lines.append("languages: " + ", ".join(code))
    if dirs:
        lines.append("layout: " + ", ".join(d for d, _ in _top(dirs, TOP_DIRS)))
    if symbols:
        lines.append("symbols: " + ", ".join(s for s, _ in _top(symbols, TOP_SYMBOLS)))
    if routes:
        lines.append("routes: " + ", ".join(sorted(set(routes))[:TOP_ROUTES]))
    return "\n".join(lines)


def _top(counts: Counter, n: int) -> list[tuple[str, int]]:
    """The n most counted, ties by name: a card depends on the repo's rows, not on the order a run wrote them."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
