"""CLI commands that write: init, repo add/list/remove, index, verify. Each body is parse -> call -> print."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

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
@click.pass_context
def repo_add(ctx, name, url, refs, org, credential, username, no_check) -> None:
    """Add (or replace) a repo: https, ssh, file:// URLs or local paths."""
    from indexer.mirror import redact

    cfg = cli_config(ctx)
    configmod.check_name("repo", name)
    configmod.check_name("org", org)
    if credential and not re.match(r"^(env|file):.+", credential):
        raise ConfigError(
            "the --credential value is not a reference (it is not shown, in case it is the secret "
            "itself): pass env:NAME or file:PATH, which name where the secret is kept"
        )
    url = _source(name, url)
    spec = RepoSpec(name=name, url=url, org=org, refs=tuple(refs), credential=credential, username=username)
    if no_check:
        if "HEAD" in refs and refs != ("HEAD",):
            raise ConfigError(
                f"repo {name!r}: --ref HEAD with other refs needs the check to learn which branch "
                f"HEAD is; name that branch instead, or drop --no-check"
            )
        spec = replace(spec, refs=tuple(r for r in refs if r != "HEAD"))
    else:
        spec = replace(spec, refs=_checked_refs(spec))
    configmod.save(configmod.with_repo(cfg, spec))
    click.echo(
        f"added repo {org}/{name} -> {redact(url)}"
        + (f" refs {', '.join(spec.refs)}" if spec.refs else " (default branch)")
    )


def _source(name: str, url: str) -> str:
    """`url` made absolute if it is a local path; refused if it carries a password or token."""
    from indexer.mirror import redact

    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"repo {name!r}: the url cannot be parsed ({exc}); give a URL or a local path") from exc
    if parts.password:
        user = f" --username {parts.username}" if parts.username and parts.username != "git" else ""
        raise ConfigError(
            f"repo {name!r}: the url carries a password or token, which would be stored in plain "
            f"text; keep the secret in an environment variable and run 'blobdex repo add {name} "
            f"{redact(url)} --credential env:VAR{user}'"
        )
    if "://" in url or re.match(r"^[\w.-]+@[\w.-]+:", url):
        return url
    local = Path(url).expanduser()
    if not local.exists():
        raise ConfigError(f"local repo path {url!r} does not exist; give an existing path or a URL")
    return str(local.resolve())


def _checked_refs(spec: RepoSpec) -> tuple[str, ...]:
    """The refs to store for `spec`, after asking its source which refs it has (git ls-remote).

    A wrong URL or ref is refused here, when the person who made it is watching, rather than at the
    next scheduled index run. HEAD (or no ref) becomes the name of the source's default branch.
    """
    from dulwich.client import HTTPUnauthorized, get_transport_and_path
    from dulwich.errors import GitProtocolError, HangupException, NotGitRepository

    from indexer.mirror import MirrorError, quiet_retries, redact, resolve_credential
    from indexer.scan import HEX40_RE

    where = f"cannot add repo {spec.name!r} from {redact(spec.url)}"
    skip = "or pass --no-check to add it without checking"
    try:
        kwargs = {}
        if spec.credential:
            kwargs = {"username": spec.username or "git", "password": resolve_credential(spec.credential)}
        client, path = get_transport_and_path(spec.url, **kwargs)
        with quiet_retries():
            result = client.get_refs(path)
    except MirrorError as exc:
        raise ConfigError(f"{where}: {exc}, {skip}") from exc
    except HTTPUnauthorized as exc:
        raise ConfigError(
            f"{where}: the server refused the credentials; check the credential reference {spec.credential!r}, {skip}"
        ) from exc
    except NotGitRepository as exc:
        raise ConfigError(
            f"{where}: it is not a git repository; give a clone, a bare repo or a git URL, {skip}"
        ) from exc
    except (GitProtocolError, HangupException, OSError, ValueError) as exc:
        raise ConfigError(
            f"{where}: the source cannot be reached ({exc}); check the url and the network, {skip}"
        ) from exc
    names = {n.decode("utf-8", "replace") for n in result.refs if n != b"HEAD" and not n.endswith(b"^{}")}
    branches = sorted(n[len("refs/heads/") :] for n in names if n.startswith("refs/heads/"))
    tags = sorted(n[len("refs/tags/") :] for n in names if n.startswith("refs/tags/"))
    known = f"branches: {', '.join(branches[:10]) or 'none'}; tags: {', '.join(tags[:10]) or 'none'}"
    refs = []
    for ref in spec.refs or ("HEAD",):
        if ref == "HEAD":
            head = (result.symrefs or {}).get(b"HEAD", b"").decode("utf-8", "replace")
            if head in names:
                ref = head[len("refs/heads/") :] if head.startswith("refs/heads/") else head
            elif len(branches) == 1:  # `git init --bare` names master; a push of main leaves HEAD dangling
                ref = branches[0]
            else:
                raise ConfigError(
                    f"{where}: its HEAD names no existing branch, so there is no default branch "
                    f"to index ({known}); name one with --ref BRANCH"
                )
        # A commit id cannot be listed remotely: the index run checks that it exists.
        elif not HEX40_RE.match(ref) and not {ref, f"refs/heads/{ref}", f"refs/tags/{ref}"} & names:
            raise ConfigError(
                f"{where}: it has no ref {ref!r} ({known}); name an existing branch, tag or "
                f"commit id with --ref, {skip}"
            )
        if ref not in refs:
            refs.append(ref)
    return tuple(refs)


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
@click.pass_context
def index(ctx, full: bool, as_json: bool, quiet: bool, fast_first: bool | None, backfill_seconds: int | None) -> None:
    """Mirror, scan, chunk, embed, write and publish. Exit code 1 if any repo failed."""
    from indexer.build import run

    cfg = cli_config(ctx, must_exist=True)
    if fast_first is not None:
        cfg = replace(cfg, fast_first=fast_first)
    if backfill_seconds is not None:
        cfg = replace(cfg, backfill_seconds=backfill_seconds)
    report = run(cfg, full=full, show_progress=not quiet)
    if as_json:
        click.echo(report.to_json())
    elif not quiet:
        click.echo(report.to_text())
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
