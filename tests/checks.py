"""Assertions many test modules share: what a user sees when a command fails."""

from __future__ import annotations

from tests.conftest import Run


def assert_one_sentence_error(run: Run, *fragments: str) -> None:
    """The command exited 2 with one line on stderr and nothing on stdout, no traceback, and names every fragment."""
    assert run.code == 2 and run.out == "", run
    assert run.err.startswith("blobdex: error: ") and run.err.count("\n") == 1, run.err
    assert "Traceback" not in run.err
    for fragment in fragments:
        assert fragment in run.err, run.err
