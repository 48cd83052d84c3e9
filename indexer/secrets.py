"""Credential material inside text: a chunk that holds some is held back, never stored or embedded."""

from __future__ import annotations

import re

# Each pattern names a kind of credential; a match anywhere in a chunk holds the chunk back.
# The needles are literals every match contains: a substring test (fast, in C) guards each regex.
PATTERNS = [
    ("private_key", ("PRIVATE KEY",), re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("aws_access_key", ("AKIA", "ASIA", "AGPA", "AIDA", "AROA"),
     re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    ("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})\b")),
    ("gitlab_token", ("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b")),
    ("slack_token", ("xox",), re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("google_api_key", ("AIza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("stripe_key", ("_live_",), re.compile(r"\b(?:sk|rk)_live_[0-9A-Za-z]{20,}\b")),
    ("openai_key", ("sk-",), re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}\b")),
    ("jwt", ("eyJ",), re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    ("url_credentials", ("://",), re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s:@'\"]{6,}@[\w.-]+")),
]
# A quoted literal assigned to a credential-looking name: `API_KEY = "…"`, `password: '…'`.
# Found in two steps (the name, then what follows it): one regex doing both backtracks badly.
NAME_NEEDLES = ("password", "passwd", "pwd", "secret", "token", "key")
NAME_RE = re.compile(r"(?i)password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
                     r"client[_-]?secret|auth[_-]?key")
ASSIGNED_RE = re.compile(r"""[\w.-]*["']?\s*[:=]{1,2}\s*[fbr]?(["'])([^"'\s]{8,})\1""")
# Values that are clearly not secrets: placeholders, templates, references to the environment.
PLACEHOLDER_RE = re.compile(
    r"(?i)^(?:x+|\*+|\.+|<.*>|\$\{.*\}|\{\{.*\}\}|%\(.*\)s|.*(?:example|changeme|placeholder|your[_-]|dummy|"
    r"redacted|xxxx|test|fake|sample).*)$")


def credential_kind(text: str) -> str | None:
    """The kind of credential material in `text`, or None."""
    for kind, needles, pattern in PATTERNS:
        if any(n in text for n in needles) and pattern.search(text):
            return kind
    lower = text.lower()
    if not any(n in lower for n in NAME_NEEDLES):
        return None
    for name in NAME_RE.finditer(text):
        m = ASSIGNED_RE.match(text, name.end(), name.end() + 300)
        if m and not PLACEHOLDER_RE.match(m.group(2)) and _looks_random(m.group(2)):
            return "assigned_secret"
    return None


def _looks_random(value: str) -> bool:
    # Words like "password_reset_view" are names, not secrets: require mixed character classes.
    classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]"))
    return classes >= 2 and not re.fullmatch(r"[a-z_.]+", value)
