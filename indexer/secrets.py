"""Credential material inside text: a chunk that holds some is held back, never stored or embedded,
and no fact (signature, docstring, literal) drawn from it is stored either. What is held back is cached
per blob: a change to it bumps POLICY_VERSION (indexer/versions.py). The rules that find it are
indexer/credential_rules.py.

An operator releases a false positive in blobdex.toml (`[[release]]`: repo, path and the fingerprint of
the line, never its text); `screen` keeps a chunk whose every finding is on a released line once the
chunk without those lines holds nothing. Key material (a private key block, a marker-less key body) is
never released.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from indexer.credential_rules import (
    KIND_ORDER,
    PEM_LINE_RE,
    PEM_RUN_LINES,
    credential_kind,
    findings,
    key_blocks,
    mixed_case,
    pem_runs,
)

FINGERPRINT_HEX = 16  # hex characters of sha256(stripped line) that name a line in a release


@dataclass(frozen=True)
class HeldBack:
    """Where credential material was found (never what): 1-based inclusive lines and the kind."""

    line_start: int
    line_end: int
    kind: str


@dataclass(frozen=True)
class Screened:
    """What `screen` made of one file's chunks: those fit to store, the spans held back, and the lines whose
    findings a release let through (their facts may be stored too)."""

    kept: list
    held: list[HeldBack]
    released_lines: frozenset[int] = field(default_factory=frozenset)


# Kinds that are key material: never released, whatever the config says.
KEY_KINDS = frozenset({"private_key", "pem_body"})


def key_spans(text: str) -> list[HeldBack]:
    """The line spans of private key blocks in `text` (BEGIN marker to END marker, or to the last line of
    key material after it)."""
    if "PRIVATE KEY" not in text:
        return []
    return [HeldBack(s, e, "private_key") for s, e, private in key_blocks(text) if private]


# --- releases -------------------------------------------------------------------------------------------


def fingerprint(line: str) -> str:
    """The name a release gives a line: the first hex characters of the sha256 of its stripped text."""
    return hashlib.sha256(line.strip().encode("utf-8", "surrogatepass")).hexdigest()[:FINGERPRINT_HEX]


# --- files and chunks -----------------------------------------------------------------------------------


def screen(text: str, chunks: list, released: frozenset[str] = frozenset()) -> Screened:
    """Split the chunks of one file into those fit to store and the spans held back: a chunk is held back when
    it overlaps a private key block or a key body of the file or holds credential material, unless every line that holds
    some is released (`released`: fingerprints) and the chunk without those lines holds none."""
    blocks = key_blocks(text)
    keys = [(s, e, "private_key") for s, e, private in blocks if private]
    public = [(s, e) for s, e, private in blocks if not private]
    public_lines = frozenset(n for s, e in public for n in range(s, e + 1))
    keys += [(s, e, "pem_body") for _, s, e in pem_runs(text.encode("utf-8", "surrogatepass"), public_lines)]
    kept, held, let_through = [], [], set()
    for c in chunks:
        kind = next((k for s, e, k in keys if s <= c.line_end and c.line_start <= e), None)
        if kind is None:
            shift = c.line_start - 1
            inside = frozenset(
                n - shift for s, e in public for n in range(max(s, c.line_start), min(e, c.line_end) + 1)
            )
            found = findings(c.text, inside)
            lines = c.text.split("\n") if found and released else []
            free = {
                f.line
                for f in found
                if lines and f.kind not in KEY_KINDS and fingerprint(lines[f.line - 1]) in released
            }
            if found and len(free) == len({f.line for f in found}) and all(f.kind not in KEY_KINDS for f in found):
                rest = "\n".join("" if n in free else line for n, line in enumerate(lines, 1))
                if not findings(rest, inside):
                    let_through.update(n + shift for n in free)
                    found = []
            kind = min((f.kind for f in found), key=KIND_ORDER.__getitem__) if found else None
        if kind is None:
            kept.append(c)
        else:
            held.append(HeldBack(c.line_start, c.line_end, kind))
    return Screened(kept, held, frozenset(let_through))


def hold_back(text: str, chunks: list, released: frozenset[str] = frozenset()) -> tuple[list, list[HeldBack]]:
    """`screen`'s chunks fit to store and spans held back."""
    screened = screen(text, chunks, released)
    return screened.kept, screened.held


def scrub_facts(
    facts: dict[str, list], held: list[HeldBack], released_lines: frozenset[int] = frozenset()
) -> dict[str, list]:
    """Fact rows fit to store: a row is dropped when any of its strings holds credential material (unless it
    is drawn from a released line), or when it starts inside a held-back private key block (a docstring can
    hold a key's body)."""
    keys = [h for h in held if h.kind == "private_key"]
    clean = {}
    for table, rows in facts.items():
        clean[table] = [
            row
            for row in rows
            if (_row_line(row) in released_lines or not any(isinstance(v, str) and credential_kind(v) for v in row))
            and not any(k.line_start <= _row_line(row) <= k.line_end for k in keys)
        ]
    return clean


def _row_line(row: list) -> int:
    # Every fact table's first int column is the row's line (FACT_COLUMNS puts `line` after the strings).
    return next((v for v in row if isinstance(v, int) and not isinstance(v, bool)), 0)


def withheld_lines(lines: list[str], first: int, last: int, released: frozenset[str] = frozenset()) -> dict[int, str]:
    """Which of lines first..last (1-based) a reader must withhold, and why: lines of a private key block,
    of a marker-less key body, or holding credential material themselves unless released (`released`:
    fingerprints). The reader's counterpart of `screen`, line by line, so what the index holds back is never
    served by get_file either."""
    held: dict[int, str] = {}
    text = "\n".join(lines) if any("-----BEGIN " in line for line in lines) else ""
    blocks = key_blocks(text)
    public = {n for s, e, private in blocks if not private for n in range(s, e + 1)}
    for s, e, private in blocks:
        if private:
            held.update((n, "private_key") for n in range(max(first, s), min(last, e) + 1))
    lo, hi = max(1, first - PEM_RUN_LINES + 1), min(len(lines), last + PEM_RUN_LINES - 1)
    pem = {
        n
        for n in range(lo, hi + 1)
        if n not in public
        and PEM_LINE_RE.search(lines[n - 1].encode("utf-8", "surrogatepass"))
        and mixed_case(lines[n - 1].encode())
    }
    for n in range(first, last + 1):
        if n not in held and any(
            all(m in pem for m in range(s, s + PEM_RUN_LINES)) for s in range(n - PEM_RUN_LINES + 1, n + 1)
        ):
            held[n] = "pem_body"
    if first <= last:
        shown = "\n".join(lines[first - 1 : last])
        for f in findings(shown, frozenset(range(1, last - first + 2))):  # key bodies were judged above
            n = f.line + first - 1
            if n not in held and (f.kind in KEY_KINDS or fingerprint(lines[n - 1]) not in released):
                held[n] = f.kind
    return held


def triggered(lines: list[str], first: int, last: int) -> list[tuple[int, str, str | None]]:
    """The lines of first..last (1-based, of a file's `lines`) that hold credential material, as `withheld_lines`
    finds them: (line, kind, fingerprint), the fingerprint None for key material, which no release lets through.
    For the operator's `blobdex secrets` only: a fingerprint names a line without its text."""
    held = withheld_lines(lines, first, last)
    return [(n, kind, None if kind in KEY_KINDS else fingerprint(lines[n - 1])) for n, kind in sorted(held.items())]
