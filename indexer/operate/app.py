"""The webhooks process as one ASGI app (`blobdex webhooks`): the push webhooks, the operator's control API when
asked for, health and metrics, composed here so that neither surface mounts the other."""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from indexer.config import Config, load
from indexer.observe import RequestLog, exposition, route_of
from indexer.operate import control as control_api
from indexer.operate.http import error
from indexer.operate.queue import Queue
from indexer.operate.webhooks import hooks


class QueueCollector:
    """The queue's jobs by state, read on each scrape."""

    def __init__(self, data_dir):
        self.data_dir = data_dir

    def collect(self):
        with Queue(self.data_dir) as queue:
            jobs = queue.jobs()
        now = time.time()
        gauge = GaugeMetricFamily("blobdex_queue_jobs", "Queued repos by state", labels=["state"])
        leased = sum(1 for j in jobs if j.leased_by and (j.lease_until or 0) >= now)
        waiting = sum(1 for j in jobs if not (j.leased_by and (j.lease_until or 0) >= now) and j.not_before > now)
        gauge.add_metric(["leased"], leased)
        gauge.add_metric(["backoff"], waiting)
        gauge.add_metric(["ready"], len(jobs) - leased - waiting)
        yield gauge


async def healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def metrics(request: Request) -> Response:
    body, content_type = exposition(request.app.state.metrics)
    return Response(body, media_type=content_type)


def app(config_path, data_dir=None, control: bool = False) -> RequestLog:
    """The webhooks process as one ASGI app; the config is read again for every request (a repo added with
    `blobdex repo add` or the control API is matched at once)."""

    def config() -> Config:
        return load(config_path, data_dir, must_exist=True)

    routes = [Route("/hooks", hooks, methods=["POST"]), Route("/healthz", healthz), Route("/metrics", metrics)]
    if control:
        routes.append(Mount(control_api.PREFIX, routes=control_api.ROUTES))
    root = Starlette(routes=routes, exception_handlers={404: _unrouted, 405: _unrouted})
    root.state.config = config
    own = CollectorRegistry(auto_describe=False)
    own.register(QueueCollector(config().data_dir))
    root.state.metrics = own
    names = route_of(("/hooks", "/healthz", "/metrics", control_api.PREFIX))
    return RequestLog(root, "webhooks", names, logging.getLogger("indexer.access"))


async def _unrouted(request: Request, exc) -> Response:
    if exc.status_code == 405:
        return error(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}")
    return error(404, "not_found", f"no route {request.url.path}: webhooks POST to /hooks")
