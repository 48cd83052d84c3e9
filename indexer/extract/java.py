"""Java facts: classes, interfaces, enums, records, methods and constructors, imports, method calls,
System.getenv keys and Spring @…Mapping routes (joined to their class's @RequestMapping prefix)."""

from __future__ import annotations

from tree_sitter import Node

from indexer.extract import Extraction, line, type_name

FIELDS_IN_SCOPE = True  # a field is a name in every method of its class (extract.Extraction.receiver_type)

CAPTURES = [
    "class_declaration",
    "interface_declaration",
    "enum_declaration",
    "record_declaration",
    "method_declaration",
    "constructor_declaration",
    "import_declaration",
    "method_invocation",
    "string_literal",
    "object_creation_expression",
    "field_declaration",
    "formal_parameter",
    "local_variable_declaration",
]
TYPES = ("class_declaration", "interface_declaration", "enum_declaration", "record_declaration")


def handle(x: Extraction, node: Node, scope: str) -> str | None:
    t = node.type
    if t in TYPES:
        qualified = x.symbol(
            node, x.text(node.child_by_field_name("name")), "class", scope, node.child_by_field_name("body")
        )
        for name, path in _mappings(x, node):
            if name == "RequestMapping":
                x.route_prefix[qualified] = path
        return qualified
    if t in ("method_declaration", "constructor_declaration"):
        name = x.text(node.child_by_field_name("name"))
        qualified = x.symbol(node, name, "method", scope, node.child_by_field_name("body"))
        for ann, path in _mappings(x, node):
            method = "ANY" if ann == "RequestMapping" else ann[: -len("Mapping")].upper()
            full = (x.route_prefix.get(scope, "").rstrip("/") + "/" + path.lstrip("/")) or "/"
            x.facts.routes.append([method, full, qualified, "spring", line(node)])
        return qualified
    if t == "import_declaration":
        module = x.text(node).removeprefix("import").strip().removeprefix("static").strip().rstrip(";").strip()
        x.facts.imports.append([module, "", "", line(node)])
    elif t == "method_invocation":
        # Java's call has `object` and `name` fields, not `function`: the shared call_site() does not fit.
        name = node.child_by_field_name("name")
        obj = node.child_by_field_name("object")
        callee = x.text(name)
        root = x.root(obj) if obj is not None else callee
        x.call(scope, callee, root, " ".join(x.text(obj).split()) if obj is not None else "", line(node))
        first = x.first_arg(node.child_by_field_name("arguments"))
        if first and x.text(obj) == "System" and callee == "getenv":
            x.facts.env_keys.append([first, "System.getenv", line(node)])
    elif t == "string_literal":
        x.url(node)
    elif t == "object_creation_expression":  # `new Invoice(...)` calls Invoice's constructor
        kind = x.text(node.child_by_field_name("type"))
        callee = type_name(kind).rsplit(".", 1)[-1]
        if callee:
            x.call(scope, callee, kind.split(".")[0], "", line(node))
    elif t in ("field_declaration", "local_variable_declaration"):
        kind = x.text(node.child_by_field_name("type"))
        for declarator in node.children_by_field_name("declarator"):
            name = x.text(declarator.child_by_field_name("name"))
            x.bind(scope, name, kind)
            if t == "field_declaration":  # a field is `this.f` as well as `f` in its class's methods
                x.bind(scope, "this." + name, kind)
    elif t == "formal_parameter":
        x.bind(scope, x.text(node.child_by_field_name("name")), x.text(node.child_by_field_name("type")))
    return None


def _mappings(x: Extraction, node: Node) -> list[tuple[str, str]]:
    """(annotation name, path) for @GetMapping("/x"), @RequestMapping(value = "/x"), …"""
    found = []
    modifiers = next((c for c in node.children if c.type == "modifiers"), None)
    for ann in modifiers.named_children if modifiers is not None else []:
        if ann.type not in ("annotation", "marker_annotation"):
            continue
        name = x.text(ann.child_by_field_name("name"))
        if not name.endswith("Mapping"):
            continue
        args = ann.child_by_field_name("arguments")
        strings = [x.string(s) for s in _descendants(args, "string_literal")] if args is not None else []
        found.append((name, strings[0] if strings and strings[0] is not None else ""))
    return found


def _descendants(node: Node, node_type: str):
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == node_type:
            yield n
        stack.extend(reversed(n.children))
