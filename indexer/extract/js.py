"""JavaScript and TypeScript facts: functions, classes and methods (arrow functions included), ES and
CommonJS imports, process.env / import.meta.env keys and Express-style routes."""

from __future__ import annotations

from tree_sitter import Node

from indexer.extract import HTTP_METHODS, Extraction, line

CAPTURES = [
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
]
DEFINITIONS = (
    "function_declaration",
    "generator_function_declaration",
    "class_declaration",
    "abstract_class_declaration",
    "method_definition",
)
FUNCTION_VALUES = ("arrow_function", "function_expression", "function")


def handle(x: Extraction, node: Node, scope: str) -> str | None:
    t = node.type
    if t in DEFINITIONS:
        name = x.text(node.child_by_field_name("name"))
        kind = "method" if t == "method_definition" else ("class" if "class" in t else "function")
        return x.symbol(node, name, kind, scope, node.child_by_field_name("body"))
    if t == "variable_declarator":
        value = node.child_by_field_name("value")
        if value is not None and value.type in FUNCTION_VALUES:
            name = x.text(node.child_by_field_name("name"))
            return x.symbol(node, name, "function", scope, value.child_by_field_name("body"))
    elif t == "import_statement":
        source = x.string(node.child_by_field_name("source")) if node.child_by_field_name("source") else None
        if source:
            x.facts.imports.append([source, "", line(node)])
    elif t == "call_expression":
        _call(x, node, scope)
    elif t == "member_expression":
        obj = node.child_by_field_name("object")
        if x.text(obj) in ("process.env", "import.meta.env"):
            x.facts.env_keys.append([x.text(node.child_by_field_name("property")), x.text(obj), line(node)])
    elif t == "subscript_expression":
        obj = node.child_by_field_name("object")
        if x.text(obj) == "process.env":
            key = x.string(node.child_by_field_name("index"))
            if key:
                x.facts.env_keys.append([key, "process.env[]", line(node)])
    elif t in ("string", "template_string"):
        x.url(node)
    return None


def _call(x: Extraction, node: Node, scope: str) -> None:
    call = x.call_site(node, scope)
    callee, first, args = call.callee, call.first, call.args
    if callee == "require" and first:
        x.facts.imports.append([first, "", line(node)])
    elif (
        callee in HTTP_METHODS + ("all",)
        and first
        and first.startswith("/")
        and call.fn is not None
        and call.fn.type == "member_expression"
        and len(args.named_children) >= 2
    ):
        handler = args.named_children[-1]
        label = x.text(handler) if handler.type in ("identifier", "member_expression") else "<inline>"
        method = callee.upper() if callee != "all" else "ANY"
        x.facts.routes.append([method, first, label[:200], "express", line(node)])
