"""Structural facts of one blob from its syntax tree: symbols, imports, calls, routes, env keys,
tasks and URL literals. A pure function of (bytes, language, EXTRACTOR_VERSION), cached by blob_id:
a change to what it finds in the same bytes bumps EXTRACTOR_VERSION in indexer/versions.py.

A call row keeps what resolving it needs and one blob can tell: the callee's name, the expression it is
called on (`receiver`: `self`, `requests`, `self.session`, "" for a bare name) and, where the blob says it,
that expression's type (`receiver_type`: a variable assigned from a constructor, an annotated parameter or
variable, a field, a Go method's receiver). Resolution to a definition needs the other files of the repo, so
it happens when a part is written (indexer/calls/rules.py), never here.

This module holds what every language family shares: the Facts record, the Extraction helpers that
read nodes and append rows, one `call_site()`, the compiled capture queries and the scoped walk.
Each family is a module of its own here (python, js, go, java) with two names: CAPTURES, the node
types its handler looks at, and handle(x, node, scope), which appends that node's facts.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field

from tree_sitter import Node, Query, QueryCursor, Tree
from tree_sitter_language_pack import get_language

from indexer.chunk import node_text
from indexer.snapshot import FACT_COLUMNS

# language -> the family module (indexer/extract/<family>.py) that extracts it
FAMILY = {"python": "python", "javascript": "js", "typescript": "js", "tsx": "js", "go": "go", "java": "java"}
MAX_LITERAL_CHARS = 300
HTTP_METHODS = ("get", "post", "put", "delete", "patch", "head", "options")
URL_RE = re.compile(r"^(?:https?://[^\s/]+)?(/[^\s\"'<>]*)$")
PLACEHOLDER_RE = re.compile(r"\{[^{}]*\}|\$\{[^{}]*\}")
MAX_RECEIVER_CHARS = 200
LOCAL = "(local)"  # a bare call's receiver_type when the called name is a function's own (a parameter, a local)
TYPE_NAME_RE = re.compile(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*$")
SELF_NAMES = ("self.", "cls.", "this.")


@dataclass(frozen=True, kw_only=True)
class Facts:
    """Rows per table (columns as FACT_COLUMNS says; lines 1-based). Plain lists so they cache as JSON."""

    symbols: list = field(default_factory=list)  # name, qualified, kind, parent, signature, doc, line, line_end
    imports: list = field(default_factory=list)  # module, name, alias, line
    calls: list = field(default_factory=list)  # caller, callee, callee_root, receiver, receiver_type, line
    routes: list = field(default_factory=list)  # method, pattern, handler, framework, line
    env_keys: list = field(default_factory=list)  # key, how, line
    tasks: list = field(default_factory=list)  # name, role (producer|consumer), how, line
    url_literals: list = field(default_factory=list)  # url, url_path, line

    TABLES = tuple(FACT_COLUMNS)

    def to_json(self) -> dict:
        return {t: getattr(self, t) for t in self.TABLES}

    @classmethod
    def from_json(cls, data: dict | None) -> "Facts":
        return cls(**(data or {}))


def line(node: Node) -> int:
    return node.start_point[0] + 1


@dataclass(frozen=True, kw_only=True)
class CallSite:
    """A call expression, taken apart the same way for every family that has `function` and `arguments`."""

    fn: Node | None  # the called expression: `os.getenv`, `app.get`, `HandleFunc`
    callee: str  # its last name: `getenv` ("" when it is not a plain or dotted name)
    root: str  # its leftmost name: `os`
    receiver: str  # what it is called on: `os`, `self.session`; "" for a bare name
    args: Node | None
    first: str | None  # the first argument when it is a string literal


class Extraction:
    """One blob's extraction in progress: its bytes, the facts found so far, and the helpers the families
    read nodes and append rows with."""

    def __init__(self, src: bytes, fields_in_scope: bool = False):
        self.src = src
        self.fields_in_scope = fields_in_scope  # Java: a class's fields are names in its methods
        self.facts = Facts()
        self.route_prefix: dict[str, str] = {}  # java: class qualified name -> @RequestMapping path
        self.kinds: dict[str, str] = {}  # qualified name -> kind, of the definitions seen so far
        self.bindings: dict[tuple[str, str], set[str]] = {}  # (scope, variable or self.field) -> type names
        self.outer: dict[tuple[str, str], str] = {}  # (scope, name) -> where a `global`/`nonlocal` name binds

    def text(self, node: Node | None) -> str:
        return node_text(node, self.src)

    def string(self, node: Node | None) -> str | None:
        """The value of a string literal node, with interpolations as `{}`; None if not a string."""
        t = node.type if node is not None else ""
        if t in ("string", "template_string", "interpreted_string_literal", "raw_string_literal", "string_literal"):
            raw = self.text(node)
            m = re.match(r"^[rRbBuUfF]{0,2}(\"\"\"|'''|\"|'|`)(.*)\1$", raw, re.DOTALL)
            value = m.group(2) if m else raw.strip("\"'`")
            if "{" in value and (t == "template_string" or raw[:1] in "fF" or raw[:2].lower() in ("rf", "fr")):
                value = PLACEHOLDER_RE.sub("{}", value)
            return value
        return None

    def first_arg(self, args: Node | None) -> str | None:
        if args is None:
            return None
        for child in args.named_children:
            return self.string(child)
        return None

    def root(self, node: Node | None) -> str:
        """Leftmost name of a dotted chain: `Model.objects.filter` -> Model."""
        while node is not None:
            nxt = (
                node.child_by_field_name("object")
                or node.child_by_field_name("operand")
                or node.child_by_field_name("function")
                or node.child_by_field_name("value")
            )
            if nxt is None or node.type in ("identifier", "this", "self"):
                break
            node = nxt
        return self.text(node).split("(")[0].split(".")[0] if node is not None else ""

    def symbol(self, node: Node, name: str, kind: str, scope: str, body: Node | None, doc: str = "") -> str:
        scope = named(scope)  # a definition inside an arrow function passed along is named as if it were not
        qualified = f"{scope}.{name}" if scope else name
        end = node.end_byte
        if body is not None:  # up to the last token before the body: a comment after `:` or `{` is the body's
            head = [c.end_byte for c in node.children if c.end_byte <= body.start_byte and c.type != "comment"]
            end = max(head, default=body.start_byte)
        signature = " ".join(self.src[node.start_byte : end].decode("utf-8", "replace").split())
        self.facts.symbols.append(
            [name, qualified, kind, scope, signature.rstrip(":{ ")[:300], doc, line(node), node.end_point[0] + 1]
        )
        self.kinds.setdefault(qualified, kind)
        return qualified

    def bind(self, scope: str, target: str, type_text: str) -> None:
        """Record that `target` (a variable, or `self.x` / `this.x`) holds a `type_text` in `scope`; a field is
        bound in its class, where every method sees it."""
        name = type_name(type_text)
        if not name or not target:
            return
        if target.startswith(SELF_NAMES):
            scope = next((s for s in scopes(scope) if self.kinds.get(s) == "class"), None)
            if scope is None:
                return
        scope = self.outer.get((scope, target), scope)
        self.bindings.setdefault((scope, target), set()).add(name)

    def shadow(self, scope: str, target: str) -> None:
        """Record that a name holds something of no stated type in `scope` (a parameter, a loop variable, a
        value a function returned): a binding of the same name further out says nothing about it here."""
        if target:
            self.bindings.setdefault((self.outer.get((scope, target), scope), target), set()).add("")

    def anonymous(self, node: Node, scope: str) -> str:
        """A scope of no name (a lambda, a comprehension, an arrow function passed along): its parameters and
        loop variables bind there, not in the function around it; its calls are that function's (finish)."""
        return f"{scope}.<{node.start_byte}>" if scope else f"<{node.start_byte}>"

    def receiver_type(self, scope: str, receiver: str) -> str:
        """The one type bound to `receiver` in the nearest scope that binds it ("" when none, several, or a
        binding of no stated type: see shadow). A class body's names are not in scope in its methods, but in
        Java, whose fields are."""
        for s in scopes(scope):
            if s != scope and self.kinds.get(s) == "class" and not receiver.startswith(SELF_NAMES):
                if not self.fields_in_scope:
                    continue
            found = self.bindings.get((s, receiver))
            if found:
                return next(iter(found)) if len(found) == 1 else ""
        return ""

    def finish(self) -> Facts:
        """The facts, each call given the type of its receiver (bindings are complete only once the walk ends:
        a method may use a field another method assigns further down); a bare call of a name a function binds
        (a parameter, a local) gets LOCAL: whatever it holds, it is no definition of that name further out."""
        calls = []
        for caller, callee, root, receiver, at in self.facts.calls:
            if receiver:
                found = self.receiver_type(caller, receiver)
            else:
                local = any((s, callee) in self.bindings for s in scopes(caller) if s and self.kinds.get(s) != "class")
                found = LOCAL if local else ""
            calls.append([named(caller), callee, root, receiver, found, at])
        self.facts.calls[:] = calls
        return self.facts

    def url(self, node: Node) -> None:
        value = self.string(node)
        if value and len(value) <= MAX_LITERAL_CHARS and "/" in value:
            m = URL_RE.match(value)
            if m and re.search(r"[A-Za-z]", m.group(1)):
                self.facts.url_literals.append([value, m.group(1).split("?")[0].split("#")[0], line(node)])

    def call_site(self, node: Node, scope: str) -> CallSite:
        """Take a call expression apart and record the call (caller scope, callee, its root, receiver, line)."""
        fn = node.child_by_field_name("function")
        callee, root, receiver = self._callee(fn)
        if callee:
            self.call(scope, callee, root, receiver, line(node))
        args = node.child_by_field_name("arguments")
        return CallSite(fn=fn, callee=callee, root=root, receiver=receiver, args=args, first=self.first_arg(args))

    def call(self, scope: str, callee: str, root: str, receiver: str, at: int) -> None:
        """Record a call; its receiver_type is filled in by finish()."""
        self.facts.calls.append([scope, callee, root, receiver[:MAX_RECEIVER_CHARS], at])

    def _callee(self, fn: Node | None) -> tuple[str, str, str]:
        if fn is None:
            return "", "", ""
        if fn.type in ("identifier", "field_identifier"):
            return self.text(fn), self.text(fn), ""
        field_name = next(
            (f for f in ("attribute", "property", "field", "name") if fn.child_by_field_name(f) is not None), None
        )
        if field_name:
            obj = fn.child_by_field_name("object") or fn.child_by_field_name("operand")
            receiver = " ".join(self.text(obj).split()) if obj is not None else ""
            return self.text(fn.child_by_field_name(field_name)), self.root(fn), receiver
        return "", "", ""


def named(scope: str) -> str:
    """A scope with its anonymous parts (Extraction.anonymous) left out: what a call's caller says."""
    return ".".join(p for p in scope.split(".") if not p.startswith("<")) if "<" in scope else scope


def scopes(scope: str) -> list[str]:
    """A scope and those enclosing it, innermost first, ending with the file's: `A.b` -> [A.b, A, ""]."""
    parts = scope.split(".") if scope else []
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)] + [""]


def type_name(text: str) -> str:
    """A type as written, cut down to the name of what it is: `*http.Request` -> http.Request, `Optional[Foo]`
    -> Foo, `Foo | None` -> Foo, `List<Foo>` -> List, `"Foo"` -> Foo; "" for anything else."""
    t = text.strip().strip("\"'").lstrip("*&").strip()
    for wrapper in ("Optional[", "typing.Optional[", "t.Optional["):
        if t.startswith(wrapper) and t.endswith("]"):
            t = t[len(wrapper) : -1]
    t = t.split("|")[0].strip()
    t = re.split(r"[\[<(]", t, maxsplit=1)[0].strip().lstrip("*&")
    return t if TYPE_NAME_RE.match(t) and t not in ("None", "null", "undefined", "any", "object") else ""


def _walk(x: Extraction, root: Node, query: Query, handle) -> Facts:
    """Visit only the nodes the family's query captures (matching runs in C), outer before inner,
    tracking the enclosing definition as the scope of each."""
    captured = QueryCursor(query).captures(root).get("n", [])
    captured.sort(key=lambda n: (n.start_byte, -n.end_byte))
    open_defs: list[tuple[int, str]] = []  # (end_byte, qualified name) of enclosing definitions
    for node in captured:
        while open_defs and open_defs[-1][0] <= node.start_byte:
            open_defs.pop()
        inner = handle(x, node, open_defs[-1][1] if open_defs else "")
        if inner is not None:
            open_defs.append((node.end_byte, inner))
    return x.finish()


# One query per language from its family's CAPTURES. No text predicates (#eq?): the tree was parsed through
# a read callback, and predicates would read node text back through it, which costs more than checking the
# few candidates in the handlers.
_QUERIES: dict[str, Query] = {}


def _query(lang: str, captures: list[str]) -> Query:
    if lang not in _QUERIES:
        language = get_language(lang)
        patterns = [
            p if p.startswith("(") else f"({p})"
            for p in captures
            if p.startswith("(")
            and language.id_for_node_kind(p[1:].split()[0], True)
            or not p.startswith("(")
            and language.id_for_node_kind(p, True)
        ]
        _QUERIES[lang] = Query(language, "\n".join(f"{p} @n" for p in patterns))
    return _QUERIES[lang]


def extract(parsed: tuple[Tree, bytes] | None, lang: str) -> Facts:
    """Facts of one parsed blob (its tree and the bytes it was parsed from); languages without
    an extractor, and blobs that could not be parsed, yield no facts."""
    if parsed is None or lang not in FAMILY:
        return Facts()
    tree, src = parsed
    family = importlib.import_module(f"{__name__}.{FAMILY[lang]}")  # imported here: each family imports this module
    x = Extraction(src, fields_in_scope=getattr(family, "FIELDS_IN_SCOPE", False))
    return _walk(x, tree.root_node, _query(lang, family.CAPTURES), family.handle)
