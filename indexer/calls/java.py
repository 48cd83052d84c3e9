"""Java's class rules: an import's class in this repo or in the repo that has its package, and the classes of a
file's own package, which need no import."""

from __future__ import annotations

from indexer.calls.code import Repos, EXTERNAL, Code, Def


def java_class(resolver: Repos, code: Code, dotted: str):
    """The class a Java import names: in this repo, else in the repo that has its package."""
    suffix = "/" + dotted.replace(".", "/") + ".java"
    owner = resolver.code_of(resolver.world.declared.java.get(dotted.rpartition(".")[0], code.name))
    for candidate in (code, owner):
        found = next((p for p in sorted(candidate.paths) if ("/" + p).endswith(suffix)), None) if candidate else None
        if found is not None:
            return candidate.top(found, dotted.rsplit(".", 1)[-1]) or EXTERNAL
    return EXTERNAL


def same_package(code: Code, path: str, name: str) -> Def | None:
    """A Java class of the file's package (its directory)."""
    return next((d for p in code.dirs.get(path.rpartition("/")[0], ()) if (d := code.top(p, name))), None)
