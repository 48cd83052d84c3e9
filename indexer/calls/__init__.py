"""Call resolution: which definition a call reaches. The rules over a repo's files, symbols and imports (rules),
with each language family's module rules in a module of its own (python, js, go, java), what a repo declares
(declared: its packages and manifests), and the precise tier from SCIP indexers (scip). A run applies them to what
it changed in indexer/build/resolution.py."""

from indexer.calls.code import EXTERNAL, Code, Def, Module, World
from indexer.calls.declared import Declared
from indexer.calls.rules import Resolver, resolve_calls

__all__ = ["EXTERNAL", "Code", "Declared", "Def", "Module", "Resolver", "World", "resolve_calls"]
