"""Index runs: incremental by blob, per-repo failure isolation, atomic publish, verification."""

import json
import os
import shutil
from dataclasses import replace

import pytest

from indexer import prepare as prepare_module
from indexer.build import parts
from indexer import snapshot
from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from indexer.build import LockBusy, run
from indexer.snapshot import SnapshotError, current_id, open_manifest
from indexer.snapshot.verify import verify
from query.reader import SnapshotReader
from tests import gitrepo
from tests.corpus import RENEW_PY, api_files, write_config


class CountingEmbedder(HashEmbedder):
    def __init__(self):
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


class BrokenEmbedder(HashEmbedder):
    def embed(self, texts):
        raise RuntimeError("model crashed")


def test_rerun_without_upstream_change_embeds_nothing_and_publishes_nothing(two_repos):
    cfg, _, _ = two_repos
    first = run(cfg, show_progress=False, embedder=CountingEmbedder())
    assert first.published and first.chunks_embedded == first.chunks > 0
    counter = CountingEmbedder()
    second = run(cfg, show_progress=False, embedder=counter)
    assert counter.texts == 0
    assert second.unchanged and not second.published
    assert second.snapshot_id == first.snapshot_id == current_id(cfg.data_dir)
    totals = second.to_dict()["totals"]
    assert totals["blobs_new"] == 0 and totals["chunks_embedded"] == 0 and totals["chunks"] == first.chunks


def test_one_commit_chunks_and_embeds_only_new_blobs(two_repos):
    cfg, api, _ = two_repos
    first = run(cfg, show_progress=False)
    changed = RENEW_PY.replace(b"days=30", b"days=31")
    gitrepo.commit(api, {**api_files(), "src/billing/renew.py": changed}, message="longer months")
    counter = CountingEmbedder()
    second = run(cfg, show_progress=False, embedder=counter)
    assert second.published and second.snapshot_id != first.snapshot_id
    assert second.blobs_new == 1  # only the changed file's blob is read and chunked
    # only the one method whose text changed, and the new commit's message (the history's vector of it)
    assert second.chunks_embedded == 1 and counter.texts == 2
    assert second.chunks == first.chunks
    assert verify(cfg.data_dir)[1] == []


def test_the_embed_stage_runs_before_any_part_is_written(two_repos, monkeypatch):
    """A run decides its rows, embeds what they lack, then writes (design review 2, F5: it embedded inside part
    writing, and found write time by subtracting embed time): no model call comes after the first part is
    written, on a first run (two repos, every row and card new) and on a one-commit run."""
    cfg, api, _ = two_repos
    events = []

    class Recording(HashEmbedder):
        def embed(self, texts):
            events.append("embed")
            return super().embed(texts)

    written = parts.write_part
    monkeypatch.setattr(parts, "write_part", lambda *a, **kw: events.append("write") or written(*a, **kw))
    first = run(cfg, show_progress=False, embedder=Recording())
    assert first.published and events.count("write") == 2 and "embed" not in events[events.index("write") :]
    events.clear()
    changed = RENEW_PY.replace(b"days=30", b"days=31")
    gitrepo.commit(api, {**api_files(), "src/billing/renew.py": changed}, message="longer months")
    second = run(cfg, show_progress=False, embedder=Recording())
    # the new commit's message (the history stage), the method, then api's one delta
    assert second.chunks_embedded == 1 and events == ["embed", "embed", "write"]
    assert second.seconds["embed"] > 0 and second.seconds["write"] > 0


def test_full_rebuild_publishes_an_identical_manifest_from_caches(two_repos):
    cfg, _, _ = two_repos
    first = run(cfg, show_progress=False)
    counter = CountingEmbedder()
    again = run(cfg, full=True, show_progress=False, embedder=counter)
    assert again.published and counter.texts == 0
    _, m1 = open_manifest(cfg.data_dir, first.snapshot_id)
    _, m2 = open_manifest(cfg.data_dir, again.snapshot_id)
    assert m1.content_key() == m2.content_key()


def test_failed_fetch_marks_repo_stale_keeps_its_content_and_others_advance(two_repos, tmp_path):
    cfg, api, tools = two_repos
    first = run(cfg, show_progress=False)
    gitrepo.commit(api, {**api_files(), "NEW.md": b"# New\n\nfresh text\n"})
    shutil.move(tmp_path / "src" / "tools", tmp_path / "src" / "tools-moved")
    report = run(cfg, show_progress=False)
    assert report.failed and report.published
    by_name = {r.name: r for r in report.repos}
    assert by_name["api"].status == "ok"
    assert by_name["tools"].status == "stale" and "does not exist" in by_name["tools"].error
    _, manifest = open_manifest(cfg.data_dir)
    tools_state = manifest.repo("default", "tools")
    assert (
        tools_state.status == "stale"
        and tools_state.chunks == open_manifest(cfg.data_dir, first.snapshot_id)[1].repo("default", "tools").chunks
    )
    reader = SnapshotReader(cfg.data_dir)
    paths = {reader.row(i)["path"] for i in range(reader.rows.num_rows)}
    assert "server/server.go" in paths and "NEW.md" in paths
    assert verify(cfg.data_dir)[1] == []


def test_unknown_ref_marks_only_that_repo_stale(two_repos):
    cfg, _, _ = two_repos
    cfg = replace(cfg, repos=(replace(cfg.repos[0], refs=("no-such-branch",)), cfg.repos[1]))
    report = run(cfg, show_progress=False)
    api = next(r for r in report.repos if r.name == "api")
    assert api.status == "stale"
    assert "ref 'no-such-branch' not found in repo 'api' (branches: main" in api.error
    assert next(r for r in report.repos if r.name == "tools").status == "ok"


def test_pinned_commit_and_tag_refs(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "r")
    old = gitrepo.commit(repo, {"a.py": b"def old_version():\n    return 1\n"})
    gitrepo.commit(repo, {"a.py": b"def new_version():\n    return 2\n"})
    repo.refs[b"refs/tags/v1"] = old.encode()
    cfg = write_config(tmp_path, [RepoSpec(name="r", url=str(tmp_path / "src" / "r"), refs=(old, "v1", "main"))])
    run(cfg, show_progress=False)
    _, manifest = open_manifest(cfg.data_dir)
    refs = [(x.ref, x.commit_id) for x in manifest.repo("default", "r").refs]
    assert refs[0] == (old, old) and refs[1] == ("refs/tags/v1", old) and refs[2][0] == "refs/heads/main"
    reader = SnapshotReader(cfg.data_dir)
    rows = {reader.row(i)["symbol"]: reader.row(i)["refs"] for i in range(reader.rows.num_rows)}
    assert rows["old_version"] == [old, "refs/tags/v1"] and rows["new_version"] == ["refs/heads/main"]


def test_publish_keeps_previous_snapshot_when_build_fails(two_repos, tmp_path):
    cfg, api, _ = two_repos
    first = run(cfg, show_progress=False)
    gitrepo.commit(api, {**api_files(), "extra.py": b"def brand_new():\n    return 'x'\n"})
    with pytest.raises(RuntimeError, match="model crashed"):
        run(cfg, show_progress=False, embedder=BrokenEmbedder())
    assert current_id(cfg.data_dir) == first.snapshot_id
    leftovers = [p.name for p in snapshot.snapshots_dir(cfg.data_dir).iterdir()]
    assert leftovers == [first.snapshot_id]
    assert SnapshotReader(cfg.data_dir).rows.num_rows == first.chunks


def test_second_concurrent_run_is_refused(two_repos):
    import fcntl

    cfg, _, _ = two_repos
    cfg.data_dir.mkdir(parents=True)
    with open(cfg.data_dir / "index.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        with pytest.raises(LockBusy, match="another 'blobdex index' is running"):
            run(cfg, show_progress=False)


def test_old_snapshots_are_pruned_but_current_kept(two_repos):
    cfg, _, _ = two_repos
    cfg = replace(cfg, keep_snapshots=2)
    ids = [run(cfg, full=True, show_progress=False).snapshot_id for _ in range(3)]
    kept = sorted(p.name for p in snapshot.snapshots_dir(cfg.data_dir).iterdir())
    assert kept == sorted(ids[1:]) and current_id(cfg.data_dir) == ids[2]


def test_verify_reports_a_mismatch(two_repos):
    cfg, _, _ = two_repos
    run(cfg, show_progress=False)
    path, manifest = open_manifest(cfg.data_dir)
    data = json.loads((path / snapshot.MANIFEST).read_text())
    data["repos"][0]["chunks"] += 1
    (path / snapshot.MANIFEST).write_text(json.dumps(data))
    _, problems = verify(cfg.data_dir)
    assert any("manifest says" in p and "live rows" in p for p in problems)
    assert any("lexical index has" in p for p in problems)


def test_foreign_format_snapshot_is_refused_with_advice(two_repos):
    cfg, _, _ = two_repos
    run(cfg, show_progress=False)
    path, _ = open_manifest(cfg.data_dir)
    data = json.loads((path / snapshot.MANIFEST).read_text())
    data["format_version"] = 999
    (path / snapshot.MANIFEST).write_text(json.dumps(data))
    with pytest.raises(
        SnapshotError, match=r"format 999, this version reads format 3; rebuild with 'blobdex index --full'"
    ):
        SnapshotReader(cfg.data_dir)


def test_crash_leftover_build_dir_is_ignored_and_cleaned(two_repos):
    cfg, _, _ = two_repos
    first = run(cfg, show_progress=False)
    stray = snapshot.snapshots_dir(cfg.data_dir) / ".build-20990101T000000Z-dead00"
    stray.mkdir()
    (stray / "partial").write_text("x")
    assert SnapshotReader(cfg.data_dir).snapshot_id == first.snapshot_id
    run(cfg, full=True, show_progress=False)
    assert not stray.exists()


def test_removed_repo_leaves_the_next_snapshot(two_repos):
    cfg, _, _ = two_repos
    run(cfg, show_progress=False)
    run(replace(cfg, repos=cfg.repos[:1]), show_progress=False)
    _, manifest = open_manifest(cfg.data_dir)
    assert [r.name for r in manifest.repos] == ["api"]
    assert verify(cfg.data_dir)[1] == []


def test_report_json_contract(two_repos):
    cfg, _, _ = two_repos
    d = run(cfg, show_progress=False).to_dict()
    t = d["totals"]
    for key in (
        "blobs",
        "blobs_new",
        "chunks",
        "chunks_embedded",
        "chunks_reused",
        "files_skipped",
        "secrets_held_back",
    ):
        assert key in t
    stages = {"mirror", "scan", "history", "chunk", "extract", "resolve", "embed", "write", "publish"}
    assert set(d["seconds"]) == stages
    assert set(t["graph"]) == {"symbols", "imports", "calls", "routes", "env_keys", "tasks", "url_literals", "edges"}
    assert {"name", "refs", "status", "error"} <= set(d["repos"][0])
    assert d["repos"][0]["refs"][0]["commit_id"] and os.path.isdir(cfg.data_dir / "mirrors" / "default" / "api.git")


def test_model_that_cannot_load_fails_the_run_and_keeps_the_snapshot(two_repos, tmp_path):
    from indexer.embed import EmbedError

    cfg, api, _ = two_repos
    first = run(cfg, show_progress=False)
    gitrepo.commit(api, {**api_files(), "extra.py": b"def brand_new():\n    return 'x'\n"})
    with pytest.raises(EmbedError, match=r"cannot load embedding model '/no/such/model'.*set `model` in blobdex.toml"):
        run(replace(cfg, model="/no/such/model"), show_progress=False)
    assert current_id(cfg.data_dir) == first.snapshot_id


def test_unreadable_manifest_is_refused_with_advice(two_repos):
    cfg, _, _ = two_repos
    run(cfg, show_progress=False)
    path, _ = open_manifest(cfg.data_dir)
    (path / snapshot.MANIFEST).write_text("{not json")
    with pytest.raises(SnapshotError, match="is not in a format this version reads"):
        SnapshotReader(cfg.data_dir)
    # The indexer treats it as absent: the next run builds from caches and publishes again.
    report = run(cfg, show_progress=False)
    assert report.published and report.chunks_embedded == 0


def test_a_blob_that_failed_once_is_tried_again_by_the_next_build(two_repos, monkeypatch):
    cfg, api, _ = two_repos
    real = prepare_module.prepare

    def flaky(data, lang, *args, **options):
        if b"total_with_tax" in data:
            raise OSError("simulated read failure")
        return real(data, lang, *args, **options)

    monkeypatch.setattr(prepare_module, "prepare", flaky)
    first = run(cfg, show_progress=False)
    assert first.files_skipped.get("unreadable") == 1
    monkeypatch.setattr(prepare_module, "prepare", real)
    gitrepo.commit(api, {**api_files(), "NEWS.md": b"# News\n\nInvoices gained tax.\n"})
    second = run(cfg, show_progress=False)
    assert second.published and "unreadable" not in second.files_skipped


@pytest.mark.parametrize(
    "first_line, lang",
    [
        (b"#!/usr/bin/env python3", "python"),
        (b"#!/usr/bin/python3.11 -u", "python"),
        (b"#!/usr/bin/env -S node --no-warnings", "javascript"),
        (b"#!/bin/sh", "bash"),
        (b"#!/usr/bin/env FOO=1 bash", "bash"),
        (b"#!/usr/bin/env ruby", "ruby"),
        (b"#!/usr/bin/env perl", None),  # no grammar: text, as before
        (b"# not a shebang", None),
    ],
)
def test_a_scripts_shebang_names_its_language(first_line, lang):
    from indexer.languages import script_language

    assert script_language(first_line + b"\nprint(1)\n") == lang


def test_a_script_without_an_extension_is_indexed_as_its_shebang_says(tmp_path):
    from indexer.snapshot import read_graph

    deploy = b'#!/usr/bin/env python3\n"""Deploy the service."""\n\n\ndef roll_out(version):\n    return version\n'
    files = {"bin/deploy": deploy, "bin/notes": b"just some text\n", "app.py": b"def app():\n    return 1\n"}
    gitrepo.commit(gitrepo.init(tmp_path / "src"), files)
    cfg = write_config(tmp_path, [RepoSpec(name="src", url=str(tmp_path / "src"))])
    run(cfg, show_progress=False)
    path = open_manifest(cfg.data_dir)[0]
    langs = {r["path"]: r["lang"] for r in read_graph(path, "files").to_pylist()}
    assert langs == {"bin/deploy": "python", "bin/notes": "text", "app.py": "python"}
    symbols = {r["qualified_name"]: r["path"] for r in read_graph(path, "symbols").to_pylist()}
    assert symbols["roll_out"] == "bin/deploy"  # parsed as Python: its definitions are facts
    reader = SnapshotReader(cfg.data_dir)
    rows = [i for i in range(reader.rows.num_rows) if reader.col["path"][i] == "bin/deploy"]
    assert rows and {reader.col["lang"][i] for i in rows} == {"python"}


def test_a_runs_peak_memory_is_its_own_not_that_of_the_process_that_started_it():
    """ru_maxrss keeps the spawning process's mark across fork and exec; the report reads the run's own."""
    import subprocess
    import sys

    held = bytearray(400 * 2**20)
    held[::4096] = b"\1" * len(held[::4096])  # touched: resident
    code = "from indexer.build.report import peak_rss_mib; print(peak_rss_mib())"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert 0 < int(child.stdout) < 300, child.stdout  # a fresh interpreter, not the 400 MiB its parent holds
    del held


def test_repos_new_to_the_index_past_run_files_are_built_in_batches_each_a_snapshot(two_repos, tmp_path):
    """A run holds each new chunk's rows until it writes, so repos no snapshot holds yet are built a batch of
    about `run_files` files at a time (never fewer than one repo), each batch published: one report says it all,
    and the last snapshot holds what one run builds."""
    cfg, _, _ = two_repos
    report = run(replace(cfg, run_files=1), show_progress=False)
    first, last = (x["snapshot_id"] for x in report.snapshots)
    assert report.published and report.snapshot_id == last == current_id(cfg.data_dir) and report.deferred == []
    assert [r.name for r in open_manifest(cfg.data_dir, first)[1].repos] == ["api"]  # the first batch: one repo
    assert [r.name for r in open_manifest(cfg.data_dir, last)[1].repos] == ["api", "tools"]
    assert [r.name for r in report.repos] == ["api", "tools"] and not report.failed
    said = "left 1 of the repos new to the index for the next batch"
    assert any(said in n and "run_files = 1" in n for n in report.notes)
    assert verify(cfg.data_dir, first)[1] == [] and verify(cfg.data_dir, last)[1] == []
    assert run(replace(cfg, run_files=1), show_progress=False).unchanged

    whole = run(replace(cfg, data_dir=tmp_path / "whole"), show_progress=False)  # the same repos in one run
    assert len(whole.snapshots) == 1 and whole.chunks == report.chunks

    def rows(data_dir):
        return sorted(zip(*(SnapshotReader(data_dir).rows.column(c).to_pylist() for c in ("repo", "path", "text"))))

    assert rows(cfg.data_dir) == rows(tmp_path / "whole")
