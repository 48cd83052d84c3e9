"""What the servers tell their operators: one access-log line per request with a request id (taken from
X-Request-Id when the caller sent a sane one, else made, and always echoed back), logs as text or JSON lines, and
Prometheus metrics (the official prometheus-client) for `/metrics` and the indexer's textfile."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from datetime import datetime, timezone

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")  # what is echoed back and logged: no header injection
LOG_FORMATS = ("text", "json")
# Request latency buckets (seconds): a search is ~10-100 ms, a route a few hundred, a cold open seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# One set per process (prometheus-client's default registry): both servers label by `server`.
REQUESTS = Counter("blobdex_http_requests", "HTTP requests answered", ["server", "route", "method", "status"])
LATENCY = Histogram("blobdex_http_request_seconds", "HTTP request latency", ["server", "route"], buckets=BUCKETS)
TOOL_SECONDS = Histogram(
    "blobdex_tool_seconds", "MCP tool calls by tool and outcome", ["tool", "outcome"], buckets=BUCKETS
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and a request's fields when the line is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


_format = {"now": "text"}  # the process's --log-format, for say()


def say(line: str, level: str = "info", message: str | None = None) -> None:
    """A line for the person running a command (a banner, an error, a note), on stderr: `line` as written, or under
    `--log-format json` a JSON record of `message` (else `line`) like every log line, so a collector that parses each
    line alone never meets plain text."""
    if _format["now"] == "json":
        record = logging.LogRecord("blobdex", getattr(logging, level.upper()), "", 0, message or line, None, None)
        line = JsonFormatter().format(record)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def log_format() -> str:
    """The process's --log-format: "text" or "json"."""
    return _format["now"]


def setup_logging(fmt: str = "text", verbose: bool = False) -> None:
    """Logs to stderr (stdout carries data: a report, JSON, MCP), as `blobdex: LEVEL: message` or JSON lines;
    blobdex's own details at debug with `verbose`, the libraries' never."""
    _format["now"] = fmt
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "blobdex", False)]
    if ours or not root.handlers:  # a handler someone else installed (a test's capture) is left alone
        handler = ours[0] if ours else logging.StreamHandler(sys.stderr)
        handler.blobdex = True
        text = logging.Formatter("blobdex: %(levelname)s: %(message)s")
        handler.setFormatter(JsonFormatter() if fmt == "json" else text)
        if not ours:
            root.addHandler(handler)
        root.setLevel(logging.WARNING)
    for name in ("indexer", "query"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.NOTSET)


def serving_logs() -> None:
    """A server's own lines at info: the access log, the snapshot swaps (the libraries stay at warning)."""
    for name in ("indexer", "query"):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)


class RequestLog:
    """ASGI middleware: a request id for every request, echoed as X-Request-Id; one access-log line when it is
    answered (method, path, status, milliseconds, request id); the request counted and timed by `route_of(path)`
    (a few fixed names: a path carries ids and user text, which must not become labels)."""

    def __init__(self, app, server: str, route_of, logger: logging.Logger):
        self.app, self.server, self.route_of, self.log = app, server, route_of, logger

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"x-request-id"), "")
        request_id = given if REQUEST_ID_RE.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        status = [500]
        started = time.perf_counter()

        async def tagged(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        finally:
            seconds = time.perf_counter() - started
            route, method = self.route_of(scope["path"]), scope.get("method", "")
            REQUESTS.labels(self.server, route, method, str(status[0])).inc()
            LATENCY.labels(self.server, route).observe(seconds)
            fields = {
                "method": method,
                "path": scope["path"],
                "status": status[0],
                "ms": round(seconds * 1000, 1),
                "request_id": request_id,
            }
            self.log.info(
                "%s %s %d %.1f ms %s",
                method,
                scope["path"],
                status[0],
                seconds * 1000,
                request_id,
                extra={"fields": fields},
            )


def route_of(prefixes: tuple[str, ...]):
    """A label for a path: the longest of `prefixes` it starts with, else "other"."""
    ordered = sorted(prefixes, key=len, reverse=True)

    def label(path: str) -> str:
        return next((p for p in ordered if path == p or path.startswith(p.rstrip("/") + "/")), "other")

    return label


def exposition(*registries) -> tuple[bytes, str]:
    """The text format of prometheus-client's default registry and of `registries` (a server's own gauges)."""
    from prometheus_client import REGISTRY

    return b"".join(generate_latest(r) for r in (REGISTRY, *registries)), CONTENT_TYPE_LATEST


def run_textfile(path, report: dict, last_success: float | None) -> None:
    """The run's figures for node-exporter's textfile collector (written whole: a scrape never reads half)."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    registry = CollectorRegistry()

    def gauge(name: str, doc: str, value: float, **labels) -> None:
        metric = Gauge(name, doc, list(labels), registry=registry)
        (metric.labels(**labels) if labels else metric).set(value)

    totals = report.get("totals", {})
    gauge("blobdex_index_last_run_timestamp_seconds", "When the last index run ended", time.time())
    gauge("blobdex_index_last_run_ok", "1 when the last index run had no failure", float(bool(report.get("ok"))))
    if last_success is not None:
        gauge(
            "blobdex_index_last_success_timestamp_seconds", "When an index run last ended without failure", last_success
        )
    gauge("blobdex_index_chunks", "Chunks in the live snapshot", totals.get("chunks", 0))
    gauge("blobdex_index_chunks_embedded", "Chunks the last run embedded", totals.get("chunks_embedded", 0))
    gauge("blobdex_index_repos_failed", "Repos the last run left stale", totals.get("repos_failed", 0))
    stage = Gauge("blobdex_index_stage_seconds", "Seconds of the last run by stage", ["stage"], registry=registry)
    for name, seconds in (report.get("seconds") or {}).items():
        stage.labels(name).set(seconds)
    write_to_textfile(str(path), registry)
