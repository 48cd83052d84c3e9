"""Credential material inside text: a chunk that holds some is held back, never stored or embedded."""

from __future__ import annotations

import re

# Each pattern names a kind of credential; a match anywhere in a chunk holds the chunk back.
PATTERNS = [
    ("private_key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})\b")),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("stripe_key", re.compile(r"\b(?:sk|rk)_live_[0-9A-Za-z]{20,}\b")),
    ("openai_key", re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    ("url_credentials", re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s:@'\"]{6,}@[\w.-]+")),
]
# A quoted literal assigned to a credential-looking name: `API_KEY = "…"`, `password: '…'`.
ASSIGNMENT_RE = re.compile(
    r"""(?ix)\b[\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|
        client[_-]?secret|auth[_-]?key)[\w.-]*\b ["']?\s*[:=]{1,2}\s*[fbr]?(["'])([^"'\s]{8,})\1""")
# Values that are clearly not secrets: placeholders, templates, references to the environment.
PLACEHOLDER_RE = re.compile(
    r"(?i)^(?:x+|\*+|\.+|<.*>|\$\{.*\}|\{\{.*\}\}|%\(.*\)s|.*(?:example|changeme|placeholder|your[_-]|dummy|"
    r"redacted|xxxx|test|fake|sample).*)$")


def credential_kind(text: str) -> str | None:
    """The kind of credential material in `text`, or None."""
    for kind, pattern in PATTERNS:
        if pattern.search(text):
            return kind
    for m in ASSIGNMENT_RE.finditer(text):
        value = m.group(2)
        if not PLACEHOLDER_RE.match(value) and _looks_random(value):
            return "assigned_secret"
    return None


def _looks_random(value: str) -> bool:
    # Words like "password_reset_view" are names, not secrets: require mixed character classes.
    classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]"))
    return classes >= 2 and not re.fullmatch(r"[a-z_.]+", value)
