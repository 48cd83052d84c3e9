"""The Codebase Index Protocol (tests/contracts/codebase-index-protocol.md) under /codebase-index.

A client syncs file hashes, pushes the chunks of changed files, and searches: here it searches the
snapshot and its own pushed chunks together, its pushed or removed paths shadowing the committed
ones inside the query. Pushed chunks live per (org, user) in the pushed-chunk store. Who the user is,
and the GitHub sign-in, is cip_auth's job.
"""

from __future__ import annotations

import hashlib

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from query.overlays.pushed import PushedChunk
from query.search import MAX_LIMIT, Overlay, SearchRequest, search, search_overlay
from query.surfaces import SurfaceError, endpoint, offload, read_body, route_errors
from query.surfaces import cip_auth
from query.surfaces.cip_auth import AuthSettings

SNIPPET_LINES = 15
MAX_CHUNKS = 1000
MAX_LINE = 10_000_000


def shape(request: Request, status: int, message: str, code: str | None) -> JSONResponse:
    """The contract's error body: {"message"}."""
    return JSONResponse({"message": message}, status_code=status)


def _space(user: str) -> str:
    return f"cip:{user}"


def _committed(service, org: str, repo: str) -> dict[str, set[str]]:
    """path -> sha256 of the committed versions blobdex indexed for this repo (every ref)."""
    import pyarrow.compute as pc

    from indexer.snapshot import read_graph

    reader = service.reader()
    files = read_graph(reader.path, "files", columns=["org", "repo", "path", "sha256"])
    files = files.filter(pc.and_(pc.equal(files["org"], org), pc.equal(files["repo"], repo)))
    out: dict[str, set[str]] = {}
    for path, digest in zip(files.column("path").to_pylist(), files.column("sha256").to_pylist()):
        out.setdefault(path, set()).add(digest)
    return out


def _str(d: dict, key: str, where: str) -> str:
    if not isinstance(d.get(key), str) or not d[key]:
        raise SurfaceError(400, f"{where}.{key} must be a non-empty string")
    return d[key]


def _files(r: dict, n: int) -> list | None:
    files = r.get("files")
    if files is not None and (
        not isinstance(files, list)
        or not all(
            isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("hash"), str) for f in files
        )
    ):
        raise SurfaceError(400, f"repos[{n}].files must be an array of {{path, hash}}")
    return files


@endpoint(shape)
async def sync(request: Request):
    sp, service, org = _space(cip_auth.user(request)), request.app.state.service, request.app.state.settings.org
    d = await read_body(request)
    repos = d.get("repos")
    if not isinstance(repos, list):
        raise SurfaceError(400, "repos must be an array")
    store, changed, removed = service.pushed, [], []
    for n, r in enumerate(repos):
        if not isinstance(r, dict):
            raise SurfaceError(400, f"repos[{n}] must be an object")
        name, root = _str(r, "name", f"repos[{n}]"), _str(r, "rootHash", f"repos[{n}]")
        files = _files(r, n)
        if store.get_state(org, sp, name, "root") == root:
            continue  # unchanged since the last complete sync: the cheap path
        have = _committed(service, org, name)
        pushed = store.paths(org, sp, name)
        if files is None:
            todo = sorted(set(have) | pushed)
            listed = set(todo)
        else:
            listed = {f["path"] for f in files}
            todo = []
            for f in files:
                indexed = store.get_state(org, sp, name, f"file:{f['path']}")
                if f["hash"] not in have.get(f["path"], set()) and f["hash"] != indexed:
                    todo.append(f["path"])
                    store.set_state(org, sp, name, f"pending:{f['path']}", f["hash"])
        gone = sorted((pushed | set(have)) - listed)
        store.delete_paths(org, sp, name, gone)
        for path in gone:
            store.set_state(org, sp, name, f"shadow:{path}", "1")
        changed += [{"repo": name, "path": p} for p in todo]
        removed += [{"repo": name, "path": p} for p in gone]
        if not todo:
            store.set_state(org, sp, name, "root", root)
    return JSONResponse({"changed": changed, "removed": removed})


def _pushed_chunk(c, n: int) -> PushedChunk:
    if not isinstance(c, dict):
        raise SurfaceError(400, f"chunks[{n}] must be an object")
    repo, path = _str(c, "repo", f"chunks[{n}]"), _str(c, "path", f"chunks[{n}]")
    content, symbol = c.get("content"), c.get("symbol")
    if not isinstance(content, str) or not isinstance(symbol, str) or not isinstance(c.get("lang"), str):
        raise SurfaceError(400, f"chunks[{n}] needs string symbol, lang and content")
    if path.startswith("/") or ".." in path.split("/"):
        raise SurfaceError(400, f"chunks[{n}].path must be repo-relative")
    start, end = c.get("lineStart", 1), c.get("lineEnd", c.get("lineStart", 1) + content.count("\n"))
    if not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_LINE for x in (start, end)):
        raise SurfaceError(400, f"chunks[{n}].lineStart/lineEnd must be integers from 1 to {MAX_LINE}")
    return PushedChunk(
        repo=repo,
        chunk_id=f"{path}#{symbol}",
        chunk_hash="sha256:" + hashlib.sha256(content.encode()).hexdigest(),
        path=path,
        lang=c["lang"],
        symbol=symbol,
        line_start=start,
        line_end=max(end, start),
        content=content,
    )


@endpoint(shape)
async def index(request: Request):
    sp, service, org = _space(cip_auth.user(request)), request.app.state.service, request.app.state.settings.org
    d = await read_body(request)
    raw, remove = d.get("chunks"), d.get("remove", [])
    if not isinstance(raw, list) or not isinstance(remove, list):
        raise SurfaceError(400, "chunks (and remove) must be arrays")
    if len(raw) > MAX_CHUNKS:
        raise SurfaceError(413, f"{len(raw)} chunks in one request; send at most {MAX_CHUNKS}")
    chunks = [_pushed_chunk(c, n) for n, c in enumerate(raw)]
    store = service.pushed
    for n, r in enumerate(remove):
        if not isinstance(r, dict) or not isinstance(r.get("repo"), str) or not isinstance(r.get("path"), str):
            raise SurfaceError(400, f"remove[{n}] must be {{repo, path}}")
        store.delete_paths(org, sp, r["repo"], [r["path"]])
        store.set_state(org, sp, r["repo"], f"shadow:{r['path']}", "1")
    store.replace_paths(org, sp, chunks)  # upsert by (repo, path, symbol): a re-sent file replaces its chunks
    counts = await offload(store.upsert, org, sp, chunks, service.embedder)
    for repo, path in {(c.repo, c.path) for c in chunks}:
        pending = store.get_state(org, sp, repo, f"pending:{path}")
        if pending:
            store.set_state(org, sp, repo, f"file:{path}", pending)
    return JSONResponse({"indexed": counts["indexed"] + counts["skipped"]})


@endpoint(shape)
async def do_search(request: Request):
    sp, service, org = _space(cip_auth.user(request)), request.app.state.service, request.app.state.settings.org
    d = await read_body(request)
    query = d.get("query")
    if not isinstance(query, str):
        raise SurfaceError(400, "query must be a string")
    repo, lang, limit = d.get("repo"), d.get("lang"), d.get("limit", 10)
    if repo is not None and not isinstance(repo, str) or lang is not None and not isinstance(lang, str):
        raise SurfaceError(400, "repo and lang must be strings")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise SurfaceError(400, f"limit must be an integer from 1 to {MAX_LIMIT}")
    if not query.strip():  # the contract's schema allows "": nothing asked, nothing found
        return JSONResponse({"results": []})
    chunks, vectors, _ = service.pushed.overlay(org, sp, (repo,) if repo else ())
    shadowed = {(c.repo, c.path) for c in chunks}
    shadowed |= {(r, k[len("shadow:") :]) for r, k in service.pushed.keys(org, sp, "shadow:")}
    reader = service.reader()
    known = {r.name for r in reader.manifest.repos if r.org == org}
    req = SearchRequest(query=query, org=org, repos=(repo,) if repo else (), langs=(lang,) if lang else (), limit=limit)
    alone = bool(repo and repo not in known)  # pushed chunks alone: the configured model's vectors, as stored

    def find() -> list:  # in a worker thread: loading a model and embedding take time the event loop has not
        embedder = service.embedder if alone else service.embedder_for(reader)
        in_space = vectors if alone else service.in_tier(embedder, chunks, vectors)  # beside a static tier
        overlay = Overlay(session_id=sp, shadowed=frozenset(shadowed), chunks=chunks, vectors=in_space)
        return (
            [h for h, _ in search_overlay(embedder, req, overlay)] if alone else search(reader, embedder, req, overlay)
        )

    hits = await offload(find)
    results = []
    for h in hits:
        text = h.text if h.uncommitted else reader.row(h.row)["text"]
        results.append(
            {
                "repo": h.repo,
                "path": h.path,
                "symbol": h.symbol,
                "lang": h.lang,
                "snippet": "\n".join(text.split("\n")[:SNIPPET_LINES]),
                "score": round(h.similarity, 4),
                "lineStart": h.line_start,
                "lineEnd": h.line_end,
            }
        )
    return JSONResponse({"results": results})


def app(service, settings: AuthSettings) -> Starlette:
    """The protocol's routes over `service`; `settings` say whose tokens are good and how GitHub sign-in runs."""
    contract = Starlette(
        routes=[
            Route("/sync", sync, methods=["POST"]),
            Route("/index", index, methods=["POST"]),
            Route("/search", do_search, methods=["POST"]),
            Route("/auth/github/start", endpoint(shape)(cip_auth.start)),
            Route("/auth/github/callback", endpoint(shape)(cip_auth.callback), name="github_callback"),
            Route("/auth/github/refresh", endpoint(shape)(cip_auth.refresh), methods=["POST"]),
        ],
        exception_handlers=route_errors(shape),
    )
    contract.state.service, contract.state.settings = service, settings
    return contract
