"""Joining a Ray cluster, or starting Ray in this process: for the indexer's workers (indexer.build.cluster) and
the query server's shards (query.shard_serve). The address is checked first, one that refuses or stays silent is
said in seconds (Ray itself retries for minutes), Ray Client's flaky start is tried again, and every failure is one
sentence.

Addresses: `local` starts a Ray instance on this machine; `auto` joins the one `ray start` runs here; HOST:PORT a
cluster's head from one of its nodes; `ray://HOST:PORT` a remote cluster through Ray Client. Where the cluster uses
token authentication, this process needs the same RAY_AUTH_TOKEN as its nodes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket

from indexer.addresses import cluster_address_problem, cluster_host_port
from indexer.errors import BlobdexError

log = logging.getLogger(__name__)

CONNECT_SECONDS = 5
CLIENT_ATTEMPTS = 3  # tries to join through Ray Client (see _init)


class ClusterError(BlobdexError):
    """The cluster cannot be reached or used; the message says which and what to do."""


def check_address(address: str) -> None:
    if problem := cluster_address_problem(address):
        raise ClusterError(f"--cluster {problem}")


def join(address: str, cpus: int = 0):
    """Ray, joined to the cluster at `address` (started here with `cpus` CPUs, all of them by default, for "local")."""
    check_address(address)
    try:
        import ray
    except ImportError as exc:
        raise ClusterError("--cluster needs Ray: pip install 'blobdex[cluster]' (make install has it)") from exc
    _reachable(address)
    # Ray's own lines (a started instance, its token file) are not the command's output: errors still reach the log.
    options = {
        "include_dashboard": False,
        "log_to_driver": False,
        "ignore_reinit_error": True,
        "logging_level": logging.ERROR,
    }
    try:
        if address == "local":
            ray.init(num_cpus=cpus or os.cpu_count(), **options)
        else:
            _init(ray, address, options)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError and its own types
        with contextlib.suppress(Exception):  # whatever a failed init started; its own error is the one to say
            ray.shutdown()
        raise ClusterError(
            f"cannot reach the Ray cluster at {address!r}: {first_line(exc)}; start one with "
            f"'ray start --head' or pass --cluster local"
        ) from exc
    return ray


def _init(ray, address: str, options: dict) -> None:
    """Join the cluster. Through Ray Client the head starts a server process for each client, which now and
    then fails to come up ("Initialization failure from server", after the head's
    RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S): that is tried again, the rest is said at once."""
    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            return ray.init(address=address, **options)
        except ConnectionError as exc:
            if not address.startswith("ray://") or "Initialization failure" not in str(exc):
                raise
            if attempt == CLIENT_ATTEMPTS:
                raise
            log.warning("ray: the cluster's client server did not start a server for this process; trying again")
            with contextlib.suppress(Exception):
                ray.shutdown()


def _reachable(address: str) -> None:
    """A refused or silent address said in a few seconds."""
    if address in ("local", "auto"):
        return
    host, port = cluster_host_port(address)
    try:
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise ClusterError(
            f"cannot reach the Ray cluster at {address!r}: {exc.strerror or exc}; is its head node up "
            f"('ray start --head'), and is this the port it listens on?"
        ) from exc


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
