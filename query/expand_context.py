"""What a symbol touches: its definitions, its callers in every repo, routes and env keys inside
it, and the coupling edges whose evidence lies in it (the data of the `expand_context` tool)."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from indexer.errors import BlobdexError
from indexer.snapshot import open_manifest, read_graph

MAX_CALLERS = 200
EDGE_FIELDS = ("kind", "key", "confidence", "from_repo", "from_path", "from_line", "from_evidence")
EDGE_FIELDS += ("to_repo", "to_path", "to_line", "to_evidence", "detail")


class ContextError(BlobdexError):
    """The symbol is unknown or the request is malformed; the message says what to try."""

    status = 404  # /v1 has always answered it as not found, for a malformed request too


def _rows(path: Path, table: str, mask_of) -> list[dict]:
    t = read_graph(path, table)
    return t.filter(mask_of(t)).to_pylist() if t.num_rows else []


def context(
    data_dir: Path, symbol: str, org: str = "default", repo: str | None = None, snapshot_id: str | None = None
) -> dict:
    symbol = symbol.strip()
    if not symbol:
        raise ContextError("the symbol is empty: give a name like `renew` or `Billing.renew`")
    path, manifest = open_manifest(data_dir, snapshot_id)
    name = symbol.replace("::", ".").rsplit(".", 1)[-1]

    def defined(t):
        m = pc.and_(pc.equal(t["org"], org), pc.or_(pc.equal(t["qualified_name"], symbol), pc.equal(t["name"], symbol)))
        return pc.and_(m, pc.equal(t["repo"], repo)) if repo else m

    definitions = _rows(path, "symbols", defined)
    if not definitions:
        known = {r.name for r in manifest.repos if r.org == org}
        if repo and repo not in known:
            raise ContextError(f"unknown repo {repo!r} in org {org!r}; indexed repos: {', '.join(sorted(known))}")
        raise ContextError(
            f"no definition of {symbol!r} in org {org!r}"
            + (f" repo {repo!r}" if repo else "")
            + "; search for it with 'blobdex search' and pass the symbol a hit shows"
        )
    calls = _rows(path, "calls", lambda t: pc.and_(pc.equal(t["org"], org), pc.equal(t["callee"], name)))
    spans = {(d["repo"], d["path"], d["blob_id"]): [] for d in definitions}
    for d in definitions:
        spans[(d["repo"], d["path"], d["blob_id"])].append((d["line"], d["line_end"]))

    def inside(row, line_key="line") -> bool:
        return any(a <= row[line_key] <= b for a, b in spans.get((row["repo"], row["path"], row["blob_id"]), ()))

    in_files = partial(_in_files, org, _paths(definitions))
    handlers = {d["qualified_name"] for d in definitions}
    routes = [r for r in _rows(path, "routes", in_files) if inside(r) or r["handler"] in handlers]
    env_keys = [e for e in _rows(path, "env_keys", in_files) if inside(e)]
    route_keys = {f"{r['method']} {r['pattern']}" for r in routes}
    edges = [
        e
        for e in _rows(path, "edges", lambda t: pc.equal(t["org"], org))
        if e["key"] in route_keys
        or any(
            (e[f"{side}_repo"], e[f"{side}_path"]) == (k[0], k[1]) and any(a <= e[f"{side}_line"] <= b for a, b in v)
            for side in ("from", "to")
            for k, v in spans.items()
        )
    ]
    by_repo = Counter(c["repo"] for c in calls)
    return {
        "snapshot_id": manifest.snapshot_id,
        "symbol": symbol,
        "org": org,
        "definitions": [
            _pick(d, "repo", "path", "line", "line_end", "qualified_name", "kind", "signature", "doc")
            for d in definitions
        ],
        "callers": [_pick(c, "repo", "path", "line", "caller", "callee_root") for c in calls[:MAX_CALLERS]],
        "callers_total": len(calls),
        "callers_by_repo": dict(by_repo.most_common()),
        "routes": [_pick(r, "repo", "path", "line", "method", "pattern", "handler") for r in routes],
        "env_keys": [_pick(e, "repo", "path", "line", "key", "how") for e in env_keys],
        "edges": [_pick(e, *EDGE_FIELDS) for e in edges],
    }


def _in_files(org: str, paths: pa.Array, table: pa.Table) -> pa.ChunkedArray:
    """The rows of a fact table in one org whose path is one of `paths`."""
    return pc.and_(pc.equal(table["org"], org), pc.is_in(table["path"], value_set=paths))


def _paths(rows: list[dict]) -> pa.Array:
    return pa.array(sorted({r["path"] for r in rows}), type=pa.string())


def _pick(row: dict, *keys: str) -> dict:
    return {k: row[k] for k in keys}
