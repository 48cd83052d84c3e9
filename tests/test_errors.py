"""Docs inside the code that cannot drift: the error tree drawn in indexer/errors.py is the tree the error classes
form (every BlobdexError subclass of indexer/ and query/, where it lives, the HTTP status a surface answers
with), and each command-line module's docstring names every command it defines."""

from __future__ import annotations

import importlib
import re
import pkgutil
from pathlib import Path

import indexer
import query
from indexer import errors
from indexer.errors import BlobdexError

ROOT = Path(__file__).resolve().parents[1]


def _where(cls: type) -> str:
    path = ROOT / cls.__module__.replace(".", "/")
    return (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).relative_to(ROOT).as_posix()


def drawn_tree() -> list[str]:
    """The tree as the classes form it: one line per class, children under their parent, by name."""
    for package in (indexer, query):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    lines = [f"    {'BlobdexError':<34}{BlobdexError.status}  {_where(BlobdexError)}"]

    def below(cls: type, depth: int) -> None:
        for sub in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
            name = "|  " * (depth - 1) + "+ " + sub.__name__
            lines.append(f"    {name:<34}{sub.status}  {_where(sub)}")
            below(sub, depth + 1)

    below(BlobdexError, 1)
    return lines


def test_the_error_tree_in_errors_py_is_the_tree_of_the_classes():
    doc = errors.__doc__.splitlines()
    start = doc.index(next(line for line in doc if line.strip().startswith("BlobdexError ")))
    drawn = [line for line in doc[start:] if line.strip()]
    assert drawn == drawn_tree()


CLI_MODULES = (
    "indexer.operate.cli",
    "query.cli",
    "query.serve_cli",
    "query.history_cli",
    "query.token_cli",
    "query.eval.cli",
)


def _commands(module) -> set[str]:
    """The names of the commands (and subcommands) a module defines."""
    import click

    names = set()
    for value in vars(module).values():
        if isinstance(value, click.Command) and value.callback and value.callback.__module__ == module.__name__:
            names.add(value.name)
        if isinstance(value, click.Group):
            names.update(c.name for c in value.commands.values() if c.callback.__module__ == module.__name__)
    return names


def test_each_cli_modules_docstring_names_the_commands_it_defines():
    unnamed = {}
    for name in CLI_MODULES:
        module = importlib.import_module(name)
        missing = sorted(
            c for c in _commands(module) if not re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", module.__doc__)
        )
        if missing:
            unnamed[name] = missing
    assert unnamed == {}
