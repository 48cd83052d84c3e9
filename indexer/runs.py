"""Run history: every index run's JSON report, kept under `<data_dir>/runs/` (the newest MAX_RUNS), for
`blobdex runs`, `blobdex status` and the control API.

A run that published, found nothing to do, or failed is recorded alike (a failed run with its one-sentence
error); a run refused because another held the lock is not a run and is not recorded. Runs that found nothing to
do one after another, with the same repos failing, are one record (`repeats`: how many, `first_started_at`): an
`--every 5m` loop would otherwise push the last run that did something out of the history within a day. Each
record is written whole (temporary file, then rename): a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from indexer.snapshot.format import now_iso

RUNS_DIR = "runs"
MAX_RUNS = 200  # about two days of runs every 15 minutes: a record is a few KB


def runs_dir(data_dir: Path) -> Path:
    return data_dir / RUNS_DIR


def run_id(started: datetime) -> str:
    """Sortable by time, like snapshot ids."""
    return started.strftime("%Y%m%dT%H%M%S%fZ")


def record(data_dir: Path, started: datetime, report: dict, error: str | None = None) -> str:
    """Keep one run's report (`Report.to_dict()`), with when it started and ended and, for a run that failed as a
    whole, its error; older records past MAX_RUNS are deleted. Returns the run's id."""
    ended = datetime.now(timezone.utc)
    rid = run_id(started)
    entry = {
        "run_id": rid,
        "started_at": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ended_at": ended.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds_total": round((ended - started).total_seconds(), 3),
        "error": error,
        **report,
    }
    root = runs_dir(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    newest = last(data_dir)
    repeated = newest is not None and _quiet(newest) and _quiet(entry) and _failing(newest) == _failing(entry)
    if repeated:
        entry["repeats"] = newest.get("repeats", 1) + 1
        entry["first_started_at"] = newest.get("first_started_at", newest["started_at"])
    tmp = root / f".{rid}.tmp"
    tmp.write_text(json.dumps(entry, indent=1), encoding="utf-8")
    os.replace(tmp, root / f"{rid}.json")
    if repeated and newest["run_id"] != rid:  # the streak's record is this one now
        (root / f"{newest['run_id']}.json").unlink(missing_ok=True)
    for old in _ids(data_dir)[MAX_RUNS:]:
        (root / f"{old}.json").unlink(missing_ok=True)
    return rid


def _quiet(entry: dict) -> bool:
    """A run that changed nothing: it found the snapshot current and did not fail as a whole."""
    return bool(entry.get("unchanged")) and not entry.get("error") and not entry.get("published")


def _failing(entry: dict) -> set[tuple[str, str]]:
    return {(r.get("org"), r.get("name")) for r in entry.get("repos", []) if r.get("status") != "ok"}


def _ids(data_dir: Path) -> list[str]:
    root = runs_dir(data_dir)
    if not root.exists():
        return []
    return sorted((p.stem for p in root.glob("*.json")), reverse=True)


def history(data_dir: Path, limit: int = 20) -> list[dict]:
    """The newest `limit` run records, newest first (an unreadable one is skipped)."""
    found = []
    for rid in _ids(data_dir):
        if len(found) >= limit:
            break
        try:
            found.append(json.loads((runs_dir(data_dir) / f"{rid}.json").read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return found


def last(data_dir: Path) -> dict | None:
    newest = history(data_dir, 1)
    return newest[0] if newest else None


def summary(entry: dict, org: str | None = None) -> dict:
    """What a listing shows of a run: when, how long, what it did; with `org`, its failed repos are that org's
    only (a tenant learns nothing of another's repos)."""
    totals = entry.get("totals") or {}
    if org is not None:
        failed = sum(1 for r in entry.get("repos", []) if r.get("org") == org and r.get("status") != "ok")
        totals = {**totals, "repos_failed": failed}
    if entry.get("error"):
        outcome = "failed"
    elif entry.get("published"):
        outcome = "published"
    elif entry.get("unchanged"):
        outcome = "unchanged"
    else:
        outcome = "nothing published"
    return {
        "run_id": entry["run_id"],
        "started_at": entry["started_at"],
        "seconds": entry["seconds_total"],
        "outcome": outcome,
        "ok": (totals.get("repos_failed", 0) == 0 if org is not None else bool(entry.get("ok")))
        and not entry.get("error"),
        "snapshot_id": entry.get("snapshot_id"),
        "repos_failed": totals.get("repos_failed", 0),
        "chunks_embedded": totals.get("chunks_embedded", 0),
        "error": entry.get("error"),
        "repeats": entry.get("repeats", 1),  # unchanged runs in a row, kept as this one record
        "first_started_at": entry.get("first_started_at", entry["started_at"]),
    }


def last_success(data_dir: Path) -> float | None:
    """When the newest run without any failure ended (a Unix time), or None."""
    for entry in history(data_dir, MAX_RUNS):
        if entry.get("ok") and not entry.get("error"):
            ended = datetime.strptime(entry["ended_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
            return ended.timestamp()
    return None


BACKFILL = "backfill.json"


def write_backfill(data_dir: Path, snapshot_id: str, model_id: str, left: int) -> None:
    """Record the backlog of the fast-tier snapshot `snapshot_id`: `left` chunks still lack `model_id`'s
    vectors. Replaced whole (a reader never sees half a file); the indexer writes it after every batch."""
    tmp = data_dir / f".{BACKFILL}.tmp"
    state = {"snapshot_id": snapshot_id, "model_id": model_id, "left": left, "updated_at": now_iso()}
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, data_dir / BACKFILL)


def read_backfill(data_dir: Path, snapshot_id: str) -> dict | None:
    """The backlog record of snapshot `snapshot_id`, or None when there is none for it (or it is unreadable:
    the manifest's backlog then stands)."""
    try:
        state = json.loads((data_dir / BACKFILL).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and state.get("snapshot_id") == snapshot_id else None


def clear_backfill(data_dir: Path) -> None:
    (data_dir / BACKFILL).unlink(missing_ok=True)
