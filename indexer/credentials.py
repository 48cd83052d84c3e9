"""Secret settings: every secret blobdex.toml names (a repo's `credential`, `webhook_secret`, `store_access_key`,
`store_secret_key`, `jwt_secret`) is a reference, `env:NAME` or `file:PATH`, resolved here the one way, only when
it is used, and never stored. A secret given in the environment itself (BLOBDEX_JWT_SECRET,
BLOBDEX_GITHUB_CLIENT_SECRET) is checked here too.

A resolved value that is itself a reference (`BLOBDEX_JWT_SECRET=env:JWT_SECRET`) is refused: used as written it
would be a public key anyone can sign with. Keys that sign or verify (JWTs, webhook signatures) have a minimum
length (MIN_SECRET_BYTES)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from indexer.errors import BlobdexError

REFERENCE_RE = re.compile(r"^(env|file):(.+)$")
# HS256 keys (RFC 7518 section 3.2: a key of at least the hash's size, 256 bits) and webhook signing secrets.
MIN_SECRET_BYTES = {"jwt_secret": 32, "webhook_secret": 16}
MAX_FILE_BYTES = 64 * 1024  # a secret file is a line or a key, never a document


class CredentialError(BlobdexError):
    """A secret setting that cannot be used; the message never holds the secret."""


def is_reference(value: str) -> bool:
    return bool(REFERENCE_RE.match(value))


def literal_problem(key: str, value: str) -> str | None:
    """What is wrong with a secret setting as the config file holds it (it must be a reference), or None. The value
    is never repeated: it may be the secret itself."""
    if is_reference(value):
        return None
    return (
        f"`{key}` is not a reference (it is not shown, in case it is the secret itself): write "
        f'{key} = "env:NAME" or "file:PATH", naming where the secret is kept'
    )


def resolve(reference: str, setting: str = "") -> str:
    """The secret `reference` names (`env:NAME`: the variable; `file:PATH`: the file, stripped), checked for the
    `setting` it is for (a config key; "" for a repo's credential)."""
    where = f"{setting}: " if setting else ""
    match = REFERENCE_RE.match(reference)
    if not match:
        raise CredentialError(
            f"{where}credential reference {reference!r} is not understood; use 'env:NAME' or 'file:PATH'"
        )
    kind, name = match.groups()
    if kind == "env":
        value = os.environ.get(name)
        if not value:
            raise CredentialError(
                f"{where}credential reference {reference!r} names environment variable {name!r}, which is unset "
                f"or empty; export it before starting blobdex"
            )
    else:
        path = Path(name).expanduser()
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise CredentialError(
                f"{where}credential reference {reference!r}: cannot read {name!r} ({exc.strerror})"
            ) from exc
        if len(raw) > MAX_FILE_BYTES:
            raise CredentialError(
                f"{where}credential reference {reference!r} names a file over {MAX_FILE_BYTES // 1024} KiB; a "
                f"secret file holds the secret alone"
            )
        value = raw.decode("utf-8", "replace").strip()
    return checked(value, setting, f"what {reference!r} names")


def checked(value: str, setting: str, source: str) -> str:
    """`value` as the secret of `setting` (from `source`, for the message): not empty, not itself a reference,
    and as long as the setting needs."""
    where = f"{setting}: " if setting else ""
    if not value:
        raise CredentialError(f"{where}{source} is empty; put the secret there")
    if is_reference(value) or value.startswith("${"):
        raise CredentialError(
            f"{where}{source} holds a reference ({value.split(':', 1)[0]}:…), not a secret; put the secret "
            f"itself there (used as written, anyone could sign with it)"
        )
    need = MIN_SECRET_BYTES.get(setting, 0)
    if len(value.encode("utf-8")) < need:
        raise CredentialError(
            f"{where}{source} is {len(value.encode('utf-8'))} bytes; it must be at least {need} random bytes: "
            f"make one with 'python3 -c \"import secrets; print(secrets.token_urlsafe(32))\"'"
        )
    return value


def from_environment(variable: str, setting: str) -> str | None:
    """A secret kept in the environment itself (not a reference), checked; None when the variable is unset."""
    value = os.environ.get(variable)
    return checked(value, setting, f"environment variable {variable}") if value else None
