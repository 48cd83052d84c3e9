"""Call resolution: each call row of a repo, to the definition it calls, with how it was found.

Extraction sees one blob (indexer/extract/); a call's target lies in another file of the repo, or in another
indexed repo, so calls are resolved when a repo's part is written, from the repo's definitions and imports and
those of the org's other repos (for Python, through the packages they define). The levels, surest first:

    exact       the definition is found without leaving the file: a nested or module-level definition, a
                method of the enclosing class (`self.x()`, `this.x()`), a function of the same Go package
    import      through the file's imports: `from a import f; f()`, `import requests; requests.get()`,
                `Session.merge(...)` on an imported class (re-exports followed, `__init__.py` ones too), in
                this repo or another
    receiver    through the type of what it is called on: a variable assigned from a constructor or annotated,
                a field, a Go method's receiver, or a method a class inherits from a base class
    name_only   not resolved: it is called on something whose type is unknown here (`x.get()`, a call's
                result), so only its name matches; readers show these apart and only when asked
    unresolved  known to call nothing indexed: a builtin, or something of a module or package that no indexed
                repo defines (`os.path.join`, `json.dumps`, `fmt.Println`)

The rules are static and local, as a reader of one file would follow them; what they cannot see (values passed
in without annotations, monkey-patching, dynamic dispatch to a subclass) is name_only, never a guess. An import
of another repo resolves there when that repo declares what is imported (Declared: a Python package, a Go
module's go.mod, an npm package's package.json, a Java package).
"""

from __future__ import annotations

import re

import pyarrow as pa

from indexer.calls import go, java, js, python
from indexer.calls.code import EXTERNAL, Code, Def, Module, World, join
from indexer.calls.declared import Declared
from indexer.extract import LOCAL
from indexer.snapshot import RESOLUTION_COLUMNS

__all__ = ["EXTERNAL", "Code", "Declared", "Def", "Module", "Resolver", "World", "join", "resolve_calls"]

MAX_HOPS = 8  # re-exports and base classes followed at most this deep (a cycle ends there too)
FAMILY = {"python": "python", "javascript": "js", "typescript": "js", "tsx": "js", "go": "go", "java": "java"}
SELF = {"python": ("self", "cls"), "js": ("this",), "java": ("this",), "go": ()}
SUPER = ("super()", "super")
# Names every file of a language sees without defining or importing them: a call of one, or of a method of
# one (`console.log`, `str.join`), calls nothing indexed.
KNOWN_GLOBALS = {"python": python.BUILTINS, "js": js.GLOBALS, "go": go.BUILTINS}
BUILTIN_TYPES = {"python": python.BUILTIN_TYPES, "js": js.BUILTIN_TYPES}
BASES_RE = {
    "python": re.compile(r"^class\s+\w+\s*\((.*)\)\s*$", re.S),
    "js": re.compile(r"\bextends\s+([\w$.]+)"),
    "java": re.compile(r"\b(?:extends|implements)\s+([\w.<>, ]+?)(?=\s+(?:implements|extends|permits)\b|$)"),
}


# An import's module, by the file's language family (Java imports name classes: java.java_class).
MODULE_RULES = {
    "python": python.module,
    "js": js.module,
    "go": lambda resolver, code, path, module: go.package(resolver, code, module),  # by import path alone
}


class Resolver:
    """Resolves the calls of one repo (`code`) in its org (`world`)."""

    def __init__(self, code: Code, world: World):
        self.code, self.world = code, world
        self._bases: dict[Def, list[Def]] = {}  # each class's bases, worked out once

    # -- what a name means in a file ----------------------------------------------------------
    def bindings(self, code: Code, path: str) -> dict[str, object]:
        """Names a file's imports bind -> Module, Def or EXTERNAL (an import no indexed repo satisfies)."""
        if path in code._bindings:
            return code._bindings[path]
        family = FAMILY.get(code.lang.get(path, ""), "")
        bound: dict[str, object] = {}
        for module, what, alias in code.imports.get(path, ()):
            if family == "python":
                if not what:  # `import a.b` binds a; `import a.b as c` binds c to a.b
                    name, target = (
                        (alias, self.module(code, path, module))
                        if alias
                        else (
                            module.split(".")[0],
                            self.module(code, path, module.split(".")[0]),
                        )
                    )
                elif what == "*":
                    continue
                else:
                    name, target = alias or what, self.member_of_module(code, path, module, what)
            elif family == "js":
                if not what:
                    continue
                found = self.module(code, path, module)
                name = alias or what
                if what == "*" or not isinstance(found, Module):
                    target = found
                else:  # a default export is taken to be the definition named as it is imported
                    target = self.export(found, alias if what == "default" else what)
            elif family == "go":
                name, target = alias or module.rsplit("/", 1)[-1], self.module(code, path, module)
            elif family == "java":
                if module.endswith(".*"):
                    continue
                name, target = module.rsplit(".", 1)[-1], java.java_class(self, code, module)
            else:
                continue
            if name and target is not None:
                bound[name] = target
        code._bindings[path] = bound
        return bound

    def module(self, code: Code, path: str, module: str):
        """The Module an import names from `path`, or EXTERNAL: by the rules of the file's language family."""
        family = FAMILY.get(code.lang.get(path, ""), "")
        rules = MODULE_RULES.get(family)
        return rules(self, code, path, module) if rules is not None else EXTERNAL

    def member_of_module(self, code: Code, path: str, module: str, name: str):
        """What `from module import name` binds: a definition (through re-exports) or a submodule; EXTERNAL for a
        module no indexed repo defines; None for a name the module binds otherwise (a variable: unknown)."""
        found = self.module(code, path, module)
        if not isinstance(found, Module):
            return EXTERNAL
        return self.export(found, name)

    def export(self, module: Module, name: str, hops: int = 0):
        """What a module offers as `name`: its own definition, one it imports (a re-export, followed), or (Python)
        its submodule; None when it offers nothing by that name."""
        code = self.code_of(module.repo)
        if code is None or hops > MAX_HOPS:
            return None
        for path in module.paths:
            found = code.top(path, name)
            if found is not None:
                return found
        for path in module.paths:
            family = FAMILY.get(code.lang.get(path, ""), "")
            for mod, what, alias in code.imports.get(path, ()):
                if family == "python" and not what and alias == name:  # `import a.b as name`
                    return self.module(code, path, mod)
                if (alias or what) != name or what in ("", "*", "default"):
                    continue
                inner = self.module(code, path, mod)
                if not isinstance(inner, Module):
                    return EXTERNAL
                # `from . import views` in a package's __init__.py names its submodule, not itself again
                found = self.export(inner, what, hops + 1) if inner.paths != module.paths else None
                return found if found is not None else self._submodule(code, inner, what)
        return self._submodule(code, module, name)

    def _submodule(self, code: Code, module: Module, name: str) -> Module | None:
        dotted = f"{module.name}.{name}" if module.name else ""
        sub = code.py_modules.get(dotted) if dotted else None
        return Module(code.name, (sub,), dotted) if sub is not None else None

    def code_of(self, repo: str) -> Code | None:
        return self.code if repo == self.code.name else self.world.code(repo)

    # -- classes -----------------------------------------------------------------------------
    def member(self, cls: Def, name: str, hops: int = 0) -> tuple[Def | None, bool]:
        """A class's member `name`, from the class itself or its bases: (the definition, whether inherited)."""
        code = self.code_of(cls.repo)
        if code is None or hops > MAX_HOPS:
            return None, False
        if FAMILY.get(code.lang.get(cls.path, "")) == "go":  # a Go type's methods lie in any file of its package
            for path in code.dirs.get(cls.path.rpartition("/")[0], ()):
                found = code.children.get((path, cls.qualified), {}).get(name)
                if found is not None:
                    return found, False
            return None, False
        found = code.children.get((cls.path, cls.qualified), {}).get(name)
        if found is not None:
            return found, False
        for base in self.bases(cls):
            inherited, _ = self.member(base, name, hops + 1)
            if inherited is not None:
                return inherited, True
        return None, False

    def bases(self, cls: Def) -> list[Def]:
        """The classes a class names as its bases. Remembered, and none while they are being worked out: a base
        named through another class (`class A(b.B.Inner)`) can lead back to this one, as hostile code may."""
        if cls not in self._bases:
            self._bases[cls] = []
            self._bases[cls] = self._named_bases(cls)
        return self._bases[cls]

    def _named_bases(self, cls: Def) -> list[Def]:
        code = self.code_of(cls.repo)
        family = FAMILY.get(code.lang.get(cls.path, ""), "") if code else ""
        pattern = BASES_RE.get(family)
        m = pattern.search(code.signature.get(cls, "")) if pattern else None
        if m is None:
            return []
        names = [b.strip() for b in _top_level_split(m.group(1))]
        found = []
        for base in names:
            if not base or "=" in base:
                continue
            target = self.dotted(code, cls.path, re.split(r"[\[<(]", base)[0].strip(), "")
            if isinstance(target, Def) and target.kind in ("class", "type") and target != cls:
                found.append(target)
        return found

    # -- expressions -------------------------------------------------------------------------
    def scoped(self, code: Code, path: str, scope: str, name: str, family: str) -> Def | None:
        """A name defined where the scope sees it: nested definitions outward, then the file's own (the members
        of a class, a Go type or a JS object literal are not in scope in its methods, except in Java, where a
        bare call is a call on `this`)."""
        parts = scope.split(".") if scope else []
        for n in range(len(parts), -1, -1):
            parent = ".".join(parts[:n])
            found = code.children.get((path, parent), {}).get(name)
            if found is None:
                continue
            owner = self._def_at(code, path, parent)
            # a class body, a Go type (its methods may lie in another file) or a JS object literal is no scope of
            # its methods (the class body itself sees its own names)
            if parent and parent != scope and family != "java" and (owner is None or owner.kind in ("class", "type")):
                continue
            return found
        return None

    def _def_at(self, code: Code, path: str, qualified: str) -> Def | None:
        if not qualified:
            return None
        parent, _, name = qualified.rpartition(".")
        return code.children.get((path, parent), {}).get(name)

    def dotted(self, code: Code, path: str, expr: str, scope: str):
        """What a dotted name (`requests`, `os.path`, `Billing`, `sessions.Session`) is in a file: a Def, a
        Module, EXTERNAL, or None when its first name is no definition or import here (a variable)."""
        first, *rest = expr.split(".")
        family = FAMILY.get(code.lang.get(path, ""), "")
        target = self.scoped(code, path, scope, first, family) or self.bindings(code, path).get(first)
        if target is None and family == "go":
            target = go.same_package(code, path, first)
        if target is None and family == "java":
            target = java.same_package(code, path, first)
        for name in rest:
            if isinstance(target, Module):
                target = self.export(target, name)
            elif isinstance(target, Def) and target.kind in ("class", "type"):
                target = self.member(target, name)[0]
            elif target != EXTERNAL:
                return None
        return target

    def enclosing_class(self, code: Code, path: str, scope: str) -> Def | None:
        parts = scope.split(".") if scope else []
        js = FAMILY.get(code.lang.get(path, "")) == "js"
        for n in range(len(parts), 0, -1):
            d = self._def_at(code, path, ".".join(parts[:n]))
            if d is not None and d.kind in ("class", "type"):
                return d
            if d is None and js:  # a JS object literal (api.fetch's `api`): `this` in its methods is the object
                return None
        if FAMILY.get(code.lang.get(path, "")) == "go" and parts:  # a Go method's scope is Type.method
            return go.same_package(code, path, parts[0])
        return None

    # -- one call ----------------------------------------------------------------------------
    def resolve(self, path: str, caller: str, callee: str, receiver: str, receiver_type: str) -> tuple:
        """(resolution, resolved_repo, resolved_path, resolved_symbol) of one call row."""
        code = self.code
        family = FAMILY.get(code.lang.get(path, ""), "")
        if not family:
            return ("name_only", "", "", "")
        if not receiver:  # a parameter or a local called by name holds something no definition here says
            return (
                ("name_only", "", "", "") if receiver_type == LOCAL else self._bare(code, path, caller, callee, family)
            )
        if receiver in SELF[family]:
            cls = self.enclosing_class(code, path, caller)
            return self._on_class(cls, callee, "exact") if cls is not None else ("name_only", "", "", "")
        if receiver in SUPER:
            cls = self.enclosing_class(code, path, caller)
            for base in self.bases(cls) if cls is not None else []:
                found, _ = self.member(base, callee)
                if found is not None:
                    return _row("receiver", found)
            return ("name_only", "", "", "")
        if receiver_type in BUILTIN_TYPES.get(family, ()):  # `d = {}; d.get(k)`: a builtin's method
            return ("unresolved", "", "", "")
        if receiver_type:
            cls = self.dotted(code, path, receiver_type, caller)
            if isinstance(cls, Def) and cls.kind in ("class", "type"):
                found, _ = self.member(cls, callee)
                return _row("receiver", found) if found is not None else ("name_only", "", "", "")
            if cls == EXTERNAL:
                return ("unresolved", "", "", "")
        target = self.dotted(code, path, receiver, caller) if _is_dotted(receiver) else None
        if isinstance(target, Module):
            found = self.export(target, callee)
            if isinstance(found, Def):
                return _row("import", found)
            return ("unresolved", "", "", "") if found == EXTERNAL else ("name_only", "", "", "")
        if isinstance(target, Def) and target.kind in ("class", "type"):
            found, _ = self.member(target, callee)
            level = "exact" if target.path == path and target.repo == code.name else "import"
            return _row(level, found) if found is not None else ("name_only", "", "", "")
        if target == EXTERNAL or (target is None and receiver.split(".")[0] in KNOWN_GLOBALS.get(family, ())):
            return ("unresolved", "", "", "")
        return ("name_only", "", "", "")

    def _bare(self, code: Code, path: str, caller: str, callee: str, family: str) -> tuple:
        found = self.scoped(code, path, caller, callee, family)
        if found is not None:
            return _row("exact", found)
        if family == "java":
            cls = self.enclosing_class(code, path, caller)
            if cls is not None:
                inherited, _ = self.member(cls, callee)
                if inherited is not None:
                    return _row("receiver", inherited)
            same = java.same_package(code, path, callee)
            if same is not None:
                return _row("exact", same)
        bound = self.bindings(code, path).get(callee)
        if isinstance(bound, Def):
            return _row("import", bound)
        if bound is not None:
            return ("unresolved", "", "", "")
        if family == "go":
            same = go.same_package(code, path, callee)
            if same is not None:
                return _row("exact", same)
        known = KNOWN_GLOBALS.get(family, frozenset())
        return ("unresolved", "", "", "") if callee in known else ("name_only", "", "", "")

    def _on_class(self, cls: Def, callee: str, level: str) -> tuple:
        found, inherited = self.member(cls, callee)
        if found is None:
            return ("name_only", "", "", "")
        return _row("receiver" if inherited else level, found)


def _row(level: str, d: Def) -> tuple:
    return (level, d.repo, d.path, d.qualified)


def _is_dotted(expr: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*", expr))


def _top_level_split(text: str) -> list[str]:
    """`A, B[C, D], metaclass=M` -> [A, B[C, D], metaclass=M]: commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([<{":
            depth += 1
        elif ch in ")]>}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def resolve_calls(calls: pa.Table, resolver: Resolver) -> pa.Table:
    """`calls` (a repo's call rows) with RESOLUTION_COLUMNS set by `resolver`."""
    columns = ("path", "caller", "callee", "receiver", "receiver_type")
    memo: dict[tuple, tuple] = {}
    out: list[tuple] = []
    for key in zip(*(calls.column(c).to_pylist() for c in columns)):
        if key not in memo:
            memo[key] = resolver.resolve(*key)
        out.append(memo[key])
    for i, name in enumerate(RESOLUTION_COLUMNS):
        values = pa.array([r[i] for r in out], pa.string())
        index = calls.schema.get_field_index(name)
        calls = calls.set_column(index, name, values) if index >= 0 else calls.append_column(name, values)
    return calls
