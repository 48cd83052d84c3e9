"""Test data: the byte constants and repo contents the shared corpus and other tests are made of, builders for
one-off corpora, and readers of what a snapshot holds (its content, its call rows) for tests to compare."""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from indexer import config as configmod
from indexer.build import run
from indexer.config import Config, RepoSpec
from indexer.embed import HASH_MODEL
from indexer.build.report import Report
from indexer.snapshot import TABLE_SCHEMAS, open_manifest, read_chunks, read_graph
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


# A Python package whose calls go through a re-export, a base class and methods (resolve and scip index it).
LIB = {
    "src/lib/__init__.py": b"from .sessions import Session, session\nfrom .api import get\n",
    "src/lib/api.py": b"""from . import sessions


def request(method, url):
    with sessions.Session() as s:
        return s.request(method, url)


def get(url):
    return request("get", url)
""",
    "src/lib/sessions.py": b"""class Base:
    def merge(self):
        pass


class Session(Base):
    def request(self, m, u):
        self.merge()
        return self.send(m)

    def send(self, m):
        return len(m)

    def get(self, url):
        return self.request("GET", url)


def session():
    return Session()
""",
    "src/lib/cli.py": b"""from lib import get


def main(url):
    return get(url)
""",
}

BIG = 30 * 1024 * 1024  # over MAX_FILE_BYTES; one letter, so it is ~30 KB compressed
SECRET = "s3cret-webhook-key"  # the webhook secret conftest's forge fixture configures


# What a search hit's JSON carries at least (README's "Contract for scripts").
HIT_JSON_FIELDS = frozenset(
    "repo ref commit_id path blob_id symbol kind lang line_start line_end snippet score signals".split()
)


@dataclass(frozen=True, kw_only=True)
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
        repos=tuple(repos),
        **{"max_blob_bytes": MAX_BLOB_BYTES, **kw},  # any other Config field: max_blob_bytes, scip, ...
    )
    path.write_text(configmod.dumps(cfg, "data"), encoding="utf-8")
    return configmod.load(path)


def build_corpus(root: Path, repos: dict[str, dict], model: str = HASH_MODEL, embedder=None, **config) -> Corpus:
    """Commit each repo's files on main under root/src/<key>, configure them all and index once. A key is a repo
    name, or "org/name" for a repo of another org; `commits` maps each key to its commit id."""
    specs, commits = [], {}
    for key, files in repos.items():
        org, _, name = key.rpartition("/")
        path = root / "src" / key
        commits[key] = gitrepo.commit(gitrepo.init(path), files)
        specs.append(RepoSpec(name=name, url=str(path), **({"org": org} if org else {})))
    cfg = write_config(root, specs, model=model, **config)
    report = run(cfg, embedder=embedder, show_progress=False)
    return Corpus(root=root, cfg=cfg, report=report, commits=commits)


def private_copy(corpus: Corpus, tmp_path: Path) -> Config:
    """The corpus's config over a copy of its data dir, for a test that writes (tokens, overlays, stores): the
    session corpus is shared, and a write there would make the order of tests matter."""
    data = tmp_path / "data"
    shutil.copytree(corpus.cfg.data_dir, data, symlinks=True)
    return replace(corpus.cfg, data_dir=data)


def fresh_copy(cfg, tmp_path):
    """The same repos indexed from scratch in a data dir of their own."""
    (tmp_path / "fresh").mkdir(parents=True)
    other = write_config(tmp_path / "fresh", list(cfg.repos))
    run(other, show_progress=False)
    return other


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with its size and modification time: equal states mean nothing was written."""
    return {
        p.relative_to(root).as_posix(): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if not p.is_dir() or p.is_symlink()
    }


def content(data_dir) -> tuple:
    """What a snapshot holds, however it is stored: its chunk rows (ids aside) with their vectors, every graph
    table and the manifest's content key."""
    path, manifest = open_manifest(data_dir)
    chunks = read_chunks(path)
    vectors = np.round(np.asarray(chunks.column("vector").to_pylist()), 5).tolist() if chunks.num_rows else []
    rows = chunks.drop_columns(["row", "vector"]).to_pylist()
    rows = sorted((repr(r), v) for r, v in zip(rows, vectors))
    graph = {t: sorted(map(repr, read_graph(path, t).to_pylist())) for t in TABLE_SCHEMAS}
    return rows, graph, manifest.content_key()


def calls(data_dir, repos: tuple[str, ...] | None = None) -> list[tuple]:
    """The snapshot's call rows (of `repos` only, when given) as sorted tuples, from caller to what it resolved to."""
    path, _ = open_manifest(data_dir)
    rows = read_graph(path, "calls").to_pylist()
    columns = ("repo", "path", "line", "callee", "resolution", "resolved_repo", "resolved_path", "resolved_symbol")
    return sorted(tuple(r[c] for c in columns) for r in rows if repos is None or r["repo"] in repos)


def source_files(rng: random.Random, files: int) -> dict[str, bytes]:
    """Python files of made-up functions, each named and worded apart: blocks hold different trigrams."""

    def word():
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))

    out = {}
    for f in range(files):
        body = []
        for _ in range(4):
            name, arg = word(), word()
            body.append(f'def {name}({arg}):\n    """{word()} {word()} {word()}."""\n    return {arg}.{word()}()\n')
        out[f"pkg/{word()}_{f}.py"] = "\n\n".join(body).encode()
    return out
