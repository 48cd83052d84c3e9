"""Shared fixtures: a snapshot of a few real repos, built once per session with the hashing embedder (the data and
builders they use live in tests/corpus.py; only fixtures live here)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from indexer.build import run
from indexer.config import RepoSpec
from query.cli import main
from tests import gitrepo
from tests.corpus import INVOICE_PY_DEV, REFUND_PY, Corpus, api_files, tools_files, tree_state, write_config


@pytest.fixture
def two_repos(tmp_path):
    """Two small real repos (api, tools), configured and not yet indexed: (cfg, api repo, tools repo)."""
    api = gitrepo.init(tmp_path / "src" / "api")
    gitrepo.commit(api, api_files())
    tools = gitrepo.init(tmp_path / "src" / "tools")
    gitrepo.commit(tools, tools_files())
    cfg = write_config(
        tmp_path,
        [
            RepoSpec(name="api", url=str(tmp_path / "src" / "api")),
            RepoSpec(name="tools", url=str(tmp_path / "src" / "tools")),
        ],
    )
    return cfg, api, tools


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def blobdex(monkeypatch):
    """Run the `blobdex` entry point in process, as a shell would: exit code, stdout, stderr."""

    def invoke(*args) -> Run:
        monkeypatch.setattr(sys, "argv", ["blobdex", *map(str, args)])
        with CliRunner().isolation() as (out, err, _):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code
            sys.stdout.flush()  # what a process flushes at exit (csv writes to sys.stdout, not through click.echo)
            sys.stderr.flush()
        return Run(code, out.getvalue().decode(), err.getvalue().decode())

    return invoke


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Iterator[Corpus]:
    """The session's snapshot, read by many tests and written by none: its files are checked unchanged at the end."""
    root = tmp_path_factory.mktemp("corpus")
    api = gitrepo.init(root / "src" / "api")
    commits = {"api_main": gitrepo.commit(api, api_files(), "main", "first")}
    dev_files = {**api_files(), "src/billing/invoice.py": INVOICE_PY_DEV, "src/billing/refund.py": REFUND_PY}
    commits["api_dev"] = gitrepo.commit(api, dev_files, "dev", "refunds", parents=[commits["api_main"].encode()])
    tools = gitrepo.init(root / "src" / "tools.git", bare=True)
    commits["tools_main"] = gitrepo.commit(tools, tools_files(), "main", "tools")
    other = gitrepo.init(root / "src" / "acme-api")
    commits["acme_main"] = gitrepo.commit(other, {"billing.py": b"def acme_only_renewal():\n    return 42\n"})
    cfg = write_config(
        root,
        [
            RepoSpec(name="api", url=str(root / "src" / "api"), refs=("main", "dev")),
            RepoSpec(name="tools", url="file://" + str(root / "src" / "tools.git")),
            RepoSpec(name="api", url=str(root / "src" / "acme-api"), org="acme"),
        ],
    )
    report = run(cfg, show_progress=False)
    built = tree_state(root)
    yield Corpus(root=root, cfg=cfg, report=report, commits=commits)
    after = tree_state(root)
    changed = sorted(k for k in built.keys() | after.keys() if built.get(k) != after.get(k))
    assert not changed, f"tests wrote into the shared corpus (use tests.corpus.private_copy): {changed[:10]}"


@pytest.fixture(scope="session")
def reader(corpus):
    from query.reader import SnapshotReader

    return SnapshotReader(corpus.cfg.data_dir)


@pytest.fixture(scope="session")
def hasher():
    from indexer.embed import HashEmbedder

    return HashEmbedder()
