"""What a repo declares, for imports across repos: its top-level Python packages and modules, its Java packages,
the Go modules and npm packages its manifests name; and the org's repos' declarations together (Declared)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa

from indexer.languages import is_test_file

TOP_PACKAGE_DIRS = ("src", "lib", "python", "pkg")
GO_MODULE_RE = re.compile(r"^module\s+(\S+)", re.M)


def python_packages(paths: list[str]) -> set[str]:
    """Top-level importable package names of a repo, from its `__init__.py` files outside test code."""
    inits = {p.rsplit("/", 1)[0] for p in paths if p.endswith("/__init__.py") and not is_test_file(p)}
    names = set()
    for d in inits:
        parent = d.rsplit("/", 1)[0] if "/" in d else ""
        if parent not in inits:
            parts = d.split("/")
            if len(parts) == 1 or (len(parts) == 2 and parts[0] in TOP_PACKAGE_DIRS):
                names.add(parts[-1])
    return names


def java_packages(paths: list[str]) -> dict[str, str]:
    """The Java packages a repo's .java files are in, by their directories below a source root (`src/main/java/`,
    `src/`, `java/`; else the directory itself), each with its first file: com/acme/Invoice.java -> com.acme."""
    found: dict[str, str] = {}
    for path in sorted(paths):
        if path.endswith(".java") and "/" in path:
            parts = path.split("/")[:-1]
            roots = [i + 1 for i, part in enumerate(parts) if part in ("java", "src")]
            package = parts[roots[-1] :] if roots else parts
            if package:
                found.setdefault(".".join(package), path)
    return found


def declared(chunks: pa.Table) -> dict:
    """The Go modules and npm packages a repo declares, by manifest path, from the chunk rows (path, chunk_index,
    text) of its go.mod and package.json files: {"go": {path: module}, "npm": {path: [name, main]}}."""
    texts: dict[str, list] = defaultdict(list)
    for path, index, text in zip(*(chunks.column(c).to_pylist() for c in ("path", "chunk_index", "text"))):
        if path.rsplit("/", 1)[-1] in ("go.mod", "package.json"):
            texts[path].append((index, text))
    out: dict[str, dict] = {"go": {}, "npm": {}}
    for path, parts in sorted(texts.items()):
        text = "\n".join(t for _, t in sorted(parts))
        if path.endswith("go.mod"):
            m = GO_MODULE_RE.search(text)
            if m:
                out["go"][path] = m.group(1)
            continue
        try:
            manifest = json.loads(text)
        except ValueError:
            continue
        if isinstance(manifest, dict) and isinstance(manifest.get("name"), str):
            main = manifest.get("main") if isinstance(manifest.get("main"), str) else ""
            out["npm"][path] = [manifest["name"], main]
    return out


def python_modules(paths: list[str]) -> dict[str, str]:
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
