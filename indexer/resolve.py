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

import builtins
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from indexer.edges import TOP_PACKAGE_DIRS
from indexer.extract import LOCAL
from indexer.languages import language_for
from indexer.snapshot import RESOLUTION_COLUMNS

MAX_HOPS = 8  # re-exports and base classes followed at most this deep (a cycle ends there too)
FAMILY = {"python": "python", "javascript": "js", "typescript": "js", "tsx": "js", "go": "go", "java": "java"}
SELF = {"python": ("self", "cls"), "js": ("this",), "java": ("this",), "go": ()}
SUPER = ("super()", "super")
PY_BUILTINS = frozenset(dir(builtins))
JS_GLOBALS = frozenset(
    "require console JSON Math Object Array String Number Boolean Promise Symbol Date RegExp Error Map Set WeakMap "
    "parseInt parseFloat isNaN setTimeout clearTimeout setInterval clearInterval fetch encodeURIComponent "
    "decodeURIComponent structuredClone queueMicrotask describe it test expect beforeEach afterEach".split()
)
GO_BUILTINS = frozenset(
    "append cap clear close complex copy delete imag len make max min new panic print println real recover".split()
)
# Names every file of a language sees without defining or importing them: a call of one, or of a method of
# one (`console.log`, `str.join`), calls nothing indexed.
KNOWN_GLOBALS = {"python": PY_BUILTINS, "js": JS_GLOBALS, "go": GO_BUILTINS}
BUILTIN_TYPES = {
    "python": frozenset(n for n in PY_BUILTINS if isinstance(getattr(builtins, n), type)),
    "js": frozenset("Array Map Set WeakMap Object Promise String Number Date RegExp Error URL".split()),
}
JS_SUFFIXES = ("", ".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", "/index.ts", "/index.tsx", "/index.js", "/index.jsx")
BASES_RE = {
    "python": re.compile(r"^class\s+\w+\s*\((.*)\)\s*$", re.S),
    "js": re.compile(r"\bextends\s+([\w$.]+)"),
    "java": re.compile(r"\b(?:extends|implements)\s+([\w.<>, ]+?)(?=\s+(?:implements|extends|permits)\b|$)"),
}


@dataclass(frozen=True, kw_only=True)
class Def:
    """A definition: where it is and its qualified name in its file."""

    repo: str
    path: str
    qualified: str
    kind: str


@dataclass(frozen=True)
class Module:
    """A module (Python, JS) or a Go package: the files it is made of, and a Python module's dotted name."""

    repo: str
    paths: tuple[str, ...]
    name: str = ""


EXTERNAL = "external"  # a name bound to something no indexed repo defines


class Code:
    """One repo's definitions and imports, indexed for resolution."""

    def __init__(self, name: str, files: pa.Table, symbols: pa.Table, imports: pa.Table):
        self.name = name
        self.lang: dict[str, str] = {}
        for path, lang in zip(files.column("path").to_pylist(), files.column("lang").to_pylist()):
            self.lang[path] = lang or language_for(path)
        self.paths = frozenset(self.lang)
        self.children: dict[tuple[str, str], dict[str, Def]] = defaultdict(dict)  # (path, parent) -> name -> def
        self.signature: dict[Def, str] = {}
        for path, name_, qualified, kind, parent, signature in zip(
            *(symbols.column(c).to_pylist() for c in ("path", "name", "qualified_name", "kind", "parent", "signature"))
        ):
            d = Def(repo=self.name, path=path, qualified=qualified, kind=kind)
            self.children[(path, parent)].setdefault(name_, d)
            self.signature[d] = signature
        self.imports: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        for path, module, what, alias in zip(
            *(imports.column(c).to_pylist() for c in ("path", "module", "name", "alias"))
        ):
            self.imports[path].append((module, what, alias or ""))
        self.dirs: dict[str, list[str]] = defaultdict(list)
        for path in sorted(self.paths):
            self.dirs[path.rpartition("/")[0]].append(path)
        self.py_modules = _python_modules(sorted(p for p in self.paths if p.endswith(".py")))
        self.py_names: dict[str, str] = {}  # path -> its module's name (the package's, before any path tail)
        for dotted, path in self.py_modules.items():
            self.py_names.setdefault(path, dotted)
        self._bindings: dict[str, dict[str, object]] = {}

    def top(self, path: str, name: str) -> Def | None:
        return self.children.get((path, ""), {}).get(name)


def _python_modules(paths: list[str]) -> dict[str, str]:
    """Dotted module name -> path: a file's module is its path from the directory above its outermost package
    (the directories holding `__init__.py` that lead down to it); a file outside any package is its own name.
    Then, where no package says otherwise, a path below the repo's root or a `src/`-like directory is a module
    by that path: namespace packages (PEP 420) have no `__init__.py`, and `src/billing/invoice.py` is imported as
    `billing.invoice`. (Not every tail of a path: `src/flask/json/__init__.py` is no module `json`.)"""
    inits = {p.rpartition("/")[0] for p in paths if p.endswith("__init__.py")}
    modules: dict[str, str] = {}
    for path in paths:
        folder, _, file = path.rpartition("/")
        parts = [] if file == "__init__.py" else [file[:-3]]
        while folder and folder in inits:
            folder, _, package = folder.rpartition("/")
            parts.insert(0, package)
        if parts:
            modules.setdefault(".".join(parts), path)
    for path in paths:
        parts = path[: -len("/__init__.py") if path.endswith("/__init__.py") else -3].split("/")
        start = 1 if len(parts) > 1 and parts[0] in TOP_PACKAGE_DIRS else 0
        modules.setdefault(".".join(parts[start:]), path)
    return modules


@dataclass(kw_only=True)
class Declared:
    """What the org's repos say they are, for imports across repos: which repo defines each top-level Python
    package, each Go module (its go.mod), each npm package (its package.json) and each Java package."""

    python: dict[str, str] = field(default_factory=dict)  # package -> repo
    go: list[tuple[str, str, str]] = field(default_factory=list)  # (module, repo, its directory), longest first
    npm: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # name -> (repo, directory, main)
    java: dict[str, str] = field(default_factory=dict)  # package -> repo

    def add(self, repo: str, python: set[str], java: set[str], manifests: dict) -> None:
        """A repo's packages (edges.python_packages, edges.java_packages) and manifests (edges.declared)."""
        for package in python:
            self.python.setdefault(package, repo)
        for package in java:
            self.java.setdefault(package, repo)
        for path, module in manifests.get("go", {}).items():
            self.go.append((module, repo, path.rpartition("/")[0]))
        self.go.sort(key=lambda m: -len(m[0]))
        for path, (name, main) in manifests.get("npm", {}).items():
            self.npm.setdefault(name, (repo, path.rpartition("/")[0], main))


class World:
    """The org's repos as resolution reads them: Code per repo, loaded when a call first needs it, and what
    each declares (Declared)."""

    def __init__(self, load: Callable[[str], Code | None], declared: Declared):
        self._load, self._codes = load, {}
        self.declared = declared

    def code(self, repo: str) -> Code | None:
        if repo not in self._codes:
            self._codes[repo] = self._load(repo)
        return self._codes[repo]


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
                name, target = module.rsplit(".", 1)[-1], self.java_class(code, module)
            else:
                continue
            if name and target is not None:
                bound[name] = target
        code._bindings[path] = bound
        return bound

    def module(self, code: Code, path: str, module: str):
        """The Module an import names from `path`, or EXTERNAL."""
        family = FAMILY.get(code.lang.get(path, ""), "")
        if family == "python":
            return self._python_module(code, path, module)
        if family == "js":
            if module.startswith("."):
                return _js_file(code, _join(path.rpartition("/")[0], module))
            return self._npm_module(module)
        if family == "go":
            return self._go_package(code, module)
        return EXTERNAL

    def _npm_module(self, specifier: str):
        """A bare specifier (`@acme/ui`, `acme-ui/button`) of a package an indexed repo's package.json names: the
        file it names, or the package's entry (its `main`, else index or src/index)."""
        for name, (repo, folder, main) in self.world.declared.npm.items():
            if specifier != name and not specifier.startswith(name + "/"):
                continue
            code = self._code(repo)
            if code is None:
                return EXTERNAL
            rest = specifier[len(name) + 1 :]
            if rest:
                return _js_file(code, _join(folder, rest))
            entries = [_join(folder, main)] if main else []
            return next(
                (
                    m
                    for m in (_js_file(code, e) for e in [*entries, _join(folder, "index"), _join(folder, "src/index")])
                    if isinstance(m, Module)
                ),
                EXTERNAL,
            )
        return EXTERNAL

    def _go_package(self, code: Code, module: str):
        """The files of the Go package an import path names: in the repo whose go.mod declares the longest module
        path it starts with, else (this repo has no go.mod) the directory of this repo its path ends with."""
        for declared, repo, folder in self.world.declared.go:
            if module == declared or module.startswith(declared + "/"):
                owner = self._code(repo)
                target = _join(folder, module[len(declared) + 1 :])
                files = _go_files(owner, target) if owner is not None else ()
                return Module(owner.name, files) if files else EXTERNAL
        segments = module.split("/")
        if "." not in segments[0]:  # the standard library
            return EXTERNAL
        if any(repo == code.name for _, repo, _ in self.world.declared.go):  # its go.mod says what is its own
            return EXTERNAL
        for n in range(len(segments) - 1, 0, -1):
            files = _go_files(code, "/".join(segments[-n:]))
            if files:
                return Module(code.name, files)
        return EXTERNAL

    def _python_module(self, code: Code, path: str, module: str):
        if module.startswith("."):
            dots = len(module) - len(module.lstrip("."))
            folder = path.rpartition("/")[0]
            for _ in range(dots - 1):
                folder = folder.rpartition("/")[0]
            rest = module[dots:].replace(".", "/")
            base = _join(folder, rest) if rest else folder
            for candidate in (base + ".py", (base + "/" if base else "") + "__init__.py"):
                if candidate in code.paths:
                    return Module(code.name, (candidate,), code.py_names.get(candidate, ""))
            return EXTERNAL
        if module in code.py_modules:
            return Module(code.name, (code.py_modules[module],), module)
        owner = self.world.declared.python.get(module.split(".")[0])
        other = self.world.code(owner) if owner and owner != code.name else None
        if other is not None and module in other.py_modules:
            return Module(other.name, (other.py_modules[module],), module)
        return EXTERNAL

    def java_class(self, code: Code, dotted: str):
        """The class a Java import names: in this repo, else in the repo that has its package."""
        suffix = "/" + dotted.replace(".", "/") + ".java"
        owner = self._code(self.world.declared.java.get(dotted.rpartition(".")[0], code.name))
        for candidate in (code, owner):
            found = (
                next((p for p in sorted(candidate.paths) if ("/" + p).endswith(suffix)), None) if candidate else None
            )
            if found is not None:
                return candidate.top(found, dotted.rsplit(".", 1)[-1]) or EXTERNAL
        return EXTERNAL

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
        code = self._code(module.repo)
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

    def _code(self, repo: str) -> Code | None:
        return self.code if repo == self.code.name else self.world.code(repo)

    # -- classes -----------------------------------------------------------------------------
    def member(self, cls: Def, name: str, hops: int = 0) -> tuple[Def | None, bool]:
        """A class's member `name`, from the class itself or its bases: (the definition, whether inherited)."""
        code = self._code(cls.repo)
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
        code = self._code(cls.repo)
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
            target = self._same_package(code, path, first)
        if target is None and family == "java":
            target = self._java_same_package(code, path, first)
        for name in rest:
            if isinstance(target, Module):
                target = self.export(target, name)
            elif isinstance(target, Def) and target.kind in ("class", "type"):
                target = self.member(target, name)[0]
            elif target != EXTERNAL:
                return None
        return target

    def _same_package(self, code: Code, path: str, name: str) -> Def | None:
        """A Go definition of the file's package (its directory); tests see their package, not the reverse."""
        for other in code.dirs.get(path.rpartition("/")[0], ()):
            if not other.endswith(".go") or (other.endswith("_test.go") and not path.endswith("_test.go")):
                continue
            found = code.top(other, name)
            if found is not None:
                return found
        return None

    def _java_same_package(self, code: Code, path: str, name: str) -> Def | None:
        return next((d for p in code.dirs.get(path.rpartition("/")[0], ()) if (d := code.top(p, name))), None)

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
            return self._same_package(code, path, parts[0])
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
            same = self._java_same_package(code, path, callee)
            if same is not None:
                return _row("exact", same)
        bound = self.bindings(code, path).get(callee)
        if isinstance(bound, Def):
            return _row("import", bound)
        if bound is not None:
            return ("unresolved", "", "", "")
        if family == "go":
            same = self._same_package(code, path, callee)
            if same is not None:
                return _row("exact", same)
        known = KNOWN_GLOBALS.get(family, frozenset())
        return ("unresolved", "", "", "") if callee in known else ("name_only", "", "", "")

    def _on_class(self, cls: Def, callee: str, level: str) -> tuple:
        found, inherited = self.member(cls, callee)
        if found is None:
            return ("name_only", "", "", "")
        return _row("receiver" if inherited else level, found)


def _js_file(code: Code, base: str):
    found = next((base + s for s in JS_SUFFIXES if base + s in code.paths), None)
    return Module(code.name, (found,)) if found else EXTERNAL


def _go_files(code: Code, folder: str) -> tuple[str, ...]:
    return tuple(p for p in code.dirs.get(folder, ()) if p.endswith(".go") and not p.endswith("_test.go"))


def _row(level: str, d: Def) -> tuple:
    return (level, d.repo, d.path, d.qualified)


def _is_dotted(expr: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*", expr))


def _join(folder: str, relative: str) -> str:
    parts = folder.split("/") if folder else []
    for part in relative.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


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
