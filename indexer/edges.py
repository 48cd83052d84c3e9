"""Cross-repo coupling edges, derived from the structural facts of every repo in one org.

Chosen for what a reader cannot see in an import graph (vectormcp.md, "Coupling rules"):

    http_call  a route registered in one repo, hard-coded as a URL in another
    task       a task producer and its consumer share only the task name
    env_key    two services read the same configuration key (skipped when more than
               ENV_KEY_MAX_REPOS repos read it: that is a house convention, not a coupling)
    db_model   the same top-level model class defined in two repos (a shared schema)
    import     one repo imports a package another repo defines

A run reads only what the repos it changed hold: each repo's part keeps its coupling facts (`edge_inputs`:
the facts of those kinds, each kept once per key or up to MAX_FACTS), and the edges of an org are recomputed
from every repo's inputs at each publish, so they never lag behind the facts.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa

ENV_KEY_MAX_REPOS = 3
EDGE_INPUTS = ("routes", "url_literals", "tasks", "env_keys", "symbols", "imports")  # fact tables edges read
MAX_EVIDENCE = 10  # rows per (kind, key, from_repo, to_repo): enough to check, not a dump
# Routes, URLs and task sites kept per repo: a repo with more is a generated client or a fixture dump, and a
# part's inputs are read by every run of the org.
MAX_FACTS = 5000
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


def _pairwise(edges: list[dict], counts: dict, kind: str, key: str, first: dict[str, list]) -> None:
    """An undirected coupling: one edge per pair of repos, evidenced by each side's first fact
    ([detail, path, line] per repo)."""
    repos = sorted(first)
    for i, a in enumerate(repos):
        for b in repos[i + 1 :]:
            (da, pa_, la), (db, pb, lb) = first[a], first[b]
            _add(edges, counts, kind, key, Site(a, pa_, la), Site(b, pb, lb), f"{da} / {db}")


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


def _sorted_rows(table: pa.Table, columns: tuple[str, ...]) -> list[tuple]:
    """A fact table's rows as tuples of `columns` (path and line last), in (path, line) order."""
    if not table.num_rows:
        return []
    table = table.sort_by([("path", "ascending"), ("line", "ascending")])
    return list(zip(*(table.column(c).to_pylist() for c in columns)))


def edge_inputs(facts: dict[str, pa.Table], paths: list[str]) -> dict:
    """One repo's coupling facts, from its live fact tables (EDGE_INPUTS) and the paths of its indexed files:
    everything `edges` reads of the repo, JSON-ready, each list in (path, line) order."""
    routes = _sorted_rows(facts["routes"], ("method", "pattern", "handler", "path", "line"))[:MAX_FACTS]
    urls = [
        u
        for u in _sorted_rows(facts["url_literals"], ("url", "url_path", "path", "line"))
        if route_segments(u[1]) is not None
    ][:MAX_FACTS]
    tasks = _sorted_rows(facts["tasks"], ("name", "role", "how", "path", "line"))[:MAX_FACTS]
    env_keys: dict[str, list] = {}
    for key, how, path, line in _sorted_rows(facts["env_keys"], ("key", "how", "path", "line")):
        env_keys.setdefault(key, [how, path, line])
    models: dict[str, list] = {}
    for name, kind, parent, signature, path, line in _sorted_rows(
        facts["symbols"], ("name", "kind", "parent", "signature", "path", "line")
    ):
        if kind == "class" and not parent and "(" in signature and MODEL_BASE_RE.search(signature.split("(", 1)[-1]):
            models.setdefault(name, [signature, path, line])
    imports: dict[str, list] = defaultdict(list)
    for module, path, line in _sorted_rows(facts["imports"], ("module", "path", "line")):
        sites = imports[module.split(".")[0]]
        if len(sites) < MAX_EVIDENCE:
            sites.append([module, path, line])
    packages = {}
    for name in sorted(python_packages(paths)):
        packages[name] = next(p for p in sorted(paths) if p.endswith(f"{name}/__init__.py"))
    return {
        "routes": routes,
        "urls": urls,
        "tasks": tasks,
        "env_keys": env_keys,
        "models": models,
        "imports": dict(imports),
        "packages": packages,
    }


def edges(org: str, inputs: dict[str, dict]) -> list[dict]:
    """Coupling edges between the repos of one org, from each repo's edge_inputs (repo name -> inputs)."""
    out: list[dict] = []
    counts: dict = defaultdict(int)
    repos = sorted(inputs)
    routes_by_length = defaultdict(list)  # a URL can match only a route with as many segments
    for repo in repos:
        for method, pattern, handler, path, line in inputs[repo]["routes"]:
            segs = route_segments(pattern)
            if segs is not None:
                routes_by_length[len(segs)].append((segs, repo, method, pattern, handler, path, line))
    for repo in repos:
        for url, url_path, path, line in inputs[repo]["urls"]:
            segs = route_segments(url_path)
            for rsegs, owner, method, pattern, handler, rpath, rline in routes_by_length.get(len(segs), ()):
                if owner != repo and _matches(rsegs, segs):
                    src, dst = Site(repo, path, line), Site(owner, rpath, rline)
                    _add(out, counts, "http_call", f"{method} {pattern}", src, dst, f"{url} -> {handler}")

    consumers = defaultdict(list)
    for repo in repos:
        for name, role, how, path, line in inputs[repo]["tasks"]:
            if role == "consumer":
                for key in {name, name.rsplit(".", 1)[-1]}:
                    consumers[key].append((repo, name, how, path, line))
    for repo in repos:
        for name, role, how, path, line in inputs[repo]["tasks"]:
            if role != "producer":
                continue
            seen = set()
            for key in (name, name.rsplit(".", 1)[-1]):
                for consumer in consumers.get(key, []):
                    crepo, cname, chow, cpath, cline = consumer
                    if crepo != repo and consumer not in seen:
                        seen.add(consumer)
                        src, dst = Site(repo, path, line), Site(crepo, cpath, cline)
                        _add(out, counts, "task", cname, src, dst, f"{how} -> {chow}")

    for kind, table in (("env_key", "env_keys"), ("db_model", "models")):
        by_key = defaultdict(dict)
        for repo in repos:
            for key, first in inputs[repo][table].items():
                by_key[key][repo] = first
        for key in sorted(by_key):
            if kind == "db_model" or 2 <= len(by_key[key]) <= ENV_KEY_MAX_REPOS:
                _pairwise(out, counts, kind, key, by_key[key])

    owners = defaultdict(dict)  # package -> repo -> its __init__.py
    for repo in repos:
        for package, init in inputs[repo]["packages"].items():
            owners[package][repo] = init
    for repo in repos:
        for root, sites in inputs[repo]["imports"].items():
            if repo in owners.get(root, {}):
                continue
            for owner, init in sorted(owners.get(root, {}).items()):
                for module, path, line in sites:
                    _add(out, counts, "import", root, Site(repo, path, line), Site(owner, init, 1), module)
    for e in out:
        e["org"] = org
    return out
