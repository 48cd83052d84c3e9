"""Go's package rules: an import path in the repo whose go.mod declares it (else this repo's folder it ends with),
and a package's definitions across its files."""

from __future__ import annotations

from indexer.calls.code import Repos, EXTERNAL, Code, Def, Module, join

BUILTINS = frozenset(
    "append cap clear close complex copy delete imag len make max min new panic print println real recover".split()
)


def package(resolver: Repos, code: Code, module: str):
    """The files of the Go package an import path names: in the repo whose go.mod declares the longest module
    path it starts with, else (this repo has no go.mod) the directory of this repo its path ends with."""
    for declared, repo, folder in resolver.world.declared.go:
        if module == declared or module.startswith(declared + "/"):
            owner = resolver.code_of(repo)
            target = join(folder, module[len(declared) + 1 :])
            files = go_files(owner, target) if owner is not None else ()
            return Module(owner.name, files) if files else EXTERNAL
    segments = module.split("/")
    if "." not in segments[0]:  # the standard library
        return EXTERNAL
    if any(repo == code.name for _, repo, _ in resolver.world.declared.go):  # its go.mod says what is its own
        return EXTERNAL
    for n in range(len(segments) - 1, 0, -1):
        files = go_files(code, "/".join(segments[-n:]))
        if files:
            return Module(code.name, files)
    return EXTERNAL


def same_package(code: Code, path: str, name: str) -> Def | None:
    """A Go definition of the file's package (its directory); tests see their package, not the reverse."""
    for other in code.dirs.get(path.rpartition("/")[0], ()):
        if not other.endswith(".go") or (other.endswith("_test.go") and not path.endswith("_test.go")):
            continue
        found = code.top(other, name)
        if found is not None:
            return found
    return None


def go_files(code: Code, folder: str) -> tuple[str, ...]:
    return tuple(p for p in code.dirs.get(folder, ()) if p.endswith(".go") and not p.endswith("_test.go"))
