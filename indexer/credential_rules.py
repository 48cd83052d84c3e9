"""The rules that find credential material in text, and the checks that tell a secret from a reference, a
placeholder, a dummy or code. indexer/secrets.py decides from their findings what is held back.

The rules are our own, gitleaks-style: each has literal needles (one RE2 set finds, in one pass, which a
text holds: a rule whose needles are absent skips its regex), an RE2 regex (linear time: these functions
also run on request input, the chunks pushed over the HTTP protocols and session overlays), and a check of
the value it found (references, placeholders and dummy words are not secrets; a random-looking value is).
We measured two maintained rule sets first, detect-secrets 1.5.0 and bc-detect-secrets 1.5.52 with their
default plugins, and chose our own: each held 10 of the second reliability review's 16 new variants
(neither finds a key body without markers, a random secret as a call argument or a getenv default, a
connection-string or prose password); both flag credential references (`webhook_secret = "env:NAME"`: 34
and 39 chunks of blobdex itself) and 231 and 220 chunks of requests, flask, httpx, pyjwt, starlette and
black (these rules: 72); they ran at 160-270 chunks/s, these at ~16,000; and they are built on Python `re`,
which is not linear on request input.
"""

from __future__ import annotations

import base64
import math
import string
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote

import re2


@dataclass(frozen=True)
class Finding:
    """One piece of credential material: the 1-based line it is on and its kind."""

    line: int
    kind: str


# --- values that are not secrets ---------------------------------------------------------------------

# A reference to where a secret is kept (`env:NAME`, `file:/run/secrets/x`, `vault:secret/data/app#key`,
# `vault://…`, 1Password's `op://…`): the style blobdex's own config asks for.
REFERENCE_RE = re2.compile(
    r"(?i)^(?:env|file|vault|op|ssm|sm|secretsmanager|awssm|gcpsm|azkv|keyvault|keyring|keychain|kms|sops|k8s|"
    r"secret|secrets|ref|cmd|exec)(?::|://)"
)
# Templates, variables and placeholders: `${VAR}`, `{{ x }}`, `%(x)s`, `$(cmd)`, `#{x}`, `$NAME`, `%NAME%`,
# `<your-token>`, `********`, `xxxx`, `changeme`, `your-api-key-here`.
PLACEHOLDER_RE = re2.compile(
    r"(?i)(?:\$\{|\{\{|%\(|\$\(|#\{|<%|\{[\w.]*\}|^\$[A-Za-z_]|^%[A-Za-z_]+%$|<[^<>]*>|^\[.*\]$|^[*x.#?_-]+$|xxxx|\*\*\*|"
    r"example|change_?me|placeholder|your[_-]|dummy|redacted|sample|fake|\btest|insert[_-]|replace[_-]?me|"
    r"_here\b|-here\b|\.\.\.|…)"
)
# Words that make up dummy credentials in tests and docs (`password123`, `hunter2hunter2`, `s3cret-token-value`,
# `a secret`): a value spelled only with these (and digits, separators, single letters) is not a secret.
DUMMY_WORDS = frozenset(
    """password passwd pass pwd pw secret secrets token tokens key keys api apikey value values test testing
    tests example examples dummy fake sample foo bar baz qux quux hunter admin root user username usr guest
    changeme change me my the from file top webhook hook access private public client default demo local
    localhost dev development staging stage prod production app db database mysql postgres redis abc xyz
    letmein qwerty welcome hello world not real invalid wrong bad good new old do lose for signing sign hs
    to an in at of config fixture mock some super very long short correct valid random string text here
    this that one two three bench session cookie jwt auth basic bearer oauth github gitlab slack aws gh pat
    ci bot service server your should never be seen leak leaked other another first second alpha beta
    none null empty blank pin code shh open sesame opensesame master login logon pa ss word pwd""".split()
)
LEET = str.maketrans("013457@$", "oieastas")
# Names whose random-looking values are identifiers, digests or public values, not secrets.
NON_SECRET_NAME_RE = re2.compile(
    r"(?i)(?:id|ids|uuid|guid|nonce|hash|digest|checksum|sha\d*|md5|etag|integrity|fingerprint|thumbprint|"
    r"signature|sig|commit|revision|version|cursor|opaque|alg|typ|azp|sub|aud|iss|jti|kty|use|crv|x5t|salt|iv)$"
)
JWK_PUBLIC = frozenset({"x", "y", "n", "e"})  # a JSON Web Key's public members (its private ones are d, p, q, k…)

# --- the rules ------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Rule:
    kind: str
    needles: tuple[bytes, ...]  # lowercase literals one of which every match contains
    pattern: object  # RE2, over UTF-8 bytes
    group: int = 0  # the group holding the secret
    check: Callable[[str], bool] | None = None  # False: the value found is not a secret after all


def _not_example(value: str) -> bool:
    return "EXAMPLE" not in value.upper()


def _url_password(value: str) -> bool:
    # The password part of `scheme://user:password@host`, percent-decoded.
    return _secret_value(unquote(value), min_length=6)


def _webhook_secret(value: str) -> bool:
    # The longest part of a webhook URL's path is its secret; docs write `XXXXXXXX` or `xxx` there.
    tail = max(value.split("/"), key=len)
    return len(tail) >= 16 and len(set(tail)) >= 6 and not PLACEHOLDER_RE.search(tail)


def _key_value(value: str) -> bool:
    return len(set(value)) >= 10  # `AccountKey=AAAA…` in docs is not a key


TOKEN_RULES = (
    Rule(
        kind="private_key",
        needles=(b"private key",),
        pattern=re2.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    ),
    Rule(
        kind="aws_access_key",
        needles=(b"akia", b"asia", b"abia", b"acca"),  # access keys; AIDA, AROA, … are ids of users and roles
        pattern=re2.compile(rb"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
        check=_not_example,
    ),
    Rule(
        kind="github_token",
        needles=(b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_"),
        pattern=re2.compile(rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})\b"),
    ),
    Rule(kind="gitlab_token", needles=(b"glpat-",), pattern=re2.compile(rb"\bglpat-[A-Za-z0-9_-]{20,}")),
    Rule(kind="slack_token", needles=(b"xox",), pattern=re2.compile(rb"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    Rule(
        kind="slack_webhook",
        needles=(b"hooks.slack.com",),
        pattern=re2.compile(rb"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]+"),
        check=_webhook_secret,
    ),
    Rule(
        kind="discord_webhook",
        needles=(b"/api/webhooks/",),
        pattern=re2.compile(rb"discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]+"),
        check=_webhook_secret,
    ),
    Rule(
        kind="teams_webhook",
        needles=(b"webhook.office.com", b"outlook.office"),
        pattern=re2.compile(
            rb"(?:webhook\.office\.com/webhookb2|outlook\.office(?:365)?\.com/webhook)/[A-Za-z0-9@/_-]+"
        ),
        check=_webhook_secret,
    ),
    Rule(kind="google_api_key", needles=(b"aiza",), pattern=re2.compile(rb"\bAIza[0-9A-Za-z_-]{35}")),
    Rule(kind="stripe_key", needles=(b"_live_",), pattern=re2.compile(rb"\b(?:sk|rk)_live_[0-9A-Za-z]{20,}")),
    Rule(
        kind="openai_key", needles=(b"sk-",), pattern=re2.compile(rb"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}")
    ),
    Rule(kind="npm_token", needles=(b"npm_",), pattern=re2.compile(rb"\bnpm_[A-Za-z0-9]{36}\b")),
    Rule(
        kind="pypi_token",
        needles=(b"pypi-ageichlwas5vcmc",),
        pattern=re2.compile(rb"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}"),
    ),
    Rule(
        kind="jwt",
        needles=(b"eyj",),
        pattern=re2.compile(rb"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    ),
    Rule(
        kind="azure_key",
        needles=(b"accountkey", b"sharedaccesskey", b"sig="),
        pattern=re2.compile(
            rb"(?i)(?:\b(?:AccountKey|SharedAccessKey)[ \t]*=[ \t]*([A-Za-z0-9+/]{20,}={0,2})"
            rb"|[?&;]sig=([A-Za-z0-9%+/=]{30,}))"
        ),
        check=_key_value,
    ),
    Rule(
        kind="url_credentials",
        needles=(b"://",),
        pattern=re2.compile(rb"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"<>{}$]*:([^/\s:@'\"<>{}$]+)@[\w.-]"),
        group=1,
        check=_url_password,
    ),
)
# The order kinds are named in when a chunk holds several: the most certain first.
KIND_ORDER = {
    kind: n
    for n, kind in enumerate([r.kind for r in TOKEN_RULES] + ["pem_body", "assigned_secret", "high_entropy_string"])
}
# A key's body without its markers (a chunk cut from the middle of one, or a body pasted alone): three or more
# lines in a row of 60-80 base64 characters (PEM writes 64, MIME and OpenSSH 70-76), bare or quoted; a match is
# the whole run, so the file's runs are found in one pass and a run that chunking splits is still one run.
PEM_LINE = rb"[ \t]*[bru]?[\"']?[A-Za-z0-9+/]{60,80}={0,2}(?:\\n)?[\"']?[ \t]*[,+]?[ \t]*"
PEM_BODY_RE = re2.compile(rb"(?m)(?:^" + PEM_LINE + rb"\r?\n){2,}^" + PEM_LINE + rb"\r?$")
PEM_LINE_RE = re2.compile(b"^" + PEM_LINE + rb"\r?$")
PEM_RUN_LINES = 3
# A value given to a credential-looking name, in three shapes, each its own regex (one for all three would
# need to tell afterwards which shape matched): `API_KEY = "…"`, `password: …`, `Password=…;` in a connection
# string, `API_KEY: str = "…"`; a name in quotes followed by its quoted value, `os.getenv("API_TOKEN", "…")`;
# and prose, `# the staging admin password is …`.
# The name (group 1) runs from its keyword on; what follows the keyword starts a new word (`_`, `-`, `.`, a
# capital, a digit), so `tokenizer` and `passage` are not names of secrets.
NAME_NEEDLES = (b"pass", b"pwd", b"secret", b"token", b"key")
NAME = (
    rb"(?i)((?:secret[_-]?key|client[_-]?secret|api[_-]?key|apikey|access[_-]?key|private[_-]?key|auth[_-]?key|"
    rb"password|passwd|passphrase|pwd|secret|token)(?:(?-i:[_.\-A-Z0-9])[\w.-]*)?)"
)
QUOTED_VALUE = rb"[fbrFBR]{0,2}\"([^\"\n]+)\"|[fbrFBR]{0,2}'([^'\n]+)'|`([^`\n]+)`"
BARE_VALUE = rb"([^\s\"'`;,:&()\[\]{}<>|]+)"  # groups 2-4 quoted, 5 bare
# A name whose last word says its value is not the secret (`secret_name`, `token_url`, `password_field`,
# `ACCESS_KEY_PREFIX`, `tokenType`), or that is public (`publicKeyToken`).
NOT_SECRET_WORDS = frozenset(
    """id ids arn name names path paths url uri urls file files filename dir type types field fields manager
    version length len count size prefix suffix header headers endpoint expiry expires expiration ttl format
    kind label env var ref hash digest fingerprint regex pattern mode policy provider scope scopes method
    template hint description help prompt message msg error style class index idx cls param params""".split()
)
ASSIGNED_RE = re2.compile(
    NAME
    + rb"[\"'`]?[ \t]*(?::[ \t]*[A-Za-z_][\w.\[\]| ]*=|[:=]{1,2}>?|=>)[ \t]*(?:"
    + QUOTED_VALUE
    + b"|"
    + BARE_VALUE
    + b")"
)
PAIR_RE = re2.compile(NAME + rb"[\"'][ \t]*,[ \t]*(?:" + QUOTED_VALUE + b")")
PROSE_RE = re2.compile(NAME + rb"[ \t]+(?:is|was)[ \t]*:?[ \t]*(?:" + QUOTED_VALUE + b"|" + BARE_VALUE + b")")
NAMED_RULES = ((ASSIGNED_RE, 2), (PAIR_RE, 2), (PROSE_RE, 3))  # each with the character classes a value needs
ALL_NEEDLES = sorted({n for rule in TOKEN_RULES for n in rule.needles} | set(NAME_NEEDLES))


def _needle_set() -> re2.Set:
    """One RE2 set of every needle, case-insensitive: which of them a text holds, found in one pass (a
    substring test per needle cost 37 us per chunk, the set 3.5 us)."""
    options = re2.Options()
    options.case_sensitive = False
    needles = re2.Set.SearchSet(options)
    for needle in ALL_NEEDLES:
        needles.Add(re2.escape(needle))
    needles.Compile()
    return needles


NEEDLE_SET = _needle_set()
URL_RE = re2.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # credentials inside one are url_credentials' to judge
# Code, not a value: a call or a subscript (`get_token()`, `Iterable[Tsk]`), a regex (`[^\W\d]\w*`, `(?=\s)`).
CODE_RE = re2.compile(r"^[A-Za-z_$][\w.$]*(?:\(.*\)|\[.*\])$|\\[wdsWDSbB]|\[\^|\(\?[:=!<]")
UUID_RE = re2.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")
NAME_BACK = 64
IDENTIFIER_RE = re2.compile(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*$")
# A random-looking quoted literal, whatever holds it (`k = "…"`, `FALLBACKS = ["…"]`, `make_client("…")`): a
# key without a telling name. The name it is given, when one is, can say it is an id or a digest instead.
QUOTED_RE = re2.compile(
    rb"(?:([A-Za-z_][\w.-]*)[\"']?[ \t]*(?:[:=]{1,2}|=>)[ \t]*[fbrFBR]{0,2})?[\"'`]([A-Za-z0-9+/_-]{24,}={0,2})[\"'`]"
)
# Base62/64 only (hex strings are digests and ids far more often than secrets), mixed case with digits,
# and close to the entropy of random text of its length: a random 40-character base64 string scores
# 4.5-5.3 bits per character, camelCase names and base64 of prose 3.6-4.2 (measured on samples).
ENTROPY_MARGIN_BITS = 0.8
ENTROPY_CAP_BITS = 4.3
CASE_FLIP_RATIO = 0.35
ASCENDING_RUN = 5  # "abcde", "01234": alphabets and test sequences, not keys
VALUE_MIN_CHARS = 8
VALUE_MIN_BITS = 2.5  # 8 random characters score about 2.9; `aaaa1111` 1.0
WORD_LETTER_SHARE, WORD_VOWEL_SHARE = 0.65, 0.3  # see _wordlike
CODE_WORD_LETTER_SHARE = 0.5  # an unquoted identifier (`Ed25519PrivateKey`): random ones pass 0.2-0.8 %
TEXT_SHARE = 0.95  # printable share of decoded bytes that makes base64 an encoding of text
MAX_VALUE_CHARS = 400  # longer runs are data (a minified line, a blob of base64), judged by the other rules

# A key block's lines: BEGIN marker to END marker; without an END, the lines that look like key material
# (base64, `Proc-Type:`-style headers, blank, the quotes and `\n` of a literal) after the BEGIN.
# Scanned by hand with str.find and str.strip (C loops, linear): a regex call per line cost ~40 us.
MARKER_CHARS = string.ascii_uppercase + string.digits + " "
BASE64_CHARS = string.ascii_letters + string.digits + "+/="
HEADER_CHARS = string.ascii_letters + "-"
KEY_LINE_TRIM = " \t\r\"'`,+;()[]{}"


def credential_kind(text: str) -> str | None:
    """The kind of credential material in `text`, or None."""
    return next((kind for _, kind in _scan(text.encode("utf-8", "surrogatepass"), None)), None)


def findings(text: str, public_lines: frozenset[int] = frozenset()) -> list[Finding]:
    """Every piece of credential material in `text`, by 1-based line. `public_lines`: lines of the whole file
    inside a public block (a certificate), counted from 1 at `text`'s first line, whose base64 is not a key."""
    data = text.encode("utf-8", "surrogatepass")
    out, line, pos = set(), 1, 0
    for offset, kind in sorted(set(_scan(data, public_lines))):  # offsets ascend: counting newlines stays linear
        line += data.count(b"\n", pos, offset)
        pos = offset
        out.add(Finding(line, kind))
    return sorted(out, key=lambda f: (f.line, KIND_ORDER[f.kind]))


def _scan(data: bytes, public_lines: frozenset[int] | None) -> Iterator[tuple[int, str]]:
    """(byte offset, kind) of credential material in `data`, most certain kinds first."""
    present = {ALL_NEEDLES[i] for i in NEEDLE_SET.Match(data) or ()}  # every rule's needles in one pass
    for rule in TOKEN_RULES:
        if not present.isdisjoint(rule.needles):
            for m in rule.pattern.finditer(data):
                group = rule.group or next((g for g in range(1, len(m.groups()) + 1) if m.group(g)), 0)
                if rule.check is None or rule.check(m.group(group).decode("utf-8", "replace")):
                    yield m.start(group), rule.kind
    for offset, _, _ in pem_runs(data, public_lines):
        yield offset, "pem_body"
    if not present.isdisjoint(NAME_NEEDLES):
        for pattern, classes in NAMED_RULES:
            for m in pattern.finditer(data):
                group, value = next((g, v) for g, v in enumerate(m.groups()[1:], 2) if v is not None)
                if _secret_name(data, m.start(1), m.group(1)) and _secret_value(
                    value.decode("utf-8", "replace"), classes=classes, bare=group == 5
                ):
                    yield m.start(group), "assigned_secret"
    if b'"' in data or b"'" in data or b"`" in data:
        for m in QUOTED_RE.finditer(data):
            name = m.group(1)
            if name is not None and _non_secret_name(name.decode("ascii", "replace"), data, m.start(1)):
                continue
            if _high_entropy(m.group(2).decode("ascii")):
                yield m.start(2), "high_entropy_string"


def _wordlike(value: str, letter_share: float = WORD_LETTER_SHARE) -> bool:
    """Spelt in words, as identifiers are (`QDQDisableWeightAdjustForInt32Bias`): most letters in words of four or
    more (a capital, then lower case) and vowels near a third of the letters. Random base62 of 24 characters
    passes for words 0.13 % of the time, of 40 characters 0.007 % (measured on 200,000 of each)."""
    letters = [c for c in value if c.isalpha()]
    if not letters or sum(c in "aeiouAEIOU" for c in letters) < WORD_VOWEL_SHARE * len(letters):
        return False
    in_words, i = 0, 0
    while i < len(value):
        j = i + value[i].isupper()
        k = j
        while k < len(value) and value[k].islower():
            k += 1
        if k - i >= 4 and k > j:
            in_words += k - i
        i = max(k, i + 1)
    return in_words >= letter_share * len(letters)


def _encodes_text(value: str) -> bool:
    """Base64 (or a piece of it, cut anywhere) of prose or JSON: data, not a key. Random bytes decode to
    printable UTF-8 with odds of at most 95/256 a byte, nil for 18 bytes and more; `user:pass` (no space) stays
    a candidate, as a Basic credential would."""
    value = value.replace("-", "+").replace("_", "/").rstrip("=")
    for shift in range(4):
        piece = value[shift:]
        try:
            decoded = base64.b64decode(piece[: len(piece) - len(piece) % 4]).decode("utf-8", "replace")
        except ValueError:
            continue
        printable = sum(c.isprintable() or c in "\t\r\n" for c in decoded) - decoded.count("\ufffd")
        if decoded and printable >= TEXT_SHARE * len(decoded) and (" " in decoded or decoded[:1] in "{["):
            return True
    return False


def pem_runs(data: bytes, public_lines: frozenset[int] | None) -> Iterator[tuple[int, int, int]]:
    """(byte offset, first line, last line) of each run of key-body lines in `data`, outside public blocks
    (`public_lines`; None: those of `data` itself). Hex dumps are one case: a key body mixes cases."""
    if data.count(b"\n") < PEM_RUN_LINES - 1:
        return
    if public_lines is None:
        blocks = key_blocks(data.decode("utf-8", "replace")) if b"-----BEGIN " in data else []
        public_lines = frozenset(n for s, e, private in blocks if not private for n in range(s, e + 1))
    line, pos = 1, 0
    for m in PEM_BODY_RE.finditer(data):
        line += data.count(b"\n", pos, m.start())
        pos = m.start()
        run = m.group(0)
        if line not in public_lines and mixed_case(run):
            yield m.start(), line, line + run.count(b"\n")


def mixed_case(run: bytes) -> bool:
    return run.lower() != run and run.upper() != run


def _non_secret_name(name: str, data: bytes, start: int) -> bool:
    last = name.replace("-", "_").rsplit(".", 1)[-1].rsplit("_", 1)[-1]
    if last in JWK_PUBLIC:  # `"x": "…"`: a JSON key, not a Python name `x = "…"`
        return start > 0 and data[start - 1 : start] == b'"' and len(name) == 1
    return NON_SECRET_NAME_RE.search(last) is not None or name.lower().endswith("id")


def _secret_name(data: bytes, start: int, name: bytes) -> bool:
    """Whether the name a value is given names a secret: not `…_url`, `…Type`, `publicKeyToken`. The whole
    identifier is read back from the keyword (at most NAME_BACK bytes: linear however many names a text has)."""
    before = data[max(0, start - NAME_BACK) : start]
    head = len(before)
    while head and (before[head - 1 : head].isalnum() or before[head - 1 : head] in b"_.-"):
        head -= 1
    whole = (before[head:] + name).decode("ascii", "replace")
    if "public" in whole.lower():
        return False
    words, word = [], ""
    for a, b in zip(whole, whole[1:] + "_"):
        word += a
        if not b.isalnum() or (a.islower() and b.isupper()):
            words.append(word.strip("_.-").lower())
            word = ""
    return not words or words[-1] not in NOT_SECRET_WORDS


def _secret_value(value: str, min_length: int = VALUE_MIN_CHARS, classes: int = 2, bare: bool = False) -> bool:
    """Whether a value given to a credential-looking name is a secret: not a reference, a template, a URL, a
    placeholder, prose or dummy words, and mixed enough to be random (`Xk9#mQ2$vL7!pR4z`, not `password123`).
    `classes`: how many of lower case, upper case, digits and other characters it must mix; `bare`: written
    without quotes, where code (`password = settings.DB_PASSWORD`) is what an identifier is."""
    value = value.strip().strip("'\"`")
    if not min_length <= len(value) <= MAX_VALUE_CHARS or any(c.isspace() for c in value):
        return False
    if REFERENCE_RE.search(value) or PLACEHOLDER_RE.search(value) or URL_RE.search(value) or CODE_RE.search(value):
        return False
    if "=" in value.rstrip("=") or UUID_RE.search(value):  # an expression, or an id
        return False
    if bare and IDENTIFIER_RE.search(value):  # code far more often than a secret: words release it sooner
        return _high_entropy(value) and not _wordlike(value, CODE_WORD_LETTER_SHARE)
    if _dummy(value) or _ascending(value) or _entropy(value) < VALUE_MIN_BITS:
        return False
    lower, upper = any(c.islower() for c in value), any(c.isupper() for c in value)
    digit = any(c.isdigit() for c in value)
    mixed = lower + upper + digit + any(not c.isalnum() for c in value)
    # Words, paths and URNs (`password_reset_view`, `latest/api/token`, `urn:ietf:params:oauth`) are not
    # secrets, nor is lower case with punctuation alone (`#bygroup`): a secret has digits or both cases.
    letters_only = all(c.isalpha() or c in "_.-/:" for c in value)
    return mixed >= classes and not letters_only and (digit or (lower and upper)) and (classes < 3 or digit)


def _dummy(value: str) -> bool:
    """Spelled with dummy words: `password123`, `hunter2hunter2`, `P@ssw0rd`, `s3cret-token-value`, `a secret`."""
    return any(_words_only(v) for v in (value, value.translate(LEET), unquote(value)))


def _words_only(value: str) -> bool:
    words, word = [], []
    for a, b in zip(value, value[1:] + " "):
        if a.isalpha():
            word.append(a)
        if not b.isalpha() or (a.islower() and b.isupper()):  # digits, separators and camelCase split words
            if word:
                words.append("".join(word).lower())
            word = []
    long = [w for w in words if len(w) >= 2]
    return any(len(w) >= 3 for w in long) and all(w in DUMMY_WORDS for w in long)


def _ascending(value: str) -> bool:
    run = 1
    for a, b in zip(value, value[1:]):
        run = run + 1 if ord(b) == ord(a) + 1 else 1
        if run >= ASCENDING_RUN:
            return True
    return False


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _high_entropy(value: str) -> bool:
    core = value.rstrip("=")
    if len(core) > MAX_VALUE_CHARS or core.lower() == core or core.upper() == core:
        return False
    if sum(map(str.isdigit, core)) < 2 or _ascending(core) or PLACEHOLDER_RE.search(core):
        return False
    if core.startswith(("eyJ", "eyAi")) or _encodes_text(core) or _wordlike(core):
        return False
    # Random letters change case about every other letter; names and ids (`HuggingFaceM4/Idefics3-8B`)
    # keep words together, flipping case a third as often or less.
    letters = [ch for ch in core if ch.isalpha()]
    flips = sum(a.isupper() != b.isupper() for a, b in zip(letters, letters[1:]))
    if flips < CASE_FLIP_RATIO * (len(letters) - 1):
        return False
    return _entropy(core) >= min(ENTROPY_CAP_BITS, math.log2(len(core)) - ENTROPY_MARGIN_BITS)


# --- key blocks -------------------------------------------------------------------------------------------


def key_blocks(text: str) -> list[tuple[int, int, bool]]:
    """(first line, last line, private) of each `-----BEGIN …-----` block of `text`, 1-based."""
    if "-----BEGIN " not in text:
        return []
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        begin = _marker(lines[i], "BEGIN") if "-----BEGIN " in lines[i] else None
        if begin is None:
            i += 1
            continue
        label, after = begin
        j = i
        if _marker(lines[i][after:], "END") is None:
            j = i + 1
            while j < len(lines) and _marker(lines[j], "END") is None:
                if not _key_line(lines[j]):
                    break
                j += 1
            if j == len(lines) or _marker(lines[j], "END") is None:
                j -= 1
        blocks.append((i + 1, j + 1, "PRIVATE KEY" in label))
        i = j + 1
    return blocks


def _marker(line: str, word: str) -> tuple[str, int] | None:
    """The label of the first `-----WORD LABEL-----` marker in `line` and where the marker ends, or None."""
    opening = f"-----{word} "
    start = line.find(opening)
    while start >= 0:
        label_start = start + len(opening)
        stop = line.find("-----", label_start)
        if stop < 0:
            return None
        label = line[label_start:stop]
        if label and not label.strip(MARKER_CHARS):
            return label, stop + 5
        start = line.find(opening, start + 1)
    return None


def _key_line(line: str) -> bool:
    """Key material inside a block: base64 (bare, or in a literal with its quotes and `\\n`), a `Proc-Type:`
    style header, or blank."""
    core = line.strip(KEY_LINE_TRIM).replace("\\n", "")
    head, colon, _ = core.partition(": ")
    return not core.strip(BASE64_CHARS) or bool(colon and head[:1].isalpha() and not head.strip(HEADER_CHARS))
