"""The OpenAPI documents of the three contract mounts, each served at its mount's /openapi.json (the native API's is
query.surfaces.openapi's): the codebase-semantic-search API and the Lucos API, generated from the typed models
below (their requests as each mount's handler reads them, their answers as it writes them), and the Codebase Index
Protocol's, which is the seed's own document (contracts/), shipped with the package. Each mount answers every
error in its contract's shape; the documents say so. tests/test_mount_docs.py runs schemathesis with every check
over each mount from the document it serves."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from indexer.fields import MAX_INT
from query import MAX_LIMIT
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

CONTRACTS = Path(__file__).parent / "contracts"
TRUSTED = ("X-Request-Id", "X-Org-Id", "X-User-Id")  # the Lucos gateway's headers (query.surfaces.lucos)
REF = "#/components/schemas/{model}"
KINDS = ("code", "doc", "function", "method", "class", "definition", "module", "section", "text")
MAX_LINE = 10_000_000  # the pushed-chunk mounts' highest line (lucos, cip)
LUCOS_REPO = r"^lucos:ws:[0-9a-f]{16}$"
RELATIVE = r"^(?!/)(?![\s\S]*(^|/)\.\.(/|$))[^\x00]+$"  # a repo-relative path: no leading '/', no '..' part, no NUL


class Strict(BaseModel):
    """A request body: a field the contract does not show is refused (the mounts answer 400)."""

    model_config = ConfigDict(extra="forbid", regex_engine="python-re")  # patterns as JSON Schema reads them


class Open(BaseModel):
    """An answer: its fields, typed."""


# -- codebase-semantic-search (/codesearch) ------------------------------------------------------------------------
Include = Literal["chunkType", "module", "language"]
Pattern = Annotated[str, Field(min_length=1, max_length=200)]


class CsSearch(Strict):
    query: str = Field(pattern=r"\S", description="What to find, in words or identifiers")
    top_k: int | None = Field(100, ge=1, le=100)  # null reads as absent (indexer.fields), on every mount
    module: str | None = Field(None, description="Only this repo")
    language: str | None = None
    chunk_type: Literal[KINDS] | None = None  # type: ignore[valid-type]
    min_score: float | None = Field(None, ge=0, le=1, description="Least cosine similarity (not with min_score_diff)")
    min_score_diff: float | None = Field(None, ge=0, le=1, description="Most below the best hit (default 0.1)")
    include: list[Include] | None = None
    ignore: list[Pattern] | None = Field(None, max_length=20, description="Path patterns: docs/, *.md, a/**/b")
    format: Literal["markdown", "json", ""] | None = Field(None, description='empty or absent: "markdown"')

    # one threshold or the other (null is absent)
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["min_score", "min_score_diff"],
                "properties": {"min_score": {"type": "number"}, "min_score_diff": {"type": "number"}},
            }
        }
    )


class CsHit(Open):
    id: int
    filePath: str
    symbolName: str | None
    score: float
    startLine: int
    endLine: int
    content: str
    chunkType: str | None = None
    module: str | None = None
    language: str | None = None


class CsSearchData(Open):
    query: str
    count: int
    topK: int
    clipStoreSize: int
    results: list[CsHit]
    minScore: float | None = None
    minScoreDiff: float | None = None
    appliedThreshold: float | None = None
    maxScore: float | None = None
    candidatesBeforeFilter: int | None = None
    ignored: list[str] | None = None
    ignoreSource: str | None = None
    includedFields: list[str] | None = None


class CsLines(Open):
    filePath: str
    startLine: int
    endLine: int
    totalLines: int
    content: str


class CsClip(CsLines):
    id: int


class CsClipItem(Open):
    id: int | str
    success: bool
    filePath: str | None = None
    startLine: int | None = None
    endLine: int | None = None
    totalLines: int | None = None
    content: str | None = None
    error: str | None = None


class CsClipsData(Open):
    results: list[CsClipItem]
    requested: int
    succeeded: int
    failed: int
    clipStoreSize: int


class CsIds(Strict):
    ids: list[int | str] = Field(min_length=1, max_length=500, description="An id that is no number fails alone")


class CsRange(Open):
    startLine: int
    endLine: int


class CsRead(Strict):
    filePath: str = Field(min_length=1, description="<repo>/<path>")
    startLine: int | None = Field(1, ge=1)
    endLine: int | None = Field(None, ge=1, description="At or after startLine; 500 lines at most are read")


class CsReadData(CsLines):
    rangeRequested: CsRange


class CsStats(Open):
    chunks: int
    files: int
    repos: int
    snapshotId: str
    model: str
    clipStoreSize: int


class CsStatus(Open):
    status: str


def _answer(name: str, data: type[BaseModel]) -> type[BaseModel]:
    """The contract's envelope: {"success": true, "data": ...}."""
    return type(name, (Open,), {"__annotations__": {"success": Literal[True], "data": data}})


CS_ANSWERS = {
    "search": _answer("CsSearchAnswer", CsSearchData),
    "clip": _answer("CsClipAnswer", CsClip),
    "clips": _answer("CsClipsAnswer", CsClipsData),
    "read": _answer("CsReadAnswer", CsReadData),
    "stats": _answer("CsStatsAnswer", CsStats),
    "health": _answer("CsHealthAnswer", CsStatus),
}
CS_ERROR = {
    "type": "object",
    "properties": {"success": {"const": False}, "error": {"type": "string"}},
    "required": ["success", "error"],
}


# -- Lucos (/api/v1) ------------------------------------------------------------------------------------------------
class LucosChunk(Strict):
    chunk_id: str
    chunk_hash: str
    file_path: str = Field(pattern=RELATIVE)
    content: str
    source_type: Literal["repo_code", "repo_doc"]
    start_line: int = Field(ge=1, le=MAX_LINE, description="At most end_line")
    end_line: int = Field(ge=1, le=MAX_LINE)
    language: str | None = None
    symbol_name: str | None = None


class LucosUpload(Strict):
    repo_id: str = Field(pattern=LUCOS_REPO)
    commit_sha: str | None = None
    workspace_id: str | None = None
    chunks: list[LucosChunk] | None = Field(None, max_length=200)
    deleted_chunk_ids: list[str] | None = None


class LucosFilters(Strict):
    paths: list[str] | None = Field(None, description="Path globs")


class LucosSearch(Strict):
    repo_ids: list[Annotated[str, Field(pattern=LUCOS_REPO)]] = Field(min_length=1)
    query: str = Field(pattern=r"\S")
    top_k: int | None = Field(20, ge=1, le=100)
    filters: LucosFilters | None = None


class LucosCounts(Open):
    indexed: int
    skipped: int
    failed: int


class LucosUploaded(Open):
    repo_id: str
    counts: LucosCounts
    request_id: str


class LucosStatus(Open):
    repo_id: str
    state: Literal["pending", "indexing", "ready", "stale"]
    files_total: int
    files_indexed: int
    chunks_total: int
    stale_count: int
    last_indexed_at: str | None


class LucosHit(Open):
    file_path: str
    start_line: int
    end_line: int
    score: float
    chunk_hash: str | None
    chunk_id: str | None
    snippet: str
    source_type: str | None
    repo_id: str


class LucosResults(Open):
    results: list[LucosHit]
    request_id: str


class LucosHealth(Open):
    status: str


class LucosVersion(Open):
    version: str


LUCOS_ERROR = {
    "type": "object",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "request_id": {"type": ["string", "null"]},
    },
    "required": ["code", "message", "request_id"],
}
# The gateway's trusted headers (every operation but health and version needs the first three).
PRINTABLE = {"type": "string", "pattern": r"^[ -~]*[!-~][ -~]*$"}  # printable ASCII, not blank
LUCOS_HEADERS = [{"name": n, "in": "header", "required": True, "schema": PRINTABLE} for n in TRUSTED] + [
    {
        "name": "X-Repo-Ids",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": r"^[ -~]*$"},
        "description": "The repos this member may read, comma-separated",
    }
]


# -- one document -----------------------------------------------------------------------------------------------
def _errors(schema: dict, statuses: dict[str, str]) -> dict:
    body = {"content": {"application/json": {"schema": schema}}}
    return {code: {"description": said, **body} for code, said in statuses.items()}


ERRORS = {
    "400": "Bad request: an unknown field, a wrong type or a bad value, named in the message",
    "401": "Token missing or invalid",
    "403": "Not allowed: another org's repo, or a path that leaves the repo",
    "404": "Not found: the repo, file, id or route, named in the message",
    "405": "Method not allowed (the Allow header names the methods that work)",
    "413": "Request body over 1 MiB",
    "503": "No snapshot served yet, or the work ran past its deadline",
}


def _op(summary: str, answer: type[BaseModel] | None, errors: dict, body: type | None = None, **kw) -> dict:
    ok: dict = {"description": "OK"}
    if answer is not None:
        ok["content"] = {"application/json": {"schema": {"$ref": REF.format(model=answer.__name__)}}}
    op = {"summary": summary, "responses": {"200": ok, **errors}, **kw}
    if body is not None:
        schema = {"$ref": REF.format(model=body.__name__)}
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    return op


def _document(title: str, description: str, paths: dict, models: list[type[BaseModel]], extra: dict) -> dict:
    _, schemas = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1", "description": description},
        "paths": paths,
        "components": {"schemas": {**schemas["$defs"], **extra}},
    }


@cache
def codesearch() -> dict:
    errors = _errors({"$ref": REF.format(model="CsError")}, ERRORS)
    a = CS_ANSWERS
    search = _op("Search: hybrid order, cosine scores", a["search"], errors, CsSearch)
    search["responses"]["200"]["content"]["text/markdown"] = {"schema": {"type": "string"}}
    ids = {"name": "ids", "in": "query", "required": True, "schema": {"type": "string", "pattern": r"\S"}}
    clip = {"name": "clip", "in": "path", "required": True, "schema": {"type": "integer"}}
    paths = {
        "/search": {"post": search},
        "/clip/{clip}": {"get": _op("A hit's lines by its id", a["clip"], errors, parameters=[clip])},
        "/clips": {
            "get": _op("Hits' lines by id, ?ids=1,2,3", a["clips"], errors, parameters=[ids]),
            "post": _op("Hits' lines by id", a["clips"], errors, CsIds),
        },
        "/read": {"post": _op("A file's lines: filePath is <repo>/<path>", a["read"], errors, CsRead)},
        "/health": {"get": _op("Up", a["health"], {})},
        "/stats": {"get": _op("What is indexed", a["stats"], errors)},
    }
    models = [CsSearch, CsIds, CsRead, *a.values()]
    return _document(
        "codebase-semantic-search",
        "The codebase-semantic-search API over blobdex's index; a filePath is <repo>/<path> and `module` a repo.",
        paths,
        models,
        {"CsError": CS_ERROR},
    )


@cache
def lucos() -> dict:
    errors = _errors({"$ref": REF.format(model="LucosError")}, ERRORS)
    repo = {"name": "repo_id", "in": "query", "required": True, "schema": {"type": "string", "pattern": LUCOS_REPO}}
    paths = {
        "/indexing/chunks": {
            "post": _op("Upload chunks", LucosUploaded, errors, LucosUpload, parameters=LUCOS_HEADERS)
        },
        "/indexing/status": {"get": _op("A repo's state", LucosStatus, errors, parameters=[*LUCOS_HEADERS, repo])},
        "/retrieval/search": {
            "post": _op("Search uploaded chunks", LucosResults, errors, LucosSearch, parameters=LUCOS_HEADERS)
        },
        "/health/": {"get": _op("Up", LucosHealth, {})},
        "/version": {"get": _op("The API's version", LucosVersion, {})},
    }
    models = [LucosUpload, LucosSearch, LucosUploaded, LucosStatus, LucosResults, LucosHealth, LucosVersion]
    return _document(
        "Lucos indexing and retrieval",
        "Chunks a daemon uploads, searched per repo; the gateway's trusted headers say who asks.",
        paths,
        models,
        {"LucosError": LUCOS_ERROR},
    )


CIP_ERROR = {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
# Any JSON a body may hold where its schema leaves fields open, as query.surfaces.payload reads it (a number within
# 2^53 either side, wherever it stands).
JSON_VALUE = {
    "type": ["string", "boolean", "null", "number", "array", "object"],
    "minimum": -MAX_INT,
    "maximum": MAX_INT,
    "items": {"$ref": REF.format(model="JSONValue")},
    "additionalProperties": {"$ref": REF.format(model="JSONValue")},
}


# What the mount refuses that the seed's schemas leave open (query.surfaces.cip).
NAMED, LINE = {"minLength": 1}, {"minimum": 1, "maximum": MAX_LINE}
CIP_RULES = {
    "RepoSync": {"name": NAMED, "rootHash": NAMED},
    "Chunk": {"repo": NAMED, "path": {"pattern": RELATIVE}, "lineStart": LINE, "lineEnd": LINE},
    "SearchRequest": {"limit": {"minimum": 1, "maximum": MAX_LIMIT}},
}


def seed() -> dict:
    """The Codebase Index Protocol's document as its seed wrote it (JSON is YAML: the seed's text, converted)."""
    return json.loads((CONTRACTS / "codebase-index-protocol.openapi.json").read_text(encoding="utf-8"))


@cache
def codebase_index() -> dict:
    """The seed's document with what this server answers beside it: the refusals the seed does not list (in the
    mount's error shape), and the open fields' values as a body is read."""
    doc = seed()
    errors = {k: v for k, v in _errors({"$ref": REF.format(model="CipError")}, ERRORS).items() if k != "401"}
    for ops in doc["paths"].values():
        for op in ops.values():
            op["responses"] = {**errors, **op["responses"]}
    schemas = doc["components"]["schemas"]
    for name, fields in CIP_RULES.items():
        for field, rule in fields.items():
            schemas[name]["properties"][field] |= rule
    for schema in schemas.values():
        schema.setdefault("additionalProperties", {"$ref": REF.format(model="JSONValue")})
        for name, field in schema.get("properties", {}).items():  # null reads as absent (indexer.fields)
            if name not in schema.get("required", ()) and isinstance(field.get("type"), str):
                field["type"] = [field["type"], "null"]
    doc["components"]["schemas"] |= {"CipError": CIP_ERROR, "JSONValue": JSON_VALUE}
    return doc


def _bounded(node):
    """`node` with every number bounded as every body is read (query.surfaces.payload refuses a number past 2^53
    either side, wherever it stands)."""
    if isinstance(node, list):
        return [_bounded(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _bounded(v) for k, v in node.items()}
    if out.get("type") in ("integer", "number"):
        out = {"minimum": -MAX_INT, "maximum": MAX_INT, **out}
    return out


def route(document: Callable[[], dict]) -> Route:
    """The mount's GET /openapi.json: its document, naming the mount's own address as its server."""

    async def describe(request: Request) -> JSONResponse:
        base = str(request.url.replace(query="")).removesuffix("/openapi.json")
        return JSONResponse({**_bounded(document()), "servers": [{"url": base}]})

    return Route("/openapi.json", describe)
