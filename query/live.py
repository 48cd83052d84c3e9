"""The live snapshot: the one CURRENT names, opened once, swapped when CURRENT moves (zoekt search/watcher.go)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from indexer.snapshot import SnapshotError, current_id
from query.reader import SnapshotReader, open_kept

log = logging.getLogger(__name__)

RETRY_REFUSED_SECONDS = 30.0  # how often a snapshot that failed to open is tried again


class LiveSnapshot:
    """Follows CURRENT under `data_dir`: refuse a snapshot that cannot be served, retry it later, swap in
    one that can. `model_ids()` names the models the server can embed queries with (checked on every open)."""

    def __init__(self, data_dir: Path, model_ids: Callable[[], tuple[str, ...]]):
        self.data_dir = data_dir
        self.model_ids = model_ids
        self._reader: SnapshotReader | None = None
        self._refused: tuple[str, float] | None = None  # (snapshot id, when) of the last one refused
        self._opening = threading.Lock()  # one request at a time opens a new snapshot

    @property
    def serving(self) -> SnapshotReader | None:
        """The snapshot being served, without looking at CURRENT; None before the first open."""
        return self._reader

    def reader(self) -> SnapshotReader:
        """The snapshot CURRENT names, opened once; a request holds on to the one it got, so a swap
        never disturbs it. While one request opens a new snapshot the others keep using the old one.
        A new snapshot that cannot be opened is refused (logged) and the old one keeps serving; at start-up,
        the newest kept snapshot that opens serves instead (logged), and CURRENT's is retried later."""
        live = current_id(self.data_dir)
        current = self._reader
        if current is not None:
            if live == current.snapshot_id or self._refused_lately(live):
                return current
            if not self._opening.acquire(blocking=False):
                return current
        else:
            self._opening.acquire()
        try:
            if self._reader is not None and self._reader.snapshot_id == live:
                return self._reader
            return self._swap(live)
        finally:
            self._opening.release()

    def _refused_lately(self, live: str | None) -> bool:
        return bool(
            self._refused and self._refused[0] == live and time.monotonic() - self._refused[1] < RETRY_REFUSED_SECONDS
        )

    def _swap(self, live: str | None) -> SnapshotReader:
        """Open `live` and serve it; if it cannot be served, keep (or at start-up find) one that can."""
        try:
            fresh = SnapshotReader(self.data_dir, live, previous=self._reader)  # takes over the parts both list
            fresh.check_model(self.model_ids())
        except SnapshotError as exc:
            if self._reader is None:  # starting up: serve the newest kept snapshot that opens
                fresh = open_kept(self.data_dir, self.model_ids())
                if fresh is None:
                    raise
                log.error(
                    "serving the older snapshot %s: the snapshot CURRENT names cannot be served: %s",
                    fresh.snapshot_id,
                    exc,
                )
                self._reader, self._refused = fresh, (live, time.monotonic())
                return fresh
            log.error("keeping snapshot %s: the new one is refused: %s", self._reader.snapshot_id, exc)
            self._refused = (live, time.monotonic())
            return self._reader
        if self._reader is not None:
            log.info("swapped snapshot %s -> %s", self._reader.snapshot_id, fresh.snapshot_id)
        self._reader, self._refused = fresh, None
        return fresh
