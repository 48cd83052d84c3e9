"""The indexer as a service: drain the push queue (`index --pending`) and index on a schedule (`index --every`),
surviving failed runs and stopping cleanly when asked (SIGTERM ends the loop after the run in progress)."""

from __future__ import annotations

import logging
import os
import random
import re
import socket
import threading
import time
from collections.abc import Callable

from indexer.build import LockBusy, run
from indexer.config import Config, ConfigError
from indexer.errors import BlobdexError
from indexer.operate.queue import Queue
from indexer.build.report import Report

log = logging.getLogger(__name__)

QUEUE_POLL_SECONDS = 5.0  # how soon a queued push is indexed between scheduled runs
JITTER = 0.1  # +- this share of the interval: many indexers started together do not fetch together
DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# The shortest --every: a run fetches every repo, and pushes reach the queue (drained every QUEUE_POLL_SECONDS)
# sooner than any schedule would; a bare `5` meant five seconds, which nobody meant.
MIN_EVERY_SECONDS = 30


def seconds(text: str) -> float:
    """A duration as `--every` takes it: 90s, 5m, 1.5h, 1d (a unit is required), at least MIN_EVERY_SECONDS."""
    found = DURATION_RE.match(text.strip())
    if not found or float(found.group(1)) <= 0:
        raise ConfigError(
            f"{text!r} is not a duration: give a number with its unit, s, m, h or d, like 5m or 1h"
            + (f" ({text.strip()}s or {text.strip()}m?)" if text.strip().isdigit() else "")
        )
    value = float(found.group(1)) * UNITS[found.group(2)]
    if value < MIN_EVERY_SECONDS:
        raise ConfigError(
            f"--every {text.strip()} is too often: runs are at least {MIN_EVERY_SECONDS}s apart (pushes reach "
            f"the queue at once; 'blobdex webhooks' receives them)"
        )
    return value


def worker_id() -> str:
    """Names the worker that holds a lease: host, process, a random tail (a restarted process is another)."""
    return f"{socket.gethostname()}:{os.getpid()}:{random.randrange(16**6):06x}"


def drain(cfg: Config, owner: str | None = None, every_repo: bool = False, **options) -> Report | None:
    """Index the queued repos (fetching only them, or `every_repo`) and close their jobs; None when nothing is
    queued (and not `every_repo`). A run that cannot start because another holds the lock gives the jobs back;
    one that fails marks them failed."""
    owner = owner or worker_id()
    with Queue(cfg.data_dir) as queue:
        for org, repo in queue.sweep({r.key for r in cfg.repos}):
            log.warning("dropped the queued job of %s/%s: the repo is no longer configured", org, repo)
        claimed = queue.claim(owner)
        if not claimed and not every_repo:
            return None
        try:
            report = run(cfg, only=None if every_repo else set(claimed), **options)
        except LockBusy:
            queue.release(owner)
            raise
        except BaseException as exc:
            queue.finish(owner, {key: f"the run failed: {exc}" for key in claimed})
            raise
        errors = {(r.org, r.name): r.error for r in report.repos if r.status != "ok"}
        queue.finish(owner, {key: errors.get(key) for key in claimed})
    return report


def every(
    cfg: Config,
    interval: float,
    stop: threading.Event,
    on_report: Callable[[Report], None],
    load_config: Callable[[], Config] | None = None,
    **options,
) -> None:
    """Index every repo every `interval` seconds (+- JITTER) and the queued ones in between, until `stop` is set.
    A run that fails is logged (the run history keeps it) and the loop goes on; the config is read again before
    each run (`load_config`), so `blobdex repo add` takes effect without a restart."""
    owner, due = worker_id(), time.monotonic()
    while not stop.is_set():
        try:
            cfg = load_config() if load_config else cfg
            every_repo = time.monotonic() >= due  # a scheduled run fetches every repo and closes queued jobs too
            if every_repo:
                due = time.monotonic() + interval * random.uniform(1 - JITTER, 1 + JITTER)
            report = drain(cfg, owner, every_repo, **options)
            if report is not None:
                on_report(report)
        except LockBusy as exc:
            log.info("skipped a run: %s", exc)
        except BlobdexError as exc:
            log.error("the run failed: %s; the next goes on", exc)
        except Exception as exc:  # a bug must not stop the service either: one line, the traceback under -v
            log.error("the run failed: internal error: %s: %s; the next goes on", type(exc).__name__, exc)
            log.debug("the run failed", exc_info=True)
        stop.wait(max(0.0, min(QUEUE_POLL_SECONDS, due - time.monotonic())))
