"""A folder's README as the tree page shows it: Markdown rendered to HTML that repo content cannot turn against the
reader. Raw HTML in the Markdown is shown as text, never passed through; images are not loaded (the page fetches
nothing from another host; an image reads as a link to it); a link with a scheme other than http, https or mailto
is dropped by markdown-it's own check; and a relative link opens the file or folder it names in this repo, at the
same commit."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import quote, urlencode, urlsplit

from markdown_it import MarkdownIt
from markupsafe import Markup

NAMES = ("readme.md", "readme.markdown", "readme.rst", "readme.txt", "readme")  # in the order one is preferred
MARKDOWN = (".md", ".markdown")
MAX_README_BYTES = 256 * 1024  # a README past this is shown as its first lines of text, not rendered


def pick(names: list[str]) -> str | None:
    """The README among a folder's file names, if it has one."""
    lowered = {n.lower(): n for n in names}
    return next((lowered[n] for n in NAMES if n in lowered), None)


def _target(repo: str, folder: str, commit_id: str, href: str) -> str | None:
    """Where a relative link of a README points on this server (None: it leaves the repo, or names nothing)."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or href.startswith(("/", "#")):
        return None
    joined = posixpath.normpath(posixpath.join(folder, parts.path)) if parts.path else folder
    if joined == ".." or joined.startswith("../"):
        return None
    kind = "tree" if parts.path.endswith("/") or not posixpath.splitext(joined)[1] else "file"
    where = f"/{kind}/{quote(repo, safe='')}" + (f"/{quote(joined)}" if joined not in ("", ".") else "")
    return f"{where}?{urlencode({'ref': commit_id})}" + (f"#{parts.fragment}" if parts.fragment else "")


def render(text: str, name: str, repo: str, folder: str, commit_id: str) -> Markup:
    """The README's HTML: Markdown rendered, anything else (reStructuredText, plain text) as preformatted text."""
    if not name.lower().endswith(MARKDOWN) or len(text) > MAX_README_BYTES:
        return Markup('<pre class="readme-text">{}</pre>').format(text[:MAX_README_BYTES])
    md = MarkdownIt("commonmark", {"html": False}).disable("image")
    rules = md.renderer.rules

    def link_open(tokens, idx, options, env):
        token = tokens[idx]
        href = token.attrGet("href") or ""
        if not re.match(r"^(https?:|mailto:|#)", href):
            token.attrSet("href", _target(repo, folder, commit_id, href) or "#")
        else:
            token.attrSet("rel", "nofollow noopener")
        return md.renderer.renderToken(tokens, idx, options, env)

    rules["link_open"] = link_open
    return Markup(md.render(text))
