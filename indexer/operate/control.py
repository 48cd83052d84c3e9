"""The operator's control API under /admin/v1 (`blobdex webhooks --control`; off by default): list, add, remove
and re-index repos, read the queue and the run history. Every request needs an admin token (`blobdex token mint
--admin`); read tokens never work here, and the query server never serves these routes.

An admin token acts inside its org: it sees, adds, removes and re-indexes that org's repos, its queue jobs and its
repos in the run history, and nothing of another org. Only a global one (`--admin --global`) acts in every org and
may add a repo by a local path (the server's own disk is no org's). Adding a repo checks its source as `blobdex
repo add` does and writes blobdex.toml the same way, but takes no credential: a request that could name
`file:PATH` or `env:NAME` could make this process read a file or a variable and send it to a URL of the caller's
choosing (reliability review 2, B2). A private repo is added by an operator with `blobdex repo add --credential`.
Re-indexing queues the repo for the next `blobdex index --pending` (or the `--every` loop).
"""

from __future__ import annotations

import json
from functools import partial

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from indexer import config as configmod
from indexer import runs, tokens
from indexer.operate import sources
from indexer.config import RepoSpec
from indexer.errors import BlobdexError
from indexer.fields import Fields
from indexer.mirror import is_local, redact
from indexer.operate.queue import Queue
from indexer.snapshot import SnapshotError, open_manifest
from indexer.operate.http import HookError, capped_body, internal, refusal

PREFIX = "/admin/v1"
MAX_BODY_BYTES = 64 * 1024
REPO_FIELDS = {"name", "url", "org", "refs", "check"}


def _admin(request: Request) -> dict:
    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    try:
        grant = tokens.verify(request.app.state.config().data_dir, token, tokens.ADMIN) if token else None
    except tokens.TokenStoreError as exc:
        raise HookError(503, str(exc), "token_store") from exc
    if grant is None:
        raise HookError(
            401,
            "the control API needs 'Authorization: Bearer ADMIN_TOKEN' from 'blobdex token mint --admin'",
            "admin_token_required",
        )
    return grant


def _every_org(grant: dict) -> bool:
    return bool(grant.get("every_org"))


def _may(grant: dict, org: str) -> None:
    """Refuse an org the token does not act in, without saying whether anything of it exists."""
    if not _every_org(grant) and org != grant["org"]:
        raise HookError(
            403,
            f"this admin token acts in org {grant['org']!r} only; an operator mints one that acts in every org "
            f"with 'blobdex token mint --admin --global'",
            "org_forbidden",
        )


def _visible(grant: dict, org: str) -> bool:
    return _every_org(grant) or org == grant["org"]


def endpoint(handler):
    """A control handler behind the admin check; every error answers with its own status in the one JSON shape."""

    async def guarded(request: Request) -> Response:
        try:
            grant = _admin(request)
            status, body = await handler(request, grant)
        except BlobdexError as exc:
            return refusal(exc)
        except Exception:
            return internal(request)
        return JSONResponse(body, status_code=status)

    return guarded


def _repo_row(spec: RepoSpec, indexed) -> dict:
    state = indexed.get(spec.key)
    return {
        "org": spec.org,
        "name": spec.name,
        "url": redact(spec.url),
        "refs": list(spec.refs),
        "status": state.status if state else "not indexed",
        "error": state.error if state else None,
        "indexed_at": state.indexed_at if state else None,
        "commits": [{"ref": r.ref, "commit_id": r.commit_id} for r in state.refs] if state else [],
        "chunks": state.chunks if state else 0,
    }


@endpoint
async def list_repos(request: Request, grant: dict):
    cfg = request.app.state.config()
    try:
        manifest = open_manifest(cfg.data_dir)[1]
        indexed = {(r.org, r.name): r for r in manifest.repos}
    except SnapshotError:
        indexed = {}
    return 200, {"repos": [_repo_row(r, indexed) for r in cfg.repos if _visible(grant, r.org)]}


@endpoint
async def add_repo(request: Request, grant: dict):
    body = await _json(request)
    if "credential" in body or "username" in body:
        raise HookError(
            400,
            "the control API takes no credential (a reference here could send a file or variable of this server "
            "to any URL); an operator adds a private repo with 'blobdex repo add NAME URL --credential env:NAME'",
            "bad_request",
        )
    unknown = sorted(set(body) - REPO_FIELDS)
    if unknown:
        raise HookError(
            400,
            f"unknown field {unknown[0]!r}: give name and url (and optionally "
            f"{', '.join(sorted(REPO_FIELDS - {'name', 'url'}))})",
            "bad_request",
        )
    fields = Fields(body)
    name, url = fields.text("name", required=True, nonempty=True), fields.text("url", required=True, nonempty=True)
    refs = fields.strs("refs", must="a list of branch, tag or commit names")
    check = fields.flag("check", default=True)  # asking the source takes a network round trip: off the loop
    cfg = request.app.state.config()
    org = fields.text("org") or grant["org"]
    configmod.check_name("repo", name)
    configmod.check_name("org", org)
    _may(grant, org)
    if is_local(url) and not _every_org(grant):
        raise HookError(
            403,
            "a repo by local path or file:// URL reads this server's own disk, which belongs to no org: add it with a "
            "global admin token ('blobdex token mint --admin --global') or 'blobdex repo add'",
            "org_forbidden",
        )
    if cfg.repo(name, org) is not None:
        raise HookError(
            409,
            f"org {org!r} has a repo {name!r} already; DELETE {PREFIX}/repos/{org}/{name} first, or pick another name",
            "conflict",
        )
    spec = RepoSpec(name=name, url=url, org=org, refs=refs)
    checked = partial(sources.checked, spec, check, 'or send "check": false', cfg.data_dir)
    spec = await anyio.to_thread.run_sync(checked)
    configmod.save(configmod.with_repo(cfg, spec))
    with Queue(cfg.data_dir) as queue:
        queue.enqueue(spec.org, spec.name)
    return 201, {"repo": _repo_row(spec, {}), "queued": True}


def _configured_repo(request: Request, grant: dict):
    """The config, org and name of the repo a path names, once the grant may touch it and it exists."""
    org, name = request.path_params["org"], request.path_params["name"]
    _may(grant, org)
    cfg = request.app.state.config()
    if cfg.repo(name, org) is None:
        raise HookError(404, f"no repo {org}/{name} is configured; GET {PREFIX}/repos lists them", "not_found")
    return cfg, org, name


@endpoint
async def remove_repo(request: Request, grant: dict):
    cfg, org, name = _configured_repo(request, grant)
    configmod.save(configmod.without_repo(cfg, name, org))
    with Queue(cfg.data_dir) as queue:
        queue.sweep({r.key for r in request.app.state.config().repos})
    return 200, {"removed": f"{org}/{name}", "next": "the next index run publishes a snapshot without it"}


@endpoint
async def reindex(request: Request, grant: dict):
    cfg, org, name = _configured_repo(request, grant)
    with Queue(cfg.data_dir) as queue:
        new = queue.enqueue(org, name)
    return 202, {"queued": f"{org}/{name}", "coalesced": not new}


@endpoint
async def queue_jobs(request: Request, grant: dict):
    with Queue(request.app.state.config().data_dir) as queue:
        return 200, {"jobs": [j.to_dict() for j in queue.jobs() if _visible(grant, j.org)]}


@endpoint
async def run_history(request: Request, grant: dict):
    limit = Fields(request.query_params).integer("limit", default=20, loose=True)
    limit = min(max(limit, 1), runs.MAX_RUNS)
    found = runs.history(request.app.state.config().data_dir, limit)
    org = None if _every_org(grant) else grant["org"]
    return 200, {"runs": [runs.summary(r, org) for r in found]}


@endpoint
async def one_run(request: Request, grant: dict):
    wanted = request.path_params["run_id"]
    for entry in runs.history(request.app.state.config().data_dir, runs.MAX_RUNS):
        if entry["run_id"] == wanted:
            if _every_org(grant):
                return 200, entry
            org = grant["org"]  # the run as its org sees it: its repos, never another org's names or errors
            return 200, {**runs.summary(entry, org), "repos": [r for r in entry.get("repos", []) if r["org"] == org]}
    raise HookError(404, f"no run {wanted!r} in the history; GET {PREFIX}/runs lists them", "not_found")


async def _json(request: Request) -> dict:
    body = await capped_body(request, MAX_BODY_BYTES)
    try:
        value = json.loads(body or b"{}")
    except RecursionError:
        raise HookError(400, "the body nests deeper than any request of this API", "bad_json") from None
    except ValueError as exc:
        raise HookError(400, f"the body is not JSON ({exc})", "bad_json") from exc
    if not isinstance(value, dict):
        raise HookError(400, "the body is not a JSON object", "bad_json")
    return value


ROUTES = [
    Route("/repos", list_repos, methods=["GET"]),
    Route("/repos", add_repo, methods=["POST"]),
    Route("/repos/{org}/{name}", remove_repo, methods=["DELETE"]),
    Route("/repos/{org}/{name}/reindex", reindex, methods=["POST"]),
    Route("/queue", queue_jobs, methods=["GET"]),
    Route("/runs", run_history, methods=["GET"]),
    Route("/runs/{run_id}", one_run, methods=["GET"]),
]
