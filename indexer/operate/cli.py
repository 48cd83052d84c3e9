"""The indexer's commands, which write: init, repo (add, list, remove), index, verify, runs (the history) and
webhooks (the webhooks process). Each body is parse -> call -> print."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import click

from indexer import config as configmod
from indexer import credentials
from indexer.operate import sources
from indexer.config import ConfigError, RepoSpec
from indexer.observe import say


def cli_config(ctx: click.Context, must_exist: bool | None = None) -> configmod.Config:
    """The command's config. A command needs one (found as git finds a repository: configmod.resolve_config_path)
    unless it names its data dir (--data-dir, BLOBDEX_DATA_DIR: a replica or a copy serves without one);
    `must_exist` says otherwise (init and repo add write the file)."""
    if must_exist is None:
        must_exist = ctx.obj["data_dir"] is None
    return configmod.load(ctx.obj["config"], ctx.obj["data_dir"], must_exist=must_exist)


def _toplevel(start: Path) -> Path | None:
    for path in (start, *start.parents):
        if (path / ".git").exists():
            return path
    return None


@click.command()
@click.option("--force", is_flag=True, help="Overwrite an existing config file.")
@click.option("--no-repo", is_flag=True, help="Do not add the enclosing git checkout as a repo.")
@click.pass_context
def init(ctx: click.Context, force: bool, no_repo: bool) -> None:
    """Write blobdex.toml; inside a git checkout, the checkout becomes the first repo."""
    path = configmod.resolve_config_path(ctx.obj["config"], discover=False)  # here, not a folder above
    if path.exists() and not force:
        raise ConfigError(f"{str(path)!r} exists already; edit it, use 'blobdex repo add', or pass --force")
    cfg = configmod.Config(path=path, data_dir=Path(configmod.DEFAULT_DATA_DIR))
    top = None if no_repo else _toplevel(path.resolve().parent)
    if top is not None:
        name = re.sub(r"[^A-Za-z0-9._-]", "-", top.name).strip(".-") or "repo"
        cfg = configmod.with_repo(cfg, RepoSpec(name=configmod.check_name("repo", name[:100]), url=str(top)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(configmod.dumps(cfg, configmod.DEFAULT_DATA_DIR), encoding="utf-8")
    click.echo(f"wrote {path}" + (f" with repo {cfg.repos[0].name!r} ({top})" if top else ""))


@click.group()
def repo() -> None:
    """Add, list or remove configured repos."""


@repo.command("add")
@click.argument("name")
@click.argument("url")
@click.option(
    "--ref",
    "refs",
    multiple=True,
    help="Branch, tag or full commit id to index (repeatable). Default (or HEAD): the remote's default "
    "branch, stored by name.",
)
@click.option("--org", default=configmod.DEFAULT_ORG, show_default=True, help="Tenant the repo belongs to.")
@click.option("--credential", help="Credential reference for https: env:NAME or file:PATH (never the token itself).")
@click.option("--username", help="Username sent with the credential (default: git).")
@click.option(
    "--no-check",
    is_flag=True,
    help="Do not contact the source to check that it is a reachable git repo with these refs (offline setup).",
)
@click.option("--replace", is_flag=True, help="Replace the repo of this name (its URL, refs and credential).")
@click.pass_context
def repo_add(ctx, name, url, refs, org, credential, username, no_check, replace) -> None:
    """Add a repo: https, ssh, file:// URLs or local paths (--replace to change one that exists)."""
    from indexer.mirror import redact

    cfg = cli_config(ctx, must_exist=False)  # the first repo added writes the file
    configmod.check_name("repo", name)
    configmod.check_name("org", org)
    before = cfg.repo(name, org)
    if before is not None and not replace:
        raise ConfigError(
            f"org {org!r} has a repo {name!r} already ({redact(before.url)}); pass --replace to replace it, or "
            f"pick another name"
        )
    if credential and not credentials.is_reference(credential):
        raise ConfigError(
            "the --credential value is not a reference (it is not shown, in case it is the secret "
            "itself): pass env:NAME or file:PATH, which name where the secret is kept"
        )
    spec = RepoSpec(name=name, url=url, org=org, refs=tuple(refs), credential=credential, username=username)
    skip = "or pass --no-check to add it without checking"
    spec = sources.checked(spec, check=not no_check, skip=skip, data_dir=cfg.data_dir)
    configmod.save(configmod.with_repo(cfg, spec))
    click.echo(
        f"{'replaced' if before else 'added'} repo {org}/{name} -> {redact(url)}"
        + (f" refs {', '.join(spec.refs)}" if spec.refs else " (default branch)")
        + (f" (was {redact(before.url)} refs {', '.join(before.refs) or 'default branch'})" if before else "")
    )


@repo.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def repo_list(ctx, as_json: bool) -> None:
    """List configured repos."""
    cfg = cli_config(ctx)
    from indexer.mirror import redact

    rows = [{"org": r.org, "name": r.name, "url": redact(r.url), "refs": list(r.refs)} for r in cfg.repos]
    if as_json:
        click.echo(json.dumps({"repos": rows}, indent=2))
        return
    for r in rows:
        click.echo(f"{r['org']}/{r['name']}  {r['url']}  {', '.join(r['refs']) or '(default branch)'}")


@repo.command("remove")
@click.argument("name")
@click.option("--org", default=configmod.DEFAULT_ORG, show_default=True)
@click.pass_context
def repo_remove(ctx, name: str, org: str) -> None:
    """Remove a repo from the config; the next 'blobdex index' drops it from the snapshot."""
    cfg = cli_config(ctx, must_exist=True)
    configmod.save(configmod.without_repo(cfg, name, org))
    click.echo(f"removed repo {org}/{name}; run 'blobdex index' to publish a snapshot without it")


@click.command()
@click.option("--full", is_flag=True, help="Publish a new snapshot even if nothing changed (caches still apply).")
@click.option("--json", "as_json", is_flag=True, help="Print the run report as one JSON object on stdout.")
@click.option(
    "--quiet",
    is_flag=True,
    help="Print nothing on success: no progress, no report (errors still go to "
    "stderr, and --json still prints the report).",
)
@click.option(
    "--fast-first/--no-fast-first",
    default=None,
    help="With much to embed, publish static vectors first (searchable in seconds), then the model's; "
    "default: fast_first in blobdex.toml (on).",
)
@click.option(
    "--backfill-seconds",
    type=click.IntRange(min=0),
    help="After publishing static vectors, embed with the model for at most this long; the next run goes on "
    "(0: until done; default: backfill_seconds in blobdex.toml).",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=0,
    help="When another run holds the lock, wait up to this many seconds for it instead of exiting 75 at once.",
)
@click.option(
    "--pending", is_flag=True, help="Index only the repos pushes queued (blobdex webhooks); nothing queued: exit 0."
)
@click.option(
    "--every",
    metavar="DURATION",
    help="Keep running: index every repo every DURATION (90s, 5m, 1h: a unit, at least 30s; +-10% jitter) and "
    "queued pushes in between, until SIGTERM or Ctrl-C (the run in progress finishes first).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Fetch and scan, then say what the run would do (new blobs, chunks to embed, the embedding time measured "
    "on this machine) and write nothing else.",
)
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False),
    help="After each run, write its figures here for node-exporter's textfile collector (a .prom file).",
)
@click.option(
    "--store", "store_url", help="Upload each published snapshot to this s3://BUCKET/PREFIX (or config `store`)."
)
@click.option(
    "--cluster", help="Spread new blobs and embedding over Ray: local, auto (the `ray start` here) or ray://HOST:PORT."
)
@click.option("--workers", type=click.IntRange(0), help="Ray workers (embedding actors) to use; 0: every CPU.")
@click.pass_context
def index(ctx, full, as_json, quiet, fast_first, backfill_seconds, wait, pending, every, dry_run, metrics_file, **more):
    """Mirror, scan, chunk, embed, write and publish. Exit code 1 if any repo failed."""
    from indexer.build import run

    overrides = {"store": more["store_url"], "cluster": more["cluster"], "cluster_workers": more["workers"]}
    overrides |= {"fast_first": fast_first, "backfill_seconds": backfill_seconds}
    cfg = _index_config(ctx, overrides)
    if dry_run:
        from indexer.build.plan import plan

        found = plan(cfg, wait=wait)
        click.echo(json.dumps(found.to_dict(), indent=2) if as_json else found.to_text())
        return
    out = Output(cfg, as_json, quiet, metrics_file)
    if every is not None:
        return _index_every(ctx, cfg, every, out, lambda: _index_config(ctx, overrides), wait)
    if pending:
        from indexer.operate.schedule import drain

        report = drain(cfg, full=full, show_progress=not quiet, wait=wait)
        if report is None:
            if not quiet:
                say("nothing queued")
            return
    else:
        report = run(cfg, full=full, show_progress=not quiet, wait=wait)
    out.show(report)
    ctx.exit(1 if report.failed else 0)


def _index_config(ctx, overrides: dict) -> configmod.Config:
    """The config with the command's options over it (`overrides`: config fields; None leaves one as it is)."""
    cfg = cli_config(ctx, must_exist=True)
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})


class Output:
    """Where a run's report goes: stdout as text or JSON (nothing with --quiet but the JSON), and the metrics file."""

    def __init__(self, cfg, as_json: bool, quiet: bool, metrics_file: str | None, lines: bool = False):
        self.cfg, self.as_json, self.quiet, self.metrics_file, self.lines = cfg, as_json, quiet, metrics_file, lines

    def show(self, report) -> None:
        if self.as_json:
            click.echo(json.dumps(report.to_dict()) if self.lines else report.to_json())
        elif not self.quiet:
            click.echo(report.to_text())
        if self.metrics_file:
            from indexer import runs as history
            from indexer.observe import run_textfile

            run_textfile(self.metrics_file, report.to_dict(), history.last_success(self.cfg.data_dir))


def _index_every(ctx, cfg, every: str, out: Output, load_config, wait) -> None:
    """The --every loop: a report per run (one JSON line each with --json), until SIGTERM or SIGINT."""
    import signal
    import threading

    from indexer.operate.schedule import every as loop
    from indexer.operate.schedule import seconds

    interval = seconds(every)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    say(f"indexing every {every} (and queued pushes in between); stop with SIGTERM")
    out.lines = True
    loop(
        cfg,
        interval,
        stop,
        out.show,
        load_config=load_config,
        show_progress=False,
        wait=wait,
    )
    say("stopped")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def verify(ctx, as_json: bool) -> None:
    """Reconcile the live snapshot: manifest -> vectors -> lexical -> files. Exit 1 on any mismatch."""
    from indexer.snapshot.verify import verify as run_verify

    cfg = cli_config(ctx)
    snapshot_id, problems = run_verify(cfg.data_dir)
    # A run checks the live snapshot as verify does (snapshot.verify.deep_check) and rebuilds it from the cache when
    # it finds damage, so the next scheduled run repairs what this finds; running one now is the step to name.
    repair = "blobdex index" if problems else None
    if as_json:
        answer = {"snapshot_id": snapshot_id, "ok": not problems, "problems": problems, "repair": repair}
        click.echo(json.dumps(answer, indent=2))
    else:
        for p in problems:
            click.echo(f"MISMATCH {p}")
        click.echo(
            f"snapshot {snapshot_id}: "
            + (
                "ok"
                if not problems
                else f"{len(problems)} problem(s); run '{repair}' to rebuild it from the cache (the next scheduled "
                f"run would too; the snapshot keeps serving meanwhile)"
            )
        )
    ctx.exit(1 if problems else 0)


@click.command()
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(1, 200), help="How many runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs' full reports as JSON.")
@click.pass_context
def runs(ctx, limit: int, as_json: bool) -> None:
    """The latest index runs, newest first: when, how long, what each did (the history keeps the last 200)."""
    from indexer import runs as history

    found = history.history(cli_config(ctx).data_dir, limit)
    if as_json:
        click.echo(json.dumps({"runs": found}, indent=2))
        return
    if not found:
        click.echo("no run recorded yet: run 'blobdex index'")
    for entry in found:
        s = history.summary(entry)
        what = s["outcome"] + (f" {s['snapshot_id']}" if s["outcome"] == "published" else "")
        if s["repeats"] > 1:
            what += f" ({s['repeats']} runs in a row since {s['first_started_at']})"
        failed = f", {s['repos_failed']} repo(s) failed" if s["repos_failed"] else ""
        embedded = f", {s['chunks_embedded']} chunks embedded" if s["chunks_embedded"] else ""
        click.echo(f"{s['started_at']}  {s['seconds']:>8.1f} s  {what}{failed}{embedded}")
        if s["error"]:
            click.echo(f"    error: {s['error']}")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (put a TLS proxy in front).")
@click.option("--port", default=8766, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--control",
    is_flag=True,
    help="Also serve the operator's control API under /admin/v1 (admin tokens from 'blobdex token mint --admin').",
)
@click.pass_context
def webhooks(ctx, host: str, port: int, control: bool) -> None:
    """Receive push webhooks (GitHub, GitLab, Gitea, Forgejo) at /hooks into the queue 'blobdex index --pending'
    drains. A process apart from 'blobdex serve', which stays read-only."""
    import uvicorn

    from indexer.listen import bind
    from indexer.observe import serving_logs
    from indexer.operate.app import app

    cfg = cli_config(ctx, must_exist=True)
    if not cfg.webhook_secret:
        raise ConfigError(
            f'no webhook_secret in {str(cfg.path)!r}: add webhook_secret = "env:NAME" (or "file:PATH") naming the '
            f"secret the forge signs pushes with"
        )
    credentials.resolve(cfg.webhook_secret, "webhook_secret")  # said now, not on the first push
    if control:
        from indexer.tokens import check as check_tokens

        check_tokens(cfg.data_dir)  # a damaged token store is said now, not as an error on every request
    sock = bind(host, port)
    serving_logs()
    routes = "/hooks" + (" and the control API at /admin/v1" if control else "")
    say(f"receiving webhooks on http://{host}:{port}{routes}")
    asgi = app(ctx.obj["config"], ctx.obj["data_dir"], control)
    uvicorn.Server(uvicorn.Config(asgi, log_level="warning")).run(sockets=[sock])


COMMANDS = (init, repo, index, verify, runs, webhooks)
