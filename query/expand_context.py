"""What a symbol touches: its definitions, its callers in every repo, routes and env keys inside it, and the
coupling edges whose evidence lies in it (the data of the `expand_context` tool); and `references`, the
callers alone (`blobdex references`, /v1/references). Both find the definition from a symbol or from a position in
a file.

Callers are the call rows that resolve to one of the definitions (indexer/calls/rules.py): exact, through an import,
or through a receiver's type. A call that only shares the name (`x.get()` on something of unknown type) is no
caller; such rows are counted (`name_only_total`) and listed only when asked (`name_only=True`), each labelled.
A caller list is a page: `limit` rows, the repos with the most callers first, and a cursor for the next."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from indexer.errors import BlobdexError
from indexer.snapshot import Manifest, open_manifest, read_graph
from query.cursor import CursorError
from query.cursor import decode as cursor_decode
from query.cursor import encode as cursor_encode

MAX_CALLERS = 200  # a page at most
DEFAULT_CALLERS = 50
CALLER_FIELDS = ("repo", "path", "line", "caller", "receiver", "resolution")
DEFINITION_FIELDS = ("repo", "path", "line", "line_end", "qualified_name", "kind", "signature", "doc")
MAX_DEFINITIONS = 20  # listed; a name as common as `__init__` has hundreds (the callers count them all)
EDGE_FIELDS = ("kind", "key", "confidence", "from_repo", "from_path", "from_line", "from_evidence")
EDGE_FIELDS += ("to_repo", "to_path", "to_line", "to_evidence", "detail")


class ContextError(BlobdexError):
    """The symbol is unknown or the request is malformed; the message says what to try."""

    status = 404


class BadContextRequest(ContextError):
    """A malformed request (no symbol, both a symbol and a place, a limit out of range)."""

    status = 400


def _rows(path: Path, table: str, mask_of, **options) -> list[dict]:
    t = read_graph(path, table, **options)
    return t.filter(mask_of(t)).to_pylist() if t.num_rows else []


def context(
    data_dir: Path,
    symbol: str | None = None,
    org: str = "default",
    repo: str | None = None,
    snapshot_id: str | None = None,
    path: str | None = None,
    line: int | None = None,
    name_only: bool = False,
    cursor: str | None = None,
    limit: int = DEFAULT_CALLERS,
) -> dict:
    """What the definitions a symbol names (or the one a place names, as `references` finds it) touch."""
    _check_limit(limit)
    snap, manifest = open_manifest(data_dir, snapshot_id)
    definitions, name = _pointed(snap, manifest, org, symbol, repo, path, line)
    asked = {"tool": "context", "symbol": symbol, "org": org, "repo": repo, "path": path, "line": line}
    asked |= {"name_only": name_only, "limit": limit}
    callers = _callers(snap, manifest, org, definitions, name, name_only, asked, cursor, limit)
    spans = {(d["repo"], d["path"], d["blob_id"]): [] for d in definitions}
    for d in definitions:
        spans[(d["repo"], d["path"], d["blob_id"])].append((d["line"], d["line_end"]))

    def inside(row, line_key="line") -> bool:
        return any(a <= row[line_key] <= b for a, b in spans.get((row["repo"], row["path"], row["blob_id"]), ()))

    in_files = partial(_in_files, org, _paths(definitions))
    handlers = {d["qualified_name"] for d in definitions}
    routes = [r for r in _rows(snap, "routes", in_files) if inside(r) or r["handler"] in handlers]
    env_keys = [e for e in _rows(snap, "env_keys", in_files) if inside(e)]
    route_keys = {f"{r['method']} {r['pattern']}" for r in routes}
    edges = [
        e
        for e in _rows(snap, "edges", lambda t: pc.equal(t["org"], org))
        if e["key"] in route_keys
        or any(
            (e[f"{side}_repo"], e[f"{side}_path"]) == (k[0], k[1]) and any(a <= e[f"{side}_line"] <= b for a, b in v)
            for side in ("from", "to")
            for k, v in spans.items()
        )
    ]
    return {
        "snapshot_id": manifest.snapshot_id,
        "symbol": (symbol or name).strip(),
        "org": org,
        **_listed(definitions),
        **callers,
        "routes": [_pick(r, "repo", "path", "line", "method", "pattern", "handler") for r in routes],
        "env_keys": [_pick(e, "repo", "path", "line", "key", "how") for e in env_keys],
        "edges": [_pick(e, *EDGE_FIELDS) for e in edges],
    }


def references(
    data_dir: Path,
    org: str = "default",
    symbol: str | None = None,
    repo: str | None = None,
    path: str | None = None,
    line: int | None = None,
    snapshot_id: str | None = None,
    name_only: bool = False,
    cursor: str | None = None,
    limit: int = DEFAULT_CALLERS,
) -> dict:
    """The callers of a symbol (by name, as expand_context takes it) or of what a position names: the definition
    that starts on `line` of `repo`:`path`, else what a call on that line resolves to, else the innermost
    definition around the line."""
    _check_limit(limit)
    snap, manifest = open_manifest(data_dir, snapshot_id)
    definitions, name = _pointed(snap, manifest, org, symbol, repo, path, line)
    asked = {"tool": "references", "symbol": symbol, "org": org, "repo": repo, "path": path, "line": line}
    asked |= {"name_only": name_only, "limit": limit}
    return {
        "snapshot_id": manifest.snapshot_id,
        **_listed(definitions),
        **_callers(snap, manifest, org, definitions, name, name_only, asked, cursor, limit),
    }


def _pointed(
    snap: Path, manifest: Manifest, org: str, symbol: str | None, repo: str | None, path: str | None, line: int | None
) -> tuple[list[dict], str]:
    """The definitions a symbol names (in `repo` when given), or the one a place names: the definition that starts
    on `line` of `repo`:`path`, else what a call on that line resolves to, else the innermost definition around it;
    and the name their callers call them by."""
    if symbol and (path or line):
        raise BadContextRequest("give a symbol, or repo, path and line, not both")
    if symbol:
        return _definitions(snap, manifest, org, symbol, repo), _name(symbol)
    if repo and path and line:
        found = _at(snap, manifest, org, repo, path, line)
        return [found], found["name"]
    raise BadContextRequest("give a symbol (like `Session.get`), or repo, path and line of a definition or a call")


def _listed(definitions: list[dict]) -> dict:
    """The first MAX_DEFINITIONS definitions (by repo, path and line) and how many there are."""
    ordered = sorted(definitions, key=lambda d: (d["repo"], d["path"], d["line"]))
    return {
        "definitions": [_pick(d, *DEFINITION_FIELDS) for d in ordered[:MAX_DEFINITIONS]],
        "definitions_total": len(definitions),
    }


def _check_limit(limit: int) -> None:
    """Checked before anything is looked up: a malformed request is said as such, not as an unknown symbol."""
    if not 1 <= limit <= MAX_CALLERS:
        raise BadContextRequest(f"limit {limit} is out of range: use 1 to {MAX_CALLERS}")


def _name(symbol: str) -> str:
    return symbol.strip().replace("::", ".").rsplit(".", 1)[-1]


def _definitions(path: Path, manifest: Manifest, org: str, symbol: str, repo: str | None) -> list[dict]:
    symbol = symbol.strip()
    if not symbol:
        raise BadContextRequest("the symbol is empty: give a name like `renew` or `Billing.renew`")

    def defined(t):
        m = pc.and_(pc.equal(t["org"], org), pc.or_(pc.equal(t["qualified_name"], symbol), pc.equal(t["name"], symbol)))
        return pc.and_(m, pc.equal(t["repo"], repo)) if repo else m

    definitions = _rows(path, "symbols", defined)
    if not definitions:
        _unknown_repo(manifest, org, repo)
        raise ContextError(
            f"no definition of {symbol!r} in org {org!r}"
            + (f" repo {repo!r}" if repo else "")
            + "; ⟦find_it⟧ and pass the symbol a hit shows"
        )
    return definitions


def _unknown_repo(manifest: Manifest, org: str, repo: str | None) -> None:
    known = {r.name for r in manifest.repos if r.org == org}
    if repo and repo not in known:
        raise ContextError(f"unknown repo {repo!r} in org {org!r}; indexed repos: {', '.join(sorted(known))}")


def _at(path: Path, manifest: Manifest, org: str, repo: str, file: str, line: int) -> dict:
    """The definition a position names (see references)."""
    _unknown_repo(manifest, org, repo)
    defs = read_graph(
        path, "symbols", filters=[("org", "=", org), ("repo", "=", repo), ("path", "=", file)]
    ).to_pylist()
    starting = [d for d in defs if d["line"] == line]
    if starting:
        return starting[0]
    mine = [("org", "=", org), ("repo", "=", repo), ("path", "=", file), ("line", "=", line)]
    for call in read_graph(path, "calls", filters=mine).to_pylist():
        if call.get("resolved_symbol"):  # resolved inside the call's org: its repo named there
            where = [("org", "=", org), ("repo", "=", call["resolved_repo"]), ("path", "=", call["resolved_path"])]
            target = _rows(
                path, "symbols", lambda t, c=call: pc.equal(t["qualified_name"], c["resolved_symbol"]), filters=where
            )
            if target:
                return target[0]
    around = [d for d in defs if d["line"] <= line <= d["line_end"]]
    if around:
        return max(around, key=lambda d: d["line"])  # the innermost
    raise ContextError(f"nothing is defined or called at {repo}:{file}:{line} in org {org!r}; ⟦outline⟧")


def _callers(
    path: Path,
    manifest: Manifest,
    org: str,
    definitions: list[dict],
    name: str,
    name_only: bool,
    asked: dict,
    cursor: str | None,
    limit: int,
) -> dict:
    """The calls resolved to any of the definitions, a page of them (repos with the most first), with totals by
    repo and by resolution level; the name-only matches counted, and listed (labelled) when asked."""
    offset = cursor_decode(cursor, asked["tool"], manifest.snapshot_id, asked) or 0
    if not isinstance(offset, int) or offset < 0:
        raise CursorError("that cursor's position is not one a page gives: ask again without a cursor")
    targets = {(d["repo"], d["path"], d["qualified_name"]) for d in definitions}
    in_org = partial(_in_org, org)
    if manifest.resolver_version:  # one read: calls resolved to a target's name, or named like it (DNF: or)
        symbols = sorted({t[2] for t in targets})
        calls = _rows(path, "calls", in_org, filters=[[("resolved_symbol", "in", symbols)], [("callee", "=", name)]])
        resolved = [c for c in calls if (c["resolved_repo"], c["resolved_path"], c["resolved_symbol"]) in targets]
        loose = [c for c in calls if c["callee"] == name and c["resolution"] == "name_only"]
    else:  # a snapshot written before calls were resolved: its calls match by name only
        resolved = []
        loose = [c | {"resolution": "name_only"} for c in _rows(path, "calls", in_org, filters=[("callee", "=", name)])]
        loose = [c | {"receiver": c.get("receiver", "")} for c in loose]
    rows = _ranked(resolved) + (_ranked(loose) if name_only else [])
    page = rows[offset : offset + limit]
    more = offset + limit < len(rows)
    return {
        "callers": [_pick(c, *CALLER_FIELDS) for c in page],
        "callers_total": len(resolved),
        "callers_by_repo": dict(Counter(c["repo"] for c in resolved).most_common()),
        "callers_by_resolution": dict(Counter(c["resolution"] for c in resolved).most_common()),
        "name_only_total": len(loose),
        "name_only_included": name_only,
        "next_cursor": cursor_encode(asked["tool"], manifest.snapshot_id, asked, offset + limit) if more else None,
    }


def _ranked(calls: list[dict]) -> list[dict]:
    """Calls grouped by repo, the repos with the most first, then by path and line."""
    per_repo = Counter(c["repo"] for c in calls)
    return sorted(calls, key=lambda c: (-per_repo[c["repo"]], c["repo"], c["path"], c["line"]))


def _in_org(org: str, table: pa.Table) -> pa.ChunkedArray:
    return pc.equal(table["org"], org)


def _in_files(org: str, paths: pa.Array, table: pa.Table) -> pa.ChunkedArray:
    """The rows of a fact table in one org whose path is one of `paths`."""
    return pc.and_(pc.equal(table["org"], org), pc.is_in(table["path"], value_set=paths))


def _paths(rows: list[dict]) -> pa.Array:
    return pa.array(sorted({r["path"] for r in rows}), type=pa.string())


def _pick(row: dict, *keys: str) -> dict:
    return {k: row[k] for k in keys}
