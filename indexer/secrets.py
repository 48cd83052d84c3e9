"""Credential material inside text: a chunk that holds some is held back, never stored or embedded,
and no fact (signature, docstring, literal) drawn from it is stored either. What is held back is cached
per blob: a change to it bumps POLICY_VERSION (indexer/versions.py)."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

# Each pattern names a kind of credential; a match anywhere in a chunk holds the chunk back.
# The needles are literals every match contains: a substring test (fast, in C) guards each regex.
PATTERNS = [
    ("private_key", ("PRIVATE KEY",), re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    (
        "aws_access_key",
        ("AKIA", "ASIA", "AGPA", "AIDA", "AROA"),
        re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"),
    ),
    (
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})\b"),
    ),
    ("gitlab_token", ("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b")),
    ("slack_token", ("xox",), re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("google_api_key", ("AIza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("stripe_key", ("_live_",), re.compile(r"\b(?:sk|rk)_live_[0-9A-Za-z]{20,}\b")),
    ("openai_key", ("sk-",), re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}\b")),
    ("jwt", ("eyJ",), re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    # A key's body without its markers (a chunk cut from the middle of one): PEM lines are 64 base64
    # characters; three in a row are key or certificate material, not code.
    ("pem_body", ("\n",), re.compile(r"(?m)(?:^[ \t]*[A-Za-z0-9+/]{64}\r?\n){3}")),
    ("url_credentials", ("://",), re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"<>{}$]+:[^/\s:@'\"<>{}$]{6,}@[\w.-]+")),
]
# A private key spans many lines and only its first names itself: everything from a BEGIN marker to
# its END marker (or to the end of the text, when the END is missing) is key material.
KEY_BEGIN_RE = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
KEY_END_RE = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
# A quoted literal assigned to a credential-looking name: `API_KEY = "…"`, `password: '…'`.
# Found in two steps (the name, then what follows it): one regex doing both backtracks badly.
NAME_NEEDLES = ("password", "passwd", "pwd", "secret", "token", "key")
NAME_RE = re.compile(
    r"(?i)password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"client[_-]?secret|auth[_-]?key"
)
ASSIGNED_RE = re.compile(r"""[\w.-]*["']?\s*[:=]{1,2}\s*[fbr]?(["'])([^"'\s]{8,})\1""")
# The same without quotes, as config files, docs and shell write it: `aws_secret_access_key = wJal…`.
UNQUOTED_RE = re.compile(r"""[\w.-]*\s*[:=]\s*()([A-Za-z0-9+/=_-]{16,})(?=[\s,;]|$)""")
# Values that are clearly not secrets: placeholders, templates, references to the environment.
PLACEHOLDER_RE = re.compile(
    r"(?i)^(?:x+|\*+|\.+|<.*>|\$\{.*\}|\{\{.*\}\}|%\(.*\)s|.*(?:example|changeme|placeholder|your[_-]|dummy|"
    r"redacted|xxxx|test|fake|sample).*)$"
)
# A random-looking quoted literal assigned to any name (`k = "L3u6…"`): a key without a telling name.
# Base62/64 only (hex strings are digests and ids far more often than secrets), mixed case with digits,
# and close to the entropy of random text of its length: a random 40-character base64 string scores
# 4.5-5.3 bits per character, camelCase names and base64 of prose 3.6-4.2 (measured on samples).
ANY_ASSIGNED_RE = re.compile(r"""[:=]\s*[fbr]?(["'])([A-Za-z0-9+/_-]{24,200}={0,2})\1""")
ENTROPY_MARGIN_BITS = 0.8
ENTROPY_CAP_BITS = 4.3
CASE_FLIP_RATIO = 0.35
ASCENDING_RUN = 5  # "abcde", "01234": alphabets and test sequences, not keys


@dataclass(frozen=True)
class HeldBack:
    """Where credential material was found (never what): 1-based inclusive lines and the kind."""

    line_start: int
    line_end: int
    kind: str


def credential_kind(text: str) -> str | None:
    """The kind of credential material in `text`, or None."""
    for kind, needles, pattern in PATTERNS:
        if any(n in text for n in needles) and pattern.search(text):
            return kind
    lower = text.lower()
    if any(n in lower for n in NAME_NEEDLES):
        for name in NAME_RE.finditer(text):
            for assigned in (ASSIGNED_RE, UNQUOTED_RE):
                m = assigned.match(text, name.end(), name.end() + 300)
                if m and not PLACEHOLDER_RE.match(m.group(2)) and _looks_random(m.group(2)):
                    return "assigned_secret"
    for m in ANY_ASSIGNED_RE.finditer(text):
        if _high_entropy(m.group(2)) and not PLACEHOLDER_RE.match(m.group(2)):
            return "high_entropy_string"
    return None


def key_spans(text: str) -> list[HeldBack]:
    """The line spans of private key blocks in `text` (BEGIN marker to END marker, or to the end)."""
    if "PRIVATE KEY" not in text:
        return []
    spans, pos = [], 0
    while (begin := KEY_BEGIN_RE.search(text, pos)) is not None:
        end = KEY_END_RE.search(text, begin.end())
        stop = end.end() if end else len(text)
        spans.append(HeldBack(text.count("\n", 0, begin.start()) + 1, text.count("\n", 0, stop) + 1, "private_key"))
        pos = stop
    return spans


def hold_back(text: str, chunks: list) -> tuple[list, list[HeldBack]]:
    """Split the chunks of one file into those fit to store and the spans held back: a chunk is held
    back when it holds credential material or overlaps a private key block of the file."""
    keys = key_spans(text)
    kept, held = [], []
    for c in chunks:
        kind = next((k.kind for k in keys if k.line_start <= c.line_end and c.line_start <= k.line_end), None)
        kind = kind or credential_kind(c.text)
        if kind is None:
            kept.append(c)
        else:
            held.append(HeldBack(c.line_start, c.line_end, kind))
    return kept, held


def scrub_facts(facts: dict[str, list], held: list[HeldBack]) -> dict[str, list]:
    """Fact rows fit to store: a row is dropped when any of its strings holds credential material,
    or when it starts inside a held-back private key block (a docstring can hold a key's body)."""
    keys = [h for h in held if h.kind == "private_key"]
    clean = {}
    for table, rows in facts.items():
        clean[table] = [
            row
            for row in rows
            if not any(isinstance(v, str) and credential_kind(v) for v in row)
            and not any(k.line_start <= _row_line(row) <= k.line_end for k in keys)
        ]
    return clean


def _row_line(row: list) -> int:
    # Every fact table's first int column is the row's line (FACT_COLUMNS puts `line` after the strings).
    return next((v for v in row if isinstance(v, int) and not isinstance(v, bool)), 0)


def _looks_random(value: str) -> bool:
    # Names and templates ("password_reset_view", "AutoTokenizer", "{user}_token") are not secrets:
    # a secret mixes character classes and is not spelled with letters and separators alone.
    if "{" in value or re.fullmatch(r"[A-Za-z_.-]+", value):
        return False
    return sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]")) >= 2


def _high_entropy(value: str) -> bool:
    core = value.rstrip("=")
    if sum(ch.isdigit() for ch in core) < 2 or core.lower() == core or core.upper() == core:
        return False
    run = 1
    for a, b in zip(core, core[1:]):
        run = run + 1 if ord(b) == ord(a) + 1 else 1
        if run >= ASCENDING_RUN:
            return False
    # Random letters change case about every other letter; names and ids (`HuggingFaceM4/Idefics3-8B`)
    # keep words together, flipping case a third as often or less.
    letters = [ch for ch in core if ch.isalpha()]
    flips = sum(a.isupper() != b.isupper() for a, b in zip(letters, letters[1:]))
    if flips < CASE_FLIP_RATIO * (len(letters) - 1):
        return False
    counts = Counter(core)
    entropy = -sum(n / len(core) * math.log2(n / len(core)) for n in counts.values())
    return entropy >= min(ENTROPY_CAP_BITS, math.log2(len(core)) - ENTROPY_MARGIN_BITS)


PEM_LINE_RE = re.compile(r"^[ \t]*[A-Za-z0-9+/]{64}\r?$")
PEM_RUN_LINES = 3  # as the pem_body pattern: three full-width base64 lines in a row


def withheld_lines(lines: list[str], first: int, last: int) -> dict[int, str]:
    """Which of lines first..last (1-based) a reader must withhold, and why: lines of a private key block,
    of a marker-less key body, or holding credential material themselves. The reader's counterpart of
    `hold_back`, line by line, so what the index holds back is never served by get_file either."""
    held: dict[int, str] = {}
    text = "\n".join(lines) if any("PRIVATE KEY" in line for line in lines) else ""
    for span in key_spans(text):
        held.update((n, span.kind) for n in range(max(first, span.line_start), min(last, span.line_end) + 1))
    lo, hi = max(1, first - PEM_RUN_LINES + 1), min(len(lines), last + PEM_RUN_LINES - 1)
    pem = {n for n in range(lo, hi + 1) if PEM_LINE_RE.match(lines[n - 1])}
    for n in range(first, last + 1):
        if n in held:
            continue
        if any(all(m in pem for m in range(s, s + PEM_RUN_LINES)) for s in range(n - PEM_RUN_LINES + 1, n + 1)):
            held[n] = "pem_body"
        elif (kind := credential_kind(lines[n - 1])) is not None:
            held[n] = kind
    return held
