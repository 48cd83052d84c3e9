"""Mirrors: real fetches over a local smart-HTTP server (with auth), file URLs and local paths."""

import subprocess
import sys

import pytest
from dulwich.repo import Repo

from indexer.build import run
from indexer.config import RepoSpec
from indexer import mirror as mirrors
from indexer.mirror import CLEAN, MirrorError, fetch, redact, resolve_credential, sweep
from tests import gitrepo
from tests.corpus import api_files
from tests.servers import TOKEN


def test_https_style_fetch_with_credential_reference_then_incremental(http_remote, tmp_path, monkeypatch):
    upstream, url = http_remote
    monkeypatch.setenv("GIT_TOKEN", TOKEN)
    spec = RepoSpec(name="svc", url=url, credential="env:GIT_TOKEN")
    path = fetch(tmp_path / "data", spec)
    mirror = Repo(str(path))
    assert mirror.bare and mirror.refs[b"refs/heads/main"] == upstream.refs[b"refs/heads/main"]
    assert mirror.refs.follow(b"HEAD")[0][-1] == b"refs/heads/main"
    # Upstream moves on and deletes a branch: the mirror follows both.
    new = gitrepo.commit(upstream, {"a.py": b"def second():\n    return 2\n"})
    del upstream.refs[b"refs/heads/feature"]
    fetch(tmp_path / "data", spec)
    mirror = Repo(str(path))
    assert mirror.refs[b"refs/heads/main"].decode() == new
    assert b"refs/heads/feature" not in mirror.refs
    assert TOKEN not in (path / "config").read_text()


def test_a_fetch_writes_only_the_refs_that_moved(tmp_path):
    """A repo with many tags fetched again with nothing new leaves every ref file as it was; a moved branch and
    a new tag are written, a deleted tag goes. (Setting an unchanged ref took dulwich a lock file and a read:
    0.8 s of every run for a repo of 2,500 refs; the fetch now sets only those that moved.)"""
    src = gitrepo.init(tmp_path / "src")
    head = gitrepo.commit(src, {"x.md": b"# x\n"})
    for i in range(30):
        src.refs[b"refs/tags/v%d" % i] = head.encode()
    path = fetch(tmp_path / "data", RepoSpec(name="x", url=str(tmp_path / "src")))
    refs = sorted((path / "refs").rglob("*"))
    stamps = {p: p.stat().st_mtime_ns for p in refs if p.is_file()}
    assert len(stamps) == 31
    fetch(tmp_path / "data", RepoSpec(name="x", url=str(tmp_path / "src")))
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    moved = gitrepo.commit(src, {"x.md": b"# y\n"})
    src.refs[b"refs/tags/new"] = moved.encode()
    del src.refs[b"refs/tags/v0"]
    fetch(tmp_path / "data", RepoSpec(name="x", url=str(tmp_path / "src")))
    mirror = Repo(str(path))
    assert mirror.refs[b"refs/heads/main"].decode() == moved == mirror.refs[b"refs/tags/new"].decode()
    assert b"refs/tags/v0" not in mirror.refs and mirror.refs[b"refs/tags/v1"].decode() == head
    assert sum(stamps[p] != p.stat().st_mtime_ns for p in stamps if p.exists()) == 1  # main alone


def test_a_local_source_whose_refs_have_not_moved_is_not_fetched(tmp_path, monkeypatch):
    """A local source is compared with its mirror by their ref files alone (dulwich's fetch opened both repos
    and looked up every ref's object: 1.8 s of a cron run over 923 local repos); anything that moved, a branch,
    a tag, the default branch, is fetched as before."""
    fetched = []
    real = mirrors._fetch_once
    monkeypatch.setattr(mirrors, "_fetch_once", lambda path, url, kw: fetched.append(url) or real(path, url, kw))
    src = gitrepo.init(tmp_path / "src")
    head = gitrepo.commit(src, {"x.md": b"# x\n"})
    src.refs[b"refs/tags/v1"] = head.encode()
    spec = RepoSpec(name="x", url=str(tmp_path / "src"))
    path = fetch(tmp_path / "data", spec)
    assert len(fetched) == 1 and (path / CLEAN).exists()
    fetch(tmp_path / "data", spec)
    assert len(fetched) == 1
    moves = [
        lambda: gitrepo.commit(src, {"x.md": b"# y\n"}),
        lambda: src.refs.__setitem__(b"refs/tags/v2", src.refs[b"refs/heads/main"]),
        lambda: src.refs.__delitem__(b"refs/tags/v1"),
        lambda: src.refs.__setitem__(b"refs/heads/dev", src.refs[b"refs/heads/main"]),
        lambda: src.refs.set_symbolic_ref(b"HEAD", b"refs/heads/dev"),
    ]
    for i, move in enumerate(moves):
        move()
        fetch(tmp_path / "data", spec)
        assert len(fetched) == 2 + i
        fetch(tmp_path / "data", spec)
        assert len(fetched) == 2 + i
    held = Repo(str(path))
    assert {n: s for n, s in held.refs.as_dict().items()} == src.refs.as_dict()
    assert held.refs.get_symrefs()[b"HEAD"] == b"refs/heads/dev"


def test_a_sweep_passes_over_a_clean_mirror_and_a_failed_fetch_leaves_it_to_the_next(tmp_path, monkeypatch):
    """A fetch takes CLEAN away before it writes and puts it back when done; the sweep walks and prunes only a
    mirror without it (0.35 s of every cron run at 923 mirrors), then marks it clean."""
    src = gitrepo.init(tmp_path / "src")
    gitrepo.commit(src, {"x.md": b"# x\n"})
    spec = RepoSpec(name="x", url=str(tmp_path / "src"))
    path = fetch(tmp_path / "data", spec)
    lock = path / "refs" / "heads" / "main.lock"
    lock.write_text("left by a writer of another kind")
    assert sweep(tmp_path / "data", [path]) == []  # clean: not walked
    (path / CLEAN).unlink()
    assert sweep(tmp_path / "data", [path]) == ["mirrors/default/x.git/refs/heads/main.lock"]
    assert (path / CLEAN).exists()
    gitrepo.commit(src, {"x.md": b"# y\n"})
    monkeypatch.setattr(mirrors, "FETCH_BACKOFF_SECONDS", (0.0, 0.0))

    def dies(path, url, kw):
        (path / "objects" / "tmp_pack_half").write_bytes(b"PACK")
        raise OSError("the connection was reset")

    monkeypatch.setattr(mirrors, "_fetch_once", dies)
    with pytest.raises(MirrorError, match="after 3 attempts"):
        fetch(tmp_path / "data", spec)
    assert not (path / CLEAN).exists()
    assert sweep(tmp_path / "data", [path]) == ["mirrors/default/x.git/objects/tmp_pack_half"]


def test_wrong_credentials_are_refused_with_advice(http_remote, tmp_path, monkeypatch):
    _, url = http_remote
    monkeypatch.setenv("GIT_TOKEN", "wrong")
    with pytest.raises(MirrorError, match="refused the credentials; check the credential reference 'env:GIT_TOKEN'"):
        fetch(tmp_path / "data", RepoSpec(name="svc", url=url, credential="env:GIT_TOKEN"))


def test_unset_credential_variable_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    with pytest.raises(MirrorError, match="names environment variable 'NO_SUCH_TOKEN', which is unset"):
        resolve_credential("env:NO_SUCH_TOKEN")
    secret = tmp_path / "token"
    secret.write_text("abc\n")
    assert resolve_credential(f"file:{secret}") == "abc"
    with pytest.raises(MirrorError, match="not understood"):
        resolve_credential("plain-token")


def test_unreachable_url_fails_after_retries_without_leaking_credentials(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("indexer.mirror.FETCH_BACKOFF_SECONDS", (0.0, 0.0))
    spec = RepoSpec(name="gone", url="http://user:hunter2@127.0.0.1:9/nothing.git")
    with caplog.at_level("DEBUG"), pytest.raises(MirrorError) as err:
        fetch(tmp_path / "data", spec)
    assert "after 3 attempts" in str(err.value) and "hunter2" not in str(err.value)
    # In a few words: urllib3's ~300 characters of pool and retry detail only under -v (the debug log).
    assert "after 3 attempts: the connection was refused; check the url" in str(err.value)
    assert "HTTPConnectionPool" not in str(err.value) and len(str(err.value)) < 200
    # Our three attempts are logged; urllib3's own retries inside each are not (they were 9 more lines).
    assert [r.name for r in caplog.records if r.levelname == "WARNING"] == ["indexer.mirror"] * 3
    assert redact(spec.url) == "http://127.0.0.1:9/nothing.git"


def test_file_url_and_local_path_and_missing_path(tmp_path):
    src = gitrepo.init(tmp_path / "src")
    head = gitrepo.commit(src, {"x.md": b"# x\n"})
    for i, url in enumerate([f"file://{tmp_path / 'src'}", str(tmp_path / "src")]):
        path = fetch(tmp_path / f"data{i}", RepoSpec(name="x", url=url))
        assert Repo(str(path)).refs[b"refs/heads/main"].decode() == head
    with pytest.raises(MirrorError, match="local path .* does not exist"):
        fetch(tmp_path / "data", RepoSpec(name="x", url=str(tmp_path / "nowhere")))


def test_corrupt_mirror_is_reported(tmp_path):
    src = gitrepo.init(tmp_path / "src")
    gitrepo.commit(src, {"x.md": b"# x\n"})
    path = fetch(tmp_path / "data", RepoSpec(name="x", url=str(tmp_path / "src")))
    (path / "HEAD").unlink()
    (path / "objects").rename(path / "objects-gone")
    with pytest.raises(MirrorError, match="missing or corrupt"):
        fetch(tmp_path / "data", RepoSpec(name="x", url=str(tmp_path / "src")))


def test_a_source_missing_objects_is_named_and_not_retried(tmp_path, monkeypatch):
    import os

    src = gitrepo.init(tmp_path / "src", bare=True)
    gitrepo.commit(src, {"a.py": b"print('a')\n", "b.py": b"print('b')\n"})
    blob = next(e.sha for e in src[src[src.refs[b"refs/heads/main"]].tree].items() if e.path == b"b.py").decode()
    os.remove(tmp_path / "src" / "objects" / blob[:2] / blob[2:])
    sleeps = []
    monkeypatch.setattr("indexer.mirror.time.sleep", sleeps.append)
    with pytest.raises(MirrorError, match=f"the source is missing object {blob}"):
        fetch(tmp_path / "data", RepoSpec(name="x", url=str(tmp_path / "src")))
    assert sleeps == []


def test_a_mirror_past_max_packs_is_repacked_into_one_and_keeps_every_commit(tmp_path, monkeypatch):
    monkeypatch.setattr("indexer.mirror.MAX_PACKS", 3)
    src = gitrepo.init(tmp_path / "src")
    spec = RepoSpec(name="x", url=str(tmp_path / "src"))
    commits, packs = [], []
    for i in range(5):  # each fetch that brings objects writes one pack
        commits.append(gitrepo.commit(src, {"a.py": f"def f{i}():\n    return {i}\n".encode()}))
        path = fetch(tmp_path / "data", spec)
        packs.append(Repo(str(path)).object_store.count_pack_files())
    assert packs == [1, 2, 3, 1, 2]
    monkeypatch.setattr("indexer.mirror.MAX_REPACK_BYTES", 0)  # too large to repack in memory: left alone
    for i in range(3):
        gitrepo.commit(src, {"a.py": f"def g{i}():\n    return {i}\n".encode()})
        packs.append(Repo(str(fetch(tmp_path / "data", spec))).object_store.count_pack_files())
    assert packs[-3:] == [3, 4, 5]
    mirror = Repo(str(path))
    for commit_id in commits:
        tree = mirror[mirror[commit_id.encode()].tree]
        assert mirror[tree[b"a.py"][1]].data.startswith(b"def f")


# `blobdex index` in a process that SIGKILLs itself at dulwich's rename of refs/heads/main.lock over the mirror's
# refs/heads/main: the moment a systemd stop timeout, the OOM killer or a reboot can hit during a fetch.
KILLED_AT_REF_UPDATE = """
import os, signal, sys
replace = os.replace
def killing(src, dst, *args, **kwargs):
    if os.fsdecode(src).endswith(os.path.join("api.git", "refs", "heads", "main.lock")):
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(src, dst, *args, **kwargs)
os.replace = killing
sys.argv = ["blobdex", "--config", sys.argv[1], "index", "--quiet"]
from query.cli import main
main()
"""


def test_a_fetch_killed_at_its_ref_update_costs_one_run_not_the_repo(two_repos):
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    new = gitrepo.commit(api, {**api_files(), "more.py": b"def more():\n    return 1\n"})
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_REF_UPDATE, str(cfg.path)], capture_output=True)
    assert killed.returncode == -9, killed.stderr
    lock = cfg.data_dir / "mirrors" / "default" / "api.git" / "refs" / "heads" / "main.lock"
    assert lock.exists()
    pushed = run(cfg, show_progress=False, only={("default", "tools")})  # a push run sweeps what it fetches
    assert lock.exists() and not any("leftover" in n for n in pushed.notes)
    report = run(cfg, show_progress=False)
    assert not report.failed and report.published
    assert [r.status for r in report.repos] == ["ok", "ok"]
    assert report.repos[0].refs == [{"ref": "refs/heads/main", "commit_id": new}]
    assert any("leftover" in n and "api.git/refs/heads/main.lock" in n for n in report.notes)
    assert not lock.exists()


def test_a_ref_that_still_names_the_commit_the_last_snapshot_holds_is_not_read_again(two_repos, monkeypatch):
    """Reading each repo's commit opened a pack a repo: most of a cron run's mirror stage at 923 repos."""
    from indexer import scan

    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    peeled = []
    real = scan._peel_to_commit
    monkeypatch.setattr(
        scan, "_peel_to_commit", lambda repo, oid, what: peeled.append(oid.decode()) or real(repo, oid, what)
    )
    assert run(cfg, show_progress=False).unchanged and peeled == []
    new = gitrepo.commit(api, {**api_files(), "more.py": b"def more():\n    return 1\n"})
    report = run(cfg, show_progress=False)
    assert peeled == [new] and report.repos[0].refs == [{"ref": "refs/heads/main", "commit_id": new}]


def test_a_run_over_local_repos_that_have_not_moved_opens_no_repo(two_repos, monkeypatch):
    """Fetch, sweep, refs and history of an unchanged local repo read ref files and part infos alone: opening
    both sides of each fetch, sweeping, and opening each mirror for its refs and its history were 3 s of a
    cron run at 923 repos. A repo that moved is opened, and read."""
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    opened = []
    real = Repo.__init__
    monkeypatch.setattr(Repo, "__init__", lambda self, root, *a, **k: opened.append(root) or real(self, root, *a, **k))
    assert run(cfg, show_progress=False).unchanged and opened == []
    new = gitrepo.commit(api, {**api_files(), "more.py": b"def more():\n    return 1\n"})
    report = run(cfg, show_progress=False)
    assert report.published and report.repos[0].refs == [{"ref": "refs/heads/main", "commit_id": new}]
    assert opened and all("tools" not in str(root) for root in opened)


def test_a_run_fetches_several_remotes_at_once(tmp_path):
    """A cron run over an organisation's remotes waited on each in turn; FETCH_THREADS fetch side by side (the
    server sees requests overlap) and every mirror ends at its remote's commit."""
    import threading
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIServer, make_server

    from dulwich.server import DictBackend
    from dulwich.web import make_wsgi_chain

    from tests.corpus import write_config
    from tests.servers import QuietHandler

    upstreams, commits = {}, []
    for i in range(4):
        upstreams[f"/r{i}"] = gitrepo.init(tmp_path / f"up{i}", bare=True)
        commits.append(gitrepo.commit(upstreams[f"/r{i}"], {"a.py": b"def f%d():\n    return %d\n" % (i, i)}))
    app, lock, seen = make_wsgi_chain(DictBackend(upstreams)), threading.Lock(), {"now": 0, "most": 0}

    def slow(environ, start_response):  # each request lasts a remote's round trip, so fetches at once overlap
        with lock:
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
        try:
            threading.Event().wait(0.2)
            return list(app(environ, start_response))
        finally:
            with lock:
                seen["now"] -= 1

    class Threading(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    server = make_server("127.0.0.1", 0, slow, server_class=Threading, handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        cfg = write_config(tmp_path, [RepoSpec(name=f"r{i}", url=f"{base}/r{i}") for i in range(4)])
        report = run(cfg, show_progress=False)
    finally:
        server.shutdown()
    assert not report.failed and [r.refs[0]["commit_id"] for r in report.repos] == commits
    assert seen["most"] > 1
