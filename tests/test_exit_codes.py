"""Exit codes a cron wrapper can act on: 2 bad input, 75 busy (try later), 70 a bug, 1 a failed run."""

from __future__ import annotations

import fcntl

from indexer.config import RepoSpec
from tests import gitrepo
from tests.corpus import write_config


def _configured(tmp_path):
    repo = gitrepo.init(tmp_path / "src")
    gitrepo.commit(repo, {"app.py": b"def app():\n    return 1\n"})
    return write_config(tmp_path, [RepoSpec(name="src", url=str(tmp_path / "src"))])


def test_an_index_run_that_finds_the_lock_held_exits_75(tmp_path, blobdex):
    cfg = _configured(tmp_path)
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    with open(cfg.data_dir / "index.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        run = blobdex("--config", cfg.path, "index")
    assert run.code == 75 and run.err.startswith("blobdex: error: another 'blobdex index' is running")


def test_a_bug_is_one_sentence_with_exit_70_and_its_traceback_only_with_v(tmp_path, blobdex, monkeypatch):
    cfg = _configured(tmp_path)

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("indexer.build._run", broken)
    run = blobdex("--config", cfg.path, "index")
    assert run.code == 70 and "Traceback" not in run.err
    assert run.err == (
        "blobdex: internal error: ZeroDivisionError: division by zero; this is a bug in blobdex: "
        "run the command again with -v to see the traceback, and report it\n"
    )
    verbose = blobdex("--config", cfg.path, "-v", "index")
    assert verbose.code == 70 and "Traceback" in verbose.err
