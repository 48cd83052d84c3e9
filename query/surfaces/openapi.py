"""The OpenAPI document of the native HTTP API (served at /openjson, read by people at /docs). Every answer's
schema is generated from its model in query.surfaces.answers (the one declaration MCP's output schemas come from
too); a request's fields are the names its handler accepts (query.surfaces.api), typed here. A test walks the
server's routes and fails when one, or one of its fields, is missing from this document."""

from __future__ import annotations

from pydantic.json_schema import models_json_schema

from indexer.fields import MAX_INT
from query import MAX_LIMIT
from query.route_task import MAX_ROUTES
from query.overlays.sessions import SESSION_ID_RE
from query.surfaces import answers

REF = "#/components/schemas/{model}"
ERROR = {"$ref": "#/components/schemas/Error"}
ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}
TEXT, STRINGS = {"type": "string"}, {"type": "array", "items": {"type": "string"}}
WORDS = {"type": "string", "pattern": "\\S"}  # an empty or blank query, task or name is refused
FLAG = {"type": "boolean"}
# A repo-relative path as indexer.ignore.validate_path takes it: no empty, '.', '..' or '.git' part, no backslash or
# control character.
SAFE = r"(?![\s\S]*(^|/)(\.{1,2}|\.[gG][iI][tT])(/|$))"  # no '.', '..' or '.git' part anywhere
PARTS = r"[^/\\\x00-\x1f\x7f]+(/[^/\\\x00-\x1f\x7f]+)*"  # no empty part, backslash or control character
PATH = {"type": "string", "pattern": f"^{SAFE}/*{PARTS}/*$"}  # slashes around it are dropped
EXACT_PATH = {"type": "string", "pattern": f"^{SAFE}{PARTS}$"}  # a session's edited file, named as it is
GLOB = {"type": "string", "description": "gitignore syntax, e.g. src/**/*.py or tests/"}


def one_or_more(item: dict) -> dict:
    """A list of `item`, or one `item` alone (a body may send "repos": "api")."""
    return {"anyOf": [{"type": "array", "items": item}, item]}


LINE = {"type": "integer", "minimum": 1, "maximum": MAX_INT}
CURSOR = {"type": "string", "description": "next_cursor of the previous page; the other fields as they were"}


def limit(high: int) -> dict:
    return {"type": "integer", "minimum": 1, "maximum": high}


# Each operation's fields (a JSON body's, or the query string's: _PARAMS), and no others: query.surfaces.api refuses
# another, so that a typo is not ignored.
SEARCH_FIELDS = (
    "query",
    "repos",
    "lang",
    "paths",
    "ignore",
    "kind",
    "ref",
    "limit",
    "session_id",
    "group_by",
    "min_score",
    "min_score_diff",
    "mode",
    "format",
    "cursor",
)
GREP_FIELDS = ("pattern", "repos", "paths", "ref", "limit", "literal", "ignore_case", "cursor")
ROUTE_FIELDS = ("task", "limit")
SYNC_FIELDS = ("repo", "files", "deleted")
FILE_PARAMS, CHUNKS_PARAMS = ("repo", "path", "ref", "start", "end"), ("ids",)
REFERENCES_PARAMS = ("symbol", "repo", "path", "line", "name_only", "cursor", "limit")
CONTEXT_PARAMS = REFERENCES_PARAMS  # a symbol, or a place; and a page of callers
FILES_PARAMS, OUTLINE_PARAMS = ("repo", "path_glob", "ref", "cursor", "limit"), ("repo", "path", "ref")
COMMITS_FIELDS = ("query", "repos", "paths", "author", "since", "until", "ref", "limit", "cursor")
LOG_PARAMS, BLAME_PARAMS = ("repo", "path", "ref", "limit", "cursor"), ("repo", "path", "ref", "start", "end")
DIFF_PARAMS = ("repo", "base", "head", "path", "limit", "cursor")
# What a query string or body field holds, by name (each route lists the names it takes in query.surfaces.api).
FIELDS = {
    "query": WORDS,
    "task": WORDS,
    "pattern": {**WORDS, "description": "RE2 syntax (no backreferences or lookaround), or text with literal: true"},
    "symbol": WORDS,
    "repo": WORDS,
    "path": PATH,
    "path_glob": GLOB,
    "ref": {"type": "string", "description": "Branch, tag, full ref, commit id (abbreviated too) or main~1"},
    "base": WORDS,
    "head": WORDS,
    "author": TEXT,
    "since": {"type": "string", "format": "date"},
    "until": {"type": "string", "format": "date"},
    "repos": one_or_more(TEXT),
    "lang": one_or_more(TEXT),
    "paths": one_or_more(GLOB),
    "ignore": one_or_more(GLOB),
    "deleted": one_or_more(EXACT_PATH),
    "kind": {"enum": list(answers.Kind.__args__)},
    "session_id": {"type": "string", "pattern": SESSION_ID_RE.pattern},
    "start": LINE,
    "end": LINE,
    "line": LINE,
    "name_only": FLAG,
    "literal": FLAG,
    "ignore_case": FLAG,
    "group_by": {"enum": ["chunk", "file", ""], "default": "chunk", "description": "empty: chunk"},
    "mode": {"enum": ["hybrid", "vector", "bm25"], "default": "hybrid"},
    "format": {"enum": ["json", "markdown", ""], "default": "json", "description": "empty: json"},
    "min_score": {"type": "number", "minimum": 0, "maximum": 1},
    "min_score_diff": {"type": "number", "minimum": 0, "maximum": 1},
    "files": {"type": "object", "propertyNames": EXACT_PATH, "additionalProperties": {"type": "string"}},
    "ids": {
        "type": "string",
        "pattern": r"^(?=[\s\S]*[^,\s])[^,]*(,[^,]*){0,49}$",
        "description": "Hit ids, comma-separated: 1,2,3 (at most 50; one that is not an id is answered in `errors`)",
    },
    "cursor": CURSOR,
}
# Where a route's `limit` stops (the same bounds as the MCP tools').
LIMITS = {
    "/v1/search": MAX_LIMIT,
    "/v1/grep": 500,
    "/v1/route": MAX_ROUTES,
    "/v1/files": 1000,
    "/v1/context": 200,
    "/v1/references": 200,
    "/v1/commits": 200,
    "/v1/log": 200,
    "/v1/diff": 100,
}


def _param(schema: dict, required: bool) -> dict:
    """A query parameter's schema: an optional one sent empty (`ref=`) reads as absent (indexer.fields)."""
    return schema if required else {"anyOf": [schema, {"const": ""}]}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _given(field: str, value: str) -> dict:
    return {"properties": {field: {"const": value}}, "required": [field]}


def _set(*fields: str) -> dict:
    """All of `fields` sent, and not as null (null reads as absent)."""
    return {"required": list(fields), "properties": {f: {"not": {"type": "null"}} for f in fields}}


def _none_of(*fields: str) -> dict:
    return {"not": {"anyOf": [_set(f) for f in fields]}}


# What /v1/search refuses that its fields alone do not say: the thresholds are one or the other, and neither applies
# to BM25 alone (it has no similarity); a file ranking is one page of committed code (no cursor, no session).
SEARCH_RULES = [
    {"not": _set("min_score", "min_score_diff")},
    {"if": _given("mode", "bm25"), "then": _none_of("min_score", "min_score_diff")},
    {"if": _given("group_by", "file"), "then": _none_of("cursor", "session_id")},
]


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


COMMON_ERRORS = {
    "400": _error("Bad request: an unknown field, a wrong type or a bad value, named in the message"),
    "401": _error("Token missing or invalid (see WWW-Authenticate)"),
    "404": _error("Not found: the repo, ref, path or symbol, named in the message"),
    "405": _error("Method not allowed (the Allow header names the methods that work)"),
    "413": _error("Request body over 1 MiB (counted as it arrives, chunked or not)"),
    "503": _error("No snapshot served yet, or the work ran past its 60 s deadline"),
}
STALE = {"409": _error("The cursor's snapshot is no longer served: ask again without a cursor")}


# A field one route reads otherwise than FIELDS says: search_commits without words lists the newest commits.
ONE_ROUTE_FIELDS = {("/v1/commits", "query"): {"anyOf": [WORDS, {"const": ""}], "description": "empty: the newest"}}


def _field(route: str, name: str, known: dict) -> dict:
    if name == "limit":
        return limit(LIMITS[route])
    return ONE_ROUTE_FIELDS.get((route, name)) or known.get(name) or FIELDS[name]


def _op(
    known: dict,
    route: str,
    summary: str,
    answer: type | None,
    body: tuple[str, ...] = (),
    params: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
    extra: dict | None = None,
) -> dict:
    """One operation: its fields (a JSON body's or the query string's, typed by FIELDS), the answer's model, and the
    statuses it can answer with."""
    ok = {"description": "OK", "content": {"application/json": {"schema": {"$ref": REF.format(model=answer.__name__)}}}}
    op = {"summary": summary, "responses": {"200": ok, **COMMON_ERRORS, **(extra or {})}}
    if body:
        schema = {
            "type": "object",
            # null reads as absent (indexer.fields): an optional field may be sent as null
            "properties": {
                name: _field(route, name, known) if name in required else _nullable(_field(route, name, known))
                for name in body
            },
            "additionalProperties": False,  # the server refuses an unknown field ("did you mean ...?")
        }
        if required:
            schema["required"] = list(required)
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    if params:
        op["parameters"] = [
            {
                "name": n,
                "in": "query",
                "required": n in required,
                "schema": _param(_field(route, n, known), n in required),
            }
            for n in params
        ]
    return op


def _reads(known: dict) -> dict:
    """Search, files, symbols and routing."""
    search = _op(known, "/v1/search", "Hybrid search", answers.Search, SEARCH_FIELDS, required=("query",), extra=STALE)
    search["responses"]["200"]["content"]["text/markdown"] = {"schema": TEXT}  # with "format": "markdown"
    search["requestBody"]["content"]["application/json"]["schema"]["allOf"] = SEARCH_RULES
    return {
        "/v1/search": {"post": search},
        "/v1/chunks": {
            "get": _op(
                known,
                "",
                "Whole chunks of search hits by id",
                answers.Chunks,
                params=CHUNKS_PARAMS,
                required=("ids",),
            )
        },
        "/v1/grep": {
            "post": _op(
                known,
                "/v1/grep",
                "RE2 or literal search over the indexed text",
                answers.Grep,
                GREP_FIELDS,
                required=("pattern",),
                extra=STALE,
            )
        },
        "/v1/file": {
            "get": _op(
                known,
                "",
                "A file, or its lines, at any ref or commit",
                answers.File,
                params=FILE_PARAMS,
                required=("repo", "path"),
                extra={
                    "403": _error("A credential file (by its name): never served"),
                    "413": _error("The file is over 25 MiB"),
                },
            )
        },
        "/v1/files": {
            "get": _op(
                known,
                "/v1/files",
                "A repo's files at a ref in path order, a page at a time",
                answers.Files,
                params=FILES_PARAMS,
                required=("repo",),
                extra=STALE,
            )
        },
        "/v1/outline": {
            "get": _op(
                known,
                "",
                "A file's definitions with lines and signatures",
                answers.Outline,
                params=OUTLINE_PARAMS,
                required=("repo", "path"),
            )
        },
        "/v1/route": {
            "post": _op(known, "/v1/route", "Which repos own a task", answers.Routes, ROUTE_FIELDS, required=("task",))
        },
        "/v1/context": {
            "get": _op(
                known,
                "/v1/context",
                "Definitions, callers, routes, env keys and edges of a symbol, or of what repo, path and line name",
                answers.Context,
                params=CONTEXT_PARAMS,
                extra=STALE,
            )
        },
        "/v1/references": {
            "get": _op(
                known,
                "/v1/references",
                "Resolved callers of a symbol, or of the definition or call at repo, path and line",
                answers.References,
                params=REFERENCES_PARAMS,
                extra=STALE,
            )
        },
    }


def _history_and_more(known: dict) -> dict:
    """History, sessions, what is indexed, and the probes."""
    session = {"name": "session_id", "in": "path", "required": True, "schema": FIELDS["session_id"]}
    sync = _op(known, "", "Add a session's uncommitted edits", answers.Synced, SYNC_FIELDS, required=("repo",))
    sync["parameters"] = [session]
    status, end = _op(known, "", "A session's overlay", answers.Session), _op(known, "", "End a session", answers.Ended)
    status["parameters"] = end["parameters"] = [session]
    return {
        "/v1/commits": {
            "post": _op(
                known,
                "/v1/commits",
                "Commits by message and changed paths, or the newest; with filters",
                answers.Commits,
                COMMITS_FIELDS,
                extra=STALE,
            )
        },
        "/v1/log": {
            "get": _op(
                known,
                "/v1/log",
                "The commits that touched a path, newest first, following renames",
                answers.Commits,
                params=LOG_PARAMS,
                required=("repo",),
                extra=STALE,
            )
        },
        "/v1/blame": {
            "get": _op(
                known,
                "",
                "Each line's last commit, author and date",
                answers.Blame,
                params=BLAME_PARAMS,
                required=("repo", "path"),
            )
        },
        "/v1/diff": {
            "get": _op(
                known,
                "/v1/diff",
                "The change between two refs or commits, file by file, capped and paged",
                answers.Diff,
                params=DIFF_PARAMS,
                required=("repo", "base", "head"),
                extra=STALE,
            )
        },
        "/v1/sessions/{session_id}/sync": {"post": sync},
        "/v1/sessions/{session_id}": {"get": status, "delete": end},
        "/v1/repos": {"get": _op(known, "", "Indexed repos", answers.Repos)},
        "/v1/status": {
            "get": _op(known, "", "The served snapshot, the model and each repo's freshness", answers.Status)
        },
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
                "responses": {"200": {"description": "Ready"}, "503": _error("No snapshot")},
            }
        },
        "/.well-known/oauth-protected-resource": {
            "get": {
                "summary": "How a client signs in (RFC 9728); public",
                "security": [{}],
                "responses": {"200": {"description": "Protected resource metadata"}},
            }
        },
    }


def _paths(known: dict) -> dict:
    return {**_reads(known), **_history_and_more(known)}


MODELS = (
    answers.Search,
    answers.Chunks,
    answers.Grep,
    answers.File,
    answers.Files,
    answers.Outline,
    answers.Routes,
    answers.Context,
    answers.References,
    answers.Commits,
    answers.Blame,
    answers.Diff,
    answers.Synced,
    answers.Session,
    answers.Ended,
    answers.Repos,
    answers.Status,
)


def document(repos: list[str] = (), langs: list[str] = ()) -> dict:
    """The document; with the served snapshot's `repos` and `langs` (of the caller's org), fields naming them are
    enums of what is there, so a client (or a fuzzer) knows which names are answered and which are refused."""
    known = {}
    if repos:
        known |= {"repo": {"enum": list(repos)}, "repos": one_or_more({"enum": list(repos)})}
    if langs:
        known["lang"] = one_or_more({"enum": list(langs)})
    _, schemas = models_json_schema([(m, "serialization") for m in MODELS], ref_template=REF)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "blobdex",
            "version": "1",
            "description": "Search, route and read code across many git repositories.",
        },
        "components": {
            "schemas": {**schemas["$defs"], "Error": ERROR_SCHEMA},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": _paths(known),
        "security": [{"bearer": []}, {}],
    }


def readable(doc: dict) -> tuple[list[dict], dict[str, list[dict]]]:
    """The document as the /docs page shows it: each operation with its fields and answer, and each answer's model
    with its fields, every type written in words ("integer 1–200", "list of Hit", "string or null")."""
    operations = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            params = [
                {"name": p["name"], "where": p["in"], "type": type_words(p["schema"]), "required": p.get("required")}
                for p in op.get("parameters", ())
            ]
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            fields = [
                {"name": n, "where": "body", "type": type_words(s), "required": n in body.get("required", ())}
                for n, s in body.get("properties", {}).items()
            ]
            ok = op["responses"].get("200", {}).get("content", {}).get("application/json", {}).get("schema", {})
            operations.append(
                {
                    "method": method.upper(),
                    "path": path,
                    "summary": op.get("summary", ""),
                    "fields": params + fields,
                    "answer": ok.get("$ref", "").rsplit("/", 1)[-1] or None,
                    "errors": [code for code in op["responses"] if code != "200"],
                }
            )
    models = {
        name: [
            {
                "name": field,
                "type": type_words(s),
                "required": field in schema.get("required", ()),
                "about": s.get("description", ""),
            }
            for field, s in schema.get("properties", {}).items()
        ]
        for name, schema in sorted(doc["components"]["schemas"].items())
    }
    return operations, models


def type_words(schema: dict) -> str:
    """A field's schema in a few words."""
    if not isinstance(schema, dict) or not schema:
        return "any"
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(dict.fromkeys(type_words(s) for s in schema["anyOf"]))
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    if "const" in schema:
        return "empty" if schema["const"] == "" else repr(schema["const"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"list of {type_words(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map to {type_words(schema['additionalProperties'])}"
    if "minimum" in schema and "maximum" in schema and schema["maximum"] < MAX_INT:
        return f"{kind} {schema['minimum']}–{schema['maximum']}"
    return kind
