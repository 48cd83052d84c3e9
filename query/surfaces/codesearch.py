"""The codebase-semantic-search HTTP contract (shared/seeds/codebase-semantic-search.md), served from
the same index so its clients work unchanged: POST /search, GET /clip/:id, GET|POST /clips,
POST /read, GET /health, GET /stats.

The contract describes one codebase; here a `filePath` is `<repo>/<path>` inside the request's org,
and `module` filters by repo. `score` is the cosine similarity (0..1) the contract's thresholds
are written for; hits keep blobdex's hybrid order.
"""

from __future__ import annotations

import difflib
import math
import re
import threading
from collections import OrderedDict

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from indexer.errors import BlobdexError
from query.surfaces import payload
from query.get_file import BadRange, CredentialFile, FileTooLarge, GetFileError
from query.search import SearchRequest
from query.search import search as hybrid_search

TOP_K_MAX = 100
DEFAULT_MIN_SCORE_DIFF = 0.1
MAX_IGNORE = 20
MAX_IGNORE_CHARS = 200
MAX_IDS = 500
MAX_READ_LINES = 500
CLIP_STORE_SIZE = 10_000
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


class ContractError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def fail(status: int, message: str) -> JSONResponse:
    return JSONResponse({"success": False, "error": message}, status_code=status)


def ok(data: dict) -> JSONResponse:
    return JSONResponse({"success": True, "data": data})


class ClipStore:
    """Short auto-increment ids for (org, filePath, startLine, endLine, commit_id), deduplicated, FIFO-evicted.

    The ids are one counter for every org; the org stored with each clip keeps another org's id from
    answering (or naming that org's repos)."""

    def __init__(self, size: int = CLIP_STORE_SIZE):
        self.size, self._lock = size, threading.Lock()
        self._by_id: OrderedDict[int, tuple] = OrderedDict()
        self._by_key: dict[tuple, int] = {}
        self._next = 1

    def add(self, key: tuple) -> int:
        with self._lock:
            if key in self._by_key:
                return self._by_key[key]
            clip, self._next = self._next, self._next + 1
            self._by_id[clip], self._by_key[key] = key, clip
            while len(self._by_id) > self.size:
                _, old = self._by_id.popitem(last=False)
                self._by_key.pop(old, None)
            return clip

    def get(self, clip: int) -> tuple | None:
        return self._by_id.get(clip)

    def __len__(self) -> int:
        return len(self._by_id)


def _number(value, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise ContractError(400, f"{name} must be a finite number in [0, 1], got {value!r}")
    return float(value)


def ignore_regex(patterns) -> str:
    """The contract's ignore patterns as one regex over repo-relative paths: `docs/` a folder, `docs` a
    file or folder, `*` and `**` any run of characters (`/` included), everything else literal."""
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ContractError(400, "ignore must be an array of path patterns")
    if len(patterns) > MAX_IGNORE or any(not p or len(p) > MAX_IGNORE_CHARS for p in patterns):
        raise ContractError(400, f"ignore takes at most {MAX_IGNORE} patterns of 1 to {MAX_IGNORE_CHARS} characters")
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
        raise ContractError(400, f'unknown field: "{name}"{hint}; accepted fields: {", ".join(FIELDS)}')
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ContractError(400, "query is required: a non-empty string")
    top_k = body.get("top_k", TOP_K_MAX)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= TOP_K_MAX:
        raise ContractError(400, f"top_k must be an integer from 1 to {TOP_K_MAX}")
    if "min_score" in body and "min_score_diff" in body:
        raise ContractError(400, "min_score and min_score_diff are mutually exclusive; pass one")
    include = body.get("include", [])
    if not isinstance(include, list) or any(x not in INCLUDE for x in include):
        raise ContractError(400, f"include must be an array of: {', '.join(INCLUDE)}")
    fmt = body.get("format", "markdown")
    if fmt not in ("markdown", "json"):
        raise ContractError(400, 'format must be "markdown" or "json"')
    for name in ("module", "language", "chunk_type"):
        if name in body and not isinstance(body[name], str):
            raise ContractError(400, f"{name} must be a string")
    return {
        "query": query,
        "top_k": top_k,
        "module": body.get("module"),
        "language": body.get("language"),
        "chunk_type": body.get("chunk_type"),
        "include": include,
        "format": fmt,
        "ignore": list(body["ignore"]) if "ignore" in body else [],
        "ignore_re": ignore_regex(body["ignore"]) if body.get("ignore") else None,
        "min_score": _number(body["min_score"], "min_score") if "min_score" in body else None,
        "min_score_diff": (
            _number(body["min_score_diff"], "min_score_diff")
            if "min_score_diff" in body
            else None
            if "min_score" in body
            else DEFAULT_MIN_SCORE_DIFF
        ),
    }


def _split_path(file_path) -> tuple[str, str]:
    if not isinstance(file_path, str) or not file_path:
        raise ContractError(400, "filePath is required: <repo>/<path>")
    if file_path.startswith("/") or ".." in file_path.split("/") or "\\" in file_path:
        raise ContractError(403, f"filePath {file_path!r} escapes the workspace: give <repo>/<path>, relative")
    repo, _, path = file_path.partition("/")
    if not path:
        raise ContractError(404, f"filePath {file_path!r} names no file: give <repo>/<path>")
    return repo, path


async def _body(request: Request) -> dict:
    try:
        return payload.parse(await request.body())
    except payload.PayloadError as exc:
        raise ContractError(400, str(exc)) from None


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return fail(
        exc.status_code,
        f"{request.method} {request.url.path}: {'no such route' if exc.status_code == 404 else exc.detail}",
    )


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    return fail(500, "the server failed on this request; see its log")


def app(service, org) -> Starlette:
    """The contract's routes; `org()` names the org of the current request."""
    clips = ClipStore()

    def read(org_name: str, file_path: str, start: int, end: int, ref: str | None = None) -> dict:
        repo, path = _split_path(file_path)
        try:
            f = service.get_file(repo, path, ref, org_name, start, end)
        except (BadRange, CredentialFile, FileTooLarge) as exc:
            status = 400 if isinstance(exc, BadRange) else 403 if isinstance(exc, CredentialFile) else 413
            raise ContractError(status, str(exc)) from exc
        except GetFileError as exc:
            message = str(exc)
            raise ContractError(404 if "no file" in message or "unknown repo" in message else 400, message) from exc
        return {
            "filePath": file_path,
            "startLine": f.line_start,
            "endLine": f.line_end,
            "totalLines": f.total_lines,
            "content": f.content.decode("utf-8", "replace"),
        }

    def handle(fn):
        async def endpoint(request: Request):
            try:
                return await fn(request, org())
            except ContractError as exc:
                return fail(exc.status, str(exc))
            except BlobdexError as exc:
                return fail(400, str(exc))

        return endpoint

    async def search(request: Request, org_name: str):
        p = parse_search(await _body(request))
        req = SearchRequest(
            p["query"],
            org_name,
            (p["module"],) if p["module"] else (),
            (p["language"],) if p["language"] else (),
            (),
            (),
            p["chunk_type"],
            None,
            p["top_k"],
            ignore_re=p["ignore_re"],
        )
        reader = service.reader()  # one snapshot for the search and the rows its hits point at
        hits = await anyio.to_thread.run_sync(hybrid_search, reader, service.embedder, req)
        qvec = service.embedder.embed([p["query"]])[0]
        scored = [(h, float(reader.vectors[h.row] @ qvec)) for h in hits]
        before = len(scored)
        echo: dict = {}
        if p["min_score"] is not None:
            scored = [x for x in scored if x[1] >= p["min_score"]]
            echo = {"minScore": p["min_score"], "candidatesBeforeFilter": before}
        elif p["min_score_diff"] is not None and scored:
            best = max(s for _, s in scored)
            threshold = max(best - p["min_score_diff"], 0.0)
            scored = [x for x in scored if x[1] >= threshold]
            echo = {
                "minScoreDiff": p["min_score_diff"],
                "appliedThreshold": round(threshold, 4),
                "maxScore": round(best, 4),
                "candidatesBeforeFilter": before,
            }
        results = []
        for h, score in scored:
            file_path = f"{h.repo}/{h.path}"
            clip = clips.add((org_name, file_path, h.line_start, h.line_end, h.commit_id or None))
            item = {
                "id": clip,
                "filePath": file_path,
                "symbolName": h.symbol or None,
                "score": round(score, 4),
                "startLine": h.line_start,
                "endLine": h.line_end,
                "content": reader.row(h.row)["text"],
            }
            extra = {"chunkType": h.kind, "module": h.repo, "language": h.lang}
            item.update({k: extra[k] for k in p["include"]})
            results.append((item, h.lang))
        if p["ignore"]:
            echo.update({"ignored": p["ignore"], "ignoreSource": "request"})
        if p["include"]:
            echo["includedFields"] = p["include"]
        if p["format"] == "json":
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
        return Response(_markdown(p, results, echo, len(clips)), media_type="text/markdown; charset=utf-8")

    async def clip_one(request: Request, org_name: str):
        try:
            clip = int(request.path_params["clip"])
        except ValueError:
            raise ContractError(400, "the id must be a number from /search") from None
        return ok(await anyio.to_thread.run_sync(_clip, clip, org_name))

    def _clip(clip: int, org_name: str) -> dict:
        found = clips.get(clip)
        if found is None or found[0] != org_name:
            raise ContractError(404, "id not found or expired. Re-run /search to get a fresh id.")
        _, file_path, start, end, commit_id = found
        return {"id": clip, **read(org_name, file_path, start, min(end, start + MAX_READ_LINES - 1), commit_id)}

    async def clips_batch(request: Request, org_name: str):
        if request.method == "POST":
            ids = (await _body(request)).get("ids")
        else:
            ids = [x for v in request.query_params.getlist("ids") for x in v.split(",") if x.strip()]
        if not isinstance(ids, list) or not ids:
            raise ContractError(400, 'ids is required: ?ids=1,2,3 or {"ids": [1, 2, 3]}')
        if len(ids) > MAX_IDS:
            raise ContractError(400, f"at most {MAX_IDS} ids per request")
        results = []
        for raw in ids:
            try:
                results.append({"success": True, **await anyio.to_thread.run_sync(_clip, int(raw), org_name)})
            except (ContractError, ValueError, TypeError) as exc:
                message = str(exc) if isinstance(exc, ContractError) else "the id must be a number from /search"
                results.append({"id": raw, "success": False, "error": message})
        done = sum(r["success"] for r in results)
        return ok(
            {
                "results": results,
                "requested": len(ids),
                "succeeded": done,
                "failed": len(ids) - done,
                "clipStoreSize": len(clips),
            }
        )

    async def read_range(request: Request, org_name: str):
        body = await _body(request)
        start, end = body.get("startLine", 1), body.get("endLine")
        if not isinstance(start, int) or start < 1 or (end is not None and (not isinstance(end, int) or end < start)):
            raise ContractError(400, "startLine and endLine must be integers with 1 <= startLine <= endLine")
        wanted_end = end if end is not None else start + MAX_READ_LINES - 1
        capped = min(wanted_end, start + MAX_READ_LINES - 1)
        data = await anyio.to_thread.run_sync(read, org_name, body.get("filePath"), start, capped)
        return ok({**data, "rangeRequested": {"startLine": start, "endLine": wanted_end}})

    async def health(request: Request, org_name: str):
        return JSONResponse({"success": True, "data": {"status": "ok"}})

    async def stats(request: Request, org_name: str):
        reader = service.reader()
        repos = [r for r in reader.manifest.repos if r.org == org_name]
        return ok(
            {
                "chunks": sum(r.chunks for r in repos),
                "files": sum(r.files_indexed for r in repos),
                "repos": len(repos),
                "snapshotId": reader.snapshot_id,
                "model": reader.manifest.model_id,
                "clipStoreSize": len(clips),
            }
        )

    return Starlette(
        routes=[
            Route("/search", handle(search), methods=["POST"]),
            Route("/clip/{clip}", handle(clip_one)),
            Route("/clips", handle(clips_batch), methods=["GET", "POST"]),
            Route("/read", handle(read_range), methods=["POST"]),
            Route("/health", handle(health)),
            Route("/stats", handle(stats)),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal},
    )


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
        ticks = "```"
        while ticks in item["content"]:
            ticks += "`"
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
