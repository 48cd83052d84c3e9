"""Languages: which file is which language, and which tree-sitter nodes define symbols in it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

# File extension (lower case) -> language name. Grammar names follow tree-sitter-language-pack.
EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
    ".rb": "ruby",
    ".php": "php",
    ".cs": "csharp",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".scala": "scala",
    ".swift": "swift",
    ".sh": "bash",
    ".bash": "bash",
    ".lua": "lua",
    ".ex": "elixir",
    ".exs": "elixir",
    ".erl": "erlang",
    ".hs": "haskell",
    ".ml": "ocaml",
    ".r": "r",
    ".jl": "julia",
    ".dart": "dart",
    ".zig": "zig",
    ".sql": "sql",
    ".html": "html",
    ".htm": "html",
    ".css": "css",
    ".scss": "scss",
    ".vue": "vue",
    ".svelte": "svelte",
    ".proto": "proto",
    ".tf": "hcl",
    ".hcl": "hcl",
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdx": "markdown",
    ".rst": "rst",
    ".txt": "text",
    ".adoc": "asciidoc",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".json": "json",
    ".ini": "ini",
    ".cfg": "ini",
    ".xml": "xml",
    ".gradle": "groovy",
    ".groovy": "groovy",
}
FILENAMES = {
    "Makefile": "make",
    "makefile": "make",
    "GNUmakefile": "make",
    "Dockerfile": "dockerfile",
    "CMakeLists.txt": "cmake",
    "Rakefile": "ruby",
    "Gemfile": "ruby",
    "Jenkinsfile": "groovy",
    "README": "text",
    "LICENSE": "text",
}
DOC_LANGS = frozenset({"markdown", "rst", "text", "asciidoc"})
TEST_PATH_RE = re.compile(
    r"(^|/)(tests?|specs?|__tests__|testing|testdata)/|(^|/)tests?\.\w+$|[._](test|spec)\.\w+$"
    r"|(^|/)test_[^/]*$|(^|/)conftest\.py$|Tests?\.\w+$"
)
# Maven and Gradle keep tests under src/test/: what is under src/main/ ships, `RepeatedTest.java` in JUnit too.
MAIN_SOURCE_RE = re.compile(r"(^|/)src/main/")


def language_for(path: str) -> str:
    """The language of a path by its name; `text` when nothing matches."""
    name = path.rsplit("/", 1)[-1]
    if name in FILENAMES:
        return FILENAMES[name]
    if name.startswith("Dockerfile"):
        return "dockerfile"
    dot = name.rfind(".")
    if dot > 0:
        return EXTENSIONS.get(name[dot:].lower(), "text")
    return "text"


# A script without an extension names its language on its first line (`#!/usr/bin/env python3`): the
# interpreter's name, version digits dropped, to the language its grammar parses.
INTERPRETERS = {
    "python": "python",
    "pypy": "python",
    "node": "javascript",
    "nodejs": "javascript",
    "deno": "typescript",
    "bun": "javascript",
    "ts-node": "typescript",
    "tsx": "typescript",
    "sh": "bash",
    "bash": "bash",
    "dash": "bash",
    "ksh": "bash",
    "zsh": "bash",
    "ruby": "ruby",
    "php": "php",
}
SHEBANG_BYTES = 256  # a #! line longer than this names no interpreter we know


def script_language(data: bytes) -> str | None:
    """The language a script's `#!` line names (`#!/usr/bin/env python3`, `#!/bin/sh`, `#!/usr/bin/env -S node
    --flag`), or None."""
    if not data.startswith(b"#!"):
        return None
    words = data[2:SHEBANG_BYTES].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if words and words[0].rsplit("/", 1)[-1] == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]  # env's flags and VAR=value
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1].rstrip("0123456789.")
    return INTERPRETERS.get(name)


def is_test_file(path: str) -> bool:
    """Test code by the conventions of the common test runners (tests/, testdata/, *_test.go, *.spec.ts,
    test_*.py, FooTest.java, conftest.py); a workflow or requirements file named `tests.yaml` is not, nor
    anything under a Maven or Gradle `src/main/`."""
    return bool(TEST_PATH_RE.search(path)) and not MAIN_SOURCE_RE.search(path) and language_for(path) in GRAMMARS


def category(lang: str) -> str:
    """`doc` for prose, `code` for everything else: the search filter `kind=code|doc`."""
    return "doc" if lang in DOC_LANGS else "code"


@dataclass(frozen=True, kw_only=True)
class Grammar:
    """How to find definitions in one tree-sitter grammar."""

    name: str
    functions: frozenset[str]  # a function, or a method when nested in a container
    containers: frozenset[str]  # classes, modules, impls: members are chunked inside them
    wrappers: frozenset[str] = field(default_factory=frozenset)  # extend a definition's range (decorators, export)
    arrow_values: frozenset[str] = field(default_factory=frozenset)  # `const f = () => …` counts as a function


_JS_FUNCS = {"function_declaration", "generator_function_declaration", "method_definition"}
_JS_WRAPPERS = {"export_statement", "lexical_declaration", "variable_declaration"}
_JS_ARROWS = {"arrow_function", "function_expression", "function", "generator_function"}
# Method signatures (interfaces, .d.ts) stay inside their container's chunks: as chunks of their own
# they restate every method in words and outrank the code (commander.js vector MRR 0.842 -> 0.763).
_TS_FUNCS = _JS_FUNCS | {"function_signature", "type_alias_declaration"}
_TS_CONTAINERS = {
    "class_declaration",
    "abstract_class_declaration",
    "class",
    "interface_declaration",
    "internal_module",
    "module",
    "enum_declaration",
}

_TYPESCRIPT = Grammar(
    name="typescript",
    functions=frozenset(_TS_FUNCS),
    containers=frozenset(_TS_CONTAINERS),
    wrappers=frozenset(_JS_WRAPPERS),
    arrow_values=frozenset(_JS_ARROWS),
)

GRAMMARS = {
    g.name: g
    for g in [
        Grammar(
            name="python",
            functions=frozenset({"function_definition"}),
            containers=frozenset({"class_definition"}),
            wrappers=frozenset({"decorated_definition"}),
        ),
        Grammar(
            name="javascript",
            functions=frozenset(_JS_FUNCS),
            containers=frozenset({"class_declaration", "class"}),
            wrappers=frozenset(_JS_WRAPPERS),
            arrow_values=frozenset(_JS_ARROWS),
        ),
        _TYPESCRIPT,
        replace(_TYPESCRIPT, name="tsx"),  # TypeScript with JSX: the same definitions
        Grammar(
            name="go",
            functions=frozenset({"function_declaration", "method_declaration", "type_declaration"}),
            containers=frozenset(),
        ),
        Grammar(
            name="rust",
            functions=frozenset(
                {
                    "function_item",
                    "struct_item",
                    "enum_item",
                    "macro_definition",
                    "type_item",
                    "const_item",
                    "static_item",
                }
            ),
            containers=frozenset({"impl_item", "trait_item", "mod_item"}),
        ),
        Grammar(
            name="java",
            functions=frozenset({"method_declaration", "constructor_declaration"}),
            containers=frozenset(
                {
                    "class_declaration",
                    "interface_declaration",
                    "enum_declaration",
                    "record_declaration",
                    "annotation_type_declaration",
                }
            ),
        ),
        Grammar(
            name="c",
            functions=frozenset({"function_definition", "struct_specifier", "enum_specifier", "type_definition"}),
            containers=frozenset(),
        ),
        Grammar(
            name="cpp",
            functions=frozenset({"function_definition", "enum_specifier", "type_definition", "alias_declaration"}),
            containers=frozenset({"class_specifier", "struct_specifier", "namespace_definition"}),
            wrappers=frozenset({"template_declaration"}),
        ),
        Grammar(
            name="ruby",
            functions=frozenset({"method", "singleton_method"}),
            containers=frozenset({"class", "module", "singleton_class"}),
        ),
        Grammar(
            name="php",
            functions=frozenset({"function_definition", "method_declaration"}),
            containers=frozenset(
                {
                    "class_declaration",
                    "interface_declaration",
                    "trait_declaration",
                    "enum_declaration",
                    "namespace_definition",
                }
            ),
        ),
        Grammar(
            name="csharp",
            functions=frozenset({"method_declaration", "constructor_declaration", "property_declaration"}),
            containers=frozenset(
                {
                    "class_declaration",
                    "interface_declaration",
                    "struct_declaration",
                    "record_declaration",
                    "enum_declaration",
                    "namespace_declaration",
                }
            ),
        ),
        Grammar(
            name="kotlin",
            functions=frozenset({"function_declaration"}),
            containers=frozenset({"class_declaration", "object_declaration"}),
        ),
        Grammar(
            name="scala",
            functions=frozenset({"function_definition"}),
            containers=frozenset({"class_definition", "object_definition", "trait_definition"}),
        ),
        Grammar(
            name="swift",
            functions=frozenset({"function_declaration", "init_declaration"}),
            containers=frozenset({"class_declaration", "protocol_declaration"}),
        ),
        Grammar(name="bash", functions=frozenset({"function_definition"}), containers=frozenset()),
        Grammar(name="lua", functions=frozenset({"function_declaration"}), containers=frozenset()),
    ]
}

# Struct/enum specifiers without a body are only type references (`struct foo *p`), not definitions.
NEEDS_BODY = frozenset({"struct_specifier", "enum_specifier", "class_specifier"})
IDENTIFIER_RE = re.compile(r"[A-Za-z_$][\w$]*")
