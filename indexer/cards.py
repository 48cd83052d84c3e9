"""Repo cards: one short text per repo (README head, languages, layout, top symbols and routes),
embedded like a chunk. route_task uses a card as the prior: it matches a task's vocabulary when
no single chunk stands out."""

from __future__ import annotations

from collections import Counter, defaultdict

from indexer.languages import category

README_CHARS = 700  # about 180 tokens: the card must fit the model's 256 with room for the rest
TOP_SYMBOLS = 30
TOP_ROUTES = 15
TOP_DIRS = 8


def card_texts(tables) -> dict[tuple[str, str], str]:
    """(org, repo) -> card text, from the rows a snapshot is about to publish."""
    files, chunks = tables.files, tables.chunks
    langs: dict[tuple, Counter] = defaultdict(Counter)
    dirs: dict[tuple, Counter] = defaultdict(Counter)
    for org, repo, path, lang, skip in zip(files["org"], files["repo"], files["path"], files["lang"], files["skip"]):
        if skip is None:
            key = (org, repo)
            langs[key][lang] += 1
            dirs[key][path.split("/", 1)[0] + ("/" if "/" in path else "")] += 1
    readme: dict[tuple, list[str]] = defaultdict(list)
    for org, repo, path, text in zip(chunks["org"], chunks["repo"], chunks["path"], chunks["text"]):
        if "/" not in path and path.lower().startswith("readme"):
            readme[(org, repo)].append(text)
    called = Counter(zip(tables.facts["calls"]["org"], tables.facts["calls"]["repo"], tables.facts["calls"]["callee"]))
    symbols: dict[tuple, Counter] = defaultdict(Counter)
    sym = tables.facts["symbols"]
    for org, repo, name, kind, parent in zip(sym["org"], sym["repo"], sym["name"], sym["kind"], sym["parent"]):
        if not parent and kind in ("class", "function", "type"):
            symbols[(org, repo)][name] = 1 + called[(org, repo, name)]
    routes: dict[tuple, list[str]] = defaultdict(list)
    r = tables.facts["routes"]
    for org, repo, method, pattern in zip(r["org"], r["repo"], r["method"], r["pattern"]):
        routes[(org, repo)].append(f"{method} {pattern}")
    cards = {}
    for key in sorted(set(langs) | set(readme)):
        total = sum(langs[key].values()) or 1
        lines = [f"repository {key[1]}"]
        head = " ".join(" ".join(readme[key]).split())[:README_CHARS]
        if head:
            lines.append(head)
        code = [f"{lang} {100 * n // total}%" for lang, n in langs[key].most_common(5) if category(lang) == "code"]
        if code:
            lines.append("languages: " + ", ".join(code))
        if dirs[key]:
            lines.append("layout: " + ", ".join(d for d, _ in dirs[key].most_common(TOP_DIRS)))
        if symbols[key]:
            lines.append("symbols: " + ", ".join(s for s, _ in symbols[key].most_common(TOP_SYMBOLS)))
        if routes[key]:
            lines.append("routes: " + ", ".join(sorted(set(routes[key]))[:TOP_ROUTES]))
        cards[key] = "\n".join(lines)
    return cards
