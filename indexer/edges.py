"""Cross-repo coupling edges, derived from the structural facts of every repo in one org.

Chosen for what a reader cannot see in an import graph (vectormcp.md, "Coupling rules"):

    http_call  a route registered in one repo, hard-coded as a URL in another
    task       a task producer and its consumer share only the task name
    env_key    two services read the same configuration key (skipped when more than
               ENV_KEY_MAX_REPOS repos read it: that is a house convention, not a coupling)
    db_model   the same top-level model class defined in two repos (a shared schema)
    import     one repo imports a package another repo defines

Edges are recomputed from the facts on every publish, so they never lag behind them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

ENV_KEY_MAX_REPOS = 3
EDGE_INPUTS = ("routes", "url_literals", "tasks", "env_keys", "symbols", "imports")  # fact tables edges read
MAX_EVIDENCE = 10  # rows per (kind, key, from_repo, to_repo): enough to check, not a dump
# Route parameters in every framework's syntax: <int:id>, {id}, :id, (?P<id>...), ${id} and `{}`.
PARAM_RE = re.compile(r"^(<[^>]*>|\{[^}]*\}|:\w+|\(\?P<\w+>[^)]*\)|\$\{[^}]*\}|\*)$")
MODEL_BASE_RE = re.compile(r"\b(models\.Model|db\.Model|Model|Base|DeclarativeBase|SQLModel|Document|Entity)\b")
TOP_PACKAGE_DIRS = ("src", "lib", "python", "pkg")


@dataclass(frozen=True)
class Site:
    """Where a fact was seen."""

    repo: str
    path: str
    line: int


def route_segments(pattern: str) -> tuple[str, ...] | None:
    """Normalized path segments with parameters as `{}`; None for patterns too vague to couple on."""
    path = pattern if "(?" in pattern else pattern.split("?")[0].split("#")[0]  # a regex route keeps its groups
    path = path.strip().lstrip("^").rstrip("$")
    segments = tuple("{}" if PARAM_RE.match(s) or "{}" in s else s.lower() for s in path.split("/") if s)
    if not any(s != "{}" for s in segments):
        return None
    return segments


def _matches(route: tuple[str, ...], url: tuple[str, ...]) -> bool:
    return len(route) == len(url) and all(r == u or r == "{}" or u == "{}" for r, u in zip(route, url))


def _add(edges: list[dict], counts: dict, kind: str, key: str, src: Site, dst: Site, detail: str) -> None:
    slot = (kind, key, src.repo, dst.repo)
    if counts[slot] >= MAX_EVIDENCE:
        return
    counts[slot] += 1
    edges.append(
        {
            "kind": kind,
            "key": key,
            "from_repo": src.repo,
            "from_path": src.path,
            "from_line": src.line,
            "to_repo": dst.repo,
            "to_path": dst.path,
            "to_line": dst.line,
            "detail": detail,
        }
    )


def _pairwise(
    edges: list[dict], counts: dict, kind: str, key: str, by_repo: dict[str, list[dict]], detail: str
) -> None:
    """An undirected coupling: one edge per pair of repos, evidenced by each side's first fact."""
    repos = sorted(by_repo)
    for i, a in enumerate(repos):
        for b in repos[i + 1 :]:
            fa, fb = by_repo[a][0], by_repo[b][0]
            _add(
                edges,
                counts,
                kind,
                key,
                Site(a, fa["path"], fa["line"]),
                Site(b, fb["path"], fb["line"]),
                f"{fa[detail]} / {fb[detail]}",
            )


def python_packages(paths: list[str]) -> set[str]:
    """Top-level importable package names of a repo, from its `__init__.py` files and root modules."""
    inits = {p.rsplit("/", 1)[0] for p in paths if p.endswith("/__init__.py")}
    names = set()
    for d in inits:
        parent = d.rsplit("/", 1)[0] if "/" in d else ""
        if parent not in inits:
            parts = d.split("/")
            if len(parts) == 1 or (len(parts) == 2 and parts[0] in TOP_PACKAGE_DIRS):
                names.add(parts[-1])
    return names


def edges(org: str, facts: dict[str, list[dict]], files: list[dict]) -> list[dict]:
    """Coupling edges between the repos of one org. `facts` holds the graph tables' rows."""
    out: list[dict] = []
    counts: dict = defaultdict(int)

    routes = [(route_segments(r["pattern"]), r) for r in facts["routes"]]
    for u in facts["url_literals"]:
        segs = route_segments(u["url_path"])
        if segs is None:
            continue
        for rsegs, r in routes:
            if rsegs is not None and r["repo"] != u["repo"] and _matches(rsegs, segs):
                _add(
                    out,
                    counts,
                    "http_call",
                    f"{r['method']} {r['pattern']}",
                    Site(u["repo"], u["path"], u["line"]),
                    Site(r["repo"], r["path"], r["line"]),
                    f"{u['url']} -> {r['handler']}",
                )

    consumers = defaultdict(list)
    for t in facts["tasks"]:
        if t["role"] == "consumer":
            for name in {t["name"], t["name"].rsplit(".", 1)[-1]}:
                consumers[name].append(t)
    for p in facts["tasks"]:
        if p["role"] != "producer":
            continue
        seen = set()
        for name in (p["name"], p["name"].rsplit(".", 1)[-1]):
            for c in consumers.get(name, []):
                if c["repo"] != p["repo"] and id(c) not in seen:
                    seen.add(id(c))
                    _add(
                        out,
                        counts,
                        "task",
                        c["name"],
                        Site(p["repo"], p["path"], p["line"]),
                        Site(c["repo"], c["path"], c["line"]),
                        f"{p['how']} -> {c['how']}",
                    )

    readers = defaultdict(lambda: defaultdict(list))
    for e in facts["env_keys"]:
        readers[e["key"]][e["repo"]].append(e)
    for key, by_repo in readers.items():
        if 2 <= len(by_repo) <= ENV_KEY_MAX_REPOS:
            _pairwise(out, counts, "env_key", key, by_repo, "how")

    models = defaultdict(lambda: defaultdict(list))
    for s in facts["symbols"]:
        if (
            s["kind"] == "class"
            and not s["parent"]
            and MODEL_BASE_RE.search(s["signature"].split("(", 1)[-1])
            and "(" in s["signature"]
        ):
            models[s["name"]][s["repo"]].append(s)
    for name, by_repo in models.items():
        _pairwise(out, counts, "db_model", name, by_repo, "signature")

    paths_by_repo = defaultdict(list)
    for f in files:
        paths_by_repo[f["repo"]].append(f["path"])
    owners = defaultdict(set)
    for repo, paths in paths_by_repo.items():
        for package in python_packages(paths):
            owners[package].add(repo)
    for imp in facts["imports"]:
        root = imp["module"].split(".")[0]
        for owner in owners.get(root, ()):
            if owner != imp["repo"] and imp["repo"] not in owners[root]:
                init = next(p for p in paths_by_repo[owner] if p.endswith(f"{root}/__init__.py"))
                _add(
                    out,
                    counts,
                    "import",
                    root,
                    Site(imp["repo"], imp["path"], imp["line"]),
                    Site(owner, init, 1),
                    imp["module"],
                )
    for e in out:
        e["org"] = org
    return out
