"""Code navigation in a file: the calls of one indexed blob that resolve to a definition (exactly, through an
import, or through the receiver's type), each with the place, signature and first doc line of what it calls, in
this repo or another repo of the org. A call that only shares a name (`name_only`) is no link: it may be wrong.
The page's file view turns each into a link (query/surfaces/web.py); the definitions of the file link to their
callers (the symbol page, find_references' answer)."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from indexer.snapshot import read_graph
from query.reader import SnapshotReader

LEVELS = ("exact", "import", "receiver")  # resolution levels that are links (indexer/calls/rules.py)


def calls_in(reader: SnapshotReader, org: str, repo: str, path: str, blob_id: str) -> dict[int, list[dict]]:
    """line -> the resolved calls on it: callee (the name as written), resolution, and the definition's repo, path,
    line, signature and doc; read once per blob and snapshot."""

    def load() -> dict[int, list[dict]]:
        calls = read_graph(reader.path, "calls", {(org, repo)}, filters=[("path", "=", path)])
        linked = pc.is_in(calls["resolution"], pa.array(LEVELS))
        calls = calls.filter(pc.and_(pc.equal(calls["blob_id"], blob_id), linked))
        rows = calls.select(["line", "callee", "resolution", "resolved_repo", "resolved_path", "resolved_symbol"])
        rows = [r for r in rows.to_pylist() if r["resolved_symbol"]]
        wanted = defaultdict(set)
        for r in rows:
            wanted[r["resolved_repo"]].add(r["resolved_path"])
        found = {}
        for target_repo, paths in wanted.items():
            symbols = read_graph(reader.path, "symbols", {(org, target_repo)}, filters=[("path", "in", sorted(paths))])
            for s in symbols.select(["path", "qualified_name", "line", "signature", "doc"]).to_pylist():
                found.setdefault((target_repo, s["path"], s["qualified_name"]), s)
        out: dict[int, list[dict]] = defaultdict(list)
        for r in rows:
            target = found.get((r["resolved_repo"], r["resolved_path"], r["resolved_symbol"]))
            if target is None:  # its definition is not in this snapshot's symbols (a superseded part): no link
                continue
            out[r["line"]].append(
                {
                    "callee": r["callee"],
                    "resolution": r["resolution"],
                    "repo": r["resolved_repo"],
                    "path": r["resolved_path"],
                    "symbol": r["resolved_symbol"],
                    "line": target["line"],
                    "signature": target["signature"],
                    "doc": target["doc"],
                }
            )
        return dict(out)

    return reader.cached(f"navigate:{org}/{repo}/{path}@{blob_id}", load)
