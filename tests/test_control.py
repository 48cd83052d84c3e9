"""The control API acts for an operator inside one org: it never resolves a credential for a URL a caller names,
an admin token minted for one org sees and changes that org only (a global one every org), and no repo may point
into the data dir. The second reliability review had an admin token make the webhooks process send a file's
contents and the webhook signing secret to a listener of its own, delete another org's repo and add another org's
mirror as its own (B2, B7)."""

from __future__ import annotations

import http.server
import threading

import httpx
import pytest

from indexer import config as configmod
from indexer.build import run
from indexer.config import RepoSpec, load
from indexer.mirror import mirror_path
from indexer.operate.queue import Queue
from indexer.operate.app import app as webhooks_app
from indexer.tokens import ADMIN, mint
from tests import gitrepo
from tests.corpus import SECRET
from tests.servers import Server

PROBE = "PROBE-FILE-CONTENT-42"


@pytest.fixture
def orgs(forge, tmp_path):
    """The forge's two repos in org default, plus `pay` in org beta, indexed once: (cfg, tmp_path)."""
    cfg, _ = forge
    pay = gitrepo.init(tmp_path / "src" / "pay")
    gitrepo.commit(pay, {"ledger.py": b"BETA_CONFIDENTIAL = 1\n"})
    configmod.save(configmod.with_repo(cfg, RepoSpec(name="pay", url=str(tmp_path / "src" / "pay"), org="beta")))
    cfg = load(cfg.path)
    run(cfg, show_progress=False)
    return cfg, tmp_path


class Listener:
    """A server of the caller's own: it records every request's Authorization and answers 401 asking for Basic
    auth, as a git host would to make a client send its password."""

    def __init__(self):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append((self.path, self.headers.get("Authorization")))
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="x"')
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()


def test_the_control_api_never_sends_a_file_or_variable_of_the_server_anywhere(orgs, monkeypatch):
    cfg, tmp_path = orgs
    probe = tmp_path / "probe.txt"
    probe.write_text(PROBE)
    admin = mint(cfg.data_dir, "ops", "default", ADMIN, every_org=True)
    auth = {"Authorization": f"Bearer {admin}"}
    with Listener() as listener, Server(webhooks_app(cfg.path, control=True)) as url:
        with httpx.Client(base_url=url, headers=auth) as client:
            for name, credential in (("exfil1", f"file:{probe}"), ("exfil2", "env:BLOBDEX_TEST_WEBHOOK_SECRET")):
                body = {"name": name, "url": f"{listener.url}/{name}.git", "credential": credential}
                refused = client.post("/admin/v1/repos", json=body)
                assert refused.status_code == 400 and "takes no credential" in refused.json()["error"]["message"]
            named = client.post("/admin/v1/repos", json={"name": "x", "url": f"{listener.url}/x.git", "username": "u"})
            assert named.status_code == 400
            plain = client.post("/admin/v1/repos", json={"name": "plain", "url": f"{listener.url}/plain.git"})
    assert plain.status_code == 400  # asked without any password: the listener refuses it
    sent = [auth for _, auth in listener.seen]
    assert all(auth is None for auth in sent), sent
    assert not any(PROBE in str(a) or SECRET in str(a) for a in sent)
    assert [r.name for r in load(cfg.path).repos] == ["api", "tools", "pay"]


def test_an_admin_token_acts_in_its_own_org_only(orgs):
    cfg, tmp_path = orgs
    extra = gitrepo.init(tmp_path / "src" / "extra")
    gitrepo.commit(extra, {"x.py": b"def extra():\n    return 1\n"})
    beta = {"Authorization": f"Bearer {mint(cfg.data_dir, 'beta-ops', 'beta', ADMIN)}"}
    every = {"Authorization": f"Bearer {mint(cfg.data_dir, 'root', 'default', ADMIN, every_org=True)}"}
    with Queue(cfg.data_dir) as queue:
        queue.enqueue("default", "api")
        queue.enqueue("beta", "pay")
    with Server(webhooks_app(cfg.path, control=True)) as url, httpx.Client(base_url=url) as client:
        listed = client.get("/admin/v1/repos", headers=beta).json()["repos"]
        assert [(r["org"], r["name"]) for r in listed] == [("beta", "pay")]
        assert [j["org"] for j in client.get("/admin/v1/queue", headers=beta).json()["jobs"]] == ["beta"]
        (last,) = client.get("/admin/v1/runs", headers=beta).json()["runs"]
        one = client.get(f"/admin/v1/runs/{last['run_id']}", headers=beta).json()
        assert [r["name"] for r in one["repos"]] == ["pay"] and "notes" not in one
        for method, path in (
            ("DELETE", "/admin/v1/repos/default/tools"),
            ("POST", "/admin/v1/repos/default/api/reindex"),
        ):
            refused = client.request(method, path, headers=beta)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "org_forbidden"
        into_default = client.post(
            "/admin/v1/repos",
            headers=beta,
            json={"name": "x", "url": "https://example.invalid/x.git", "org": "default"},
        )
        assert into_default.status_code == 403
        local = client.post("/admin/v1/repos", headers=beta, json={"name": "extra", "url": str(tmp_path / "src/extra")})
        assert local.status_code == 403 and "local path" in local.json()["error"]["message"]
        stolen_mirror = str(mirror_path(cfg.data_dir, cfg.repo("api")))
        stolen = client.post("/admin/v1/repos", headers=every, json={"name": "stolen", "url": stolen_mirror})
        assert stolen.status_code == 400 and "inside blobdex's data dir" in stolen.json()["error"]["message"]
        taken = client.post(
            "/admin/v1/repos", headers=every, json={"name": "pay", "url": str(tmp_path / "src/extra"), "org": "beta"}
        )
        assert taken.status_code == 409
        added = client.post(
            "/admin/v1/repos", headers=every, json={"name": "extra", "url": str(tmp_path / "src/extra")}
        )
        assert added.status_code == 201
        assert len(client.get("/admin/v1/repos", headers=every).json()["repos"]) == 4
        assert client.delete("/admin/v1/repos/beta/pay", headers=every).status_code == 200
    assert [(r.org, r.name) for r in load(cfg.path).repos] == [
        ("default", "api"),
        ("default", "tools"),
        ("default", "extra"),
    ]


def test_every_error_answers_with_its_own_status_and_code(orgs):
    """The control API answers an error as every other surface does, with the status and code its class names
    (the first control API answered 409 for every error it did not name itself, design review 2, F7): a source
    that is not a git repo or a bad name is bad input, a repo that is not configured is not found."""
    cfg, tmp_path = orgs
    (tmp_path / "not-a-repo").mkdir()
    every = {"Authorization": f"Bearer {mint(cfg.data_dir, 'root', 'default', ADMIN, every_org=True)}"}
    with Server(webhooks_app(cfg.path, control=True)) as url, httpx.Client(base_url=url, headers=every) as client:
        bad = client.post("/admin/v1/repos", json={"name": "nope", "url": str(tmp_path / "not-a-repo")})
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "bad_request")
        assert "it is not a git repository" in bad.json()["error"]["message"]
        named = client.post("/admin/v1/repos", json={"name": "bad/name", "url": str(tmp_path / "not-a-repo")})
        assert (named.status_code, named.json()["error"]["code"]) == (400, "bad_request")
        nameless = client.post("/admin/v1/repos", json={"url": str(tmp_path / "not-a-repo"), "refs": "main"})
        assert (nameless.status_code, nameless.json()["error"]) == (
            400,
            {"code": "bad_request", "message": "name is required: it must be a non-empty string"},
        )
        refs = client.post("/admin/v1/repos", json={"name": "r", "url": str(tmp_path), "refs": "main"})
        assert refs.json()["error"]["message"] == 'refs must be a list of branch, tag or commit names, got "main"'
        limit = client.get("/admin/v1/runs?limit=ten")
        assert (limit.status_code, limit.json()["error"]["message"]) == (400, 'limit must be an integer, got "ten"')
        gone = client.delete("/admin/v1/repos/default/nosuch")
        assert (gone.status_code, gone.json()["error"]["code"]) == (404, "not_found")
        assert gone.json()["error"]["message"] == "no repo default/nosuch is configured; GET /admin/v1/repos lists them"
    assert [r.name for r in load(cfg.path).repos] == ["api", "tools", "pay"]
