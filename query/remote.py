"""The read commands against a running server: with `--server URL` (or `server` in blobdex.toml) search, route,
chunk, get-file, files, outline, context, references, grep, status and the history commands ask that server's
/v1 API instead of opening the snapshot themselves (a second and the model per process, where the server next
door is warm).

`Remote` answers the Service methods those commands call with the same records, rebuilt from /v1's JSON, so a
command prints the same either way; a test runs the README's walkthrough both ways and compares. The org is the
one the server gives the token (BLOBDEX_TOKEN), and the server words its errors for the CLI (X-Blobdex-Words)."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import fields
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import click

from indexer.addresses import server_url_problem
from indexer.config import DEFAULT_ORG
from indexer.errors import BlobdexError
from indexer.operate.cli import cli_config

if TYPE_CHECKING:  # each method imports the records it rebuilds: a command pays only for its own
    from query.blame import Blame
    from query.browse import FilePage, Outline
    from query.diff import DiffPage
    from query.get_file import FileText
    from query.history import CommitPage
    from query.localize import FileHit
    from query.route_task import RepoRoute
    from query.search.request import Hit, SearchRequest
    from query.service import ChunkText, GrepPage, IndexStatus

TOKEN_ENV = "BLOBDEX_TOKEN"
WORDS_HEADER = "X-Blobdex-Words"  # the surface a server words its errors for (indexer.errors.SURFACES)
EVIDENCE_RE = re.compile(r"(.*):(\d+)-(\d+) (.*)", re.DOTALL)  # a ranked file's evidence (render.file_record)
TIMEOUT_SECONDS = 90.0  # past the server's own deadline on a request (query.surfaces.REQUEST_SECONDS)


class RemoteError(BlobdexError):
    """The server refused a request or could not be reached; the message says which and what to do."""

    status = 502


def _record(cls, data: dict, **nested):
    """A record of `cls` from its JSON: the fields it has, `nested` ones already rebuilt."""
    return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data} | nested)


def _hit(data: dict) -> Hit:
    from query.search.request import HIT_FIELDS, Hit, Signals

    signals = data["signals"]
    kept = {k: data[k] for k in HIT_FIELDS if k != "signals"}
    return Hit(**kept, signals=Signals(**{**signals, "snippet_lines": tuple(signals["snippet_lines"])}))


class Remote:
    """The Service's read methods, answered by the server at `url` over /v1 with `token` (None: none sent)."""

    def __init__(self, url: str, token: str | None = None):
        if problem := server_url_problem(url):
            raise RemoteError(f"the server's address {problem}")
        self.url = url.rstrip("/")
        self._headers = {WORDS_HEADER: "cli", **({"Authorization": f"Bearer {token}"} if token else {})}

    @classmethod
    def from_env(cls, url: str) -> Remote:
        return cls(url, os.environ.get(TOKEN_ENV) or None)

    def _ask(self, method: str, path: str, params: dict | None = None, body: dict | None = None) -> dict:
        """The JSON object the server answers; RemoteError in the CLI's words when it cannot or will not.
        urllib, not httpx: a command pays for its imports on every run, and httpx's take a fifth of a second."""
        url = self.url + path + (f"?{urlencode(params)}" if params else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = self._headers | ({"Content-Type": "application/json"} if data is not None else {})
        try:
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (OSError, ValueError) as exc:  # refused, unresolvable, timed out
            raise RemoteError(
                f"cannot reach the server at {self.url} ({getattr(exc, 'reason', exc)}); start it with "
                f"'blobdex serve', or check --server (or `server` in blobdex.toml)"
            ) from None
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if status == 401:
            refused = " (the one set was refused)" if "Authorization" in self._headers else ""
            raise RemoteError(
                f"the server at {self.url} wants a token: set {TOKEN_ENV} to one from 'blobdex token mint' on the "
                f"server's machine{refused}"
            )
        if status >= 400 or not isinstance(answer, dict):
            said = answer.get("error", {}).get("message") if isinstance(answer, dict) else None
            raise RemoteError(said or f"the server at {self.url} answered {status} to {method} {path}")
        return answer

    # -- the Service's read methods, as the CLI calls them ----------------------------------------------

    def check_org(self, org: str) -> None:
        """The server answers in the token's org: nothing to check here."""

    def _search_body(self, req: SearchRequest) -> dict:
        body = {"query": req.query, "repos": list(req.repos), "lang": list(req.langs), "paths": list(req.paths)}
        body |= {"ignore": list(req.ignore), "kind": req.kind, "ref": req.ref, "limit": req.limit, "mode": req.mode}
        return {k: v for k, v in body.items() if v not in (None, [])}

    def search(self, req: SearchRequest) -> tuple[str, list[tuple[int, Hit]]]:
        data = self._ask("POST", "/v1/search", body=self._search_body(req))
        return data["snapshot_id"], [(h["id"], _hit(h)) for h in data["hits"]]

    def localize(self, req: SearchRequest) -> tuple[str, list[FileHit]]:
        """Files ranked for a task; each evidence a Hit with the place /v1 gives (`path:start-end symbol`)."""
        from query.localize import FileHit

        data = self._ask("POST", "/v1/search", body=self._search_body(req) | {"group_by": "file"})
        found = []
        for f in data["files"]:
            evidence = []
            for said in f["evidence"]:
                path, start, end, symbol = EVIDENCE_RE.fullmatch(said).groups()
                where = {"repo": f["repo"], "ref": f["ref"], "commit_id": f["commit_id"], "path": path}
                evidence.append(_evidence(where, int(start), int(end), symbol))
            found.append(_record(FileHit, f, evidence=evidence))
        return data["snapshot_id"], found

    def get_chunk(self, org: str, clip: int) -> ChunkText:
        from query.service import ChunkText

        data = self._ask("GET", "/v1/chunks", params={"ids": str(clip)})
        if data["errors"]:
            raise RemoteError(data["errors"][0]["message"])
        c = data["chunks"][0]
        hit = _hit({**c, "snippet": "", "score": 0.0, "signals": {"snippet_lines": [0, 0]}})
        return ChunkText(id=c["id"], hit=hit, text=c["text"], snapshot_id=c["snapshot_id"])

    def get_file(self, org: str, repo: str, path: str, ref=None, start=None, end=None) -> FileText:
        from query.get_file import FileText

        asked = {"repo": repo, "path": path, "ref": ref, "start": start, "end": end}
        data = self._ask("GET", "/v1/file", params={k: v for k, v in asked.items() if v is not None})
        withheld = tuple(tuple(w) for w in data["withheld"])
        return _record(FileText, data, content=data["content"].encode("utf-8"), withheld=withheld)

    def list_files(self, org: str, repo: str, path_glob=None, ref=None, cursor=None, limit: int = 200) -> FilePage:
        from query.browse import FilePage

        asked = {"repo": repo, "path_glob": path_glob, "ref": ref, "cursor": cursor, "limit": limit}
        return _record(FilePage, self._ask("GET", "/v1/files", params={k: v for k, v in asked.items() if v}))

    def outline(self, org: str, repo: str, path: str, ref=None) -> Outline:
        from query.browse import Outline

        asked = {"repo": repo, "path": path, "ref": ref}
        return _record(Outline, self._ask("GET", "/v1/outline", params={k: v for k, v in asked.items() if v}))

    def status(self, org: str | None) -> IndexStatus:
        from query.service import IndexStatus
        from query.status import RefStatus, RepoStatus

        data = self._ask("GET", "/v1/status")
        repos = tuple(
            _record(RepoStatus, r, refs=tuple(_record(RefStatus, x) for x in r["refs"])) for r in data["repos"]
        )
        return _record(IndexStatus, data, repos=repos)

    def route(self, org: str, task: str, limit: int = 5) -> tuple[str, list[RepoRoute]]:
        from query.route_task import RepoRoute

        data = self._ask("POST", "/v1/route", body={"task": task, "limit": limit})
        return data["snapshot_id"], [_record(RepoRoute, r) for r in data["repos"]]

    def context(self, org: str, symbol=None, repo=None, **asked) -> dict:
        return self._ask("GET", "/v1/context", params=_params(symbol=symbol, repo=repo, **asked))

    def references(self, org: str, **asked) -> dict:
        return self._ask("GET", "/v1/references", params=_params(**asked))

    def grep(self, org: str, pattern: str, cursor=None, **kw) -> GrepPage:
        from query.grep import GrepMatch
        from query.service import GrepPage

        body = {"pattern": pattern, "cursor": cursor, **kw, "repos": list(kw["repos"]), "paths": list(kw["paths"])}
        data = self._ask("POST", "/v1/grep", body={k: v for k, v in body.items() if v not in (None, [])})
        matches = [_record(GrepMatch, m) for m in data["matches"]]
        return GrepPage(snapshot_id=data["snapshot_id"], matches=matches, next_cursor=data["next_cursor"])

    def search_commits(self, org: str, query: str = "", cursor=None, **filters) -> CommitPage:
        from query.history import CommitPage

        body = {"query": query, "cursor": cursor, **filters, "repos": list(filters.get("repos", ()))}
        body["paths"] = list(filters.get("paths", ()))
        return _record(CommitPage, self._ask("POST", "/v1/commits", body={k: v for k, v in body.items() if v}))

    def log(self, org: str, repo: str, path=None, ref=None, **page) -> CommitPage:
        from query.history import CommitPage

        return _record(CommitPage, self._ask("GET", "/v1/log", params=_params(repo=repo, path=path, ref=ref, **page)))

    def blame(self, org: str, repo: str, path: str, ref=None, start=None, end=None) -> Blame:
        from query.blame import Blame

        asked = _params(repo=repo, path=path, ref=ref, start=start, end=end)
        return _record(Blame, self._ask("GET", "/v1/blame", params=asked))

    def diff(self, org: str, repo: str, base: str, head: str, path=None, **page) -> DiffPage:
        from query.diff import DiffPage

        asked = _params(repo=repo, base=base, head=head, path=path, **page)
        return _record(DiffPage, self._ask("GET", "/v1/diff", params=asked))


def _params(**asked) -> dict:
    """A query string's parameters: the ones given, flags as /v1 reads them."""
    return {k: ("true" if v is True else v) for k, v in asked.items() if v is not None and v is not False}


def _evidence(where: dict, start: int, end: int, symbol: str) -> Hit:
    """A file's evidence as /v1 names it: its place and symbol (what `search --files` prints)."""
    from query.search.request import Hit

    blank = {"org": "", "blob_id": "", "chunk_index": 0, "kind": "", "lang": "", "snippet": "", "score": 0.0}
    return Hit(**where, **blank, line_start=start, line_end=end, symbol=symbol)


def service_for(ctx: click.Context, remote: bool = True):
    """What a read command asks: the server `--server` names (or the config's `server`), else this machine's index
    (query.service). `remote` False: the command reads what no server serves, so a --server is refused."""
    url = ctx.obj.get("server")
    if url and not remote:
        raise click.UsageError(f"'blobdex {ctx.info_name}' reads this machine's index; run it without --server")
    cfg = None if url else cli_config(ctx)
    if cfg is not None and remote:
        url = cfg.server
    if not url:
        from query.service import Service

        return Service(cfg)
    if ctx.params.get("org") not in (None, DEFAULT_ORG):
        raise click.UsageError("--org does not go to a server: it answers in the org of your token (BLOBDEX_TOKEN)")
    return Remote.from_env(url)
