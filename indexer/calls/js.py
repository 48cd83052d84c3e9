"""JavaScript and TypeScript module rules: relative files with their suffixes, and bare specifiers of the npm
packages an indexed repo's package.json names."""

from __future__ import annotations

from indexer.calls.code import Repos, EXTERNAL, Code, Module, join

GLOBALS = frozenset(
    "require console JSON Math Object Array String Number Boolean Promise Symbol Date RegExp Error Map Set WeakMap "
    "parseInt parseFloat isNaN setTimeout clearTimeout setInterval clearInterval fetch encodeURIComponent "
    "decodeURIComponent structuredClone queueMicrotask describe it test expect beforeEach afterEach".split()
)
SUFFIXES = ("", ".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", "/index.ts", "/index.tsx", "/index.js", "/index.jsx")
BUILTIN_TYPES = frozenset("Array Map Set WeakMap Object Promise String Number Date RegExp Error URL".split())


def module(resolver: Repos, code: Code, path: str, module: str):
    """The Module a JS import names from `path`: a relative file, else an npm package's."""
    if module.startswith("."):
        return js_file(code, join(path.rpartition("/")[0], module))
    return npm_module(resolver, module)


def npm_module(resolver: Repos, specifier: str):
    """A bare specifier (`@acme/ui`, `acme-ui/button`) of a package an indexed repo's package.json names: the
    file it names, or the package's entry (its `main`, else index or src/index)."""
    for name, (repo, folder, main) in resolver.world.declared.npm.items():
        if specifier != name and not specifier.startswith(name + "/"):
            continue
        code = resolver.code_of(repo)
        if code is None:
            return EXTERNAL
        rest = specifier[len(name) + 1 :]
        if rest:
            return js_file(code, join(folder, rest))
        entries = [join(folder, main)] if main else []
        return next(
            (
                m
                for m in (js_file(code, e) for e in [*entries, join(folder, "index"), join(folder, "src/index")])
                if isinstance(m, Module)
            ),
            EXTERNAL,
        )
    return EXTERNAL


def js_file(code: Code, base: str):
    found = next((base + s for s in SUFFIXES if base + s in code.paths), None)
    return Module(code.name, (found,)) if found else EXTERNAL
