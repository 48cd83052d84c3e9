"""The OpenAPI document of the native HTTP API (served at /openapi.json)."""

from __future__ import annotations

ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        }
    },
}
STRINGS = {"type": "array", "items": {"type": "string"}}
CURSOR = {"type": "string", "description": "next_cursor of the previous page; the other fields as they were"}


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


STALE = {
    "description": "The cursor's snapshot is no longer served: ask again without a cursor",
    "content": {"application/json": {"schema": ERROR}},
}


def _op(summary: str, body: dict | None = None, params: list[str] | None = None, extra: dict | None = None) -> dict:
    op = {
        "summary": summary,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
            "400": _error("Bad request: an unknown field, a wrong type or a bad value, named in the message"),
            "401": _error("Token missing or invalid"),
            "404": _error("Not found"),
            "405": _error("Method not allowed"),
            "413": _error("Request body over 1 MiB (counted as it arrives, chunked or not)"),
            **(extra or {}),
        },
    }
    if body:
        # additionalProperties: false, as the server refuses unknown fields ("did you mean ...?")
        op["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"type": "object", "properties": body, "additionalProperties": False}}
            },
        }
    if params:
        op["parameters"] = [{"name": p, "in": "query", "schema": {"type": "string"}} for p in params]
    return op


def _search() -> dict:
    """POST /v1/search: search_code's options over HTTP."""
    return _op(
        "Hybrid search",
        {
            "query": {"type": "string"},
            "repos": STRINGS,
            "lang": STRINGS,
            "paths": STRINGS,
            "ignore": STRINGS,
            "kind": {"type": "string"},
            "ref": {"type": "string"},
            "session_id": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 200},
            "group_by": {"enum": ["chunk", "file"], "default": "chunk"},
            "min_score": {"type": "number", "minimum": 0, "maximum": 1},
            "min_score_diff": {"type": "number", "minimum": 0, "maximum": 1},
            "mode": {"enum": ["hybrid", "vector", "bm25"], "default": "hybrid"},
            "format": {"enum": ["json", "markdown"], "default": "json"},
            "cursor": CURSOR,
        },
        extra={
            "409": STALE,
            "200": {
                "description": "Hits (or files with group_by 'file'); markdown as search_code renders it",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    "text/markdown": {"schema": {"type": "string"}},
                },
            },
        },
    )


def _navigation() -> dict:
    """The routes that browse a repo and follow its calls: list_files, outline, expand_context, find_references."""
    return {
        "/v1/files": {
            "get": _op(
                "A repo's files at a ref in path order, a page at a time",
                params=["repo", "path_glob", "ref", "cursor", "limit"],
            )
        },
        "/v1/outline": {"get": _op("A file's definitions with lines and signatures", params=["repo", "path", "ref"])},
        "/v1/context": {
            "get": _op(
                "Definitions, callers, routes, env keys and edges of a symbol",
                params=["symbol", "repo", "name_only", "cursor", "limit"],
                extra={"409": STALE},
            )
        },
        "/v1/references": {
            "get": _op(
                "Resolved callers of a symbol, or of the definition or call at repo, path and line",
                params=["symbol", "repo", "path", "line", "name_only", "cursor", "limit"],
                extra={"409": STALE},
            )
        },
    }


def _history() -> dict:
    """The routes that read history: search_commits, log, blame, diff."""
    return {
        "/v1/commits": {
            "post": _op(
                "Commits by message, changed paths and hunks (BM25), or the newest; with filters",
                {
                    "query": {"type": "string"},
                    "repos": STRINGS,
                    "paths": STRINGS,
                    "author": {"type": "string"},
                    "since": {"type": "string", "format": "date"},
                    "until": {"type": "string", "format": "date"},
                    "ref": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 200},
                    "cursor": CURSOR,
                },
                extra={"409": STALE},
            )
        },
        "/v1/log": {
            "get": _op(
                "The commits that touched a path, newest first, following renames",
                params=["repo", "path", "ref", "limit", "cursor"],
                extra={"409": STALE},
            )
        },
        "/v1/blame": {
            "get": _op("Each line's last commit, author and date", params=["repo", "path", "ref", "start", "end"])
        },
        "/v1/diff": {
            "get": _op(
                "The change between two refs or commits, file by file, capped and paged",
                params=["repo", "base", "head", "path", "limit", "cursor"],
            )
        },
    }


def document() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "blobdex",
            "version": "1",
            "description": "Search, route and read code across many git repositories.",
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/v1/search": {"post": _search()},
            "/v1/chunks": {"get": _op("Full chunks of search hits by id", params=["ids"])},
            "/v1/grep": {
                "post": _op(
                    "RE2 or literal search over indexed text",
                    {
                        "pattern": {"type": "string"},
                        "repos": STRINGS,
                        "paths": STRINGS,
                        "ref": {"type": "string"},
                        "limit": {"type": "integer"},
                        "literal": {"type": "boolean"},
                        "ignore_case": {"type": "boolean"},
                        "cursor": CURSOR,
                    },
                    extra={"409": STALE},
                )
            },
            "/v1/file": {
                "get": _op(
                    "A file at any ref or commit",
                    params=["repo", "path", "ref", "start", "end"],
                    extra={
                        "403": _error("A credential file (by its name): never served"),
                        "413": _error("The file is over get_file's 25 MiB cap"),
                    },
                )
            },
            "/v1/route": {
                "post": _op("Which repos own a task", {"task": {"type": "string"}, "limit": {"type": "integer"}})
            },
            **_navigation(),
            **_history(),
            "/v1/sessions/{session_id}/sync": {
                "post": _op(
                    "Add a session's uncommitted edits",
                    {
                        "repo": {"type": "string"},
                        "files": {"type": "object", "additionalProperties": {"type": "string"}},
                        "deleted": STRINGS,
                    },
                )
            },
            "/v1/sessions/{session_id}": {"get": _op("A session's overlay"), "delete": _op("End a session")},
            "/v1/repos": {"get": _op("Indexed repos")},
            "/v1/status": {"get": _op("Served snapshot, model and per-repo freshness")},
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "OK"}}}},
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics: requests, latencies, MCP tools, the served snapshot",
                    "responses": {"200": {"description": "The text exposition format", "content": {"text/plain": {}}}},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "A snapshot is being served",
                    "responses": {"200": {"description": "Ready"}, "503": {"description": "No snapshot"}},
                }
            },
        },
        "security": [{"bearer": []}, {}],
    }
