"""The servers: `blobdex serve` (the HTTP API, MCP over streamable HTTP and the page, following CURRENT or a
bucket) and `blobdex mcp` (MCP over stdio, for agent runtimes that spawn their servers)."""

from __future__ import annotations

import socket

import click

from indexer.config import DEFAULT_ORG
from indexer.listen import bind
from indexer.observe import say, serving_logs
from indexer.operate.cli import cli_config


@click.command()
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind (localhost unless told otherwise)."
)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="Also accept this Host/Origin (repeatable); needed when serving beyond localhost.",
)
@click.option("--require-token", is_flag=True, help="Refuse requests without a bearer token from 'blobdex token mint'.")
@click.option("--org", default=DEFAULT_ORG, show_default=True, help="Org of requests that carry no token.")
@click.option(
    "--codesearch-prefix",
    default="/codesearch",
    show_default=True,
    help="Where the codebase-semantic-search HTTP API is mounted.",
)
@click.option(
    "--lucos",
    is_flag=True,
    help="Serve the Lucos API under /api/v1, trusting X-Org-Id/X-User-Id headers: only behind a gateway.",
)
@click.option(
    "--store", "store_url", help="Serve as a read replica of this s3://BUCKET/PREFIX (keys: the config's store_*)."
)
@click.option("--poll-seconds", default=10.0, show_default=True, type=click.FloatRange(1), help="Replica poll period.")
@click.option(
    "--shards",
    default=0,
    type=click.IntRange(0, 1024),
    help="Split the repos between this many shards on Ray Serve and serve as their front (docs/scale-out.md).",
)
@click.option(
    "--cluster",
    default="local",
    show_default=True,
    help="With --shards: the Ray cluster to run them on (ray://HOST:10001, auto, or local: Ray started here).",
)
@click.pass_context
def serve(
    ctx, host, port, allow_hosts, require_token, org, codesearch_prefix, lucos, store_url, poll_seconds, shards, cluster
) -> None:
    """Serve the HTTP API (/v1/...) and MCP over streamable HTTP (/mcp), following CURRENT; with --store, as a
    read replica that keeps its data dir at the object store's newest snapshot; with --shards, as the front of
    shards that each hold some of the repos."""
    import uvicorn

    from query.surfaces.guard import is_local
    from query.surfaces.app import app
    from query.service import Service
    from query.threads import one_thread_numerics

    if not codesearch_prefix.startswith("/") or codesearch_prefix in ("/", "/v1", "/mcp"):
        raise click.BadParameter("use a path like /codesearch, not /, /v1 or /mcp", param_hint="--codesearch-prefix")
    from indexer.tokens import check as check_tokens
    from query.surfaces.cip_auth import load_settings

    cfg = cli_config(ctx)
    cip_settings = load_settings(cfg)  # its secrets resolved and checked now: one sentence, not a key anyone has
    check_tokens(cfg.data_dir)  # a damaged token store is said now, not as an error on every request
    sock = bind(host, port)
    serving_logs()  # an access line per request, a line per snapshot swap
    one_thread_numerics()
    if store_url:
        from indexer.store import store_for
        from query.replica import Replica

        name = f"{socket.gethostname()}:{port}"
        Replica(store_for(cfg, store_url), cfg.data_dir, poll_seconds, name, max(2, cfg.keep_snapshots)).start()
    service = _sharded(cfg, shards, cluster, store_url, poll_seconds) if shards else Service(cfg, prepare=True)
    service.embedder_for(service.reader())  # fail now, with the reason, rather than on the first request
    if not is_local(host) and not (require_token or allow_hosts):
        warning = f"binding {host} without --require-token: anyone who can reach it can read every indexed repo"
        say(f"blobdex: warning: {warning}", "warning", warning)
    base = f"http://{host}:{port}"
    say(f"serving snapshot {service.reader().snapshot_id} on {base} (MCP at /mcp)")
    bearer = ' --header "Authorization: Bearer TOKEN"' if require_token else ""
    for line in (  # once, for whoever started it: where to look, how to connect an agent, where the data is
        f"  the page: {base}/ (search, files, repos, routes)",
        f"  an agent: claude mcp add --transport http{bearer} blobdex {base}/mcp",
        f"  the data: {cfg.data_dir} (config {cfg.path})",
        "  then try: blobdex search 'what the code does' -n 5, blobdex status; Ctrl-C stops the server",
    ):
        say(line)
    asgi = app(service, list(allow_hosts), require_token, org, codesearch_prefix.rstrip("/"), lucos, cip_settings)
    uvicorn.Server(uvicorn.Config(asgi, log_level="warning")).run(sockets=[sock])


def _sharded(cfg, count: int, cluster: str, store_url: str | None, poll: float):
    """The front of `count` shards on Ray Serve (query.front, query.shard_serve); with a store, each shard follows
    the bucket as this process does."""
    from query.front import FrontService
    from query.service import Service
    from query.shard_serve import start

    model_ids = Service(cfg).model_ids()
    say(f"blobdex: starting {count} shards on Ray Serve ({cluster}); each opens its repos' parts")
    return FrontService(cfg, start(cfg, count, model_ids, cluster, store_url, poll))


WARM_JOIN_SECONDS = 60


@click.command()
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.pass_context
def mcp(ctx, org) -> None:
    """Serve MCP over stdio, for agent runtimes that spawn their servers. Nothing but MCP touches stdout."""
    from query.surfaces.mcp import build, started_service

    cfg = cli_config(ctx)
    current = cfg.data_dir / "CURRENT"  # read here: indexer.snapshot would import numpy and Arrow before initialize
    if not (current.is_file() and current.read_text(encoding="utf-8").strip()):
        from indexer.snapshot import open_manifest

        open_manifest(cfg.data_dir)  # nothing published: one sentence now, not an error on every tool call
    # initialize and tools/list are answered at once; the query engine, the snapshot and the model load meanwhile
    service, warming = started_service(cfg)
    build(service, org=lambda: org).run("stdio")
    # A client that closes at once can leave the warm thread inside the model's native code; interpreter shutdown
    # under it printed "terminate called without an active exception". Let it finish first (seconds at most).
    warming.join(WARM_JOIN_SECONDS)


COMMANDS = (serve, mcp)
