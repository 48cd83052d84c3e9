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
    "new_expression",
    "assignment_expression",
    "public_field_definition",
    "required_parameter",
    "optional_parameter",
    "formal_parameters",
    "arrow_function",
    "function_expression",
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
        if t == "method_definition" and node.parent is not None and node.parent.type == "object":
            owner = _object_name(x, node.parent)  # `const api = { fetch() {} }`: api.fetch, no file-level fetch
            scope = f"{scope}.{owner}" if scope else owner
        return x.symbol(node, name, kind, scope, node.child_by_field_name("body"))
    if t in ("arrow_function", "function_expression"):  # one passed along; a named one's scope is its own (below)
        inner = x.anonymous(node, scope)
        x.shadow(inner, x.text(node.child_by_field_name("parameter")))  # `s => s.get()`: s is no outer s
        return inner
    if t == "formal_parameters":  # typed ones (TypeScript) are bound by their own captures
        for param in node.named_children:
            target = param.child_by_field_name("left") if param.type == "assignment_pattern" else param
            if param.type in ("required_parameter", "optional_parameter"):
                typed = param.child_by_field_name("type") is not None
                target = None if typed else param.child_by_field_name("pattern")
            if target is not None and target.type == "rest_pattern":
                target = next(iter(target.named_children), None)
            if target is not None and target.type == "identifier":
                x.shadow(scope, x.text(target))
        return None
    if t == "variable_declarator":
        value, name = node.child_by_field_name("value"), node.child_by_field_name("name")
        if value is not None and value.type in FUNCTION_VALUES:
            return x.symbol(node, x.text(name), "function", scope, value.child_by_field_name("body"))
        if value is not None and value.type == "class":  # `const Api = class { ... }`: a class named Api
            return x.symbol(node, x.text(name), "class", scope, value.child_by_field_name("body"))
        if value is not None and value.type == "new_expression":
            x.bind(scope, x.text(name), x.text(value.child_by_field_name("constructor")))
        elif value is not None and value.type == "call_expression" and _required(x, value) and name is not None:
            _require_binding(x, name, _required(x, value), line(node))
    elif t == "import_statement":
        source = x.string(node.child_by_field_name("source")) if node.child_by_field_name("source") else None
        if source:
            _import(x, node, source)
    elif t == "call_expression":
        _call(x, node, scope)
    elif t == "new_expression":
        ctor = node.child_by_field_name("constructor")
        callee, root, receiver = x._callee(ctor)
        if callee:
            x.call(scope, callee, root, receiver, line(node))
    elif t == "assignment_expression":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if right is not None and right.type == "new_expression" and left is not None:
            x.bind(scope, x.text(left), x.text(right.child_by_field_name("constructor")))
    elif t == "public_field_definition":
        name, annotation = node.child_by_field_name("name"), node.child_by_field_name("type")
        if name is not None and annotation is not None:
            x.bind(scope, "this." + x.text(name), x.text(annotation).lstrip(": "))
    elif t in ("required_parameter", "optional_parameter"):
        name, annotation = node.child_by_field_name("pattern"), node.child_by_field_name("type")
        if name is not None and annotation is not None and name.type == "identifier":
            type_text = x.text(annotation).lstrip(": ")
            x.bind(scope, x.text(name), type_text)
            if any(c.type == "accessibility_modifier" for c in node.children):  # a constructor's parameter property
                x.bind(scope, "this." + x.text(name), type_text)
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


def _import(x: Extraction, node: Node, source: str) -> None:
    """One imports row per name an ES import binds: (source, what, alias): `default` for a default import,
    `*` for a namespace; a bare `import './x'` binds nothing."""
    clause = next((c for c in node.named_children if c.type == "import_clause"), None)
    rows = []
    for part in clause.named_children if clause is not None else []:
        if part.type == "identifier":
            rows.append(["default", x.text(part)])
        elif part.type == "namespace_import":
            rows += [["*", x.text(c)] for c in part.named_children if c.type == "identifier"]
        elif part.type == "named_imports":
            for spec in part.named_children:
                if spec.type == "import_specifier":
                    name, alias = spec.child_by_field_name("name"), spec.child_by_field_name("alias")
                    rows.append([x.text(name), x.text(alias) if alias is not None else ""])
    for what, alias in rows or [["", ""]]:
        x.facts.imports.append([source, what, alias, line(node)])


def _required(x: Extraction, call: Node) -> str | None:
    """The module a `require('...')` call names; None for any other call."""
    fn = call.child_by_field_name("function")
    if fn is None or fn.type != "identifier" or x.text(fn) != "require":
        return None
    return x.first_arg(call.child_by_field_name("arguments"))


def _require_binding(x: Extraction, pattern: Node, source: str, at: int) -> None:
    """`const m = require(s)` binds the module; `const {a, b: c} = require(s)` binds its names."""
    if pattern.type == "identifier":
        x.facts.imports.append([source, "*", x.text(pattern), at])
        return
    for part in pattern.named_children:
        if part.type == "shorthand_property_identifier_pattern":
            x.facts.imports.append([source, x.text(part), "", at])
        elif part.type == "pair_pattern":
            key, value = part.child_by_field_name("key"), part.child_by_field_name("value")
            x.facts.imports.append([source, x.text(key), x.text(value), at])


def _object_name(x: Extraction, obj: Node) -> str:
    """What an object literal is called: the variable or property it is assigned to, with the keys it lies
    under (`const app = { methods: { save() {} } }` -> app.methods); `{}` at the root of one of no name
    (`Vue.component("x", { methods: { ... } })` -> {}.methods)."""
    names, node = [], obj
    while node is not None and node.type in ("object", "pair", "parenthesized_expression"):
        if node.type == "pair":
            names.append(x.text(node.child_by_field_name("key")).strip("\"'"))
        node = node.parent
    if node is not None and node.type == "variable_declarator":
        names.append(x.text(node.child_by_field_name("name")))
    elif node is not None and node.type == "assignment_expression":
        names.append(x.text(node.child_by_field_name("left")))
    else:  # an object of no name (passed along, returned): `{}` at its root
        names.append("{}")
    return ".".join(reversed(names))


def _call(x: Extraction, node: Node, scope: str) -> None:
    call = x.call_site(node, scope)
    callee, first, args = call.callee, call.first, call.args
    if callee == "require" and first:
        parent = node.parent
        if parent is None or parent.type != "variable_declarator":  # a binding one: variable_declarator's row
            x.facts.imports.append([first, "", "", line(node)])
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
