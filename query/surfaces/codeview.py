"""What the page's file view shows beside a file's lines: the definitions that start on a line (a margin link to
their callers), the calls that resolve (links to what they call, query.navigate) and the outline, each read once
per blob or commit and kept with the snapshot; and the file view's URL, which every page links with."""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode

from markupsafe import escape

from indexer.errors import BlobdexError
from query import navigate


def file_url(repo: str, path: str, ref: str, start: int | None = None, end: int | None = None) -> str:
    """The file view of `path` at `ref`, its lines start-end marked and scrolled to."""
    query = {"ref": ref} if ref else {}
    if start:
        query["hl"] = f"{start}-{end or start}"
    anchor = (f"#L{start}-L{end}" if end and end > start else f"#L{start}") if start else ""
    return f"/file/{quote(repo, safe='')}/{quote(path)}" + (f"?{urlencode(query)}" if query else "") + anchor


def outline(service, org: str, repo: str, path: str, commit_id: str) -> list[dict]:
    """The file's definitions for the outline panel (none where the file has no parser, or cannot be parsed), kept
    with the snapshot: a commit's file never changes."""

    def load() -> list[dict]:
        try:
            return service.outline(org, repo, path, commit_id).symbols
        except BlobdexError:
            return []

    return service.reader().cached(f"outline:{org}/{repo}/{path}@{commit_id}", load)


def calls(service, org: str, repo: str, path: str, blob_id: str) -> dict[int, list[dict]]:
    """The file's resolved calls by line (query.navigate), when the blob shown is one the snapshot indexed."""
    try:
        return navigate.calls_in(service.reader(), org, repo, path, blob_id)
    except BlobdexError:
        return {}


def linked(html: str, calls) -> str:
    """A highlighted line with each resolved call's name a link to its definition, titled with the definition's
    signature, first doc line and how the call was resolved (a name that only matches is never a link)."""
    for call in calls:
        said = call["signature"] + (f" — {call['doc']}" if call["doc"] else "")
        said += f" ({call['repo']}:{call['path']}:{call['line']}, resolved by {call['resolution']})"
        target = file_url(call["repo"], call["path"], "", call["line"])
        # the title shows to a pointer; data-tip, drawn by the stylesheet, on keyboard focus
        tip = escape(said)
        anchor = f'<a class="call {call["resolution"]}" href="{escape(target)}" title="{tip}" data-tip="{tip}">'
        # the first occurrence of the name as a token of its own, outside any link made already
        link = anchor + call["callee"] + "</a>"  # the name as the highlighter wrote it: no markup added
        html = re.sub(rf"(?<=>){re.escape(call['callee'])}(?=<)(?![^<]*</a>)", lambda _: link, html, count=1)
    return html


def definitions(service, org: str, repo: str, path: str, blob_id: str) -> dict[int, str]:
    """The file's definitions this snapshot indexed at this blob: first line -> symbol (none when no snapshot
    serves)."""
    try:
        return service.file_definitions(org, repo, path, blob_id)
    except BlobdexError:
        return {}
