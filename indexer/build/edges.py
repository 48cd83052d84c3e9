"""Cross-repo coupling edges, derived from the structural facts of every repo in one org.

Chosen for what a reader cannot see in an import graph (vectormcp.md, "Coupling rules"):

    http_call  a route registered in one repo, hard-coded as a URL in another
    task       a task producer and its consumer share only the task name
    env_key    two services read the same configuration key (skipped when more than
               ENV_KEY_MAX_REPOS repos read it: that is a house convention, not a coupling)
    db_model   the same top-level model class defined in two repos (a shared schema)
    import     one repo imports a package another repo defines

An edge is a claim an agent and an analyst act on, so each says how sure it is (`confidence`, 0-1, by the
rules of its kind below) and shows its evidence on both sides (`from_evidence`, `to_evidence`: the literal,
import, task or key as written, and the route, package or definition it meets). Test code couples nothing by
default: a test that fetches `http://github.com/about/` is no client of a route `/about` in another repo, so
facts in test files (languages.is_test_file) are left out unless `edges(..., tests=True)`. An absolute URL
couples only when its host is internal (a bare name, localhost, a private address, *.local, *.internal,
*.svc ...): a third-party host never matches a route, whatever its path.

A run reads only what the repos it changed hold: each repo's part keeps its coupling facts (`edge_inputs`:
the facts of those kinds, each kept once per key or up to MAX_FACTS, code before tests), and the edges of an org
are recomputed from every repo's inputs at each publish, so they never lag behind the facts.
"""

from __future__ import annotations

import ipaddress
import re
from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa

from indexer.calls.code import reach
from indexer.calls.declared import declared, java_packages, python_packages
from indexer.languages import is_test_file, language_for

ENV_KEY_MAX_REPOS = 3
# the fact tables a part's edge_inputs are made from: those edges read, and the calls resolution reaches
EDGE_INPUTS = ("routes", "url_literals", "tasks", "env_keys", "symbols", "imports", "calls")
MAX_EVIDENCE = 10  # rows per (kind, key, from_repo, to_repo): enough to check, not a dump
# Routes, URLs and task sites kept per repo: a repo with more is a generated client or a fixture dump, and a
# part's inputs are read by every run of the org.
MAX_FACTS = 5000
# Route parameters in every framework's syntax: <int:id>, {id}, :id, (?P<id>...), ${id} and `{}`.
PARAM_RE = re.compile(r"^(<[^>]*>|\{[^}]*\}|:\w+|\(\?P<\w+>[^)]*\)|\$\{[^}]*\}|\*)$")
MODEL_BASE_RE = re.compile(r"\b(models\.Model|db\.Model|Model|Base|DeclarativeBase|SQLModel|Document|Entity)\b")
HOST_RE = re.compile(r"^https?://([^/?#]+)", re.I)
# Host suffixes that name a service inside one network, never a third party.
INTERNAL_SUFFIXES = (".local", ".internal", ".svc", ".cluster.local", ".lan", ".corp", ".localdomain", ".intranet")
# Confidence of each kind of edge (an http_call's depends on its URL: http_confidence).
CONFIDENCE = {"import": 0.9, "task": 0.9, "task_short_name": 0.5, "db_model": 0.5, "env_key": 0.4}


@dataclass(frozen=True, kw_only=True)
class Site:
    """Where a fact was seen, and the fact as written there (the edge's evidence on that side)."""

    repo: str
    path: str
    line: int
    evidence: str = ""


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


def url_host(url: str) -> str | None:
    """The host of an absolute http(s) URL, lower-cased without port or credentials; None for a path."""
    m = HOST_RE.match(url)
    if m is None:
        return None
    host = m.group(1).rsplit("@", 1)[-1].lower()
    return host[1:].split("]", 1)[0] if host.startswith("[") else host.split(":", 1)[0]


def internal_host(host: str) -> bool:
    """A host that names a service of one's own network: a bare name (`billing`, a compose or k8s service),
    localhost, a private or loopback address, an internal suffix, or a placeholder (`http://{}/...`)."""
    if "{}" in host or "." not in host or host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host.endswith(INTERNAL_SUFFIXES)
    return address.is_private or address.is_loopback


def http_confidence(url: str, route: tuple[str, ...], owner: str) -> float | None:
    """How sure an http_call is that `url` calls `route` of repo `owner`: None (no edge) for a third-party host;
    0.9 for an internal host that names the owner, 0.7 for another internal host, 0.6 for a bare path (its base
    is configured elsewhere). A route of one fixed segment (`/about`, `/health`) is common to many services:
    half as sure."""
    host = url_host(url)
    if host is None:
        sure = 0.6
    elif not internal_host(host):
        return None
    else:
        names = {owner.lower(), owner.lower().replace("_", "-")}
        sure = 0.9 if any(n and n in host for n in names) else 0.7
    if sum(1 for s in route if s != "{}") < 2:
        sure /= 2
    return round(sure, 2)


def _add(edges: list[dict], counts: dict, kind: str, key: str, src: Site, dst: Site, detail: str, sure: float) -> None:
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
            "confidence": sure,
            "from_evidence": src.evidence,
            "to_evidence": dst.evidence,
        }
    )


def _pairwise(edges: list[dict], counts: dict, kind: str, key: str, first: dict[str, list]) -> None:
    """An undirected coupling: one edge per pair of repos, evidenced by each side's first fact
    ([detail, path, line] per repo)."""
    repos = sorted(first)
    for i, a in enumerate(repos):
        for b in repos[i + 1 :]:
            (da, pa_, la), (db, pb, lb) = first[a], first[b]
            src, dst = (
                Site(repo=a, path=pa_, line=la, evidence=f"{da} {key}"),
                Site(repo=b, path=pb, line=lb, evidence=f"{db} {key}"),
            )
            _add(edges, counts, kind, key, src, dst, f"{da} / {db}", CONFIDENCE[kind])


def _sorted_rows(table: pa.Table, columns: tuple[str, ...]) -> list[tuple]:
    """A fact table's rows as tuples of `columns` (path and line last): code before tests (a part keeps a
    bounded number of sites, and tests couple nothing by default), then in (path, line) order."""
    if not table.num_rows:
        return []
    table = table.sort_by([("path", "ascending"), ("line", "ascending")])
    rows = list(zip(*(table.column(c).to_pylist() for c in columns)))
    return sorted(rows, key=lambda r: is_test_file(r[-2]))  # stable: (path, line) order within each


def edge_inputs(facts: dict[str, pa.Table], paths: list[str], chunks: pa.Table | None = None) -> dict:
    """One repo's coupling facts, from its live fact tables (EDGE_INPUTS), the paths of its indexed files and
    its chunk rows (path, chunk_index, text; for its manifests): everything `edges` and call resolution read of
    the repo as a whole, JSON-ready, each list in (path, line) order."""
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
    modules: dict[str, list] = {}
    for module, path, line in _sorted_rows(facts["imports"], ("module", "path", "line")):
        if module and not module.startswith("."):
            modules.setdefault(module, [path, line])
        if language_for(path) != "python":  # these name Python packages: `import utils from 'utils'` is npm's
            continue
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
        "java": java_packages(paths),
        # every module the repo imports by name (not relative ones), with its first site: the import edges of Go,
        # npm and Java read it, and a run that changes what another repo declares looks here for the repos
        # whose calls it may move (indexer/resolution.importers)
        "modules": modules,
        "declared": declared(chunks) if chunks is not None else {"go": {}, "npm": {}},
        # what a change in another repo must name to move this repo's calls: a run reads the calls of only the
        # repos it reaches (indexer/build/resolution.py)
        "reach": reach(facts["calls"], facts["imports"]),
    }


def _declared_imports(out: list[dict], counts: dict, inputs: dict[str, dict], kept) -> None:
    """`import` edges of Go, npm and Java: a module one repo imports that another repo's go.mod, package.json or
    Java sources declare (Python's are the packages' own, above)."""
    owners: list[tuple[str, str, str, str, str]] = []  # (kind, name, repo, path, evidence)
    for repo in sorted(inputs):
        made = inputs[repo].get("declared", {})
        owners += [("go", module, repo, path, f"module {module}") for path, module in made.get("go", {}).items()]
        owners += [("npm", name, repo, path, f"package {name}") for path, (name, _) in made.get("npm", {}).items()]
        java = inputs[repo].get("java", {})
        owners += [("java", package, repo, path, f"package {package}") for package, path in java.items()]
    # Owners by the name they declare: a module meets only those named by itself, by one of its "/" prefixes
    # (Go, npm) or by its package (Java). Trying every owner for every import took 43 s a run over 54 real
    # repositories (10k modules imported, hundreds of Java packages declared).
    by_name: dict[str, list[int]] = defaultdict(list)
    for i, (_, name, _, _, _) in enumerate(owners):
        by_name[name].append(i)
    met: dict[str, list[int]] = {}  # module -> the owners it may meet: most modules are imported by many repos

    def owners_of(module: str) -> list[int]:
        if module not in met:
            steps = module.split("/")
            named = {module, module.rpartition(".")[0], *("/".join(steps[:k]) for k in range(1, len(steps)))}
            met[module] = sorted(i for n in named for i in by_name.get(n, ()))
        return met[module]

    for repo in sorted(inputs):
        for module, (path, line) in inputs[repo].get("modules", {}).items():
            for i in owners_of(module):
                kind, name, owner, where, evidence = owners[i]
                inside = module.rpartition(".")[0] == name if kind == "java" else module.startswith(name + "/")
                if owner != repo and (module == name or inside) and kept(path) and kept(where):
                    src = Site(repo=repo, path=path, line=line, evidence=f"import {module}")
                    dst = Site(repo=owner, path=where, line=1, evidence=evidence)
                    _add(out, counts, "import", name, src, dst, module, CONFIDENCE["import"])


def edges(org: str, inputs: dict[str, dict], tests: bool = False) -> list[dict]:
    """Coupling edges between the repos of one org, from each repo's edge_inputs (repo name -> inputs); facts
    in test files take part only with `tests`."""
    out: list[dict] = []
    counts: dict = defaultdict(int)
    repos = sorted(inputs)

    def kept(path: str) -> bool:
        return tests or not is_test_file(path)

    routes_by_length = defaultdict(list)  # a URL can match only a route with as many segments
    for repo in repos:
        for method, pattern, handler, path, line in inputs[repo]["routes"]:
            segs = route_segments(pattern)
            if segs is not None and kept(path):
                routes_by_length[len(segs)].append((segs, repo, method, pattern, handler, path, line))
    for repo in repos:
        for url, url_path, path, line in inputs[repo]["urls"]:
            if not kept(path):
                continue
            segs = route_segments(url_path)
            for rsegs, owner, method, pattern, handler, rpath, rline in routes_by_length.get(len(segs), ()):
                if owner == repo or not _matches(rsegs, segs):
                    continue
                sure = http_confidence(url, rsegs, owner)
                if sure is not None:
                    src = Site(repo=repo, path=path, line=line, evidence=url)
                    dst = Site(repo=owner, path=rpath, line=rline, evidence=f"{method} {pattern} -> {handler}")
                    _add(out, counts, "http_call", f"{method} {pattern}", src, dst, f"{url} -> {handler}", sure)

    consumers = defaultdict(list)
    for repo in repos:
        for name, role, how, path, line in inputs[repo]["tasks"]:
            if role == "consumer" and kept(path):
                for key in {name, name.rsplit(".", 1)[-1]}:
                    consumers[key].append((repo, name, how, path, line))
    for repo in repos:
        for name, role, how, path, line in inputs[repo]["tasks"]:
            if role != "producer" or not kept(path):
                continue
            seen = set()
            for key in (name, name.rsplit(".", 1)[-1]):
                for consumer in consumers.get(key, []):
                    crepo, cname, chow, cpath, cline = consumer
                    if crepo != repo and consumer not in seen:
                        seen.add(consumer)
                        sure = CONFIDENCE["task" if cname == name else "task_short_name"]
                        src, dst = (
                            Site(repo=repo, path=path, line=line, evidence=f"{how} {name}"),
                            Site(repo=crepo, path=cpath, line=cline, evidence=f"{chow} {cname}"),
                        )
                        _add(out, counts, "task", cname, src, dst, f"{how} -> {chow}", sure)

    for kind, table in (("env_key", "env_keys"), ("db_model", "models")):
        by_key = defaultdict(dict)
        for repo in repos:
            for key, first in inputs[repo][table].items():
                if kept(first[1]):
                    by_key[key][repo] = first
        for key in sorted(by_key):
            if kind == "db_model" or 2 <= len(by_key[key]) <= ENV_KEY_MAX_REPOS:
                _pairwise(out, counts, kind, key, by_key[key])

    owners = defaultdict(dict)  # package -> repo -> its __init__.py
    for repo in repos:
        for package, init in inputs[repo]["packages"].items():
            if kept(init):
                owners[package][repo] = init
    for repo in repos:
        for root, sites in inputs[repo]["imports"].items():
            if repo in owners.get(root, {}):
                continue
            for owner, init in sorted(owners.get(root, {}).items()):
                for module, path, line in sites:
                    if kept(path) and language_for(path) == "python":  # inputs kept before only Python's were
                        src, dst = (
                            Site(repo=repo, path=path, line=line, evidence=f"import {module}"),
                            Site(repo=owner, path=init, line=1, evidence=f"package {root}"),
                        )
                        _add(out, counts, "import", root, src, dst, module, CONFIDENCE["import"])
    _declared_imports(out, counts, inputs, kept)
    for e in out:
        e["org"] = org
    return out
