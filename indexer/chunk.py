"""Chunking: one blob's text into spans named by symbol (tree-sitter), heading (markdown) or lines.

A pure function of (blob bytes, language, CHUNKER_VERSION): its output is cached by blob_id, so a
change to what it outputs for the same text bumps CHUNKER_VERSION in indexer/versions.py.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from tree_sitter import Node, Tree
from tree_sitter_language_pack import get_parser

from indexer.languages import GRAMMARS, IDENTIFIER_RE, NEEDS_BODY, Grammar

# all-MiniLM-L6-v2 reads 256 tokens, about 950 characters of code; a little over that keeps
# whole small functions together while losing only a short tail to truncation.
MAX_CHUNK_CHARS = 1200
MAX_CHUNK_LINES = 60
PARSE_TIMEOUT_SECONDS = 2.0  # tree-sitter parses 3-7 MB/s; a 1 MiB file needs well under this
READ_CALLBACK_BYTES = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """A span of one blob; (blob_id, index) is its identity everywhere."""

    index: int
    symbol: str  # `Class.method`, `Install > From source`, or "" for file-level text
    kind: str  # function | method | class | definition | module | section | text
    line_start: int  # 1-based, inclusive
    line_end: int
    text: str


@dataclass(frozen=True, kw_only=True)
class Span:
    start: int  # 0-based line numbers, inclusive
    end: int
    symbol: str
    kind: str


class ParseTimeout(Exception):
    pass


def chunk_text(text: str, lang: str) -> tuple[list[Chunk], str | None]:
    """Chunk decoded text; returns the chunks and a fallback reason (`parse_timeout`) or None."""
    chunks, fallback, _ = chunk_and_parse(text, lang)
    return chunks, fallback


def chunk_and_parse(text: str, lang: str) -> tuple[list[Chunk], str | None, tuple[Tree, bytes] | None]:
    """As chunk_text, and the syntax tree with the bytes it was parsed from (None without a grammar
    or after a timeout), so structural extraction does not parse the same bytes again."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    fallback, parsed = None, None
    if lang in GRAMMARS:
        try:
            src = text.encode("utf-8")
            tree = parse(src, GRAMMARS[lang].name)
            parsed = (tree, src)
            spans = _syntax_spans(tree, src, lines, GRAMMARS[lang])
        except ParseTimeout:
            spans, fallback = _windows(lines, 0, len(lines) - 1, "", "text"), "parse_timeout"
    elif lang == "markdown":
        spans = _markdown_spans(lines)
    else:
        spans = _windows(lines, 0, len(lines) - 1, "", "text")
    chunks = []
    for span in sorted(spans, key=lambda s: (s.start, s.end)):
        start, end = span.start, span.end
        while start < end and not lines[start].strip():
            start += 1
        while end > start and not lines[end].strip():
            end -= 1
        body = "\n".join(lines[start : end + 1])
        if body.strip():
            chunks.append(
                Chunk(
                    index=len(chunks),
                    symbol=span.symbol,
                    kind=span.kind,
                    line_start=start + 1,
                    line_end=end + 1,
                    text=body,
                )
            )
    return chunks, fallback, parsed


def _windows(lines: list[str], start: int, end: int, symbol: str, kind: str) -> list[Span]:
    """Split lines[start..end] into spans of at most MAX_CHUNK_CHARS / MAX_CHUNK_LINES."""
    spans, first, size = [], start, 0
    for i in range(start, end + 1):
        size += len(lines[i]) + 1
        if i > first and (size > MAX_CHUNK_CHARS or i - first >= MAX_CHUNK_LINES):
            spans.append(Span(start=first, end=i - 1, symbol=symbol, kind=kind))
            first, size = i, len(lines[i]) + 1
    if first <= end:
        spans.append(Span(start=first, end=end, symbol=symbol, kind=kind))
    return spans


def _size(lines: list[str], start: int, end: int) -> int:
    return sum(len(lines[i]) + 1 for i in range(start, end + 1))


def parse(source: bytes, grammar_name: str) -> Tree:
    """Parse with a time bound (PARSE_TIMEOUT_SECONDS); raises ParseTimeout past it."""
    parser = get_parser(grammar_name)
    deadline = time.monotonic() + PARSE_TIMEOUT_SECONDS

    def read(offset: int, _point) -> bytes:
        return source[offset : offset + READ_CALLBACK_BYTES]

    try:
        # The progress callback is only honoured with the read-callback form of parse().
        tree = parser.parse(read, progress_callback=lambda *_: time.monotonic() > deadline)
    except ValueError as exc:
        raise ParseTimeout() from exc
    if tree is None:
        raise ParseTimeout()
    return tree


def _is_def(node: Node, g: Grammar) -> bool:
    t = node.type
    if t in g.functions or t in g.containers:
        return t not in NEEDS_BODY or node.child_by_field_name("body") is not None
    if t == "variable_declarator" and g.arrow_values:
        value = node.child_by_field_name("value")
        return value is not None and value.type in g.arrow_values
    return False


def _defs_under(node: Node, g: Grammar):
    """Definition nodes below `node`, not descending into definitions (iterative: trees can be deep)."""
    stack = list(reversed(node.children))
    while stack:
        child = stack.pop()
        if child.is_named and _is_def(child, g):  # not the `class` keyword token of a class_declaration
            yield child
        else:
            stack.extend(reversed(child.children))


def _outer(node: Node, g: Grammar) -> Node:
    while node.parent is not None and node.parent.type in g.wrappers:
        node = node.parent
    return node


def _leading_comments(node: Node) -> int:
    """The first line of `node` with the comments directly above it: a doc comment says in words what
    the definition does, which is what a search in words needs to find in the same chunk."""
    start = node.start_point[0]
    prev = node.prev_sibling
    while prev is not None and _attached(prev) and _last_row(prev) >= start - 1:
        before = prev.prev_sibling
        if before is not None and not _attached(before) and _last_row(before) >= prev.start_point[0]:
            break  # a trailing comment on the line of the code before it
        start, prev = prev.start_point[0], before
    return start


def _attached(node: Node) -> bool:
    # Rust's #[derive(...)] sits between an item and its doc comment.
    return "comment" in node.type or node.type == "attribute_item"


def _last_row(node: Node) -> int:
    row, column = node.end_point
    return row - 1 if column == 0 and row > node.start_point[0] else row  # a line comment may end on the next row


def node_text(node: Node | None, src: bytes) -> str:
    """The text of `node` ("" for None), sliced from the bytes it was parsed from: `node.text` re-reads
    through the parse callback, chunk by chunk. Chunking and extraction both read nodes this way."""
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace") if node is not None else ""


def _innermost_name(node: Node | None, src: bytes) -> str:
    """C/C++ declarators nest (`*f(int)`): follow `declarator` fields down to the name."""
    while node is not None and node.child_by_field_name("declarator") is not None:
        node = node.child_by_field_name("declarator")
    return node_text(node, src)


def _name(node: Node, src: bytes) -> str:
    t = node.type
    if t == "impl_item":
        return node_text(node.child_by_field_name("type"), src)
    if t == "type_declaration":
        spec = next((c for c in node.children if c.type in ("type_spec", "type_alias")), None)
        return node_text(spec.child_by_field_name("name"), src) if spec is not None else ""
    if t == "method_declaration" and node.child_by_field_name("receiver") is not None:
        receiver = node_text(node.child_by_field_name("receiver"), src)
        types = IDENTIFIER_RE.findall(receiver)
        name = node_text(node.child_by_field_name("name"), src)
        return f"{types[-1]}.{name}" if types else name
    name = node.child_by_field_name("name")
    if name is not None:
        return node_text(name, src)
    declarator = node.child_by_field_name("declarator")
    if declarator is not None:
        return _innermost_name(declarator, src)
    for child in node.named_children:  # grammars without a `name` field (kotlin, …)
        if child.type in _NAME_NODES:
            return node_text(child, src)
    first_line = node_text(node, src).split("\n", 1)[0]
    words = [w for w in IDENTIFIER_RE.findall(first_line) if w not in _KEYWORDS]
    return words[0] if words else ""


_NAME_NODES = frozenset(
    {
        "identifier",
        "simple_identifier",
        "type_identifier",
        "name",
        "constant",
        "field_identifier",
        "property_identifier",
    }
)
_KEYWORDS = frozenset(
    {
        "def",
        "class",
        "function",
        "fn",
        "func",
        "pub",
        "public",
        "private",
        "protected",
        "static",
        "async",
        "export",
        "default",
        "const",
        "let",
        "var",
        "struct",
        "enum",
        "impl",
        "trait",
        "interface",
        "type",
        "module",
        "namespace",
        "template",
        "typedef",
        "fun",
        "override",
        "suspend",
        "inline",
        "open",
        "internal",
        "final",
        "abstract",
        "data",
        "sealed",
        "object",
        "val",
    }
)


def _syntax_spans(tree: Tree, src: bytes, lines: list[str], g: Grammar) -> list[Span]:
    spans: list[Span] = []
    containers: list[tuple[int, int, str]] = []  # (start, end, qualified name), for file-level gaps

    def visit(parent: Node, prefix: str) -> None:
        for node in _defs_under(parent, g):
            outer = _outer(node, g)
            start, end = _leading_comments(outer), outer.end_point[0]
            if end >= len(lines):
                end = len(lines) - 1
            name = _name(node, src)
            qname = f"{prefix}{name}" if name else prefix.rstrip(".")
            if node.type in g.containers:
                kind = "class"
            elif node.type in g.functions and not _is_function_type(node.type):
                kind = "definition"
            else:
                kind = "method" if prefix or "." in name else "function"
            if node.type in g.containers and next(_defs_under(node, g), None) is not None:
                # Members become their own chunks (`Class.method`); the class's own lines
                # (header, docstring, attributes) are picked up as gaps named after it.
                containers.append((start, end, qname))
                visit(node, f"{qname}.")
            elif _size(lines, start, end) > MAX_CHUNK_CHARS or end - start >= MAX_CHUNK_LINES:
                spans.extend(_windows(lines, start, end, qname, kind))
            else:
                spans.append(Span(start=start, end=end, symbol=qname, kind=kind))

    visit(tree.root_node, "")
    spans.extend(_gap_spans(lines, spans, containers))
    return spans


def _is_function_type(node_type: str) -> bool:
    return any(w in node_type for w in ("function", "method", "constructor", "macro", "init_declaration"))


_TRIVIAL_RE = re.compile(r"[\s\W]*(end)?[\s\W]*")


def _gap_spans(lines: list[str], spans: list[Span], containers: list[tuple[int, int, str]]) -> list[Span]:
    """Lines no definition covers: file-level code (imports, constants) or a class's own lines."""
    covered = bytearray(len(lines))
    for s in spans:
        covered[s.start : s.end + 1] = b"\x01" * (s.end - s.start + 1)

    def owner(i: int) -> str:
        inner = [c for c in containers if c[0] <= i <= c[1]]
        return min(inner, key=lambda c: c[1] - c[0])[2] if inner else ""

    out: list[Span] = []
    i = 0
    while i < len(lines):
        if covered[i]:
            i += 1
            continue
        symbol, j = owner(i), i
        while j + 1 < len(lines) and not covered[j + 1] and owner(j + 1) == symbol:
            j += 1
        if not _TRIVIAL_RE.fullmatch("\n".join(lines[i : j + 1])):
            out.extend(_windows(lines, i, j, symbol, "class" if symbol else "module"))
        i = j + 1
    return out


_HEADING_RE = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")


def _markdown_spans(lines: list[str]) -> list[Span]:
    """One section per ATX heading (outside code fences), named by its heading path."""
    heads: list[tuple[int, int, str]] = []  # (line, level, title)
    in_fence = False
    for i, line in enumerate(lines):
        if _FENCE_RE.match(line):
            in_fence = not in_fence
        elif not in_fence and (m := _HEADING_RE.match(line)):
            heads.append((i, len(m.group(1)), m.group(2)))
    spans: list[Span] = []
    if not heads or heads[0][0] > 0:
        end = heads[0][0] - 1 if heads else len(lines) - 1
        spans.extend(_windows(lines, 0, end, "", "section"))
    path: list[tuple[int, str]] = []
    for n, (line, level, title) in enumerate(heads):
        path = [p for p in path if p[0] < level] + [(level, title)]
        end = heads[n + 1][0] - 1 if n + 1 < len(heads) else len(lines) - 1
        spans.extend(_windows(lines, line, end, " > ".join(t for _, t in path), "section"))
    return spans
