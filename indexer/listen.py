"""A server's listening socket (`blobdex serve`, `blobdex webhooks`), bound before anything is announced: a busy
port is one sentence, not a traceback after "serving". uvicorn listens on it."""

from __future__ import annotations

import errno
import socket

from indexer.errors import BlobdexError


def bind(host: str, port: int) -> socket.socket:
    """The socket for host:port, bound (not yet listening)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise BlobdexError(
            f"cannot resolve --host {host!r}: {exc.strerror}; give a name or address of this machine"
        ) from exc
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart need not wait
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise BlobdexError(f"port {port} on {host} is in use; pick another with --port") from exc
        raise BlobdexError(
            f"cannot listen on {host} port {port}: {exc.strerror}; pick another --host or --port"
        ) from exc
    return sock
