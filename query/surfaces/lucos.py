"""The Lucos indexing & retrieval API (tests/contracts/lucos-indexing-retrieval-api.md) under /api/v1.

Trusted-header mode: a gateway has authenticated the user and forwards X-Request-Id, X-Org-Id and
X-User-Id (X-Repo-Ids limits a team-only member). It is enabled only by `blobdex serve --lucos`,
because it believes those headers; with `--require-token` too, a request also needs a bearer token
whose org is the X-Org-Id it sends. Workspace repos (`lucos:ws:<16 hex>`) are registered on first
upload and live in the pushed-chunk store of the request's org, never in a snapshot, and are searched through the
query facade (Service.search_pushed).
"""

from __future__ import annotations

from http import HTTPStatus

import re
from collections.abc import Callable
from datetime import datetime, timezone

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from indexer.fields import Fields
from query.overlays.pushed import PushedChunk
from query.search import SearchRequest
from query.surfaces import SurfaceError, endpoint, mount_docs, offload, read_body, route_errors

SPACE = "lucos"
MAX_CHUNKS = 200
MAX_CONTENT_BYTES = 64 * 1024
MAX_TOP_K = 100
MAX_LINE = mount_docs.MAX_LINE
REPO_ID_RE = re.compile(mount_docs.LUCOS_REPO)
TRUSTED = mount_docs.TRUSTED  # the gateway's headers: who asks
HEADER_RE = re.compile(r"^[ -~]*$")
SOURCE_TYPES = {"repo_code": "code", "repo_doc": "doc"}
VERSION = "blobdex-lucos-1"
# The contract's error code for a status, where the raiser names none.
# The fields of each request body the contract shows; another is refused (400), not ignored.
UPLOAD_FIELDS = ("repo_id", "commit_sha", "workspace_id", "chunks", "deleted_chunk_ids")
SEARCH_FIELDS = ("repo_ids", "query", "top_k", "filters")
CODES = {400: "INVALID_PAYLOAD", 404: "NOT_FOUND", 500: "INTERNAL"}


def shape(request: Request, status: int, message: str, code: str | None) -> JSONResponse:
    """The contract's error body: {"code", "message", "request_id"}."""
    return JSONResponse(
        {
            "code": code or CODES.get(status) or HTTPStatus(status).name,  # METHOD_NOT_ALLOWED, UNAUTHORIZED
            "message": message,
            "request_id": request.headers.get("X-Request-Id"),
        },
        status_code=status,
    )


def _context(request: Request) -> dict:
    """Who asks, from the gateway's trusted headers; with tokens required (`token_org`), X-Org-Id must be the org
    the Guard took from the request's bearer token."""
    token_org: Callable[[], str] | None = request.app.state.token_org
    h = request.headers
    missing = [n for n in TRUSTED if not h.get(n)]
    if missing:
        raise SurfaceError(401, f"missing trusted headers: {', '.join(missing)}", "TRUSTED_CONTEXT_REQUIRED")
    garbled = [n for n in (*TRUSTED, "X-Repo-Ids") if h.get(n) is not None and not HEADER_RE.match(h[n])]
    if garbled:
        raise SurfaceError(400, f"{garbled[0]} must be printable ASCII (ids, comma-separated for X-Repo-Ids)")
    if token_org is not None and h["X-Org-Id"] != token_org():
        raise SurfaceError(
            403,
            f"X-Org-Id {h['X-Org-Id']!r} is not the org of the bearer token; send a token minted for that org",
            "ORG_FORBIDDEN",
        )
    repos = h.get("X-Repo-Ids")
    return {
        "request_id": h["X-Request-Id"],
        "org": h["X-Org-Id"],
        "user": h["X-User-Id"],
        "repo_ids": {r.strip() for r in repos.split(",") if r.strip()} if repos is not None else None,
    }


def _repo(ctx: dict, repo_id) -> str:
    if not isinstance(repo_id, str) or not REPO_ID_RE.match(repo_id):
        raise SurfaceError(400, f"repo_id {repo_id!r} is not lucos:ws:<16 hex characters>")
    if ctx["repo_ids"] is not None and repo_id not in ctx["repo_ids"]:
        raise SurfaceError(403, f"repo {repo_id} is not among this member's repos (X-Repo-Ids)", "REPO_FORBIDDEN")
    return repo_id


def _chunk(repo_id: str, raw, n: int) -> PushedChunk:
    if not isinstance(raw, dict):
        raise SurfaceError(400, f"chunks[{n}] is not an object")
    f = Fields(raw, where=f"chunks[{n}]")
    chunk_id, chunk_hash = f.text("chunk_id", required=True), f.text("chunk_hash", required=True)
    path, content = f.text("file_path", required=True), f.text("content", required=True)
    source_type = f.text("source_type", required=True)
    start, end = f.integer("start_line", required=True), f.integer("end_line", required=True)
    if source_type not in SOURCE_TYPES:
        f.fail("source_type", " or ".join(SOURCE_TYPES), source_type)
    if not 1 <= start <= end <= MAX_LINE:
        raise SurfaceError(400, f"chunks[{n}] needs 1 <= start_line <= end_line <= {MAX_LINE}")
    if path.startswith("/") or ".." in path.split("/") or "\x00" in path:
        f.fail("file_path", "repo-relative", path)
    return PushedChunk(
        repo=repo_id,
        chunk_id=chunk_id,
        chunk_hash=chunk_hash,
        path=path,
        lang=str(raw.get("language") or "text"),
        symbol=str(raw.get("symbol_name") or ""),
        line_start=start,
        line_end=end,
        content=content,
        source_type=source_type,
    )


@endpoint(shape)
async def upload(request: Request):
    ctx, service = _context(request), request.app.state.service
    d = await read_body(request, UPLOAD_FIELDS)
    f = Fields(d)
    repo_id = _repo(ctx, d.get("repo_id"))
    raw, deleted = f.array("chunks"), list(f.strs("deleted_chunk_ids"))
    commit_sha, _ = f.text("commit_sha"), f.text("workspace_id")  # text or absent, as the contract types them
    if len(raw) > MAX_CHUNKS:
        raise SurfaceError(400, f"{len(raw)} chunks in one request; at most {MAX_CHUNKS}")
    chunks = [_chunk(repo_id, c, n) for n, c in enumerate(raw)]
    oversized = [c for c in chunks if len(c.content.encode("utf-8")) > MAX_CONTENT_BYTES]
    store = service.pushed
    store.delete_ids(ctx["org"], SPACE, repo_id, deleted)
    counts = await offload(store.upsert, ctx["org"], SPACE, [c for c in chunks if c not in oversized], service.embedder)
    counts["failed"] += len(oversized)
    if commit_sha:
        store.set_state(ctx["org"], SPACE, repo_id, "commit_sha", commit_sha)
    return {"repo_id": repo_id, "counts": counts, "request_id": ctx["request_id"]}


@endpoint(shape)
async def status(request: Request):
    ctx, service = _context(request), request.app.state.service
    repo_id = _repo(ctx, request.query_params.get("repo_id"))
    s = service.pushed.stats(ctx["org"], SPACE, repo_id)
    last = datetime.fromtimestamp(s["updated"], timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if s["updated"] else None
    return {
        "repo_id": repo_id,
        "state": "ready" if s["chunks"] else "pending",
        "files_total": s["files"],
        "files_indexed": s["files"],
        "chunks_total": s["chunks"],
        "stale_count": 0,
        "last_indexed_at": last,
    }


@endpoint(shape)
async def retrieve(request: Request):
    ctx, service = _context(request), request.app.state.service
    d = await read_body(request, SEARCH_FIELDS)
    f = Fields(d)
    repo_ids = f.array("repo_ids", required=True, must="a non-empty array")
    if not repo_ids:
        f.fail("repo_ids", "a non-empty array", repo_ids)
    repos = tuple(_repo(ctx, r) for r in repo_ids)
    top_k = f.integer("top_k", 20, low=1, high=MAX_TOP_K)
    paths = Fields(f.mapping("filters"), where="filters").strs("paths", must="an array of globs")
    query = f.text("query", required=True, nonempty=True)
    req = SearchRequest(query=query, org=ctx["org"], repos=repos, paths=paths, limit=top_k)
    found = await offload(service.search_pushed, req, SPACE, beside_snapshot=False)
    results = []
    for hit in found.hits:
        m = found.meta[hit.chunk_index]  # pushed chunks are numbered in the order their metadata is listed
        results.append(
            {
                "file_path": hit.path,
                "start_line": hit.line_start,
                "end_line": hit.line_end,
                "score": round(hit.similarity, 4),
                "chunk_hash": m.get("chunk_hash"),
                "chunk_id": m.get("chunk_id"),
                "snippet": hit.snippet,
                "source_type": m.get("source_type"),
                "repo_id": hit.repo,
            }
        )
    return {"results": results, "request_id": ctx["request_id"]}


async def health(request: Request):
    return JSONResponse({"status": "ok"})


async def version(request: Request):
    return JSONResponse({"version": VERSION})


def app(service, token_org: Callable[[], str] | None = None) -> Starlette:
    """The contract's routes over `service`; with `token_org` (tokens required) the org the Guard took from the
    request's bearer token, which X-Org-Id must name."""
    contract = Starlette(
        routes=[
            Route("/indexing/chunks", upload, methods=["POST"]),
            Route("/indexing/status", status),
            Route("/retrieval/search", retrieve, methods=["POST"]),
            Route("/health/", health),
            Route("/version", version),
            mount_docs.route(mount_docs.lucos),
        ],
        exception_handlers=route_errors(shape),
    )
    contract.state.service, contract.state.token_org = service, token_org
    return contract
