"""The versions of the tools whose output a snapshot and the cache hold, each with its history, and the one
record that composes them (zoekt's FeatureVersion, beside the format's own version in snapshot/format.py).

Bump a tool's version when its output changes for the same bytes: cache entries made under another version
are erased, and the next `blobdex index` rebuilds instead of reporting the snapshot unchanged. This module
imports nothing, so the query side can read versions without loading a parser.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# indexer/chunk.py: what a blob's text chunks into.
# 1: initial chunker.
# 2: comments directly above a definition (JSDoc, Javadoc, Go and Rust docs) belong to it; the
#    `class` keyword no longer counts as a member, which split every JS/TS class header off alone.
# 3: a file whose name names no language but whose `#!` line does (`bin/deploy`: `#!/usr/bin/env python3`) is
#    chunked and parsed as that language, and says so (BlobEntry.lang).
CHUNKER_VERSION = 3

# indexer/ignore.py and indexer/secrets.py: which bytes are skipped, which chunks and facts are held back.
# 1: initial policy.
# 2: private key blocks held back whole, random-looking assigned literals held back, facts of held-back
#    spans and facts holding credentials dropped (cached entries from 1 may hold key bodies).
# 3: credential references and placeholders (`env:NAME`, `${VAR}`, `vault:…`, `<your-token>`) and dummy values
#    (`password123`) are not secrets; webhook URLs (Slack, Discord, Teams), Azure keys, npm and PyPI tokens,
#    marker-less key bodies of 60-80 columns, random literals in lists and call arguments, connection-string and
#    prose passwords are; a key block without its END marker ends with its key lines, not the file; lines the
#    config releases are kept (their digest joins a blob's cache key).
POLICY_VERSION = 3

# indexer/tokenize.py: the lexical index's tokens (a query against an older snapshot uses its version).
# 1: whole identifiers and dotted paths, plus their snake_case / camelCase / dotted parts.
# 2: plurals folded to their singular (`tests` -> test, `dependencies` -> dependency).
TOKENIZER_VERSION = 2

# indexer/extract/: the structural facts of a blob.
# 1: symbols, imports, calls, routes, env keys, tasks, URL literals for python, js/ts, go, java.
# 2: imports keep the name they bind (`alias`); calls keep their receiver and its locally known type; JS
#    `new X()` and Java `new X()` are calls of X.
# 3: Python parameters, loop variables and values of no stated type shadow a type bound further out (a bare
#    call of one has receiver_type `(local)`); a Go method of a generic type belongs to the type
#    (`Stack.Push`, not `T.Push`); a JS object literal's methods are named under it (`api.fetch`).
# 4: a signature ends at the last token before the body (`def f(x) -> int:`): a comment after the colon or
#    the brace belongs to the body.
EXTRACTOR_VERSION = 4

# indexer/calls/rules.py: which definition each call row resolves to. Not part of a cached blob's key: resolution
# reads the whole repo, so a change reruns it over cached facts.
# 1: imports, enclosing classes and their bases, receiver types, Python packages across repos.
# 2: no class, Go type or object literal is a scope of its methods' bare calls; a repo with a go.mod resolves
#    no third-party import to a folder of its own; base-class cycles end; SCIP answers it cannot tell apart
#    on a line, or "external" for a call resolved into another repo, leave blobdex's answer.
RESOLVER_VERSION = 2


@dataclass(frozen=True, kw_only=True)
class ToolVersions:
    """The tool versions a snapshot was built with. Field names are the manifest's keys, so a manifest
    stores them flat, as it always has."""

    chunker_version: int
    policy_version: int
    tokenizer_version: int
    extractor_version: int
    resolver_version: int

    def as_fields(self) -> dict[str, int]:
        return asdict(self)

    def blob_tag(self) -> str:
        """The part of a cached blob entry's key naming the tools the entry depends on (not the tokenizer:
        entries hold text and facts, never tokens). Changing this format misses every cached entry."""
        return f"p{self.policy_version}:c{self.chunker_version}:x{self.extractor_version}"


TOOLS = ToolVersions(
    chunker_version=CHUNKER_VERSION,
    policy_version=POLICY_VERSION,
    tokenizer_version=TOKENIZER_VERSION,
    extractor_version=EXTRACTOR_VERSION,
    resolver_version=RESOLVER_VERSION,
)
