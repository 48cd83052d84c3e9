"""The Codebase Index Protocol (tests/contracts/codebase-index-protocol.md) under /codebase-index.

A client syncs file hashes, pushes the chunks of changed files, and searches: here it searches the
snapshot and its own pushed chunks together, its pushed or removed paths shadowing the committed
ones inside the query (Service.search_pushed). Pushed chunks live per (org, user) in the pushed-chunk store. Who
the user is, and the GitHub sign-in, is cip_auth's job.
"""

from __future__ import annotations

import hashlib

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from indexer.fields import Fields
from query import MAX_LIMIT
from query.overlays.pushed import PushedChunk
from query.search import SearchRequest
from query.surfaces import SurfaceError, endpoint, mount_docs, offload, read_body, route_errors
from query.surfaces import cip_auth
from query.surfaces.cip_auth import AuthSettings

SNIPPET_LINES = 15
MAX_CHUNKS = 1000
MAX_LINE = mount_docs.MAX_LINE


def shape(request: Request, status: int, message: str, code: str | None) -> JSONResponse:
    """The contract's error body: {"message"}."""
    return JSONResponse({"message": message}, status_code=status)


def _space(user: str) -> str:
    return f"cip:{user}"


def _files(r: Fields) -> list | None:
    """A repo's listed files ({path, hash} each), or None when the client lists none (it sends every file)."""
    if r.data.get("files") is None:
        return None
    files = r.array("files", must="an array of {path, hash}")
    if not all(
        isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("hash"), str) for f in files
    ):
        r.fail("files", "an array of {path, hash}", files)
    return files


@endpoint(shape)
async def sync(request: Request):
    sp, service, org = _space(cip_auth.user(request)), request.app.state.service, request.app.state.settings.org
    repos = Fields(await read_body(request)).array("repos", required=True)
    store, changed, removed = service.pushed, [], []
    for n, r in enumerate(repos):
        if not isinstance(r, dict):
            raise SurfaceError(400, f"repos[{n}] must be an object")
        f = Fields(r, where=f"repos[{n}]")
        name, root = f.text("name", required=True, nonempty=True), f.text("rootHash", required=True, nonempty=True)
        files = _files(f)
        if store.get_state(org, sp, name, "root") == root:
            continue  # unchanged since the last complete sync: the cheap path
        have = service.committed_files(org, name)
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
    f = Fields(c, where=f"chunks[{n}]")
    repo, path = f.text("repo", required=True, nonempty=True), f.text("path", required=True, nonempty=True)
    symbol, lang = f.text("symbol", required=True), f.text("lang", required=True)
    content = f.text("content", required=True)
    if path.startswith("/") or ".." in path.split("/"):
        f.fail("path", "repo-relative", path)
    start = f.integer("lineStart", 1, low=1, high=MAX_LINE)
    end = f.integer("lineEnd", start + content.count("\n"), low=1, high=MAX_LINE)
    return PushedChunk(
        repo=repo,
        chunk_id=f"{path}#{symbol}",
        chunk_hash="sha256:" + hashlib.sha256(content.encode()).hexdigest(),
        path=path,
        lang=lang,
        symbol=symbol,
        line_start=start,
        line_end=max(end, start),
        content=content,
    )


@endpoint(shape)
async def index(request: Request):
    sp, service, org = _space(cip_auth.user(request)), request.app.state.service, request.app.state.settings.org
    f = Fields(await read_body(request))
    raw, remove = f.array("chunks", required=True), f.array("remove")
    if len(raw) > MAX_CHUNKS:
        raise SurfaceError(413, f"{len(raw)} chunks in one request; send at most {MAX_CHUNKS}")
    chunks = [_pushed_chunk(c, n) for n, c in enumerate(raw)]
    store = service.pushed
    for n, r in enumerate(remove):
        if not isinstance(r, dict):
            raise SurfaceError(400, f"remove[{n}] must be {{repo, path}}")
        gone = Fields(r, where=f"remove[{n}]")
        repo, path = gone.text("repo", required=True), gone.text("path", required=True)
        store.delete_paths(org, sp, repo, [path])
        store.set_state(org, sp, repo, f"shadow:{path}", "1")
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
    f = Fields(await read_body(request))
    query = f.text("query", required=True)
    repo, lang, limit = f.text("repo"), f.text("lang"), f.integer("limit", 10, low=1, high=MAX_LIMIT)
    if not query.strip():  # the contract's schema allows "": nothing asked, nothing found
        return JSONResponse({"results": []})
    req = SearchRequest(query=query, org=org, repos=(repo,) if repo else (), langs=(lang,) if lang else (), limit=limit)
    found = await offload(service.search_pushed, req, sp)
    results = []
    for h in found.hits:
        results.append(
            {
                "repo": h.repo,
                "path": h.path,
                "symbol": h.symbol,
                "lang": h.lang,
                "snippet": "\n".join(h.text.split("\n")[:SNIPPET_LINES]),
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
            mount_docs.route(mount_docs.codebase_index),
        ],
        exception_handlers=route_errors(shape),
    )
    contract.state.service, contract.state.settings = service, settings
    return contract
