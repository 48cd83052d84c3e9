"""The page's history views, over the history tools every surface shares (query/history.py, blame.py, diff.py): a
file's or folder's log, blame (each line's last commit, author and date), a commit (its message, changed files and
diff) and a compare of two refs or commits, each paged and capped as the tools are. Server-rendered, as the rest
of the page (query/surfaces/web.py, whose page() and crumbs they use)."""

from __future__ import annotations

from functools import partial
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from indexer.errors import BlobdexError
from query.history import NoHistory
from query.surfaces import offload
from query.surfaces.guard import current_org
from query.surfaces.web import _failed, page

LOG_PAGE = 20  # commits a page
DIFF_PAGE = 20  # files a page
BLAME_LINES = 500  # lines a page, as the file view shows them


def _next(request: Request, cursor: str | None) -> str | None:
    """This page's URL asking for the page after it."""
    if cursor is None:
        return None
    asked = {k: v for k, v in request.query_params.items() if k != "cursor"}
    return f"{request.url.path}?{urlencode({**asked, 'cursor': cursor})}"


async def log(request: Request) -> Response:
    """The commits that touched a file or folder (a repo's, without a path), newest first, through renames."""
    service, org = request.app.state.service, current_org.get()
    repo, path = request.path_params["repo"], request.path_params.get("path") or None
    ref, cursor = request.query_params.get("ref") or None, request.query_params.get("cursor")
    context = {"repo": repo, "path": path or "", "ref": ref, "page": None, "more": None}
    try:
        found = await offload(partial(service.log, org, repo, path, ref, limit=LOG_PAGE, cursor=cursor))
    except BlobdexError as exc:
        return _failed(request, exc, "log.html", **context)
    indexed = await offload(service.reader().files, org)  # a changed path links where the file view can show it
    more = _next(request, found.next_cursor)
    return page(request, "log.html", **{**context, "page": found, "more": more, "indexed": indexed})


async def blame(request: Request) -> Response:
    """For each line of a file, the commit that last changed it, with its author and date, 500 lines a page."""
    service, org = request.app.state.service, current_org.get()
    repo, path = request.path_params["repo"], request.path_params["path"]
    ref = request.query_params.get("ref") or None
    try:
        start = max(int(request.query_params.get("start") or 1), 1)
    except ValueError:
        start = 1
    context = {"repo": repo, "path": path, "ref": ref, "found": None, "more": None}
    try:
        found = await offload(service.blame, org, repo, path, ref, start, start + BLAME_LINES - 1)
    except BlobdexError as exc:
        return _failed(request, exc, "blame.html", **context)
    if found.line_end < found.total_lines:
        later = {**({"ref": ref} if ref else {}), "start": found.line_end + 1}
        context["more"] = f"{request.url.path}?{urlencode(later)}"
    return page(request, "blame.html", **{**context, "found": found})


async def commit(request: Request) -> Response:
    """One commit: its message, author and date, parents, and its change against its first parent, paged."""
    service, org = request.app.state.service, current_org.get()
    repo, commit_id = request.path_params["repo"], request.path_params["commit"]
    cursor = request.query_params.get("cursor")
    context = {"repo": repo, "path": "", "ref": None, "commit": None, "diff": None, "more": None}
    try:
        found = await offload(partial(service.log, org, repo, None, commit_id, limit=1))
        if not found.commits:
            raise NoHistory(f"no commit {commit_id!r} in the history of repo {repo!r}")
        context["commit"] = c = found.commits[0]
        if c["parents"]:  # a root commit's change is its paths, listed with it
            diff = partial(service.diff, org, repo, c["parents"][0], c["commit_id"], limit=DIFF_PAGE, cursor=cursor)
            context["diff"] = await offload(diff)
            context["more"] = _next(request, context["diff"].next_cursor)
    except BlobdexError as exc:
        return _failed(request, exc, "commit.html", **context)
    return page(request, "commit.html", **context, indexed=await offload(service.reader().files, org))


async def compare(request: Request) -> Response:
    """The change from one ref or commit to another (`?base=&head=`, a folder or file with `path`), paged."""
    service, org = request.app.state.service, current_org.get()
    repo, q = request.path_params["repo"], request.query_params
    base, head, path = (q.get("base") or "").strip(), (q.get("head") or "").strip(), q.get("path") or None
    context = {"repo": repo, "path": "", "ref": None, "base": base, "head": head, "diff": None, "more": None}
    if not (base and head):
        return page(request, "compare.html", **context)  # the form alone
    try:
        found = await offload(
            partial(service.diff, org, repo, base, head, path, limit=DIFF_PAGE, cursor=q.get("cursor"))
        )
    except BlobdexError as exc:
        return _failed(request, exc, "compare.html", **context)
    return page(request, "compare.html", **{**context, "diff": found, "more": _next(request, found.next_cursor)})


PAGES = ("/log/", "/blame/", "/commit/", "/compare/")  # the Guard's UI paths, beside web.PAGES
ROUTES = [
    Route("/log/{repo}", log, methods=["GET"]),
    Route("/log/{repo}/{path:path}", log, methods=["GET"]),
    Route("/blame/{repo}/{path:path}", blame, methods=["GET"]),
    Route("/commit/{repo}/{commit}", commit, methods=["GET"]),
    Route("/compare/{repo}", compare, methods=["GET"]),
]
