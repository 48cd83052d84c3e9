"""Shared fixtures: a snapshot of a few real repos, built once per session with the hashing embedder."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from indexer import config as configmod
from indexer.config import Config, RepoSpec
from indexer.embed import HASH_MODEL
from indexer.build import run
from indexer.report import Report
from query.cli import main
from tests import gitrepo

MAX_BLOB_BYTES = 16 * 1024  # small, so the oversized fixture file stays small too

RENEW_PY = b'''"""Subscription billing."""
import datetime

from billing.invoice import Invoice


class Billing:
    """Charges customers for their plans."""

    def renew_subscription(self, subscription):
        """Extend a subscription by one period and charge the stored card."""
        subscription.expires = subscription.expires + datetime.timedelta(days=30)
        return Invoice(subscription.customer, subscription.plan.price)

    def cancel(self, subscription):
        subscription.active = False
'''

INVOICE_PY = b"""class Invoice:
    def __init__(self, customer, amount):
        self.customer = customer
        self.amount = amount

    def total_with_tax(self, rate):
        return self.amount * (1 + rate)
"""

INVOICE_PY_DEV = (
    INVOICE_PY
    + b"""
    def pdf(self):
        return render_pdf(self)
"""
)

REFUND_PY = b'''def issue_refund(invoice, reason):
    """Give the customer their money back for an invoice."""
    return {"invoice": invoice, "reason": reason, "refunded": True}
'''

SETTINGS_PY = b"""import os


def database_url():
    return os.environ.get("DATABASE_URL", "sqlite:///dev.db")


def cloud_credentials():
    aws_access_key_id = "AKIAABCDEFGHIJKLMNOP"
    return aws_access_key_id
"""

APP_JS = b"""import { fetchJson } from "./http";

export async function loadCart(userId) {
  const cart = await fetchJson(`/api/carts/${userId}`);
  return cart.items;
}

export const formatPrice = (cents) => `$${(cents / 100).toFixed(2)}`;
"""

README_MD = b"""# Acme API

Billing and carts for the Acme shop.

## Installing

Run the installer and configure the database.

## Renewals

Subscriptions renew every thirty days.
"""

SERVER_GO = b"""package server

import "net/http"

type Server struct {
	mux *http.ServeMux
}

func (s *Server) HandleHealth(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
}

func NewServer() *Server {
	return &Server{mux: http.NewServeMux()}
}
"""

LIB_RS = b"""pub struct Queue {
    items: Vec<u32>,
}

impl Queue {
    pub fn push(&mut self, item: u32) {
        self.items.push(item);
    }
}

pub fn drain_queue(q: &mut Queue) -> Vec<u32> {
    std::mem::take(&mut q.items)
}
"""


def api_files() -> dict:
    return {
        "src/billing/renew.py": RENEW_PY,
        "src/billing/invoice.py": INVOICE_PY,
        "src/config/settings.py": SETTINGS_PY,
        "web/app.js": APP_JS,
        "README.md": README_MD,
        "assets/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00binary",
        "assets/blob.dat2": b"abc\x00def" * 10,
        "data/huge.txt": b"line of text\n" * (MAX_BLOB_BYTES // 10),
        ".env": b"DATABASE_PASSWORD=hunter2hunter2\n",
        "deploy/server.pem": b"-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\n",
        "package-lock.json": b'{"lockfileVersion": 3}\n',
        "node_modules/left-pad/index.js": b"module.exports = function leftPad() {};\n",
        "static/app.min.js": b"var a=1;" * 200,
        "link.py": (gitrepo.SYMLINK, b"src/billing/renew.py"),
        "a/../evil.py": b"print('escaped')\n",
        "vendor-sub": (gitrepo.GITLINK, b"1" * 40),
    }


def tools_files() -> dict:
    return {
        "server/server.go": SERVER_GO,
        "queue/src/lib.rs": LIB_RS,
        "docs/guide.md": b"# Guide\n\nHow to drain the queue safely.\n",
    }


@dataclass
class Corpus:
    root: Path
    cfg: Config
    report: Report
    commits: dict[str, str]


def write_config(root: Path, repos: list[RepoSpec], model: str = HASH_MODEL, **kw) -> Config:
    path = root / "blobdex.toml"
    cfg = Config(
        path=path,
        data_dir=root / "data",
        model=model,
        max_blob_bytes=kw.get("max_blob_bytes", MAX_BLOB_BYTES),
        repos=tuple(repos),
    )
    path.write_text(configmod.dumps(cfg, "data"), encoding="utf-8")
    return configmod.load(path)


@pytest.fixture
def two_repos(tmp_path):
    """Two small real repos (api, tools), configured and not yet indexed: (cfg, api repo, tools repo)."""
    api = gitrepo.init(tmp_path / "src" / "api")
    gitrepo.commit(api, api_files())
    tools = gitrepo.init(tmp_path / "src" / "tools")
    gitrepo.commit(tools, tools_files())
    cfg = write_config(
        tmp_path, [RepoSpec("api", str(tmp_path / "src" / "api")), RepoSpec("tools", str(tmp_path / "src" / "tools"))]
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
        return Run(code, out.getvalue().decode(), err.getvalue().decode())

    return invoke


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Corpus:
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
            RepoSpec("api", str(root / "src" / "api"), refs=("main", "dev")),
            RepoSpec("tools", "file://" + str(root / "src" / "tools.git")),
            RepoSpec("api", str(root / "src" / "acme-api"), org="acme"),
        ],
    )
    report = run(cfg, show_progress=False)
    return Corpus(root, cfg, report, commits)


@pytest.fixture(scope="session")
def reader(corpus):
    from query.reader import SnapshotReader

    return SnapshotReader(corpus.cfg.data_dir)


@pytest.fixture(scope="session")
def hasher():
    from indexer.embed import HashEmbedder

    return HashEmbedder()
