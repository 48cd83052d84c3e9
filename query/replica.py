"""A read replica: `blobdex serve --store s3://...` keeps its data dir at the object store's newest snapshot
(indexer/store.py), off the request path, and the server swaps to it as it does after a local publish (it
follows CURRENT). Each poll also says which snapshot this replica serves, so `blobdex status --store` can list
the replicas and what they serve."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

from indexer.snapshot import current_id
from indexer.store import Store, StoreError, sync

log = logging.getLogger(__name__)


class Replica:
    """Syncs `data_dir` from `store` once now (so there is something to serve), then every `poll` seconds."""

    def __init__(self, store: Store, data_dir: Path, poll: float, name: str = "", keep: int = 2, select=None):
        """`select`: a shard's repos (query.shard.owned), the only chunk parts it downloads (indexer.store.sync)."""
        self.store, self.data_dir, self.poll, self.keep, self.select = store, data_dir, poll, keep, select
        self.name = name or socket.gethostname()
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="blobdex-replica", daemon=True)

    def start(self) -> None:
        self.step()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def step(self) -> None:
        """One poll: download the newest snapshot if this replica lacks it, then say what it serves. A failure is
        logged, and the snapshot already here keeps serving."""
        try:
            moved = sync(self.store, self.data_dir, self.keep, self.select)
            if moved is not None:
                log.info(
                    "replica: snapshot %s from %s (%d of %d files downloaded, %d bytes, %.2f s)",
                    moved.snapshot_id,
                    self.store.url,
                    moved.moved_files,
                    moved.files,
                    moved.moved_bytes,
                    moved.seconds,
                )
            self.store.report_replica(self.name, current_id(self.data_dir))
            self.last_error = None
        except (StoreError, OSError, ValueError) as exc:  # the store, this disk, a damaged listing
            if str(exc) != self.last_error:
                log.error("replica: %s; the snapshot here keeps serving", exc)
            self.last_error = str(exc)
        except Exception:  # a bug: logged whole, and the poll goes on (a dead thread would stop syncing)
            log.exception("replica: poll failed; the snapshot here keeps serving")
            self.last_error = "poll failed"

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            started = time.monotonic()
            self.step()
            log.debug("replica poll took %.2f s", time.monotonic() - started)
