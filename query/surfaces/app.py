"""The HTTP server's composition root: the Guard in front of the /v1 routes, the contract facades (codesearch,
the Codebase Index Protocol, Lucos) and MCP at /mcp, over one query service.

Binds to localhost by default and refuses requests whose Host or Origin is not local (DNS rebinding) unless
more hosts are allowed. With tokens required, every request needs a bearer token minted by `blobdex token mint`;
the token names the org the request runs in.
"""

from __future__ import annotations

import contextlib
import json
import logging
from functools import partial

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount

from indexer.observe import RequestLog, route_of
from query.service import Service
from query.surfaces import api, cip, codesearch, history_pages, metrics, oauth, web
from query.surfaces import lucos as lucos_contract
from query.surfaces.cip_auth import AuthSettings, load_settings
from query.surfaces.guard import API_PATHS, MAX_BODY_BYTES, Guard, current_org, mcp_security, served_hosts
from query.surfaces.mcp import build as build_mcp

LUCOS_PREFIX = "/api/v1"
CIP_PREFIX = "/codebase-index"
# Probes, scrapes and the sign-in metadata a 401 points at need no token.
OPEN_PATHS = (
    "/healthz",
    "/readyz",
    "/metrics",
    LUCOS_PREFIX + "/health/",
    oauth.METADATA_PATH,
    oauth.METADATA_PATH + oauth.MCP_PATH,
)
# What the access log and the request metrics name a path by: a route, never a path's ids or text.
ROUTE_NAMES = tuple(r.path for r in api.ROUTES if "{" not in r.path) + (
    "/v1/sessions",
    "/mcp",
    LUCOS_PREFIX,
    CIP_PREFIX,
    *web.PAGES,
    *history_pages.PAGES,
)


async def unrouted(request: Request, exc: HTTPException) -> Response:
    """An unknown path or a wrong method: the site's page with one sentence and a way back for a browser (it asks
    for text/html), the API's JSON for everyone else."""
    answer = await api.unrouted(request, exc)
    if "text/html" not in request.headers.get("accept", "") or request.url.path.startswith(API_PATHS):
        return answer
    said = json.loads(answer.body)["error"]["message"]
    if answer.status_code == 404:
        said = f"there is no page {request.url.path} on this server"
    page = web.error_page(request, answer.status_code, said)
    if "Allow" in answer.headers:
        page.headers["Allow"] = answer.headers["Allow"]
    return page


@contextlib.asynccontextmanager
async def _lifespan(mcp, _app):
    async with mcp.session_manager.run():
        yield


def app(
    service: Service,
    allowed_hosts: list[str] | None = None,
    require_token: bool = False,
    default_org: str = "default",
    codesearch_prefix: str = "/codesearch",
    lucos: bool = False,
    cip_settings: AuthSettings | None = None,
) -> RequestLog:
    """The whole server as one ASGI app."""
    allowed = served_hosts(allowed_hosts)
    mcp = build_mcp(service, org=current_org.get)
    mcp_app = mcp.streamable_http_app(transport_security=mcp_security(allowed), max_request_body_size=MAX_BODY_BYTES)
    mcp_app.add_exception_handler(HTTPException, unrouted)  # every unknown path ends there
    mcp_app.state.require_token = require_token  # what an unknown page's page says about signing in
    # The Lucos routes authenticate by the gateway's trusted headers, unless tokens are required: then
    # they need one too, and its org must be the X-Org-Id they send.
    token_org = current_org.get if require_token else None
    routes = [
        *api.ROUTES,
        *web.ROUTES,
        *history_pages.ROUTES,
        *([Mount(LUCOS_PREFIX, app=lucos_contract.app(service, token_org))] if lucos else []),
        Mount(codesearch_prefix, app=codesearch.app(service)),
        Mount(CIP_PREFIX, app=cip.app(service, cip_settings or load_settings(service.cfg))),
        Mount("/", app=mcp_app),  # last: the MCP app serves /mcp itself (mounting it at /mcp redirects)
    ]
    root = Starlette(
        routes=routes,
        lifespan=partial(_lifespan, mcp),
        exception_handlers={HTTPException: unrouted, Exception: api.internal},
    )
    root.state.service = service
    root.state.require_token = require_token
    root.state.metrics = metrics.registry(service)
    root.state.issuer = oauth.Issuer.from_config(service.cfg.protocol_auth)
    # The Codebase Index Protocol has JWTs of its own.
    exempt = (CIP_PREFIX + "/",) + ((LUCOS_PREFIX + "/",) if lucos and not require_token else ())
    guarded = Guard(
        root,
        allowed,
        require_token,
        service.cfg.data_dir,
        default_org,
        exempt,
        OPEN_PATHS,
        (*web.PAGES, *history_pages.PAGES),
        web.OPEN,
        root.state.issuer,
        shapes=(
            (codesearch_prefix + "/", codesearch.shape),
            (CIP_PREFIX + "/", cip.shape),
            *([(LUCOS_PREFIX + "/", lucos_contract.shape)] if lucos else []),
        ),
    )
    names = route_of((*ROUTE_NAMES, codesearch_prefix))
    return RequestLog(guarded, "serve", names, logging.getLogger("query.access"))
