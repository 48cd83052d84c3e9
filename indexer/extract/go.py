"""Go facts: functions, methods (scoped by their receiver type) and types, imports, os.Getenv keys,
net/http handlers and router-style routes."""

from __future__ import annotations

import re

from tree_sitter import Node

from indexer.extract import HTTP_METHODS, Extraction, line

CAPTURES = [
    "function_declaration",
    "method_declaration",
    "type_spec",
    "import_spec",
    "call_expression",
    "interpreted_string_literal",
    "raw_string_literal",
    "parameter_declaration",
    "short_var_declaration",
    "range_clause",
    "var_spec",
]


def handle(x: Extraction, node: Node, scope: str) -> str | None:
    t = node.type
    if t in ("function_declaration", "method_declaration"):
        name = x.text(node.child_by_field_name("name"))
        owner = _receiver_type(x, node.child_by_field_name("receiver"))
        kind = "method" if owner else "function"
        return x.symbol(node, name, kind, owner or scope, node.child_by_field_name("body"))
    if t == "type_spec":
        x.symbol(node, x.text(node.child_by_field_name("name")), "type", scope, None)
    elif t == "import_spec":
        path, alias = x.string(node.child_by_field_name("path")), node.child_by_field_name("name")
        if path:
            x.facts.imports.append([path, "", x.text(alias) if alias is not None else "", line(node)])
    elif t in ("parameter_declaration", "var_spec"):  # a method's receiver is one: `func (s *Server) ...`
        kind = node.child_by_field_name("type")
        for name in node.children_by_field_name("name"):
            if kind is not None:
                x.bind(scope, x.text(name), x.text(kind))
    elif t == "short_var_declaration":  # `s := &Server{}` holds a Server; `a, err := f()` something unstated
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        names, values = left.named_children if left else [], right.named_children if right else []
        for i, name in enumerate(names):
            value = values[i] if len(values) == len(names) else None
            if value is not None and value.type == "unary_expression":
                value = value.child_by_field_name("operand") or value
            if value is not None and value.type == "composite_literal":
                x.bind(scope, x.text(name), x.text(value.child_by_field_name("type")))
            else:
                x.shadow(scope, x.text(name))
    elif t == "range_clause":  # `for _, h := range hs`: of no stated type
        left = node.child_by_field_name("left")
        for name in left.named_children if left is not None else []:
            x.shadow(scope, x.text(name))
    elif t == "call_expression":
        _call(x, node, scope)
    elif t in ("interpreted_string_literal", "raw_string_literal"):
        x.url(node)
    return None


def _receiver_type(x: Extraction, receiver: Node | None) -> str:
    """The type a method's receiver names: `(s *Server)`, `(Server)` -> Server; `(s *Stack[T])` -> Stack, not
    its type parameter."""
    decl = next((c for c in receiver.named_children if c.type == "parameter_declaration"), None) if receiver else None
    kind = decl.child_by_field_name("type") if decl is not None else None
    found = re.match(r"[\s*(]*([A-Za-z_]\w*)", x.text(kind)) if kind is not None else None
    return found.group(1) if found else ""


def _call(x: Extraction, node: Node, scope: str) -> None:
    call = x.call_site(node, scope)
    callee, first, args = call.callee, call.first, call.args
    if first and x.text(call.fn) in ("os.Getenv", "os.LookupEnv"):
        x.facts.env_keys.append([first, x.text(call.fn), line(node)])
    elif first and callee in ("HandleFunc", "Handle"):
        method, _, pattern = first.partition(" ") if " " in first else ("ANY", "", first)
        handler = x.text(args.named_children[-1]) if len(args.named_children) > 1 else ""
        x.facts.routes.append([method, pattern, handler[:200], "net/http", line(node)])
    elif first and first.startswith("/") and callee.lower() in HTTP_METHODS and len(args.named_children) > 1:
        handler = x.text(args.named_children[-1])
        x.facts.routes.append([callee.upper(), first, handler[:200], "go-router", line(node)])
