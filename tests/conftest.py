"""Shared fixtures: a snapshot of a few real repos, built once per session with the hashing embedder; two small repos
to index, and the same with a webhook secret; a smart-HTTP git server that wants a password; a mirror of blobs over
get_file's cap. The data and builders they use live in tests/corpus.py, the servers' parts in tests/servers.py; only
fixtures live here."""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from wsgiref.simple_server import make_server

import pytest
from click.testing import CliRunner
from dulwich.server import DictBackend
from dulwich.web import make_wsgi_chain

from indexer.build import run
from indexer.config import RepoSpec, load
from query.cli import main
from tests import gitrepo
from tests.corpus import (
    BIG,
    INVOICE_PY_DEV,
    REFUND_PY,
    SECRET,
    Corpus,
    api_files,
    tools_files,
    tree_state,
    write_config,
)
from tests.servers import TOKEN, QuietHandler


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


@pytest.fixture
def forge(two_repos, monkeypatch):
    """The two repos, with a webhook secret referenced from the environment: (cfg, api repo). A push names a repo by
    URL; here the configured URLs are the repos' local paths, and a push payload names them as file:// URLs."""
    cfg, api, _ = two_repos
    monkeypatch.setenv("BLOBDEX_TEST_WEBHOOK_SECRET", SECRET)
    cfg.path.write_text('webhook_secret = "env:BLOBDEX_TEST_WEBHOOK_SECRET"\n' + cfg.path.read_text())
    return load(cfg.path), api


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


@pytest.fixture
def http_remote(tmp_path):
    """A smart-HTTP git server on 127.0.0.1 that wants basic auth with password TOKEN."""
    upstream = gitrepo.init(tmp_path / "upstream", bare=True)
    gitrepo.commit(upstream, {"a.py": b"def first():\n    return 1\n"})
    gitrepo.commit(upstream, {"a.py": b"def first():\n    return 1\n"}, branch="feature")
    app = make_wsgi_chain(DictBackend({"/": upstream}))
    expected = "Basic " + base64.b64encode(f"git:{TOKEN}".encode()).decode()

    def guarded(environ, start_response):
        if environ.get("HTTP_AUTHORIZATION") != expected:
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')])
            return [b"auth required"]
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, guarded, handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield upstream, f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


@pytest.fixture(scope="module")
def big_mirror(tmp_path_factory):
    """A mirror whose 30 MB blobs are loose (big.txt at main), packed whole (new.txt) and a delta (old.txt)."""
    root = tmp_path_factory.mktemp("big")
    mirror = root / "mirrors" / "default" / "big.git"
    repo = gitrepo.init(mirror, bare=True)
    gitrepo.commit(repo, {"old.txt": b"a" * BIG, "new.txt": b"a" * BIG + b"b\n"}, "packed")
    subprocess.run(["git", "--git-dir", str(mirror), "repack", "-a", "-d", "-f", "-q"], check=True)
    gitrepo.commit(repo, {"big.txt": b"a" * (BIG + 7), "small.txt": b"hello\n"}, "main")
    packed = subprocess.run(
        ["git", "--git-dir", str(mirror), "verify-pack", "-v", str(next((mirror / "objects" / "pack").glob("*.idx")))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return root, repo, packed
