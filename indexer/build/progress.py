"""Progress for long stages: a redrawn line on a terminal, plain periodic lines in CI logs (stderr), JSON records
under --log-format json."""

from __future__ import annotations

import sys
import time

from indexer.observe import log_format, say

PLAIN_EVERY_SECONDS = 15.0  # CI logs: one line per stage this often, plus start and end


class Progress:
    def __init__(self, label: str, total: int, enabled: bool = True, stream=None):
        self.label, self.total, self.done = label, total, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.json = log_format() == "json" and self.stream is sys.stderr
        self.tty = self.enabled and self.stream.isatty() and not self.json
        self.started = self.last = time.monotonic()
        if self.enabled and not self.tty:
            self._line(f"{label}: {total} to do")

    def _line(self, text: str) -> None:
        if self.json:
            return say(text)
        self.stream.write(text + "\n")
        self.stream.flush()

    def _status(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        pct = 100 * self.done // max(self.total, 1)
        return f"{self.label}: {self.done}/{self.total} ({pct}%) {rate:.1f}/s, {left:.0f}s left"

    def advance(self, n: int = 1) -> None:
        if not self.enabled:
            return
        self.done = min(self.total, self.done + n)
        now = time.monotonic()
        if self.tty and now - self.last > 0.1:
            self.stream.write("\r\033[K" + self._status())
            self.stream.flush()
            self.last = now
        elif not self.tty and now - self.last > PLAIN_EVERY_SECONDS:
            self._line(self._status())
            self.last = now

    def close(self, failed: bool = False) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        if failed:  # what got done, not "done": the error that follows says why
            text = f"{self.label}: stopped at {self.done}/{self.total} after {elapsed:.1f}s"
        else:
            self.done = self.total
            text = f"{self.label}: {self.total} done in {elapsed:.1f}s"
        if self.tty:
            self.stream.write("\r\033[K" + text + "\n")
            self.stream.flush()
        else:
            self._line(text)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, kind, *exc) -> None:
        self.close(failed=kind is not None and not issubclass(kind, GeneratorExit))
