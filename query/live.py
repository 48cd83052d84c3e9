"""The live snapshot: the one CURRENT names, opened once, swapped when CURRENT moves (zoekt search/watcher.go)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from indexer.snapshot import SnapshotError, current_id
from query.pages import release_freed
from query.reader import Select, SnapshotReader, open_kept

log = logging.getLogger(__name__)

RETRY_REFUSED_SECONDS = 30.0  # how often a snapshot that failed to open is tried again


class LiveSnapshot:
    """Follows CURRENT under `data_dir`: refuse a snapshot that cannot be served, retry it later, swap in
    one that can. `model_ids()` names the models the server can embed queries with (checked on every open).

    `prepare`, a long-lived server's, loads what requests read of a snapshot (route_task.prepare). With it, a
    new snapshot is opened and prepared in a thread while the old one answers every request, and serves once
    both are done, so a publish costs requests nothing (at 10M chunks the first search after a publish took
    6.9 s over HTTP when it opened the snapshot itself, beside the preparing thread); the first snapshot
    answers at once and is prepared in a thread. Without it (the CLI, tests, a shard), the request that
    finds CURRENT moved opens the new snapshot and answers from it."""

    def __init__(
        self,
        data_dir: Path,
        model_ids: Callable[[], tuple[str, ...]],
        exact: bool = False,
        prepare: Callable[[SnapshotReader], None] | None = None,
        select: Select | None = None,
    ):
        self.data_dir = data_dir
        self.model_ids = model_ids
        self.exact = exact  # exact_search: every vector search scores every allowed row
        self.prepare = prepare
        self.select = select  # the repos each snapshot is opened with (a shard's); every one when None
        self._reader: SnapshotReader | None = None
        self._refused: tuple[str, float] | None = None  # (snapshot id, when) of the last one refused
        self._damaged: set[str] = set()  # snapshots a query found damaged: never served again
        self._opening = threading.Lock()  # one request at a time opens a new snapshot

    @property
    def serving(self) -> SnapshotReader | None:
        """The snapshot being served, without looking at CURRENT; None before the first open."""
        return self._reader

    def reader(self) -> SnapshotReader:
        """The snapshot CURRENT names, opened once; a request holds on to the one it got, so a swap
        never disturbs it. While one request opens a new snapshot the others keep using the old one.
        A new snapshot that cannot be opened is refused (logged) and the old one keeps serving; at start-up,
        the newest kept snapshot that opens serves instead (logged), and CURRENT's is retried later. A snapshot
        that a query found damaged (DamagedSnapshot) is left for the newest older kept one that opens (logged)."""
        live = current_id(self.data_dir)
        current = self._reader
        if current is not None:
            if not self._leaving(current) and self._keeps(current, live):
                return current
            if not self._opening.acquire(blocking=False):
                return current
        else:
            self._opening.acquire()
        behind = False  # whether a thread opens the new snapshot, and releases _opening when it is done
        try:
            current = self._reader
            if current is not None and self._leaving(current):
                return self._fall_back(current)
            if current is not None and self._keeps(current, live):
                return current
            if current is not None and self.prepare is not None:
                threading.Thread(target=self._swap_behind, args=(live,), name=f"open {live}", daemon=True).start()
                behind = True
                return current
            return self._swap(live)
        finally:
            if not behind:
                self._opening.release()

    def _swap_behind(self, live: str | None) -> None:
        """_swap in a thread, the new snapshot prepared before it serves; _opening is held until it is done."""
        try:
            self._swap(live, behind=True)
        except Exception as exc:  # not a SnapshotError (those are refused in _swap): say it, retry it later
            log.error("keeping snapshot %s: opening %s failed: %s", self._reader.snapshot_id, live, exc)
            self._refused = (live, time.monotonic())
        finally:
            self._opening.release()
        release_freed()  # what the old snapshot held, once no request holds it, goes back with the next one

    def _keeps(self, current: SnapshotReader, live: str | None) -> bool:
        """Whether `current` goes on serving: CURRENT names it, or nothing, or one refused lately or found damaged."""
        return live in (current.snapshot_id, None) or live in self._damaged or self._refused_lately(live)

    def _leaving(self, reader: SnapshotReader) -> bool:
        return reader.damaged is not None and reader.snapshot_id not in self._damaged

    def _fall_back(self, damaged: SnapshotReader) -> SnapshotReader:
        """Serve the newest older kept snapshot that opens instead of `damaged`; `damaged` itself when none does."""
        self._damaged.add(damaged.snapshot_id)
        older = open_kept(
            self.data_dir, self.model_ids(), before=damaged.snapshot_id, exact=self.exact, select=self.select
        )
        if older is None:
            log.error(
                "snapshot %s is damaged (%s) and no older kept snapshot opens: it serves what it still can; "
                "run 'blobdex index' to rebuild it",
                damaged.snapshot_id,
                damaged.damaged,
            )
            return damaged
        log.error(
            "serving the older snapshot %s: a query found snapshot %s damaged (%s); run 'blobdex index' to rebuild it",
            older.snapshot_id,
            damaged.snapshot_id,
            damaged.damaged,
        )
        self._reader = older
        self._told(older)
        return older

    def _refused_lately(self, live: str | None) -> bool:
        return bool(
            self._refused and self._refused[0] == live and time.monotonic() - self._refused[1] < RETRY_REFUSED_SECONDS
        )

    def _swap(self, live: str | None, behind: bool = False) -> SnapshotReader:
        """Open `live` and serve it; if it cannot be served, keep (or at start-up find) one that can. `behind`:
        in _swap_behind's thread, which prepares it before it serves."""
        try:
            # takes over the parts both list
            fresh = SnapshotReader(self.data_dir, live, previous=self._reader, exact=self.exact, select=self.select)
            fresh.check_model(self.model_ids())
        except SnapshotError as exc:
            if self._reader is None:  # starting up: serve the newest kept snapshot that opens
                fresh = open_kept(self.data_dir, self.model_ids(), exact=self.exact, select=self.select)
                if fresh is None:
                    raise
                if live is None:
                    log.error(
                        "serving snapshot %s, the newest kept: CURRENT in %r is missing or empty; the next "
                        "'blobdex index' writes it again",
                        fresh.snapshot_id,
                        str(self.data_dir),
                    )
                else:
                    log.error(
                        "serving the older snapshot %s: the snapshot CURRENT names cannot be served: %s",
                        fresh.snapshot_id,
                        exc,
                    )
                self._reader, self._refused = fresh, (live, time.monotonic())
                self._told(fresh)
                return fresh
            log.error("keeping snapshot %s: the new one is refused: %s", self._reader.snapshot_id, exc)
            self._refused = (live, time.monotonic())
            return self._reader
        if behind:
            self._prepared(fresh)
        if self._reader is not None:
            log.info("swapped snapshot %s -> %s", self._reader.snapshot_id, fresh.snapshot_id)
        self._reader, self._refused = fresh, None
        if not behind:
            self._told(fresh)
        return fresh

    def _told(self, reader: SnapshotReader) -> None:
        """A snapshot that serves at once (at start-up, or instead of a damaged one): prepared in a thread."""
        if self.prepare is not None:

            def run() -> None:
                self._prepared(reader)
                release_freed()

            threading.Thread(target=run, name=f"prepare {reader.snapshot_id}", daemon=True).start()

    def _prepared(self, reader: SnapshotReader) -> None:
        """What fails is the first request's to say, in its own words (each loads what it needs itself)."""
        try:
            self.prepare(reader)
        except Exception as exc:
            log.info("snapshot %s was not prepared: %s", reader.snapshot_id, exc)
