"""The history commands (commits, log, blame, diff): what changed, when, by whom and why, read from the index's
history tables and the mirrors, printed as the MCP tools answer (query/surfaces/render.py) or as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from indexer.config import DEFAULT_ORG


def _service(ctx: click.Context):
    from query.remote import service_for

    return service_for(ctx)


def _page_json(page) -> str:
    return json.dumps(
        {"snapshot_id": page.snapshot_id, "commits": page.commits, "next_cursor": page.next_cursor}, indent=2
    )


@click.command("commits")
@click.argument("query", required=False, default="")
@click.option("--repo", "repos", multiple=True, help="Only these repos (repeatable).")
@click.option("--path", "paths", multiple=True, help="Only commits that changed this file or folder (repeatable).")
@click.option("--author", help="Only commits whose author's name or email contains this (any case).")
@click.option("--since", help="Only commits authored on or after this date (2024-01-31).")
@click.option("--until", help="Only commits authored on or before this date.")
@click.option("--ref", help="Only commits reachable from this indexed branch or tag.")
@click.option("-n", "--limit", default=10, show_default=True, type=click.IntRange(1, 200), help="How many commits.")
@click.option("--cursor", help="The next page: the cursor the last page ended with.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help='Print {"commits": [...]} as JSON.')
@click.pass_context
def commits(ctx, query, repos, paths, author, since, until, ref, limit, cursor, org, as_json) -> None:
    """Search commit messages (and changed paths, and hunks where indexed) for QUERY, best first; without QUERY,
    the newest commits the filters keep."""
    from query.surfaces import render

    page = _service(ctx).search_commits(
        org,
        query,
        cursor,
        repos=tuple(repos),
        paths=tuple(paths),
        author=author,
        since=since,
        until=until,
        ref=ref,
        limit=limit,
    )
    title = f"commits matching {query!r}" if query else "newest commits"
    click.echo(
        _page_json(page)
        if as_json
        else render.commits_markdown(title, page.snapshot_id, page.commits, page.next_cursor, "commits")
    )


@click.command("log")
@click.argument("repo")
@click.argument("path", required=False)
@click.option("--ref", help="An indexed branch or tag, or a commit of the history. Default: the first indexed ref.")
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(1, 200), help="How many commits.")
@click.option("--cursor", help="The next page: the cursor the last page ended with.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help='Print {"commits": [...]} as JSON.')
@click.pass_context
def log(ctx, repo, path, ref, limit, cursor, org, as_json) -> None:
    """The commits that touched PATH (a file or a folder; every commit without one), newest first, following a
    file through its renames, as `git log --follow`."""
    from query.surfaces import render

    page = _service(ctx).log(org, repo, path, ref, limit=limit, cursor=cursor)
    title = f"log of {repo}:{path}" if path else f"log of {repo}"
    click.echo(
        _page_json(page)
        if as_json
        else render.commits_markdown(title, page.snapshot_id, page.commits, page.next_cursor, "log")
    )


@click.command("blame")
@click.argument("repo")
@click.argument("path")
@click.option("--ref", help="Branch, tag or commit. Default: the commit that was indexed.")
@click.option("--lines", help="Line range A-B (1-based, inclusive); also A-, -B or A.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def blame(ctx, repo, path, ref, lines, org, as_json) -> None:
    """For each line of PATH, the commit that last changed it, with its date and author, as `git blame`."""
    from query.get_file import parse_lines
    from query.surfaces import render

    start, end = parse_lines(lines)
    found = _service(ctx).blame(org, repo, path, ref, start, end)
    click.echo(json.dumps(asdict(found), indent=2) if as_json else render.blame_markdown(found))


@click.command("diff")
@click.argument("repo")
@click.argument("base")
@click.argument("head")
@click.argument("path", required=False)
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(1, 100), help="Files a page.")
@click.option("--cursor", help="The next page of files: the cursor the last page ended with.")
@click.option("--org", default=DEFAULT_ORG, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def diff(ctx, repo, base, head, path, limit, cursor, org, as_json) -> None:
    """What changed from BASE to HEAD (branches, tags, commits, main~3), file by file, under PATH when given."""
    from query.surfaces import render

    page = _service(ctx).diff(org, repo, base, head, path, limit=limit, cursor=cursor)
    click.echo(json.dumps(asdict(page), indent=2) if as_json else render.diff_markdown(page))


COMMANDS = (commits, log, blame, diff)
