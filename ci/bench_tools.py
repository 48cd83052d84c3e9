"""Do the MCP tools' descriptions still tell the tools apart? tools/list is cut to fit every agent's context, and
a cut can make two tools read alike. This is a proxy for an agent's choice: each request below, as an agent might
word it, is embedded with the default model beside every tool's name and description, and counts as chosen right
when its nearest tool is one it names. A model reading the whole list does better; a fall here says a cut
blurred two tools."""

from __future__ import annotations

import numpy as np

# (what an agent wants, the tools that answer it: a list made before merges keeps both names)
REQUESTS = (
    ("find the code that retries failed HTTP requests", ("search_code",)),
    ("where do we validate the user's password", ("search_code",)),
    ("which files does this stack trace involve", ("search_code",)),
    ("show the full text of search hits 12 and 40", ("get_chunk",)),
    ("every line containing TODO(security)", ("grep",)),
    ("where is the exact string 'connection reset by peer' used", ("grep",)),
    ("read src/app.py at commit 3f2a9c1", ("get_file",)),
    ("read lines 40 to 80 of a file", ("get_file",)),
    ("what files does the billing repo contain", ("list_files",)),
    ("list the python files under src", ("list_files",)),
    ("which functions and classes are defined in this file", ("outline",)),
    ("which repository should I change to fix the login timeout bug", ("route_task",)),
    ("which services own this feature request", ("route_task",)),
    ("who calls Billing.renew across services", ("expand_context", "find_references")),
    ("find all references to this function", ("expand_context", "find_references")),
    ("what routes and config keys does this handler touch", ("expand_context",)),
    ("when was the rate limiter changed and why", ("search_commits",)),
    ("was this bug fixed before in any repo", ("search_commits",)),
    ("commits by alice since March", ("search_commits",)),
    ("the history of changes to this file", ("log",)),
    ("who last changed line 42 of this file", ("blame",)),
    ("which commit introduced this line", ("blame",)),
    ("what changed between v1.2 and v1.3", ("diff",)),
    ("show the changes commit 3f2a9c1 made", ("diff",)),
    ("make my uncommitted edits searchable", ("sync_workspace",)),
    ("which files have I synced into my session", ("session_status",)),
    ("discard my editing session", ("end_session",)),
    ("which repositories are indexed", ("list_repos",)),
    ("is the index up to date with the mirrors", ("list_repos", "index_status")),
)


def tool_choice(tools: list[dict], embedder) -> dict:
    """The share of REQUESTS whose nearest tool (name and description) is one they name, and the misses."""
    names = [t["name"] for t in tools]
    described = embedder.embed([f"{t['name'].replace('_', ' ')}: {t['description']}" for t in tools])
    asked = embedder.embed([words for words, _ in REQUESTS])
    nearest = np.argmax(np.asarray(asked) @ np.asarray(described).T, axis=1)
    misses = [f"{words} -> {names[i]}" for (words, right), i in zip(REQUESTS, nearest) if names[i] not in right]
    return {"requests": len(REQUESTS), "right": round(1 - len(misses) / len(REQUESTS), 3), "misses": misses}
