"""Structural facts of one blob from its syntax tree: symbols, imports, calls, routes, env keys,
tasks and URL literals. A pure function of (bytes, language, EXTRACTOR_VERSION), cached by blob_id.

Calls are matched by name, never resolved: resolution needs type inference, while a name match
is cheap, has no failure modes, and answers who calls this and which other repo is coupled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node, Query, QueryCursor, Tree
from tree_sitter_language_pack import get_language

from indexer.snapshot import FACT_COLUMNS

# 1: symbols, imports, calls, routes, env keys, tasks, URL literals for python, js/ts, go, java.
EXTRACTOR_VERSION = 1

FAMILY = {"python": "python", "javascript": "js", "typescript": "js", "tsx": "js", "go": "go", "java": "java"}
MAX_LITERAL_CHARS = 300
HTTP_METHODS = ("get", "post", "put", "delete", "patch", "head", "options")
URL_RE = re.compile(r"^(?:https?://[^\s/]+)?(/[^\s\"'<>]*)$")
PLACEHOLDER_RE = re.compile(r"\{[^{}]*\}|\$\{[^{}]*\}")
SETTINGS_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]+$")


@dataclass
class Facts:
    """Rows per table (columns as FACT_COLUMNS says; lines 1-based). Plain lists so they cache as JSON."""

    symbols: list = field(default_factory=list)  # name, qualified, kind, parent, signature, doc, line, line_end
    imports: list = field(default_factory=list)  # module, name, line
    calls: list = field(default_factory=list)  # caller, callee, callee_root, line
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


def _text(node: Node | None, src: bytes) -> str:
    # Sliced from our own copy: `node.text` re-reads through the parse callback, chunk by chunk.
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace") if node is not None else ""


def _line(node: Node) -> int:
    return node.start_point[0] + 1


def _string_value(node: Node | None, src: bytes) -> str | None:
    """The value of a string literal node, with interpolations as `{}`; None if not a string."""
    t = node.type if node is not None else ""
    if t in ("string", "template_string", "interpreted_string_literal", "raw_string_literal", "string_literal"):
        raw = _text(node, src)
        m = re.match(r"^[rRbBuUfF]{0,2}(\"\"\"|'''|\"|'|`)(.*)\1$", raw, re.DOTALL)
        value = m.group(2) if m else raw.strip("\"'`")
        if "{" in value and (t == "template_string" or raw[:1] in "fF" or raw[:2].lower() in ("rf", "fr")):
            value = PLACEHOLDER_RE.sub("{}", value)
        return value
    return None


def _first_string_arg(args: Node | None, src: bytes) -> str | None:
    if args is None:
        return None
    for child in args.named_children:
        return _string_value(child, src)
    return None


def _chain_root(node: Node | None, src: bytes) -> str:
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
    return _text(node, src).split("(")[0].split(".")[0] if node is not None else ""


class _Extractor:
    def __init__(self, family: str, src: bytes):
        self.family, self.src = family, src
        self.facts = Facts()
        self.route_prefix: dict[str, str] = {}  # java: class qualified name -> @RequestMapping path

    # -- helpers shared by the families ------------------------------------------------
    def t(self, node: Node | None) -> str:
        return _text(node, self.src)

    def sv(self, node: Node | None) -> str | None:
        return _string_value(node, self.src)

    def first_arg(self, args: Node | None) -> str | None:
        return _first_string_arg(args, self.src)

    def root(self, node: Node | None) -> str:
        return _chain_root(node, self.src)

    def symbol(self, node: Node, name: str, kind: str, scope: str, body: Node | None, doc: str = "") -> str:
        qualified = f"{scope}.{name}" if scope else name
        end = body.start_byte if body is not None else node.end_byte
        signature = " ".join(self.src[node.start_byte : end].decode("utf-8", "replace").split())
        self.facts.symbols.append(
            [name, qualified, kind, scope, signature.rstrip(":{ ")[:300], doc, _line(node), node.end_point[0] + 1]
        )
        return qualified

    def url(self, node: Node) -> None:
        value = self.sv(node)
        if value and len(value) <= MAX_LITERAL_CHARS and "/" in value:
            m = URL_RE.match(value)
            if m and re.search(r"[A-Za-z]", m.group(1)):
                self.facts.url_literals.append([value, m.group(1).split("?")[0].split("#")[0], _line(node)])

    def call(self, node: Node, callee_node: Node | None, scope: str) -> tuple[str, str]:
        if callee_node is None:
            return "", ""
        field_name = next(
            (f for f in ("attribute", "property", "field", "name") if callee_node.child_by_field_name(f) is not None),
            None,
        )
        if callee_node.type in ("identifier", "field_identifier"):
            callee = root = self.t(callee_node)
        elif field_name:
            callee = self.t(callee_node.child_by_field_name(field_name))
            root = self.root(callee_node)
        else:
            return "", ""
        if callee:
            self.facts.calls.append([scope, callee, root, _line(node)])
        return callee, root

    # -- the walk ------------------------------------------------------------------------
    def run(self, root: Node, query: Query) -> Facts:
        """Visit only the nodes the family's query captures (matching runs in C), outer before inner,
        tracking the enclosing definition as the scope of each."""
        handler = getattr(self, f"_{self.family}")
        captured = QueryCursor(query).captures(root).get("n", [])
        captured.sort(key=lambda n: (n.start_byte, -n.end_byte))
        open_defs: list[tuple[int, str]] = []  # (end_byte, qualified name) of enclosing definitions
        for node in captured:
            while open_defs and open_defs[-1][0] <= node.start_byte:
                open_defs.pop()
            inner = handler(node, open_defs[-1][1] if open_defs else "")
            if inner is not None:
                open_defs.append((node.end_byte, inner))
        return self.facts

    # -- python --------------------------------------------------------------------------
    def _python(self, node: Node, scope: str) -> str | None:
        t = node.type
        if t in ("function_definition", "class_definition"):
            name = self.t(node.child_by_field_name("name"))
            body = node.child_by_field_name("body")
            kind = "class" if t == "class_definition" else ("method" if self._in_class(node) else "function")
            qualified = self.symbol(node, name, kind, scope, body, self._py_doc(body))
            if node.parent is not None and node.parent.type == "decorated_definition":
                for dec in node.parent.children:
                    if dec.type == "decorator":
                        self._py_decorator(dec, name, qualified)
            return qualified
        if t == "import_statement":
            for child in node.named_children:
                target = child.child_by_field_name("name") if child.type == "aliased_import" else child
                self.facts.imports.append([self.t(target), "", _line(node)])
        elif t == "import_from_statement":
            module = self.t(node.child_by_field_name("module_name"))
            names = [c for c in node.children_by_field_name("name")]
            for n in names or [None]:
                target = n.child_by_field_name("name") if n is not None and n.type == "aliased_import" else n
                self.facts.imports.append([module, self.t(target) if target is not None else "*", _line(node)])
        elif t == "call":
            fn = node.child_by_field_name("function")
            callee, root = self.call(node, fn, scope)
            args = node.child_by_field_name("arguments")
            chain = self.t(fn)
            key = self.first_arg(args)
            if key and chain in ("os.getenv", "getenv", "os.environ.get", "environ.get", "os.environ.setdefault"):
                self.facts.env_keys.append([key, chain, _line(node)])
            elif key and callee == "send_task":
                self.facts.tasks.append([key, "producer", "send_task", _line(node)])
            elif callee in ("delay", "apply_async") and fn.type == "attribute":
                task = self.t(fn.child_by_field_name("object")).rsplit(".", 1)[-1]
                self.facts.tasks.append([task, "producer", callee, _line(node)])
            elif (
                key is not None
                and callee in ("path", "re_path", "url")
                and fn.type == "identifier"
                and args is not None
                and len(args.named_children) >= 2
            ):
                view = self.t(args.named_children[1])
                pattern = key if key.startswith("/") else "/" + key
                self.facts.routes.append(["ANY", pattern, view[:200], "django", _line(node)])
        elif t == "subscript":
            value = node.child_by_field_name("value")
            if self.t(value) in ("os.environ", "environ"):
                key = self.sv(node.child_by_field_name("subscript") or node.named_children[-1])
                if key:
                    self.facts.env_keys.append([key, "os.environ[]", _line(node)])
        elif t == "attribute":
            obj, attr = node.child_by_field_name("object"), self.t(node.child_by_field_name("attribute"))
            if (
                obj is not None
                and obj.type == "identifier"
                and self.t(obj) == "settings"
                and SETTINGS_KEY_RE.match(attr)
            ):
                self.facts.env_keys.append([attr, "settings", _line(node)])
        elif t == "string":
            self.url(node)
        return None

    @staticmethod
    def _in_class(node: Node) -> bool:
        p = node.parent
        while p is not None and p.type in ("block", "decorated_definition"):
            if p.type == "block" and p.parent is not None and p.parent.type == "class_definition":
                return True
            p = p.parent
        return False

    def _py_doc(self, body: Node | None) -> str:
        if body is None or not body.named_children:
            return ""
        first = body.named_children[0]
        if first.type == "expression_statement" and first.named_children:  # older grammars wrap it
            first = first.named_children[0]
        if first.type != "string":
            return ""
        value = self.sv(first) or ""
        return next((line.strip() for line in value.splitlines() if line.strip()), "")[:200]

    def _py_decorator(self, dec: Node, name: str, qualified: str) -> None:
        expr = dec.named_children[0] if dec.named_children else None
        if expr is None:
            return
        fn, args = (
            (expr.child_by_field_name("function"), expr.child_by_field_name("arguments"))
            if expr.type == "call"
            else (expr, None)
        )
        dotted = self.t(fn)
        last = dotted.rsplit(".", 1)[-1]
        if last in ("task", "shared_task", "periodic_task"):
            task = name
            for kw in args.named_children if args is not None else []:
                if kw.type == "keyword_argument" and self.t(kw.child_by_field_name("name")) == "name":
                    task = self.sv(kw.child_by_field_name("value")) or task
            self.facts.tasks.append([task, "consumer", dotted, _line(dec)])
            return
        pattern = self.first_arg(args)
        if pattern is None or not pattern.startswith("/") or "." not in dotted:
            return
        if last in HTTP_METHODS:
            self.facts.routes.append([last.upper(), pattern, qualified, "python", _line(dec)])
        elif last in ("route", "api_route", "websocket"):
            methods = ["GET"]
            for kw in args.named_children if args is not None else []:
                if kw.type == "keyword_argument" and self.t(kw.child_by_field_name("name")) == "methods":
                    found = [self.sv(c) for c in kw.child_by_field_name("value").named_children]
                    methods = [m.upper() for m in found if m] or methods
            for m in methods:
                self.facts.routes.append([m, pattern, qualified, "python", _line(dec)])

    # -- javascript / typescript -------------------------------------------------------
    def _js(self, node: Node, scope: str) -> str | None:
        t = node.type
        if t in (
            "function_declaration",
            "generator_function_declaration",
            "class_declaration",
            "abstract_class_declaration",
            "method_definition",
        ):
            name = self.t(node.child_by_field_name("name"))
            kind = "method" if t == "method_definition" else ("class" if "class" in t else "function")
            return self.symbol(node, name, kind, scope, node.child_by_field_name("body"))
        if t == "variable_declarator":
            value = node.child_by_field_name("value")
            if value is not None and value.type in ("arrow_function", "function_expression", "function"):
                name = self.t(node.child_by_field_name("name"))
                return self.symbol(node, name, "function", scope, value.child_by_field_name("body"))
        elif t == "import_statement":
            source = self.sv(node.child_by_field_name("source")) if node.child_by_field_name("source") else None
            if source:
                self.facts.imports.append([source, "", _line(node)])
        elif t == "call_expression":
            fn = node.child_by_field_name("function")
            callee, root = self.call(node, fn, scope)
            args = node.child_by_field_name("arguments")
            first = self.first_arg(args)
            if callee == "require" and first:
                self.facts.imports.append([first, "", _line(node)])
            elif (
                callee in HTTP_METHODS + ("all",)
                and first
                and first.startswith("/")
                and fn is not None
                and fn.type == "member_expression"
                and len(args.named_children) >= 2
            ):
                handler = args.named_children[-1]
                label = self.t(handler) if handler.type in ("identifier", "member_expression") else "<inline>"
                self.facts.routes.append(
                    [callee.upper() if callee != "all" else "ANY", first, label[:200], "express", _line(node)]
                )
        elif t == "member_expression":
            obj = node.child_by_field_name("object")
            if self.t(obj) in ("process.env", "import.meta.env"):
                self.facts.env_keys.append([self.t(node.child_by_field_name("property")), self.t(obj), _line(node)])
        elif t == "subscript_expression":
            obj = node.child_by_field_name("object")
            if self.t(obj) == "process.env":
                key = self.sv(node.child_by_field_name("index"))
                if key:
                    self.facts.env_keys.append([key, "process.env[]", _line(node)])
        elif t in ("string", "template_string"):
            self.url(node)
        return None

    # -- go ------------------------------------------------------------------------------
    def _go(self, node: Node, scope: str) -> str | None:
        t = node.type
        if t in ("function_declaration", "method_declaration"):
            name = self.t(node.child_by_field_name("name"))
            receiver = node.child_by_field_name("receiver")
            owner = re.findall(r"[A-Za-z_]\w*", self.t(receiver))[-1:] if receiver is not None else []
            kind = "method" if owner else "function"
            return self.symbol(node, name, kind, owner[0] if owner else scope, node.child_by_field_name("body"))
        if t == "type_spec":
            self.symbol(node, self.t(node.child_by_field_name("name")), "type", scope, None)
        elif t == "import_spec":
            path = self.sv(node.child_by_field_name("path"))
            if path:
                self.facts.imports.append([path, "", _line(node)])
        elif t == "call_expression":
            fn = node.child_by_field_name("function")
            callee, root = self.call(node, fn, scope)
            args = node.child_by_field_name("arguments")
            first = self.first_arg(args)
            if first and self.t(fn) in ("os.Getenv", "os.LookupEnv"):
                self.facts.env_keys.append([first, self.t(fn), _line(node)])
            elif first and callee in ("HandleFunc", "Handle"):
                method, _, pattern = first.partition(" ") if " " in first else ("ANY", "", first)
                handler = self.t(args.named_children[-1]) if len(args.named_children) > 1 else ""
                self.facts.routes.append([method, pattern, handler[:200], "net/http", _line(node)])
            elif first and first.startswith("/") and callee.lower() in HTTP_METHODS and len(args.named_children) > 1:
                handler = self.t(args.named_children[-1])
                self.facts.routes.append([callee.upper(), first, handler[:200], "go-router", _line(node)])
        elif t in ("interpreted_string_literal", "raw_string_literal"):
            self.url(node)
        return None

    # -- java ----------------------------------------------------------------------------
    def _java(self, node: Node, scope: str) -> str | None:
        t = node.type
        if t in ("class_declaration", "interface_declaration", "enum_declaration", "record_declaration"):
            qualified = self.symbol(
                node, self.t(node.child_by_field_name("name")), "class", scope, node.child_by_field_name("body")
            )
            for name, path in self._java_mappings(node):
                if name == "RequestMapping":
                    self.route_prefix[qualified] = path
            return qualified
        if t in ("method_declaration", "constructor_declaration"):
            name = self.t(node.child_by_field_name("name"))
            qualified = self.symbol(node, name, "method", scope, node.child_by_field_name("body"))
            for ann, path in self._java_mappings(node):
                method = "ANY" if ann == "RequestMapping" else ann[: -len("Mapping")].upper()
                full = (self.route_prefix.get(scope, "").rstrip("/") + "/" + path.lstrip("/")) or "/"
                self.facts.routes.append([method, full, qualified, "spring", _line(node)])
            return qualified
        if t == "import_declaration":
            module = self.t(node).removeprefix("import").strip().removeprefix("static").strip().rstrip(";").strip()
            self.facts.imports.append([module, "", _line(node)])
        elif t == "method_invocation":
            name = node.child_by_field_name("name")
            obj = node.child_by_field_name("object")
            callee = self.t(name)
            root = self.root(obj) if obj is not None else callee
            self.facts.calls.append([scope, callee, root, _line(node)])
            first = self.first_arg(node.child_by_field_name("arguments"))
            if first and self.t(obj) == "System" and callee == "getenv":
                self.facts.env_keys.append([first, "System.getenv", _line(node)])
        elif t == "string_literal":
            self.url(node)
        return None

    def _java_mappings(self, node: Node) -> list[tuple[str, str]]:
        """(annotation name, path) for @GetMapping("/x"), @RequestMapping(value = "/x"), …"""
        found = []
        modifiers = next((c for c in node.children if c.type == "modifiers"), None)
        for ann in modifiers.named_children if modifiers is not None else []:
            if ann.type not in ("annotation", "marker_annotation"):
                continue
            name = self.t(ann.child_by_field_name("name"))
            if not name.endswith("Mapping"):
                continue
            args = ann.child_by_field_name("arguments")
            strings = [self.sv(s) for s in _descendants(args, "string_literal")] if args is not None else []
            found.append((name, strings[0] if strings and strings[0] is not None else ""))
        return found


def _descendants(node: Node, node_type: str):
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == node_type:
            yield n
        stack.extend(reversed(n.children))


# The node types each family's handler looks at; everything else is never visited in Python.
# No text predicates (#eq?): the tree was parsed through a read callback, and predicates would
# read node text back through it, which costs more than checking the few candidates here.
CAPTURES = {
    "python": [
        "function_definition",
        "class_definition",
        "import_statement",
        "import_from_statement",
        "call",
        "subscript",
        "string",
        "(attribute object: (identifier))",
    ],
    "js": [
        "function_declaration",
        "generator_function_declaration",
        "class_declaration",
        "abstract_class_declaration",
        "method_definition",
        "variable_declarator",
        "import_statement",
        "call_expression",
        "string",
        "template_string",
        "(member_expression object: (member_expression property: (property_identifier)))",
        "(subscript_expression object: (member_expression))",
    ],
    "go": [
        "function_declaration",
        "method_declaration",
        "type_spec",
        "import_spec",
        "call_expression",
        "interpreted_string_literal",
        "raw_string_literal",
    ],
    "java": [
        "class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "method_declaration",
        "constructor_declaration",
        "import_declaration",
        "method_invocation",
        "string_literal",
    ],
}
_QUERIES: dict[str, Query] = {}


def _query(lang: str, family: str) -> Query:
    if lang not in _QUERIES:
        language = get_language(lang)
        patterns = [
            p if p.startswith("(") else f"({p})"
            for p in CAPTURES[family]
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
    family = FAMILY.get(lang)
    if parsed is None or family is None:
        return Facts()
    tree, src = parsed
    return _Extractor(family, src).run(tree.root_node, _query(lang, family))
