"""Clip ids: the short numbers a search answer gives its hits, so a caller can read one back by id."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

MAX_CLIPS = 20_000  # clips remembered, the oldest forgotten first


class ClipStore:
    """Short auto-increment ids for clips, deduplicated by key and FIFO-evicted.

    The ids are one counter for every org; the org stored with each clip keeps another org's id from
    answering (or naming that org's repos). A key seen again keeps its id, moves to the back of the line (the
    oldest-used clip is forgotten first, never one the latest answer gave), and the value is replaced with the
    newer one (the same chunk found by another query of the same org)."""

    def __init__(self, size: int = MAX_CLIPS):
        self.size = size
        self._lock = threading.Lock()
        self._by_id: OrderedDict[int, tuple[str, Hashable, Any]] = OrderedDict()
        self._by_key: dict[tuple[str, Hashable], int] = {}
        self._next = 1

    def add(self, org: str, key: Hashable, value: Any = None) -> int:
        """The id of the clip `key` in `org`, new or known; `value` (default: the key) is what get returns."""
        value = key if value is None else value
        with self._lock:
            clip = self._by_key.get((org, key))
            if clip is None:
                clip, self._next = self._next, self._next + 1
                self._by_key[(org, key)] = clip
            self._by_id[clip] = (org, key, value)
            self._by_id.move_to_end(clip)  # found again: as fresh as a new clip, so the answer it is in can read it
            while len(self._by_id) > self.size:
                _, (old_org, old_key, _) = self._by_id.popitem(last=False)
                self._by_key.pop((old_org, old_key), None)
            return clip

    def get(self, clip: int, org: str) -> Any | None:
        """The value stored with `clip`, or None when it is unknown, forgotten, or another org's."""
        with self._lock:
            found = self._by_id.get(clip)
        if found is None or found[0] != org:
            return None
        return found[2]

    def __len__(self) -> int:
        return len(self._by_id)
