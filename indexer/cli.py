"""CLI commands that write: init, repo add/list/remove, index, verify. Each body is parse -> call -> print."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

from indexer import config as configmod
from indexer.config import ConfigError, RepoSpec


def cli_config(ctx: click.Context, must_exist: bool = False) -> configmod.Config:
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
    path = configmod.resolve_config_path(ctx.obj["config"])
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
@click.option("--ref", "refs", multiple=True,
              help="Branch, tag or full commit id to index (repeatable). Default: the remote's default branch.")
@click.option("--org", default=configmod.DEFAULT_ORG, show_default=True, help="Tenant the repo belongs to.")
@click.option("--credential", help="Credential reference for https: env:NAME or file:PATH (never the token itself).")
@click.option("--username", help="Username sent with the credential (default: git).")
@click.pass_context
def repo_add(ctx, name, url, refs, org, credential, username) -> None:
    """Add (or replace) a repo: https, ssh, file:// URLs or local paths."""
    cfg = cli_config(ctx)
    configmod.check_name("repo", name)
    configmod.check_name("org", org)
    if credential and not re.match(r"^(env|file):.+", credential):
        raise ConfigError(f"credential {credential!r} is not a reference: use env:NAME or file:PATH, "
                          f"never the secret itself")
    if "://" not in url and not re.match(r"^[\w.-]+@[\w.-]+:", url):
        local = Path(url).expanduser()
        if not local.exists():
            raise ConfigError(f"local repo path {url!r} does not exist; give an existing path or a URL")
        url = str(local.resolve())
    cfg = configmod.with_repo(cfg, RepoSpec(name, url, org, tuple(refs), credential, username))
    configmod.save(cfg)
    click.echo(f"added repo {org}/{name} -> {url}" + (f" refs {', '.join(refs)}" if refs else ""))


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
@click.option("--quiet", is_flag=True, help="No progress output.")
@click.pass_context
def index(ctx, full: bool, as_json: bool, quiet: bool) -> None:
    """Mirror, scan, chunk, embed, write and publish. Exit code 1 if any repo failed."""
    from indexer.index import run

    cfg = cli_config(ctx, must_exist=True)
    report = run(cfg, full=full, show_progress=not quiet)
    click.echo(report.to_json() if as_json else report.to_text())
    ctx.exit(1 if report.failed else 0)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def verify(ctx, as_json: bool) -> None:
    """Reconcile the live snapshot: manifest -> vectors -> lexical -> files. Exit 1 on any mismatch."""
    from indexer.verify import verify as run_verify

    cfg = cli_config(ctx)
    snapshot_id, problems = run_verify(cfg.data_dir)
    if as_json:
        click.echo(json.dumps({"snapshot_id": snapshot_id, "ok": not problems, "problems": problems}, indent=2))
    else:
        for p in problems:
            click.echo(f"MISMATCH {p}")
        click.echo(f"snapshot {snapshot_id}: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    ctx.exit(1 if problems else 0)


COMMANDS = (init, repo, index, verify)
