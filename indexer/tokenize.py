"""The code-aware tokenizer shared by the lexical index and lexical queries.

Tantivy-py cannot run Python tokenizers, so tokens are made here and handed to Tantivy's
`whitespace` tokenizer: both sides must call this same function (indexing and querying).
"""

from __future__ import annotations

import re

# 1: whole identifiers and dotted paths, plus their snake_case / camelCase / dotted parts.
TOKENIZER_VERSION = 1
MAX_TOKEN_CHARS = 64

WORD_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)*|[0-9]+")
PART_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-cased tokens: every identifier whole, then its parts (`getUserID` -> getuserid get user id)."""
    out: list[str] = []
    for match in WORD_RE.finditer(text):
        word = match.group()
        if len(word) > MAX_TOKEN_CHARS:
            continue
        out.append(word.lower())
        names = word.split(".") if "." in word else [word]
        for name in names:
            if len(names) > 1:
                out.append(name.lower())
            parts = PART_RE.findall(name)
            if len(parts) > 1:
                out.extend(p.lower() for p in parts)
    return out


def path_tokens(path: str) -> list[str]:
    """Tokens of a repo path: each directory and file name, its stem and extension, and their parts."""
    return tokens(path.replace("/", " ").replace("-", "_"))
