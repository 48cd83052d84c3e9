"""The `blobdex` command: the root group (cli) and main(); the read-only commands search, grep, files, route,
chunk, get-file, outline, references, context, status (each against this machine's index or, with --server, a
running server: query/remote.py), and secrets and sql (this machine's alone); it mounts the indexer's commands,
the servers (query/serve_cli.py), the history commands, token and eval."""

from __future__ import annotations

import json
import logging
import sys
import traceback
from dataclasses import asdict

import click

from indexer.operate.cli import COMMANDS, cli_config
from indexer.config import DEFAULT_ORG
from indexer.errors import BlobdexError
from indexer.observe import LOG_FORMATS, log_format, say, setup_logging
from query.eval.cli import eval_group, tune_cmd
from query.history_cli import COMMANDS as HISTORY_COMMANDS
from query.serve_cli import COMMANDS as SERVE_COMMANDS
from query.token_cli import token

# Exit codes: 0 ok; 1 a repo failed or the disk is full (the run's own report says which);
# 2 bad input; 70 a bug (EX_SOFTWARE); 75 another index run holds the lock (EX_TEMPFAIL, try later).
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 70


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    envvar="BLOBDEX_CONFIG",
    type=click.Path(dir_okay=False),
    help="Config file (default: blobdex.toml in this folder or the nearest folder above; env BLOBDEX_CONFIG).",
)
@click.option(
    "--data-dir",
    envvar="BLOBDEX_DATA_DIR",
    type=click.Path(file_okay=False),
    help="Where mirrors, caches and snapshots live (env BLOBDEX_DATA_DIR; default from the config, else ./.blobdex).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log progress details to stderr.")
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    envvar="BLOBDEX_LOG_FORMAT",
    show_default=True,
    help="Log lines on stderr as text or as one JSON object each (env BLOBDEX_LOG_FORMAT).",
)
@click.option(
    "--server",
    envvar="BLOBDEX_SERVER",
    metavar="URL",
    help="Read commands ask this running 'blobdex serve' over /v1, with the token in BLOBDEX_TOKEN "
    "(env BLOBDEX_SERVER; default: `server` in the config, else this machine's index).",
)
@click.version_option(package_name="blobdex")
@click.pass_context
def cli(ctx: click.Context, config: str | None, data_dir: str | None, verbose: bool, log_format: str, server) -> None:
    """blobdex: one code index over many git repositories, keyed by git blob id."""
    setup_logging(log_format, verbose)  # our own details only under -v; the libraries' debug output is noise
    # Each command reads the config itself (cli_config), so `--help` works whatever state the config is in, and
    # a command that finds none says so first.
    ctx.obj = {"config": config, "data_dir": data_dir, "server": server}


for command in COMMANDS:
    cli.add_command(command)


@cli.command()
@click.argument("query")
@click.option("--repo", "repos", multiple=True, help="Only these repos (repeatable).")
@click.option("--lang", "langs", multiple=True, help="Only these languages, e.g. python (repeatable).")
@click.option("--path", "paths", multiple=True, help="Only paths matching this glob, gitignore syntax (repeatable).")
@click.option("--ignore", multiple=True, help="Drop paths matching this glob (repeatable).")
@click.option("--kind", help="code, doc, or a chunk kind: function, method, class, definition, module, section, text.")
@click.option("--ref", help="Only chunks reachable from this branch, tag or ref.")
@click.option("-n", "--limit", default=10, show_default=True, type=int, help="How many hits.")
@click.option("--org", default=DEFAULT_ORG, show_default=True, help="Tenant to search in.")
@click.option(
    "--files", "by_file", is_flag=True, help="Rank files (chunk evidence per file, plus names the query spells)."
)
@click.option(
    "--mode",
    type=click.Choice(["hybrid", "vector", "bm25"]),
    default="hybrid",
    show_default=True,
    help="Signals to use; single ones exist to measure what fusion adds.",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"hits": [...]} as JSON.')
@click.pass_context
def search(ctx, query, repos, langs, paths, ignore, kind, ref, limit, org, by_file, mode, as_json) -> None:
    """Hybrid search (vectors + BM25, fused by RRF) over the live snapshot."""
    from query.search import SearchRequest
    from query.surfaces import render

    service = _service(ctx)
    req = SearchRequest(
        query=query,
        org=org,
        repos=tuple(repos),
        langs=tuple(langs),
        paths=tuple(paths),
        ignore=tuple(ignore),
        kind=kind,
        ref=ref,
        limit=limit,
        mode=mode,
    )
    service.check_org(org)
    notes = _notes(req.note, as_json)
    if by_file:
        snapshot_id, files = service.localize(req)
        if as_json:  # /v1's answer: each file's evidence as `path:start-end symbol` (`blobdex chunk` reads one)
            from query.surfaces import answers

            answer = answers.files_body(snapshot_id, files, notes.get("notes", []))
            click.echo(json.dumps({"query": req.query, **answer}, indent=2))
        else:
            _echo(render.files_text(files))
        return
    snapshot_id, hits = service.search(req)
    if as_json:
        found = [{"id": c, **h.to_dict()} for c, h in hits]
        click.echo(json.dumps({"snapshot_id": snapshot_id, "query": req.query, "hits": found, **notes}, indent=2))
        return
    _echo(render.hits_text([h for _, h in hits], _bold))


def _notes(note: str | None, as_json: bool) -> dict:
    """What an answer did not read in full: a `notes` list for --json, else one line on stderr."""
    if note and not as_json:
        say(f"blobdex: note: {note}", "warning", note)
    return {"notes": [note]} if note else {}


def _service(ctx: click.Context):
    """What a read command asks: a running server (--server, or `server` in the config), else this machine's
    index through the facade every surface calls (query.service)."""
    from query.remote import service_for

    return service_for(ctx)


def _local(ctx: click.Context):
    """This machine's index, for a command that reads what no server serves (credentials' places, SQL)."""
    from query.remote import service_for

    return service_for(ctx, remote=False)


def _bold(text: str) -> str:
    return click.style(text, bold=True)


def _echo(lines: list[str]) -> None:
    if lines:
        click.echo("\n".join(lines))


@cli.command()
@click.argument("pattern")
@click.option("--repo", "repos", multiple=True, help="Only these repos (repeatable).")
@click.option("--path", "paths", multiple=True, help="Only paths matching this glob (repeatable).")
@click.option("--ref", help="Only files reachable from this branch or tag.")
@click.option("-F", "--literal", is_flag=True, help="PATTERN is plain text, not a regular expression.")
@click.option("-i", "--ignore-case", is_flag=True)
@click.option("-n", "--limit", default=100, show_default=True, type=click.IntRange(1, 500), help="Matching lines.")
@click.option("--cursor", help="The next page: the cursor the last page ended with.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def grep(ctx, pattern, repos, paths, ref, literal, ignore_case, limit, cursor, org, as_json) -> None:
    """Lines of the indexed files that match PATTERN (RE2: linear time, no backreferences), as `git grep`."""
    from query.surfaces import answers, render

    asked = {"repos": tuple(repos), "paths": tuple(paths), "ref": ref, "limit": limit}
    page = _service(ctx).grep(org, pattern, cursor, **asked, literal=literal, ignore_case=ignore_case)
    if as_json:
        click.echo(json.dumps(answers.grep_body(page), indent=2))
        return
    click.echo(render.grep_markdown(page.snapshot_id, page.matches, page.next_cursor, tool=None))


@cli.command("chunk")
@click.argument("ids", nargs=-1, required=True, type=click.IntRange(-(2**53), 2**53))
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help='Print {"chunks": [...], "errors": [...]} as JSON.')
@click.pass_context
def chunk_cmd(ctx, ids, org, as_json) -> None:
    """Print whole chunks by the ids 'search --json' gives (as /v1/chunks and MCP get_chunk read them)."""
    service, found, errors = _service(ctx), [], []
    for clip in ids:
        try:
            found.append(service.get_chunk(org, clip))
        except BlobdexError as exc:
            errors.append({"id": clip, "message": str(exc)})
    if as_json:
        click.echo(json.dumps({"chunks": [c.to_dict() for c in found], "errors": errors}, indent=2))
    else:
        for c in found:
            h = c.hit
            click.echo(_bold(f"{h.repo}:{h.path}:{h.line_start}-{h.line_end}") + f" @ {h.ref} ({h.commit_id[:12]})")
            click.echo(c.text)
        for e in errors:
            say(f"blobdex: error: {e['message']}", "error", e["message"])
    if errors:
        sys.exit(EXIT_BAD_INPUT)


@cli.command("get-file")
@click.argument("repo")
@click.argument("path")
@click.option(
    "--ref",
    help="Branch, tag, full ref, commit id (abbreviated too) or revision like main~1. "
    "Default: the first indexed ref at the commit the live snapshot holds (what search "
    "hits show), else the first configured ref, else the mirror's HEAD.",
)
@click.option("--lines", help="Line range A-B (1-based, inclusive); also A-, -B or A.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.pass_context
def get_file(ctx, repo, path, ref, lines, org) -> None:
    """Print a file (or its lines) at any ref or commit, from the mirror: like `git show REF:PATH`."""
    from query.get_file import parse_lines

    start, end = parse_lines(lines)
    result = _service(ctx).get_file(org, repo, path, ref, start, end)
    sys.stdout.buffer.write(result.content)
    sys.stdout.buffer.flush()


@cli.command()
@click.argument("repo")
@click.argument("path_glob", required=False)
@click.option("--ref", help="Branch, tag or commit. Default: the first indexed ref.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (every file, no paging).")
@click.pass_context
def files(ctx, repo, path_glob, ref, org, as_json) -> None:
    """List a repo's files at a ref (like `git ls-tree -r`), with language, size and why a file is not indexed;
    PATH_GLOB (gitignore syntax, e.g. 'src/**/*.py') keeps only the paths it matches."""
    from dataclasses import asdict, replace

    from query.surfaces import render

    service, cursor, listed = _service(ctx), None, []
    while True:
        page = service.list_files(org, repo, path_glob, ref, cursor, 1000)
        listed += page.files
        cursor = page.next_cursor
        if cursor is None:
            break
    whole = replace(page, files=listed)
    click.echo(json.dumps(asdict(whole), indent=2) if as_json else render.files_page_markdown(whole))


@cli.command()
@click.argument("repo")
@click.argument("path")
@click.option("--ref", help="Branch, tag or commit. Default: the first indexed ref.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def outline(ctx, repo, path, ref, org, as_json) -> None:
    """A file's definitions (classes, functions, methods) with their lines, signatures and first doc line."""
    from dataclasses import asdict

    from query.surfaces import render

    found = _service(ctx).outline(org, repo, path, ref)
    click.echo(json.dumps(asdict(found), indent=2) if as_json else render.outline_markdown(found))


@cli.command()
@click.option("--org", help="Only this org.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--replicas", is_flag=True, help="Also list the read replicas of the object store and what each serves.")
@click.option("--store", "store_url", help="The object store for --replicas (default: the config's `store`).")
@click.pass_context
def status(ctx, org, as_json, replicas, store_url) -> None:
    """Per repo: refs, indexed commit, when, files, chunks, and whether it is stale or behind its mirror."""
    from query.surfaces import render

    found = (_local(ctx) if replicas else _service(ctx)).status(org)
    seen = None
    if replicas:
        from indexer.store import store_for

        store = store_for(cli_config(ctx), store_url)
        seen = {"store": store.url, "newest": store.newest(), "replicas": store.replicas()}
    if as_json:
        rows = [r.to_dict() for r in found.repos]
        answer = {"snapshot_id": found.snapshot_id, "vectors": found.vectors, "last_run": found.last_run, "repos": rows}
        click.echo(json.dumps(answer | ({"store": seen} if seen else {}), indent=2))
        return
    _echo(render.status_text(found.snapshot_id, list(found.repos), found.vectors, found.last_run))
    if seen:
        click.echo(f"\nstore {seen['store']}: newest snapshot {seen['newest'] or 'none'}")
        for r in seen["replicas"]:
            if r.get("unreadable"):
                click.echo(f"  replica {r['replica']}: its report in the store is not readable")
                continue
            mark = "" if r["serving"] == seen["newest"] else "  (behind)"
            click.echo(f"  replica {r['replica']} serves {r['serving'] or 'nothing yet'} (as of {r['at']}){mark}")


@cli.command()
@click.option("--org", help="Only this org.")
@click.option("--repo", help="Only this repo.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def secrets(ctx, org, repo, as_json) -> None:
    """Where the live snapshot held chunks back as credentials: repo, ref, path, lines and the kind of
    credential, never its text; under each chunk the lines that triggered, with the fingerprint a
    [[release]] table in blobdex.toml names to release a line that is not a secret; then the releases in
    effect. Rotate what is real; the rest stays out of search until released."""
    service = _local(ctx)
    snapshot_id, rows = service.held_back(org, repo, lines=True)
    configured = {r.key for r in service.cfg.repos}
    releases = [
        {**asdict(r), "repo_configured": (r.org, r.repo) in configured}
        for r in service.cfg.releases
        if (not org or r.org == org) and (not repo or r.repo == repo)
    ]
    if as_json:
        click.echo(json.dumps({"snapshot_id": snapshot_id, "held_back": rows, "releases": releases}, indent=2))
        return
    click.echo(f"snapshot {snapshot_id}: {len(rows)} chunk(s) held back")
    for r in rows:
        click.echo(
            f"{r['org']}/{r['repo']}:{r['path']}:{r['line_start']}-{r['line_end']}  {r['kind']}  "
            f"{r['ref']}@{r['commit_id'][:12]}"
        )
        for line in r["lines"]:
            mark = line["fingerprint"] or "(key material: never released)"
            click.echo(f"    line {line['line']}  {line['kind']}  {mark}")
    click.echo(f"releases in effect: {len(releases)}")
    for r in releases:
        unknown = "" if r["repo_configured"] else "  (no such repo is configured: it releases nothing)"
        click.echo(f"  {r['org']}/{r['repo']}:{r['path']}  {r['line']}  {r['reason']}{unknown}")
    if any(line["fingerprint"] for r in rows for line in r["lines"]):
        click.echo(
            'to release a line that is not a secret, add a [[release]] table to blobdex.toml with repo = "…", '
            'path = "…", line = "<its fingerprint>" and reason = "…", then run \'blobdex index\''
        )


@cli.command()
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="Print rows as a JSON list of objects.")
@click.option("--csv", "as_csv", is_flag=True, help="Print rows as CSV with a header.")
@click.option(
    "--max-width",
    default=60,
    show_default=True,
    type=click.IntRange(0),
    help="Cut table cells at this many characters, marked with …; 0: never cut (--json and --csv never cut).",
)
@click.pass_context
def sql(ctx, query, as_json, as_csv, max_width) -> None:
    """Run read-only SQL (DuckDB) over the live snapshot's tables: files, symbols, imports, calls,
    routes, env_keys, tasks, url_literals, edges, and chunks (text, no vectors)."""
    _, columns, rows = _local(ctx).sql(query)
    if as_json:
        click.echo(json.dumps([dict(zip(columns, r)) for r in rows], indent=2, default=str))
    elif as_csv:
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        click.echo(_table(columns, rows, max_width))


def _cell(value, max_width: int) -> str:
    """A value as one table cell: on one line, cut at `max_width` characters with … saying so (0: whole)."""
    text = "" if value is None else str(value).replace("\n", " ")
    return text if not max_width or len(text) <= max_width else text[: max_width - 1] + "…"


def _table(columns: list[str], rows: list[tuple], max_width: int = 60) -> str:
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    out = [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    return "\n".join(out + [f"({len(rows)} row{'s' if len(rows) != 1 else ''})"])


@cli.command()
@click.argument("symbol")
@click.option("--repo", help="Only definitions in this repo (callers are still found in every repo).")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--name-only", is_flag=True, help="Also list calls that only share the name (labelled).")
@click.option("-n", "--limit", default=50, show_default=True, type=click.IntRange(1, 200), help="Callers shown.")
@click.option("--cursor", help="The next page of callers: the cursor the last page ended with.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def context(ctx, symbol, repo, org, name_only, limit, cursor, as_json) -> None:
    """Where SYMBOL is defined, who calls it (in every repo), routes and env keys in it, coupling edges."""
    from query.surfaces import render

    data = _service(ctx).context(org, symbol, repo, name_only=name_only, limit=limit, cursor=cursor)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    _echo(render.context_text(data, _bold, tool=None))


@cli.command()
@click.argument("symbol", required=False)
@click.option("--repo", help="The repo of --path, or: only definitions of SYMBOL in this repo.")
@click.option("--path", "file", help="A file (with --repo and --line): the definition or call on that line.")
@click.option("--line", type=click.IntRange(1), help="A line of --path, 1-based.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--name-only", is_flag=True, help="Also list calls that only share the name (labelled).")
@click.option("-n", "--limit", default=50, show_default=True, type=click.IntRange(1, 200), help="Callers shown.")
@click.option("--cursor", help="The next page of callers: the cursor the last page ended with.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def references(ctx, symbol, repo, file, line, org, name_only, limit, cursor, as_json) -> None:
    """Every resolved call of SYMBOL (or of what --repo/--path/--line point at), grouped by repo."""
    from query.surfaces import render

    data = _service(ctx).references(
        org, symbol=symbol, repo=repo, path=file, line=line, name_only=name_only, limit=limit, cursor=cursor
    )
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    _echo(render.references_text(data, _bold))


@cli.command("route")
@click.argument("task")
@click.option("-n", "--limit", default=5, show_default=True, type=int)
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def route_cmd(ctx, task, limit, org, as_json) -> None:
    """Which repos own TASK (the route_task tool, without a server)."""
    from query.query_text import cut_note
    from query.surfaces import answers, render

    snapshot_id, routes = _service(ctx).route(org, task, limit)
    notes = _notes(cut_note(len(task)), as_json)
    if as_json:
        click.echo(json.dumps(answers.routes_body(snapshot_id, routes, notes.get("notes", [])), indent=2))
        return
    _echo(render.routes_text(routes, _bold))


cli.add_command(eval_group)
cli.add_command(tune_cmd)
cli.add_command(token)
for command in (*HISTORY_COMMANDS, *SERVE_COMMANDS):
    cli.add_command(command)


def main() -> None:
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.Abort:
        say("aborted", "warning")
        code = 130
    except click.ClickException as exc:
        if log_format() == "json":
            say("", "error", exc.format_message())
        else:
            exc.show()
        code = exc.exit_code
    except BlobdexError as exc:
        say(f"blobdex: error: {exc}", "error", str(exc))
        code = getattr(exc, "exit_code", EXIT_BAD_INPUT)  # LockBusy: 75, DiskFull: 1
    except Exception as exc:  # a bug: one sentence and its own exit code, the traceback only when asked for
        if logging.getLogger("query").isEnabledFor(logging.DEBUG):
            click.echo(traceback.format_exc(), err=True, nl=False)
        bug = (
            f"internal error: {type(exc).__name__}: {exc}; this is a bug in blobdex: run the command again with -v "
            f"to see the traceback, and report it"
        )
        say(f"blobdex: {bug}", "error", bug)
        code = EXIT_INTERNAL
    sys.exit(code or 0)
