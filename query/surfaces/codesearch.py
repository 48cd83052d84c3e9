"""The codebase-semantic-search HTTP contract (tests/contracts/codebase-semantic-search.md), served from
the same index so its clients work unchanged: POST /search, GET /clip/:id, GET|POST /clips,
POST /read, GET /health, GET /stats.

The contract describes one codebase; here a `filePath` is `<repo>/<path>` inside the request's org,
and `module` filters by repo. `score` is the cosine similarity (0..1) the contract's thresholds
are written for; hits keep blobdex's hybrid order. The search and its threshold are the query facade's
(Service.search_top): this module reads the contract's fields and renders its answer.
"""

from __future__ import annotations

import difflib
import re

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from indexer.errors import BlobdexError
from indexer.fields import MAX_INT, Fields
from query.clips import ClipStore
from query.search import SearchRequest
from query.service import TopHits
from query.surfaces import SurfaceError, endpoint, mount_docs, offload, read_body, render, route_errors
from query.surfaces.guard import current_org

TOP_K_MAX = 100
DEFAULT_MIN_SCORE_DIFF = 0.1
MAX_IGNORE = 20
MAX_IGNORE_CHARS = 200
MAX_IDS = 500
MAX_READ_LINES = 500
CLIP_STORE_SIZE = 10_000  # this contract's clips remembered, the oldest forgotten first
FIELDS = (
    "query",
    "top_k",
    "module",
    "language",
    "chunk_type",
    "min_score",
    "min_score_diff",
    "include",
    "ignore",
    "format",
)
INCLUDE = ("chunkType", "module", "language")
READ_FIELDS = ("filePath", "startLine", "endLine")
GUESSES = {
    "limit": "top_k",
    "k": "top_k",
    "n": "top_k",
    "lang": "language",
    "kind": "chunk_type",
    "type": "chunk_type",
    "repo": "module",
    "exclude": "ignore",
    "threshold": "min_score",
}


def shape(request: Request, status: int, message: str, code: str | None) -> JSONResponse:
    """The contract's error body: {"success": false, "error": message}."""
    return JSONResponse({"success": False, "error": message}, status_code=status)


def ok(data: dict) -> JSONResponse:
    return JSONResponse({"success": True, "data": data})


def ignore_regex(patterns) -> str:
    """The contract's ignore patterns as one regex over repo-relative paths: `docs/` a folder, `docs` a
    file or folder, `*` and `**` any run of characters (`/` included), everything else literal."""
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise SurfaceError(400, "ignore must be an array of path patterns")
    if len(patterns) > MAX_IGNORE or any(not p or len(p) > MAX_IGNORE_CHARS for p in patterns):
        raise SurfaceError(400, f"ignore takes at most {MAX_IGNORE} patterns of 1 to {MAX_IGNORE_CHARS} characters")
    parts = []
    for p in patterns:
        p = p.lstrip("/")
        if "*" in p:
            parts.append("^" + ".*".join(re.escape(x) for x in re.split(r"\*+", p)) + "$")
        elif p.endswith("/"):
            parts.append("^" + re.escape(p))
        else:
            parts.append("^" + re.escape(p) + "(/|$)")
    return "|".join(parts)


def parse_search(body: dict) -> dict:
    unknown = [k for k in body if k not in FIELDS]
    if unknown:
        name = unknown[0]
        guess = GUESSES.get(name) or next(iter(difflib.get_close_matches(name, FIELDS, 1)), None)
        hint = f' (did you mean "{guess}"?)' if guess else ""
        raise SurfaceError(400, f'unknown field: "{name}"{hint}; accepted fields: {", ".join(FIELDS)}')
    f = Fields(body)
    query = f.text("query", required=True, nonempty=True)
    top_k = f.integer("top_k", TOP_K_MAX, low=1, high=TOP_K_MAX)
    # The contract words its thresholds' range its own way; the one-or-the-other rule is the Service's.
    min_score = f.number("min_score", 0, 1, must="a finite number in [0, 1]")
    min_score_diff = f.number("min_score_diff", 0, 1, must="a finite number in [0, 1]")
    include = f.array("include", must=f"an array of: {', '.join(INCLUDE)}")
    if any(x not in INCLUDE for x in include):
        f.fail("include", f"an array of: {', '.join(INCLUDE)}", include)
    fmt = f.choice("format", ("markdown", "json"), must='"markdown" or "json"')
    module, language, chunk_type = f.text("module"), f.text("language"), f.text("chunk_type")
    ignore = list(f.strs("ignore", must="an array of path patterns"))
    return {
        "query": query,
        "top_k": top_k,
        "module": module,
        "language": language,
        "chunk_type": chunk_type,
        "include": include,
        "format": fmt,
        "ignore": ignore,
        "ignore_re": ignore_regex(ignore) if ignore else None,
        "min_score": min_score,
        # The contract's default threshold, where the request names neither.
        "min_score_diff": DEFAULT_MIN_SCORE_DIFF if min_score is None and min_score_diff is None else min_score_diff,
    }


def _split_path(file_path) -> tuple[str, str]:
    if not isinstance(file_path, str) or not file_path:
        raise SurfaceError(400, "filePath is required: <repo>/<path>")
    if file_path.startswith("/") or ".." in file_path.split("/") or "\\" in file_path:
        raise SurfaceError(403, f"filePath {file_path!r} escapes the workspace: give <repo>/<path>, relative")
    repo, _, path = file_path.partition("/")
    if not path:
        raise SurfaceError(404, f"filePath {file_path!r} names no file: give <repo>/<path>")
    return repo, path


def _read(service, org: str, file_path, start: int, end: int, ref: str | None = None) -> dict:
    repo, path = _split_path(file_path)
    f = service.get_file(org, repo, path, ref, start, end)  # its errors carry their status, as on /v1
    return {
        "filePath": file_path,
        "startLine": f.line_start,
        "endLine": f.line_end,
        "totalLines": f.total_lines,
        "content": f.content.decode("utf-8", "replace"),
    }


def _clip(request: Request, clip: int, org: str) -> dict:
    found = request.app.state.clips.get(clip, org)
    if found is None:
        raise SurfaceError(404, "id not found or expired. Re-run /search to get a fresh id.")
    file_path, start, end, commit_id = found
    end = min(end, start + MAX_READ_LINES - 1)
    return {"id": clip, **_read(request.app.state.service, org, file_path, start, end, commit_id)}


def _echo(p: dict, found: TopHits) -> dict:
    """What the contract echoes about the threshold the search applied (none when there was nothing to apply)."""
    if found.floor is None:
        return {}
    if p["min_score"] is not None:
        return {"minScore": p["min_score"], "candidatesBeforeFilter": found.candidates}
    return {
        "minScoreDiff": p["min_score_diff"],
        "appliedThreshold": round(found.floor, 4),
        "maxScore": round(found.best, 4),
        "candidatesBeforeFilter": found.candidates,
    }


@endpoint(shape)
async def search(request: Request):
    service, clips, org = request.app.state.service, request.app.state.clips, current_org.get()
    p = parse_search(await read_body(request))
    req = SearchRequest(
        query=p["query"],
        org=org,
        repos=(p["module"],) if p["module"] else (),
        langs=(p["language"],) if p["language"] else (),
        kind=p["chunk_type"],
        limit=p["top_k"],
        ignore_re=p["ignore_re"],
    )
    found = await offload(service.search_top, req, p["min_score"], p["min_score_diff"])
    echo = _echo(p, found)
    results = []
    for h in found.hits:
        file_path = f"{h.repo}/{h.path}"
        item = {
            "id": clips.add(org, (file_path, h.line_start, h.line_end, h.commit_id or None)),
            "filePath": file_path,
            "symbolName": h.symbol or None,
            "score": round(h.similarity, 4),
            "startLine": h.line_start,
            "endLine": h.line_end,
            "content": h.text,
        }
        extra = {"chunkType": h.kind, "module": h.repo, "language": h.lang}
        item.update({k: extra[k] for k in p["include"]})
        results.append((item, h.lang))
    if p["ignore"]:
        echo.update({"ignored": p["ignore"], "ignoreSource": "request"})
    if p["include"]:
        echo["includedFields"] = p["include"]
    if p["format"] == "markdown":
        return Response(_markdown(p, results, echo, len(clips)), media_type="text/markdown; charset=utf-8")
    return ok(
        {
            "query": p["query"],
            "count": len(results),
            "topK": p["top_k"],
            "clipStoreSize": len(clips),
            "results": [r for r, _ in results],
            **echo,
        }
    )


@endpoint(shape)
async def clip_one(request: Request):
    try:
        clip = int(request.path_params["clip"])
    except ValueError:
        raise SurfaceError(400, "the id must be a number from /search") from None
    return ok(await offload(_clip, request, clip, current_org.get()))


def _id_like(x) -> bool:
    """An item of a batch of ids: a whole number (2.0 is one, as JSON counts), or text, which fails alone unless it
    is a number."""
    return isinstance(x, str) or (isinstance(x, int | float) and not isinstance(x, bool) and float(x).is_integer())


@endpoint(shape)
async def clips_batch(request: Request):
    if request.method == "POST":
        ids = (await read_body(request, ("ids",))).get("ids")
    else:
        ids = [x for v in request.query_params.getlist("ids") for x in v.split(",") if x.strip()]
    if not isinstance(ids, list) or not ids or not all(map(_id_like, ids)):
        raise SurfaceError(400, 'ids is required, numbers from /search: ?ids=1,2,3 or {"ids": [1, 2, 3]}')
    if len(ids) > MAX_IDS:
        raise SurfaceError(400, f"at most {MAX_IDS} ids per request")
    results = []
    for raw in ids:
        try:
            results.append({"success": True, **await offload(_clip, request, int(raw), current_org.get())})
        except (BlobdexError, ValueError, TypeError) as exc:  # per item: one unreadable clip fails only itself
            message = exc.said("http") if isinstance(exc, BlobdexError) else "the id must be a number from /search"
            results.append({"id": raw, "success": False, "error": message})
    done = sum(r["success"] for r in results)
    return ok(
        {
            "results": results,
            "requested": len(ids),
            "succeeded": done,
            "failed": len(ids) - done,
            "clipStoreSize": len(request.app.state.clips),
        }
    )


@endpoint(shape)
async def read_range(request: Request):
    body = await read_body(request, READ_FIELDS)
    f = Fields(body)
    start, end = f.integer("startLine", 1, low=1, high=MAX_INT), f.integer("endLine", low=1, high=MAX_INT)
    if end is not None and end < start:
        raise SurfaceError(400, "startLine and endLine must be integers with 1 <= startLine <= endLine")
    wanted_end = end if end is not None else start + MAX_READ_LINES - 1
    capped = min(wanted_end, start + MAX_READ_LINES - 1)
    service, org = request.app.state.service, current_org.get()
    data = await offload(_read, service, org, body.get("filePath"), start, capped)
    return ok({**data, "rangeRequested": {"startLine": start, "endLine": wanted_end}})


async def health(request: Request):
    return JSONResponse({"success": True, "data": {"status": "ok"}})


@endpoint(shape)
async def stats(request: Request):
    reader, org = request.app.state.service.reader(), current_org.get()
    repos = [r for r in reader.manifest.repos if r.org == org]
    return ok(
        {
            "chunks": sum(r.chunks for r in repos),
            "files": sum(r.files_indexed for r in repos),
            "repos": len(repos),
            "snapshotId": reader.snapshot_id,
            "model": reader.manifest.model_id,
            "clipStoreSize": len(request.app.state.clips),
        }
    )


def app(service) -> Starlette:
    """The contract's routes over `service`, each run in the org the Guard set; clip ids live as long as the app."""
    contract = Starlette(
        routes=[
            Route("/search", search, methods=["POST"]),
            Route("/clip/{clip}", clip_one),
            Route("/clips", clips_batch, methods=["GET", "POST"]),
            Route("/read", read_range, methods=["POST"]),
            Route("/health", health),
            Route("/stats", stats),
            mount_docs.route(mount_docs.codesearch),
        ],
        exception_handlers=route_errors(shape),
    )
    contract.state.service, contract.state.clips = service, ClipStore(CLIP_STORE_SIZE)
    return contract


def _markdown(p: dict, results: list, echo: dict, store: int) -> str:
    summary = [f"{len(results)} results", f"top_k: {p['top_k']}"]
    if "minScore" in echo:
        summary.append(f"min_score: {echo['minScore']}")
    if "minScoreDiff" in echo:
        summary.append(f"min_score_diff: {echo['minScoreDiff']}")
    if p["include"]:
        summary.append(f"included: {', '.join(p['include'])}")
    if p["ignore"]:
        summary.append(f"ignored: {', '.join(p['ignore'])} (request)")
    summary.append(f"clip store: {store}")
    out = [f'# Search: "{p["query"]}"', "", " • ".join(summary)]
    for item, lang in results:
        ticks = render.fence(item["content"])
        caption = [f"{item['filePath']}:{item['startLine']}-{item['endLine']}"]
        if item["symbolName"]:
            caption.append(item["symbolName"])
        caption.append(f"score: {item['score']:.4f}")
        caption += [f"{k}: {item[k]}" for k in ("chunkType", "module") if k in item]
        caption.append(f"id: {item['id']}")
        out += [
            "",
            "---",
            "",
            f"{ticks}{re.sub(r'[^a-z0-9+#-]', '', lang) or 'text'}",
            item["content"],
            ticks,
            "",
            " • ".join(caption),
        ]
    return "\n".join(out) + "\n"
