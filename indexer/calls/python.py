"""Python's module rules: `import a.b`, `from . import c`, packages in this repo or in another that declares them."""

from __future__ import annotations

import builtins
from indexer.calls.code import Repos, EXTERNAL, Code, Module, join

BUILTINS = frozenset(dir(builtins))
BUILTIN_TYPES = frozenset(n for n in BUILTINS if isinstance(getattr(builtins, n), type))


def module(resolver: Repos, code: Code, path: str, module: str):
    """The Module a Python import names from `path` (relative imports by folder), or EXTERNAL."""
    if module.startswith("."):
        dots = len(module) - len(module.lstrip("."))
        folder = path.rpartition("/")[0]
        for _ in range(dots - 1):
            folder = folder.rpartition("/")[0]
        rest = module[dots:].replace(".", "/")
        base = join(folder, rest) if rest else folder
        for candidate in (base + ".py", (base + "/" if base else "") + "__init__.py"):
            if candidate in code.paths:
                return Module(code.name, (candidate,), code.py_names.get(candidate, ""))
        return EXTERNAL
    if module in code.py_modules:
        return Module(code.name, (code.py_modules[module],), module)
    owner = resolver.world.declared.python.get(module.split(".")[0])
    other = resolver.world.code(owner) if owner and owner != code.name else None
    if other is not None and module in other.py_modules:
        return Module(other.name, (other.py_modules[module],), module)
    return EXTERNAL
