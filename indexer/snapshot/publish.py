"""Publishing a snapshot: parts and the snapshot built aside, fsynced, renamed into place, CURRENT replaced last;
what killed runs left swept away, and old snapshots pruned with the parts only they listed.

Every function here runs under the index lock (indexer/build/__init__.py). A crash at any moment leaves CURRENT naming
a complete snapshot whose parts are all in place: parts are renamed in before the snapshot that lists them, and
a part is deleted only when no published snapshot lists it.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from indexer.snapshot import (
    CURRENT,
    MANIFEST,
    Manifest,
    current_id,
    parts_dir,
    published,
    snapshots_dir,
)

log = logging.getLogger(__name__)

BUILD_PREFIX = ".build-"  # a snapshot or part being written: nothing reads it
TRASH_PREFIX = ".trash-"  # a snapshot or part being deleted: renamed first, so a kill never leaves half of one


def build_dir(data_dir: Path, snapshot_id: str) -> Path:
    """A temporary directory to build a snapshot into; nothing reads it until `publish` renames it."""
    path = snapshots_dir(data_dir) / f"{BUILD_PREFIX}{snapshot_id}"
    path.mkdir(parents=True)
    return path


def part_build_dir(data_dir: Path, part_id: str) -> Path:
    path = parts_dir(data_dir) / f"{BUILD_PREFIX}{part_id}"
    path.mkdir(parents=True)
    return path


def finish_part(data_dir: Path, built: Path, part_id: str) -> Path:
    """fsync a written part and rename it into place: from now on a snapshot may list it."""
    _fsync_tree(built)
    final = parts_dir(data_dir) / part_id
    os.rename(built, final)
    _fsync_dir(final.parent)
    return final


def _fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(data_dir: Path, built: Path, manifest: Manifest) -> Path:
    """Write the manifest, fsync, rename into place, then point CURRENT at it (written last)."""
    (built / MANIFEST).write_text(manifest.to_json(), encoding="utf-8")
    _fsync_tree(built)
    final = snapshots_dir(data_dir) / manifest.snapshot_id
    os.rename(built, final)
    _fsync_dir(final.parent)
    point_current(data_dir, manifest.snapshot_id)
    return final


def point_current(data_dir: Path, snapshot_id: str) -> None:
    """Point CURRENT at a snapshot in place (atomically: a reader sees the old name or the new one)."""
    tmp = data_dir / f".{CURRENT}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(snapshot_id + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, data_dir / CURRENT)
    _fsync_dir(data_dir)


def _remove(path: Path) -> None:
    trash = path.with_name(TRASH_PREFIX + path.name)
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def sweep(data_dir: Path) -> list[str]:
    """Delete what interrupted runs left: build dirs, half-deleted snapshots and parts, a stray `.CURRENT.tmp`,
    snapshots renamed into place that CURRENT never named (newer than CURRENT's), and parts no published
    snapshot lists. CURRENT's snapshot and the older kept ones stay, with their parts: a server may be reading
    them. When CURRENT names no snapshot on disk, no published snapshot is touched: a server may have fallen
    back to any."""
    removed = []
    tmp = data_dir / f".{CURRENT}.tmp"
    if tmp.exists():
        tmp.unlink()
        removed.append(tmp.name)
    root = snapshots_dir(data_dir)
    if root.exists():
        live = current_id(data_dir)
        named = live in published(data_dir)
        for path in sorted(root.iterdir()):
            if path.name.startswith((BUILD_PREFIX, TRASH_PREFIX)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
            elif named and not path.name.startswith(".") and path.name > live:
                _remove(path)
                removed.append(path.name)
    return removed + _sweep_parts(data_dir)


def _sweep_parts(data_dir: Path) -> list[str]:
    """Delete parts being built or deleted, and parts that no published snapshot lists. Nothing is deleted when a
    published manifest cannot be read: the parts it lists are unknown."""
    root = parts_dir(data_dir)
    if not root.exists():
        return []
    listed = listed_parts(data_dir)
    removed = []
    for path in sorted(root.iterdir()):
        if path.name.startswith((BUILD_PREFIX, TRASH_PREFIX)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"{path.parent.name}/{path.name}")
        elif listed is not None and path.name not in listed:
            _remove(path)
            removed.append(f"{path.parent.name}/{path.name}")
    return removed


def listed_parts(data_dir: Path) -> set[str] | None:
    """The parts every published snapshot lists; None when one of their manifests cannot be read."""
    listed: set[str] = set()
    for snapshot_id in published(data_dir):
        try:
            text = (snapshots_dir(data_dir) / snapshot_id / MANIFEST).read_text(encoding="utf-8")
            manifest = Manifest.from_json(text)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("keeping every part: the manifest of snapshot %s cannot be read (%s)", snapshot_id, exc)
            return None
        for repo in manifest.repos:
            listed.update(repo.parts, repo.history)
    return listed


def prune(data_dir: Path, keep: int) -> list[str]:
    """Delete all but the newest `keep` published snapshots (never CURRENT's), then what `sweep` deletes: the parts
    only they listed, among the rest."""
    removed = []
    live = current_id(data_dir)
    for name in published(data_dir)[keep:]:
        if name != live:
            _remove(snapshots_dir(data_dir) / name)
            removed.append(name)
    return removed + sweep(data_dir)
