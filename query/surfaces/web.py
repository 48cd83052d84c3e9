"""The page for people at `/`: search (hybrid, one signal, files for an issue text, grep), a file at any commit,
the repos and their freshness, routing a task, and a symbol's definitions and callers. Server-rendered HTML that
works without JavaScript; blobdex.js adds results as you type and keyboard navigation. Read-only, in the org the
request runs in (the Guard: a bearer token, or with --require-token the sign-in cookie), nothing loaded from
elsewhere (a Content-Security-Policy of 'self' says so to the browser).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import unescape
from functools import partial
from pathlib import Path
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from indexer import runs, tokens
from indexer.errors import BlobdexError
from indexer.tokenize import tokens as word_tokens
from query import MAX_LIMIT
from query.grep import GrepError, compile_pattern
from query.query_text import STOPWORDS, cut, cut_note
from query.search import KINDS, MODES, SearchRequest
from query.surfaces import answers, codeview, highlight, offload, openapi, readme
from query.surfaces.codeview import file_url
from query.surfaces.render import route_in_words
from query.surfaces.guard import current_org

HERE = Path(__file__).parent
TEMPLATES = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
STATIC = StaticFiles(directory=HERE / "static")
COOKIE = "blobdex_token"
PAGE_LINES = 500  # lines of a file per page: highlighting costs ~1-7 ms per 100 lines of Python here
GREP_LIMIT = 200
# The browser loads nothing from elsewhere and runs no inline code; no page may be framed (clickjacking).
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer makes a browser send `Origin: null` on our own forms
    "Cache-Control": "no-store",
}
SEARCH_MODES = (*MODES, "files", "grep")
WORD_RE = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True, kw_only=True)
class Query:
    """A search as the URL holds it: every field a form field of the same name (so a link is the search)."""

    q: str = ""
    mode: str = "hybrid"
    repo: tuple[str, ...] = ()
    lang: tuple[str, ...] = ()
    path: str = ""
    ignore: str = ""
    kind: str = ""
    ref: str = ""
    literal: bool = False
    icase: bool = False
    signals: bool = False
    limit: int = 20
    cut_from: int = 0  # the length of a `q` longer than MAX_QUERY_CHARS, which is cut (as every surface cuts it)

    @property
    def note(self) -> str | None:
        return cut_note(self.cut_from)

    @classmethod
    def of(cls, params) -> "Query":
        def one(name: str) -> str:
            return (params.get(name) or "").strip()

        try:
            limit = min(max(int(params.get("limit") or 20), 1), MAX_LIMIT)
        except ValueError:
            limit = 20
        mode = one("mode") if one("mode") in SEARCH_MODES else "hybrid"
        q, cut_from = cut(params.get("q") or "")
        return cls(
            q=q,
            cut_from=cut_from,
            mode=mode,
            repo=tuple(r for r in params.getlist("repo") if r),
            lang=tuple(x for x in params.getlist("lang") if x),
            path=one("path"),
            ignore=one("ignore"),
            kind=one("kind") if one("kind") in KINDS else "",
            ref=one("ref"),
            literal=bool(params.get("literal")),
            icase=bool(params.get("icase")),
            signals=bool(params.get("signals")),
            limit=limit,
        )

    def chips(self) -> list[tuple[str, str]]:
        """The filters this search applies, each as (what it says, the URL of this search without it)."""
        fields = [("q", self.q), *(("repo", r) for r in self.repo), *(("lang", x) for x in self.lang)]
        fields += [(k, getattr(self, k)) for k in ("mode", "kind", "path", "ignore", "ref") if getattr(self, k)]
        fields = [(k, v) for k, v in fields if (k, v) != ("mode", "hybrid")]  # the default says nothing
        fields += [(k, "1") for k in ("literal", "icase") if getattr(self, k)]
        shown = {"literal": "literal", "icase": "ignore case"}
        out = []
        for n, (name, value) in enumerate(fields):
            if name == "q":
                continue
            rest = [(k, v) for i, (k, v) in enumerate(fields) if i != n]
            out.append((shown.get(name) or f"{name}: {value}", "/?" + urlencode(rest)))
        return out

    def request(self, org: str) -> SearchRequest:
        return SearchRequest(
            query=self.q,
            org=org,
            repos=self.repo,
            langs=self.lang,
            paths=(self.path,) if self.path else (),
            ignore=(self.ignore,) if self.ignore else (),
            kind=self.kind or None,
            ref=self.ref or None,
            limit=self.limit,
            mode=self.mode if self.mode in MODES else "hybrid",
        )


def marked(line: str, words: set[str]) -> Markup:
    """A line of text, escaped, the words of the query in it wrapped in <mark>."""
    out, last = [], 0
    for m in WORD_RE.finditer(line):
        word = m.group(0)
        if word.lower() in words or any(t in words for t in word_tokens(word)):
            out += [escape(line[last : m.start()]), Markup("<mark>"), escape(word), Markup("</mark>")]
            last = m.end()
    out.append(escape(line[last:]))
    return Markup("").join(out)


TAG_RE = re.compile(r"(<[^>]*>)")


def marked_html(html: str, words: set[str]) -> Markup:
    """A highlighted line (query.surfaces.highlight) with the query's words marked in its text, never in a tag."""
    parts = TAG_RE.split(html)
    return Markup("").join(Markup(p) if i % 2 else marked(unescape(p), words) for i, p in enumerate(parts))


def query_words(q: str) -> set[str]:
    return {w for w in word_tokens(q)} - STOPWORDS


def _grouped(hits) -> list[dict]:
    """Hits grouped by file (in the order of each file's best hit), each with its snippet lines."""
    groups: dict[tuple, dict] = {}
    for clip, hit in hits:
        key = (hit.repo, hit.path, hit.commit_id)
        group = groups.setdefault(
            key, {"repo": hit.repo, "path": hit.path, "ref": hit.ref, "commit_id": hit.commit_id, "hits": []}
        )
        start = hit.signals.snippet_lines[0] if hit.signals.snippet_lines else hit.line_start
        lines = highlight.lines(hit.path, hit.snippet)  # the file view's highlighter, a snippet's few lines
        group["hits"].append({"hit": hit, "clip": clip, "lines": list(enumerate(lines, start))})
    return list(groups.values())


def _results(service, org: str, query: Query) -> dict:
    """What the search page shows for `query`: grouped hits, ranked files or grep matches."""
    if query.mode == "grep":
        paths = tuple(p for p in (query.path,) if p)
        page = service.grep(
            org,
            query.q,
            repos=query.repo,
            paths=paths,
            ref=query.ref or None,
            limit=GREP_LIMIT,
            literal=query.literal,
            ignore_case=query.icase,
        )
        matches, more = page.matches, page.next_cursor is not None
        groups: dict[tuple, dict] = {}
        for m in matches:
            groups.setdefault((m.repo, m.path, m.ref), {"repo": m.repo, "path": m.path, "ref": m.ref, "lines": []})[
                "lines"
            ].append(m)
        return {"kind": "grep", "groups": list(groups.values()), "more": more, "pattern": _pattern(query)}
    if query.mode == "files":
        _, files = service.localize(query.request(org))
        return {"kind": "files", "files": files}
    _, hits = service.search(query.request(org))
    return {"kind": "hits", "groups": _grouped(hits), "count": len(hits)}


def _pattern(query: Query):
    """The grep pattern as grep compiled it (RE2: a pattern from the URL must never cost more than linear time),
    to mark what matched."""
    try:
        return compile_pattern(query.q, query.literal, query.icase)
    except GrepError:
        return None


def grep_marked(text: str, pattern) -> Markup:
    if pattern is None:
        return escape(text)
    out, last = [], 0
    for m in pattern.finditer(text):
        if m.end() == m.start():
            continue
        out += [escape(text[last : m.start()]), Markup("<mark>"), escape(m.group(0)), Markup("</mark>")]
        last = m.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


def commit_url(repo: str, commit_id: str) -> str:
    """A commit's page (query/surfaces/history_pages.py)."""
    return f"/commit/{quote(repo, safe='')}/{quote(commit_id, safe='')}"


TEMPLATES.globals.update(
    file_url=file_url,
    commit_url=commit_url,
    route_in_words=route_in_words,
    marked_html=marked_html,
    marked=marked,
    grep_marked=grep_marked,
    modes=SEARCH_MODES,
    kinds=sorted(KINDS),
)


def page(request: Request, template: str, status: int = 200, **context) -> HTMLResponse:
    signed_in = bool(request.cookies.get(COOKIE))
    body = TEMPLATES.get_template(template).render(
        org=current_org.get(), signed_in=signed_in, require_token=request.app.state.require_token, **context
    )
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def _failed(request: Request, exc: BlobdexError, template: str, **context) -> HTMLResponse:
    return page(request, template, status=getattr(exc, "status", 400), error=exc.said("web"), **context)


def _choices(service, org: str) -> dict:
    """The filters' choices: the org's repos, languages and refs in the served snapshot."""
    try:
        reader = service.reader()
    except BlobdexError:
        return {"repos": [], "langs": [], "snapshot_id": None}
    found = answers.catalog(reader, org)
    return {"repos": found["repos"], "langs": found["languages"], "snapshot_id": found["snapshot_id"]}


async def search(request: Request) -> Response:
    service, org = request.app.state.service, current_org.get()
    query = Query.of(request.query_params)
    partial_results = request.query_params.get("partial") == "results"
    context = {"query": query, "words": query_words(query.q)}
    if not partial_results:
        context.update(await offload(_choices, service, org))
    if query.q.strip():
        try:
            context["results"] = await offload(_results, service, org, query)
        except BlobdexError as exc:
            return _failed(request, exc, "results.html" if partial_results else "search.html", **context)
    return page(request, "results.html" if partial_results else "search.html", **context)


async def file_view(request: Request) -> Response:
    service, org = request.app.state.service, current_org.get()
    repo, path = request.path_params["repo"], request.path_params["path"]
    ref = request.query_params.get("ref") or None
    marked_lines = _range(request.query_params.get("hl"))
    try:
        start = max(int(request.query_params.get("start") or 0), 0)
    except ValueError:
        start = 0
    if not start:
        start = ((marked_lines[0] - 1) // PAGE_LINES) * PAGE_LINES + 1 if marked_lines else 1
    context = {"repo": repo, "path": path, "ref": ref, "hl": marked_lines}
    try:
        found = await offload(partial(service.get_file, org, repo, path, ref, start, start + PAGE_LINES - 1))
    except BlobdexError as exc:
        if exc.status == 400 and await offload(_is_folder, service, org, repo, path, ref):
            return RedirectResponse(tree_url(repo, path, ref), status_code=303)  # a folder, named as a file
        return _failed(request, exc, "file.html", **context)
    text = found.content.decode("utf-8", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    rows = highlight.page(found.blob_id, path, found.line_start, text)
    definitions = await offload(codeview.definitions, service, org, repo, path, found.blob_id)
    calls = await offload(codeview.calls, service, org, repo, path, found.blob_id)
    symbols = await offload(codeview.outline, service, org, repo, path, found.commit_id)
    rows = [codeview.linked(html, calls.get(n, ())) for n, html in enumerate(rows, found.line_start)]
    pages = {
        "prev": file_page(repo, path, ref, max(start - PAGE_LINES, 1)) if start > 1 else None,
        "next": file_page(repo, path, ref, found.line_end + 1) if found.line_end < found.total_lines else None,
    }
    return page(
        request,
        "file.html",
        file=found,
        rows=list(enumerate(rows, found.line_start)),
        definitions=definitions,
        symbols=symbols,
        pages=pages,
        **context,
    )


def tree_url(repo: str, path: str, ref: str | None) -> str:
    where = f"/tree/{quote(repo, safe='')}" + (f"/{quote(path.strip('/'))}" if path.strip("/") else "")
    return where + (f"?{urlencode({'ref': ref})}" if ref else "")


def _is_folder(service, org: str, repo: str, path: str, ref: str | None) -> bool:
    try:
        service.folder(org, repo, path, ref)
    except BlobdexError:
        return False
    return True


async def tree(request: Request) -> Response:
    """A folder of a repo at a ref (the repo's root without a path): its folders, its files with language, size
    and why the index left one out, and its README rendered."""
    service, org = request.app.state.service, current_org.get()
    repo, path = request.path_params["repo"], request.path_params.get("path", "").strip("/")
    ref = request.query_params.get("ref") or None
    context = {"repo": repo, "path": path, "ref": ref, "up": tree_url(repo, path.rpartition("/")[0], ref)}
    try:
        found = await offload(service.folder, org, repo, path, ref)
        shown = await offload(_readme, service, org, found)
    except BlobdexError as exc:
        return _failed(request, exc, "tree.html", **context)
    return page(request, "tree.html", folder=found, readme=shown, unshown=UNSHOWN, **context)


def _readme(service, org: str, found) -> dict | None:
    """The folder's README, read at the folder's commit and rendered (readme.render), kept with the snapshot (a
    commit's README never changes); None without one."""
    name = readme.pick([f["name"] for f in found.files])
    if name is None:
        return None
    path = f"{found.path}/{name}" if found.path else name

    def load() -> dict | None:
        try:
            text = service.get_file(org, found.repo, path, found.commit_id).content.decode("utf-8", "replace")
        except BlobdexError:  # withheld, unreadable: the listing stands without it
            return None
        return {"name": name, "html": readme.render(text, name, found.repo, found.path, found.commit_id)}

    return service.reader().cached(f"readme:{org}/{found.repo}/{path}@{found.commit_id}", load)


ERROR_REASONS = {404: "Not found", 405: "Method not allowed"}
# Files a folder lists without a link: the file view would refuse them (credentials) or has nothing to show.
UNSHOWN = frozenset({"credentials", "symlink", "submodule", "bad_path", "unreadable", "too_deep"})


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    """An unknown page or a wrong method, for a person: the site's page with one sentence and a way back."""
    return page(request, "error.html", status=status, code=status, reason=ERROR_REASONS.get(status, ""), error=message)


def file_page(repo: str, path: str, ref: str | None, start: int) -> str:
    query = {"start": start, **({"ref": ref} if ref else {})}
    return f"/file/{quote(repo, safe='')}/{quote(path)}?{urlencode(query)}"


def _range(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)(?:-(\d+))?$", text or "")
    if not m:
        return None
    a = int(m.group(1))
    return a, max(a, int(m.group(2) or a))


async def repos(request: Request) -> Response:
    service, org = request.app.state.service, current_org.get()
    found = await offload(service.status, org)
    last = runs.last(service.cfg.data_dir)
    report = None
    if last is not None:
        mine = [r for r in last.get("repos", []) if r["org"] == org]
        report = {
            **runs.summary(last, org),
            "seconds_by_stage": last.get("seconds", {}),
            "repos": mine,
            "totals": last.get("totals", {}),
            "notes": last.get("notes", []) if mine else [],
        }
    return page(request, "repos.html", index=found, run=report)


async def route(request: Request) -> Response:
    service, org = request.app.state.service, current_org.get()
    task = request.query_params.get("task") or ""
    task, cut_from = cut(task)
    context = {"task": task, "routes": None, "note": cut_note(cut_from)}
    if task.strip():
        try:
            _, context["routes"] = await offload(service.route, org, task)
        except BlobdexError as exc:
            return _failed(request, exc, "route.html", **context)
    return page(request, "route.html", **context)


async def commits(request: Request) -> Response:
    """search_commits for people: words, repo, author and dates as on every surface; the newest without words."""
    service, org = request.app.state.service, current_org.get()
    params = request.query_params
    asked = {k: (params.get(k) or "").strip() for k in ("q", "repo", "author", "since", "until")}
    context = {**asked, "page": None, "more": None}
    filters = {
        "repos": (asked["repo"],) if asked["repo"] else (),
        **{k: asked[k] or None for k in ("author", "since", "until")},
    }
    try:
        found = await offload(partial(service.search_commits, org, asked["q"], params.get("cursor"), **filters))
    except BlobdexError as exc:
        return _failed(request, exc, "commits.html", **context)
    # a changed path links to the file view at the commit when the snapshot indexes it (text it can show)
    context["indexed"] = await offload(service.reader().files, org)
    if found.next_cursor:
        context["more"] = "/commits?" + urlencode(
            {**{k: v for k, v in asked.items() if v}, "cursor": found.next_cursor}
        )
    return page(request, "commits.html", **{**context, "page": found})


async def symbol(request: Request) -> Response:
    service, org = request.app.state.service, current_org.get()
    name = (request.query_params.get("name") or "").strip()
    repo = (request.query_params.get("repo") or "").strip() or None
    context = {"name": name, "repo": repo, "context": None}
    if name:
        try:
            context["context"] = await offload(service.context, org, name, repo)
        except BlobdexError as exc:
            return _failed(request, exc, "symbol.html", **context)
    return page(request, "symbol.html", **context)


async def signin(request: Request) -> Response:
    """GET: the form; POST: a read token checked, kept in a Secure, HttpOnly, SameSite=Strict cookie."""
    target = _local(request.query_params.get("next"))
    if request.method == "GET":
        return page(request, "signin.html", next=target)
    form = await request.form()
    token = str(form.get("token") or "").strip()
    target = _local(str(form.get("next") or target))
    try:
        grant = tokens.verify(request.app.state.service.cfg.data_dir, token) if token else None
    except tokens.TokenStoreError as exc:
        return page(request, "signin.html", status=503, next=target, error=str(exc))
    if grant is None:
        return page(
            request,
            "signin.html",
            status=401,
            next=target,
            error="that token is not valid here: mint one with 'blobdex token mint --name NAME --org ORG'",
        )
    answer = RedirectResponse(target, status_code=303, headers=HEADERS)
    answer.set_cookie(COOKIE, token, httponly=True, secure=True, samesite="strict", path="/")
    return answer


async def signout(request: Request) -> Response:
    answer = RedirectResponse("/signin" if request.app.state.require_token else "/", status_code=303, headers=HEADERS)
    answer.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")
    return answer


def _local(target: str | None) -> str:
    """A path on this server to go back to after signing in; anything else (another site) becomes /."""
    return target if target and target.startswith("/") and not target.startswith(("//", "/\\")) else "/"


def _models_linked(words: str, models: dict) -> Markup:
    """A type in words with each model it names linked to that model's table on the /docs page."""
    return Markup(
        re.sub(
            r"\b[A-Z]\w*\b",
            lambda m: f'<a href="#model-{m[0]}">{m[0]}</a>' if m[0] in models else m[0],
            str(escape(words)),
        )
    )


TEMPLATES.filters["models_linked"] = _models_linked


async def docs(request: Request) -> HTMLResponse:
    """The HTTP API for people: /openapi.json's operations, fields and answers, as the caller's org sees them."""
    choices = await offload(_choices, request.app.state.service, current_org.get())
    operations, models = openapi.readable(openapi.document(choices["repos"], choices["langs"]))
    return page(request, "docs.html", operations=operations, models=models)


async def pygments_css(request: Request) -> Response:
    return Response(highlight.stylesheet(), media_type="text/css", headers={"Cache-Control": "max-age=3600"})


PAGES = (
    "/",
    "/file/",
    "/tree/",
    "/repos",
    "/route",
    "/symbol",
    "/commits",
    "/docs",
    "/signin",
    "/signout",
    "/static/",
)  # the Guard's UI paths
OPEN = ("/signin", "/static/")  # answered without a token even when one is required
ROUTES = [
    Route("/", search, methods=["GET"]),
    Route("/file/{repo}/{path:path}", file_view, methods=["GET"]),
    Route("/tree/{repo}", tree, methods=["GET"]),
    Route("/tree/{repo}/{path:path}", tree, methods=["GET"]),
    Route("/repos", repos, methods=["GET"]),
    Route("/route", route, methods=["GET"]),
    Route("/symbol", symbol, methods=["GET"]),
    Route("/commits", commits, methods=["GET"]),
    Route("/docs", docs, methods=["GET"]),
    Route("/signin", signin, methods=["GET", "POST"]),
    Route("/signout", signout, methods=["POST"]),
    Route("/static/pygments.css", pygments_css, methods=["GET"]),
    Mount("/static", app=STATIC),
]
