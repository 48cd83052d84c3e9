"""The addresses blobdex.toml and the command line give for services outside this process: an object store
(`store`, `--store`), a Ray cluster (`cluster`, `--cluster`) and a running query server (`server`, `--server`),
each checked before anything connects, with what is wrong said in one sentence and no credential echoed."""

from __future__ import annotations

from urllib.parse import urlsplit


def cluster_host_port(address: str) -> tuple[str, int] | None:
    """The host and port of a Ray address (config `cluster`, `index --cluster`): ray://HOST:PORT (Ray Client)
    or HOST:PORT (a node of the cluster, from one of its machines); None for "local", "auto" or a malformed one."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if host and port.isdigit() and 0 < int(port) < 65536 and "/" not in host:
        return host.strip("[]"), int(port)
    return None


def store_url_problem(url: str) -> str | None:
    """What is wrong with a store URL (config `store`, `--store`), or None. One with an '@' is refused without
    being shown: `s3://KEY:SE/CRET@bucket` parses as no credentials at all, so any '@' may carry them."""
    if "@" in url or "?" in url or "#" in url:
        return (
            f"has {'an ' + repr('@') if '@' in url else 'a query string'}, refused in case it carries credentials or a "
            "signature (not shown): write s3://BUCKET/PREFIX and name the keys in store_access_key and "
            'store_secret_key ("env:NAME" or "file:PATH")'
        )
    if not url.startswith("s3://") or not url.removeprefix("s3://").split("/")[0]:
        return f"is {url!r}; use an s3://BUCKET/PREFIX URL"
    return None


def cluster_address_problem(address: str) -> str | None:
    """What is wrong with a Ray address, or None."""
    ok = address in ("local", "auto") or cluster_host_port(address)
    return None if ok else f'is {address!r}; use "local", "auto", "ray://HOST:PORT" or "HOST:PORT"'


def server_url_problem(url: str) -> str | None:
    """What is wrong with a query server's address (config `server`, `--server`), or None."""
    if "@" in url or "?" in url or "#" in url:  # before the address is shown: it may carry a credential
        return "has credentials, a query or a fragment (not shown): give the address alone, the token in BLOBDEX_TOKEN"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"is {url!r}; give a server's address, like http://127.0.0.1:8765"
    return None
