"""Source code as HTML for the file view: Pygments tokens, one escaped line of `<span class="…">` per source line
(so each line can carry its own anchor), and the token colours as CSS for a light and a dark theme."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from html import escape

from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.token import STANDARD_TYPES, Token
from pygments.util import ClassNotFound

MAX_LEX_BYTES = 2 * 1024 * 1024  # past this a page is shown plain: lexing is linear, but slow in Python
# Pages highlighted lately, by blob: a blob never changes, and Pygments lexes 1,000 lines of Python in 10-70 ms
# here, so a page read again (a search's next hit in the same file, a shared link) costs nothing the second time.
CACHED_PAGES = 256
_pages: OrderedDict = OrderedDict()
_pages_lock = threading.Lock()


def page(blob_id: str, path: str, start: int, text: str) -> list[str]:
    """`lines(path, text)` of the page of blob `blob_id` that starts at line `start`, from the cache when it is
    there (a file name decides the lexer: the same blob at another path may read otherwise)."""
    key = (blob_id, path.rsplit("/", 1)[-1], start, len(text))
    with _pages_lock:
        if key in _pages:
            _pages.move_to_end(key)
            return _pages[key]
    found = lines(path, text)
    with _pages_lock:
        _pages[key] = found
        while len(_pages) > CACHED_PAGES:
            _pages.popitem(last=False)
    return found


@functools.lru_cache(maxsize=512)
def _lexer(name: str):
    """The lexer for a file name, kept: Pygments' lookup walks every lexer's patterns (2.6 ms here), and a lexer
    holds no state between texts."""
    try:
        return get_lexer_for_filename(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _css_class(kind) -> str:
    while kind not in STANDARD_TYPES:
        kind = kind.parent
    return STANDARD_TYPES[kind]


def lines(path: str, text: str) -> list[str]:
    """`text`'s lines as HTML, highlighted by the language its file name says (plain past MAX_LEX_BYTES)."""
    if len(text) > MAX_LEX_BYTES:
        return [escape(line) for line in text.split("\n")]
    out, current = [], []
    for kind, value in _lexer(path.rsplit("/", 1)[-1]).get_tokens(text):
        css = _css_class(kind) if kind is not Token.Text else ""
        for i, piece in enumerate(value.split("\n")):
            if i:
                out.append("".join(current))
                current = []
            if piece:
                current.append(f'<span class="{css}">{escape(piece)}</span>' if css else escape(piece))
    out.append("".join(current))
    return out


@functools.cache
def stylesheet() -> str:
    """The token colours: Pygments' default style, and github-dark's under prefers-color-scheme: dark."""
    scopes = [".code", ".snippet"]  # the file view, and search results' snippets
    light = HtmlFormatter(style="default").get_style_defs(scopes)
    dark = HtmlFormatter(style="github-dark").get_style_defs(scopes)
    return f"{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"
