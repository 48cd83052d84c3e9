"""The push queue: repos waiting to be fetched and indexed, kept durably in `<data_dir>/queue.sqlite`.

The webhooks process adds a job when a push arrives; many pushes to one repo coalesce into its one job (a push
that arrives while the job is being worked marks it to run once more). An index run claims jobs with a lease:
a worker that dies mid-run never finishes its jobs, and they are claimable again once the lease expires. A job
whose run failed waits before it is tried again, twice as long each time (with jitter), up to MAX_BACKOFF.
Delivery ids are remembered for REPLAY_WINDOW seconds, so a replayed delivery is refused.
"""

from __future__ import annotations

import random
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

QUEUE_FILE = "queue.sqlite"
LEASE_SECONDS = 3600.0  # a run that holds its jobs longer than this is taken for dead
FIRST_BACKOFF = 30.0  # seconds before a failed job is tried again; doubled per failure
MAX_BACKOFF = 3600.0
JITTER = 0.2  # +- this share of a backoff, so repos that failed together are not retried together
REPLAY_WINDOW = 24 * 3600.0  # GitHub redelivers within hours; a day covers it
BUSY_MS = 10_000  # another process (webhooks, an index run) may hold the write lock this long


@dataclass(frozen=True, kw_only=True)
class Job:
    org: str
    repo: str
    enqueued_at: float
    pushes: int  # pushes coalesced into this job
    attempts: int  # failed runs so far
    not_before: float  # the earliest time it may be claimed (after a failure)
    leased_by: str | None
    lease_until: float | None
    again: bool  # a push arrived while it was leased: run it once more
    last_error: str | None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class Queue:
    def __init__(self, data_dir: Path):
        data_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(data_dir / QUEUE_FILE), timeout=BUSY_MS / 1000, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS job (
                org TEXT NOT NULL, repo TEXT NOT NULL, enqueued_at REAL NOT NULL, pushes INTEGER NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0, not_before REAL NOT NULL DEFAULT 0,
                leased_by TEXT, lease_until REAL, again INTEGER NOT NULL DEFAULT 0, last_error TEXT,
                PRIMARY KEY (org, repo));
            CREATE TABLE IF NOT EXISTS delivery (id TEXT PRIMARY KEY, seen_at REAL NOT NULL);
        """)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def enqueue(self, org: str, repo: str, now: float | None = None) -> bool:
        """Add a job for a repo; True when it is new, False when it joined the repo's waiting job."""
        now = time.time() if now is None else now
        with self._write():
            known = self.db.execute("SELECT leased_by FROM job WHERE org = ? AND repo = ?", (org, repo)).fetchone()
            if known is None:
                self.db.execute(
                    "INSERT INTO job (org, repo, enqueued_at, pushes) VALUES (?, ?, ?, 1)", (org, repo, now)
                )
                return True
            self.db.execute(
                "UPDATE job SET pushes = pushes + 1, again = again OR (leased_by IS NOT NULL) "
                "WHERE org = ? AND repo = ?",
                (org, repo),
            )
            return False

    def seen(self, delivery_id: str, now: float | None = None) -> bool:
        """Remember a delivery; True when it was seen within REPLAY_WINDOW (a replay)."""
        now = time.time() if now is None else now
        with self._write():
            self.db.execute("DELETE FROM delivery WHERE seen_at < ?", (now - REPLAY_WINDOW,))
            try:
                self.db.execute("INSERT INTO delivery VALUES (?, ?)", (delivery_id, now))
            except sqlite3.IntegrityError:
                return True
            return False

    def claim(self, owner: str, now: float | None = None, lease: float = LEASE_SECONDS) -> list[tuple[str, str]]:
        """Lease every job that may run now (not leased, or its lease expired; past its backoff) to `owner`."""
        now = time.time() if now is None else now
        with self._write():
            rows = self.db.execute(
                "UPDATE job SET leased_by = ?, lease_until = ?, again = 0 "
                "WHERE not_before <= ? AND (leased_by IS NULL OR lease_until < ?) RETURNING org, repo",
                (owner, now + lease, now, now),
            ).fetchall()
        return sorted((org, repo) for org, repo in rows)

    def finish(self, owner: str, outcome: dict[tuple[str, str], str | None], now: float | None = None) -> None:
        """Close `owner`'s jobs: one whose run succeeded (None) is done, unless a push came meanwhile (it waits
        again); one that failed (its error) waits out its backoff. A job whose lease another worker has taken
        over (this one was taken for dead) is left to that worker."""
        now = time.time() if now is None else now
        with self._write():
            for (org, repo), error in outcome.items():
                key = (org, repo, owner)
                if error is None:
                    self.db.execute("DELETE FROM job WHERE org = ? AND repo = ? AND leased_by = ? AND again = 0", key)
                    self.db.execute(
                        "UPDATE job SET leased_by = NULL, lease_until = NULL, attempts = 0, last_error = NULL "
                        "WHERE org = ? AND repo = ? AND leased_by = ?",
                        key,
                    )
                    continue
                attempts = self.db.execute(
                    "SELECT attempts FROM job WHERE org = ? AND repo = ? AND leased_by = ?", key
                ).fetchone()
                if attempts is None:
                    continue
                self.db.execute(
                    "UPDATE job SET leased_by = NULL, lease_until = NULL, attempts = ?, not_before = ?, last_error = ? "
                    "WHERE org = ? AND repo = ? AND leased_by = ?",
                    (attempts[0] + 1, now + backoff(attempts[0] + 1), error, *key),
                )

    def release(self, owner: str) -> None:
        """Give `owner`'s jobs back untouched (its run could not start: another held the lock)."""
        with self._write():
            self.db.execute("UPDATE job SET leased_by = NULL, lease_until = NULL WHERE leased_by = ?", (owner,))

    def jobs(self) -> list[Job]:
        rows = self.db.execute(
            "SELECT org, repo, enqueued_at, pushes, attempts, not_before, leased_by, lease_until, again, last_error "
            "FROM job ORDER BY enqueued_at"
        ).fetchall()
        fields = Job.__dataclass_fields__
        return [Job(**{**dict(zip(fields, r)), "again": bool(r[8])}) for r in rows]

    def sweep(self, configured: set[tuple[str, str]]) -> list[tuple[str, str]]:
        """Drop the jobs of repos no longer configured; returns them."""
        with self._write():
            gone = [(o, r) for o, r in self.db.execute("SELECT org, repo FROM job") if (o, r) not in configured]
            self.db.executemany("DELETE FROM job WHERE org = ? AND repo = ?", gone)
        return gone

    def _write(self):
        """One write transaction, taken at once (BEGIN IMMEDIATE): a claim and an enqueue never interleave."""
        return _Transaction(self.db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, exc, tb) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


def backoff(attempts: int) -> float:
    """Seconds to wait after the `attempts`-th failure in a row: doubling from FIRST_BACKOFF, at most
    MAX_BACKOFF, +- JITTER."""
    base = min(FIRST_BACKOFF * 2 ** (attempts - 1), MAX_BACKOFF)
    return base * random.uniform(1 - JITTER, 1 + JITTER)
