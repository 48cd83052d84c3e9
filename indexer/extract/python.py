"""Python facts: definitions with docstrings, imports, os.environ / settings keys, Celery tasks,
Flask/FastAPI decorator routes and Django urlpatterns."""

from __future__ import annotations

import re

from tree_sitter import Node

from indexer.extract import HTTP_METHODS, Extraction, line

CAPTURES = [
    "function_definition",
    "class_definition",
    "import_statement",
    "import_from_statement",
    "call",
    "subscript",
    "string",
    "(attribute object: (identifier))",
    "assignment",
    "typed_parameter",
    "typed_default_parameter",
    "as_pattern",
    "parameters",
    "lambda_parameters",
    "for_statement",
    "for_in_clause",
    "lambda",
    "list_comprehension",
    "set_comprehension",
    "dictionary_comprehension",
    "generator_expression",
    "global_statement",
    "nonlocal_statement",
]
ENV_GETTERS = ("os.getenv", "getenv", "os.environ.get", "environ.get", "os.environ.setdefault")
SETTINGS_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]+$")
LITERAL_TYPES = {
    "dictionary": "dict",
    "dictionary_comprehension": "dict",
    "list": "list",
    "list_comprehension": "list",
    "set": "set",
    "set_comprehension": "set",
    "string": "str",
    "concatenated_string": "str",
    "tuple": "tuple",
}
BUILTIN_TYPES = ("dict", "list", "set", "frozenset", "tuple", "str", "bytes", "bytearray")


def handle(x: Extraction, node: Node, scope: str) -> str | None:
    t = node.type
    if t in ("function_definition", "class_definition"):
        return _definition(x, node, scope)
    if t == "import_statement":
        for child in node.named_children:
            target, alias = _aliased(x, child)
            x.facts.imports.append([target, "", alias, line(node)])
    elif t == "import_from_statement":
        module = x.text(node.child_by_field_name("module_name"))
        names = [c for c in node.children_by_field_name("name")]
        for n in names or [None]:
            target, alias = _aliased(x, n) if n is not None else ("*", "")
            x.facts.imports.append([module, target, alias, line(node)])
    elif t == "assignment":
        left, right, annotation = (node.child_by_field_name(f) for f in ("left", "right", "type"))
        if left is not None and left.type in ("identifier", "attribute"):
            if annotation is not None:
                x.bind(scope, x.text(left), x.text(annotation))
            elif right is not None and not _bind_constructed(x, scope, x.text(left), right):
                if left.type == "identifier" and right.type != "none":  # `x = None` says nothing either way
                    x.shadow(scope, x.text(left))
        elif left is not None:  # `a, b = ...`: of no stated type
            _shadow_names(x, scope, left)
    elif t in ("parameters", "lambda_parameters"):  # typed ones are bound by their own captures, after this
        for param in node.named_children:
            if param.type in ("identifier", "default_parameter", "list_splat_pattern", "dictionary_splat_pattern"):
                _shadow_names(x, scope, param.child_by_field_name("name") or param)
    elif t in ("for_statement", "for_in_clause"):
        _shadow_names(x, scope, node.child_by_field_name("left"))
    elif t in ("lambda", "list_comprehension", "set_comprehension", "dictionary_comprehension", "generator_expression"):
        return x.anonymous(node, scope)  # Python 3 gives each a scope of its own
    elif t in ("global_statement", "nonlocal_statement"):  # the name binds in the module, or the function around
        outer = "" if t == "global_statement" else scope.rpartition(".")[0]
        for name in node.named_children:
            x.outer[(scope, x.text(name))] = outer
    elif t in ("typed_parameter", "typed_default_parameter"):
        name = node.child_by_field_name("name") or next(
            (c for c in node.named_children if c.type == "identifier"), None
        )
        annotation = node.child_by_field_name("type")
        if name is not None and annotation is not None:
            x.bind(scope, x.text(name), x.text(annotation))
    elif t == "as_pattern":
        value = node.named_children[0] if node.named_children else None
        target = node.child_by_field_name("alias")
        if value is not None and target is not None and not _bind_constructed(x, scope, x.text(target), value):
            if x.text(target).isidentifier():  # `with open(p) as fh`, `except E as e`: of no stated type
                x.shadow(scope, x.text(target))
    elif t == "call":
        _call(x, node, scope)
    elif t == "subscript":
        value = node.child_by_field_name("value")
        if x.text(value) in ("os.environ", "environ"):
            key = x.string(node.child_by_field_name("subscript") or node.named_children[-1])
            if key:
                x.facts.env_keys.append([key, "os.environ[]", line(node)])
    elif t == "attribute":
        obj, attr = node.child_by_field_name("object"), x.text(node.child_by_field_name("attribute"))
        if obj is not None and obj.type == "identifier" and x.text(obj) == "settings" and SETTINGS_KEY_RE.match(attr):
            x.facts.env_keys.append([attr, "settings", line(node)])
    elif t == "string":
        x.url(node)
    return None


def _aliased(x: Extraction, node: Node) -> tuple[str, str]:
    """(what is imported, the name it is bound to when renamed) of `a.b` or `a.b as c`."""
    if node.type == "aliased_import":
        return x.text(node.child_by_field_name("name")), x.text(node.child_by_field_name("alias"))
    return x.text(node), ""


def _shadow_names(x: Extraction, scope: str, node: Node | None) -> None:
    """Shadow every plain name a target (`a`, `a, b`, `(a, [b, *c])`, `**kw`) binds."""
    if node is None:
        return
    if node.type == "identifier":
        x.shadow(scope, x.text(node))
    elif node.type in (
        "pattern_list",
        "tuple_pattern",
        "list_pattern",
        "list_splat_pattern",
        "dictionary_splat_pattern",
        "tuple",
        "list",
        "expression_list",
    ):
        for child in node.named_children:
            _shadow_names(x, scope, child)


def _bind_constructed(x: Extraction, scope: str, target: str, value: Node) -> bool:
    """`target = Name(...)` or `mod.Name(...)`: a class by its name (PEP 8 capitalises classes), so the target
    holds a Name; a literal or a builtin's constructor (`{}`, `[]`, `dict(...)`) holds that builtin type, whose
    methods (`d.get(k)`) are no call of any indexed definition."""
    if value.type in LITERAL_TYPES:
        x.bind(scope, target, LITERAL_TYPES[value.type])
        return True
    if value.type == "identifier":  # `self.app = app`, where the parameter `app` is annotated
        known = x.receiver_type(scope, x.text(value))
        if known:
            x.bind(scope, target, known)
        return bool(known)
    if value.type != "call":
        return False
    fn = value.child_by_field_name("function")
    name = x.text(fn) if fn is not None and fn.type in ("identifier", "attribute") else ""
    if name.rsplit(".", 1)[-1][:1].isupper() or name in BUILTIN_TYPES:
        x.bind(scope, target, name)
        return True
    return False


def _definition(x: Extraction, node: Node, scope: str) -> str:
    name = x.text(node.child_by_field_name("name"))
    body = node.child_by_field_name("body")
    kind = "class" if node.type == "class_definition" else ("method" if _in_class(node) else "function")
    qualified = x.symbol(node, name, kind, scope, body, _doc(x, body))
    if node.parent is not None and node.parent.type == "decorated_definition":
        for dec in node.parent.children:
            if dec.type == "decorator":
                _decorator(x, dec, name, qualified)
    return qualified


def _call(x: Extraction, node: Node, scope: str) -> None:
    call = x.call_site(node, scope)
    fn, callee, args, key = call.fn, call.callee, call.args, call.first
    chain = x.text(fn)
    if key and chain in ENV_GETTERS:
        x.facts.env_keys.append([key, chain, line(node)])
    elif key and callee == "send_task":
        x.facts.tasks.append([key, "producer", "send_task", line(node)])
    elif callee in ("delay", "apply_async") and fn.type == "attribute":
        task = x.text(fn.child_by_field_name("object")).rsplit(".", 1)[-1]
        x.facts.tasks.append([task, "producer", callee, line(node)])
    elif (
        key is not None
        and callee in ("path", "re_path", "url")
        and fn.type == "identifier"
        and args is not None
        and len(args.named_children) >= 2
    ):
        view = x.text(args.named_children[1])
        pattern = key if key.startswith("/") else "/" + key
        x.facts.routes.append(["ANY", pattern, view[:200], "django", line(node)])


def _in_class(node: Node) -> bool:
    p = node.parent
    while p is not None and p.type in ("block", "decorated_definition"):
        if p.type == "block" and p.parent is not None and p.parent.type == "class_definition":
            return True
        p = p.parent
    return False


def _doc(x: Extraction, body: Node | None) -> str:
    if body is None or not body.named_children:
        return ""
    first = body.named_children[0]
    if first.type == "expression_statement" and first.named_children:  # older grammars wrap it
        first = first.named_children[0]
    if first.type != "string":
        return ""
    value = x.string(first) or ""
    return next((text.strip() for text in value.splitlines() if text.strip()), "")[:200]


def _decorator(x: Extraction, dec: Node, name: str, qualified: str) -> None:
    expr = dec.named_children[0] if dec.named_children else None
    if expr is None:
        return
    fn, args = (
        (expr.child_by_field_name("function"), expr.child_by_field_name("arguments"))
        if expr.type == "call"
        else (expr, None)
    )
    dotted = x.text(fn)
    last = dotted.rsplit(".", 1)[-1]
    if last in ("task", "shared_task", "periodic_task"):
        task = name
        for kw in args.named_children if args is not None else []:
            if kw.type == "keyword_argument" and x.text(kw.child_by_field_name("name")) == "name":
                task = x.string(kw.child_by_field_name("value")) or task
        x.facts.tasks.append([task, "consumer", dotted, line(dec)])
        return
    pattern = x.first_arg(args)
    if pattern is None or not pattern.startswith("/") or "." not in dotted:
        return
    if last in HTTP_METHODS:
        x.facts.routes.append([last.upper(), pattern, qualified, "python", line(dec)])
    elif last in ("route", "api_route", "websocket"):
        methods = ["GET"]
        for kw in args.named_children if args is not None else []:
            if kw.type == "keyword_argument" and x.text(kw.child_by_field_name("name")) == "methods":
                found = [x.string(c) for c in kw.child_by_field_name("value").named_children]
                methods = [m.upper() for m in found if m] or methods
        for m in methods:
            x.facts.routes.append([m, pattern, qualified, "python", line(dec)])
