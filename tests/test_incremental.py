"""Incremental snapshots: a run writes only what changed and lists every other part as it was; the result holds
exactly what a rebuild from scratch holds; a kill at any point of a publish leaves a snapshot that serves."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
import os

import duckdb
from dulwich.objects import Blob
import pyarrow.parquet as pq
import pytest

from indexer.build import parts as partsmod
from indexer.build import run
from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from indexer.snapshot.publish import listed_parts
from indexer.snapshot import (
    GRAPH_VIEWS,
    LEXICAL_DIR,
    TABLE_SCHEMAS,
    current_id,
    open_manifest,
    parts_dir,
    read_chunks,
    read_graph,
    read_part_info,
    snapshots_dir,
)
from indexer.snapshot.verify import verify
from query.reader import SnapshotReader
from query.search import SearchRequest, search
from tests import gitrepo
from tests.corpus import RENEW_PY, api_files, content, fresh_copy, write_config

CHANGED = RENEW_PY.replace(b"days=30", b"days=31")


def inode(path):
    return os.stat(path).st_ino


def test_a_one_commit_run_writes_one_delta_part_and_lists_every_other_part_as_it_was(two_repos):
    cfg, api, _ = two_repos
    first = run(cfg, show_progress=False)
    path, before = open_manifest(cfg.data_dir)
    renew_rows = read_chunks(path, vectors=False).column("path").to_pylist().count("src/billing/renew.py")
    held = {p: inode(parts_dir(cfg.data_dir) / p / "chunks.arrow") for r in before.repos for p in r.parts}
    gitrepo.commit(api, {**api_files(), "src/billing/renew.py": CHANGED})
    second = run(cfg, show_progress=False)
    path, after = open_manifest(cfg.data_dir)
    assert second.snapshot_id != first.snapshot_id
    assert after.repo("default", "tools").parts == before.repo("default", "tools").parts
    api_parts = after.repo("default", "api").parts
    assert api_parts[:-1] == before.repo("default", "api").parts and len(api_parts) == 2
    delta = read_part_info(parts_dir(cfg.data_dir) / api_parts[-1])
    assert not delta.base and delta.rows == renew_rows  # the changed file's chunks, nothing else
    assert pq.read_table(parts_dir(cfg.data_dir) / api_parts[-1] / "paths.parquet").column("path").to_pylist() == [
        "src/billing/renew.py"
    ]
    assert {p: inode(parts_dir(cfg.data_dir) / p / "chunks.arrow") for p in held} == held  # not rewritten
    # The lexical index: the first snapshot's segment files are the same files (hard links), plus new ones.
    old_lexical = snapshots_dir(cfg.data_dir) / first.snapshot_id / LEXICAL_DIR
    shared = [f for f in old_lexical.iterdir() if f.suffix in (".idx", ".store", ".term")]
    assert shared and all(inode(f) == inode(path / LEXICAL_DIR / f.name) for f in shared)
    assert verify(cfg.data_dir)[1] == []
    reader = SnapshotReader(cfg.data_dir)
    hits = search(reader, HashEmbedder(), SearchRequest(query="days=31 renew_subscription", org="default", limit=50))
    renew = [h for h in hits if h.path == "src/billing/renew.py"]
    assert renew and {h.blob_id for h in renew} == {Blob.from_string(CHANGED).id.decode()}  # never the old blob


def test_rows_keep_their_ids_while_they_live(two_repos):
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)

    def ids():
        chunks = read_chunks(open_manifest(cfg.data_dir)[0], vectors=False)
        keys = zip(*(chunks.column(c).to_pylist() for c in ("repo", "path", "blob_id", "chunk_index", "row")))
        return {k[:4]: k[4] for k in keys}

    before = ids()
    gitrepo.commit(api, {**api_files(), "src/billing/renew.py": CHANGED, "NEW.md": b"# New\n\nfresh text\n"})
    run(cfg, show_progress=False)
    after = ids()
    lived = before.keys() & after.keys()
    assert lived and all(before[k] == after[k] for k in lived)
    born = after.keys() - before.keys()
    assert born and min(after[k] for k in born) > max(before.values())  # an id is never given twice


def test_an_incremental_snapshot_holds_what_a_rebuild_from_scratch_holds(two_repos, tmp_path):
    cfg, api, tools = two_repos
    run(cfg, show_progress=False)
    files = api_files()
    steps = [
        {**files, "src/billing/renew.py": CHANGED},  # a file changed
        {**files, "src/billing/renew.py": CHANGED, "src/extra.py": b"def extra_step():\n    return 1\n"},  # added
        {k: v for k, v in files.items() if k != "src/billing/invoice.py"},  # deleted (and renew.py back as it was)
    ]
    parts = []
    for i, step in enumerate(steps):
        gitrepo.commit(api, step, message=f"step {i}")
        run(cfg, show_progress=False)
        other = fresh_copy(cfg, tmp_path / f"step{i}")
        assert content(cfg.data_dir) == content(other.data_dir), f"step {i}"
        assert verify(cfg.data_dir)[1] == []
        parts.append(len(open_manifest(cfg.data_dir)[1].repo("default", "api").parts))
    assert parts[:2] == [2, 3]  # deltas (the last step supersedes most of this small repo: a base again)


def test_the_views_leave_out_superseded_rows_as_the_readers_do(two_repos):
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    gitrepo.commit(api, {k: v for k, v in api_files().items() if k != "src/billing/invoice.py"})
    run(cfg, show_progress=False)
    path, _ = open_manifest(cfg.data_dir)
    con = duckdb.connect()
    con.execute(f"SET file_search_path = '{path}'")
    con.execute((path / GRAPH_VIEWS).read_text())
    for table in TABLE_SCHEMAS:
        viewed = sorted(map(repr, con.execute(f"SELECT * FROM {table}").fetchall()))
        read = sorted(repr(tuple(r.values())) for r in read_graph(path, table).to_pylist())
        assert viewed == read, table
    assert not con.execute("SELECT count(*) FROM symbols WHERE path = 'src/billing/invoice.py'").fetchone()[0]


def test_deltas_merge_newest_first_and_a_mostly_superseded_repo_is_written_again_as_one_base(
    two_repos, tmp_path, monkeypatch
):
    monkeypatch.setattr(partsmod, "MAX_PARTS", 3)
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    first_base = open_manifest(cfg.data_dir)[1].repo("default", "api").parts[0]
    seen = []
    for i in range(4):
        gitrepo.commit(api, {**api_files(), f"src/step_{i}.py": f"def step_{i}():\n    return {i}\n".encode()})
        run(cfg, show_progress=False)
        seen.append(open_manifest(cfg.data_dir)[1].repo("default", "api").parts)
    assert [len(p) for p in seen] == [2, 3, 3, 3]  # the third delta is merged with the newer half of the deltas
    assert all(p[0] == first_base for p in seen)  # the base is never written again for them
    assert content(cfg.data_dir) == content(fresh_copy(cfg, tmp_path / "merged").data_dir)
    gitrepo.commit(api, {"README.md": b"# Almost nothing left\n"})  # most rows superseded: one base again
    run(cfg, show_progress=False)
    assert open_manifest(cfg.data_dir)[1].repo("default", "api").parts[0] != first_base
    assert len(open_manifest(cfg.data_dir)[1].repo("default", "api").parts) == 1
    assert content(cfg.data_dir) == content(fresh_copy(cfg, tmp_path / "based").data_dir)
    assert verify(cfg.data_dir)[1] == []


def test_a_change_to_gitattributes_rewrites_the_repo(two_repos):
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    gitrepo.commit(api, {**api_files(), ".gitattributes": b"web/** linguist-vendored\n"})
    run(cfg, show_progress=False)
    path, manifest = open_manifest(cfg.data_dir)
    assert len(manifest.repo("default", "api").parts) == 1
    skips = {r["path"]: r["skip"] for r in read_graph(path, "files").to_pylist() if r["repo"] == "api"}
    assert skips["web/app.js"] == "vendored" and verify(cfg.data_dir)[1] == []


def test_a_moved_branch_rewrites_only_the_paths_whose_refs_changed(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "r")
    gitrepo.commit(repo, {"a.py": b"def alpha():\n    return 1\n", "b.py": b"def beta():\n    return 2\n"})
    gitrepo.commit(repo, {"a.py": b"def alpha():\n    return 1\n", "b.py": b"def beta():\n    return 2\n"}, "dev")
    cfg = write_config(tmp_path, [RepoSpec(name="r", url=str(tmp_path / "src" / "r"), refs=("main", "dev"))])
    run(cfg, show_progress=False)
    gitrepo.commit(
        repo, {"a.py": b"def alpha():\n    return 1\n", "b.py": b"def beta_on_dev():\n    return 3\n"}, "dev"
    )
    run(cfg, show_progress=False)
    path, manifest = open_manifest(cfg.data_dir)
    delta = parts_dir(cfg.data_dir) / manifest.repo("default", "r").parts[-1]
    assert read_part_info(delta).rows == 2  # b.py on main (now main's alone) and on dev; a.py untouched
    refs = {r["symbol"]: r["refs"] for r in read_chunks(path, vectors=False).to_pylist()}
    assert refs == {
        "alpha": ["refs/heads/main", "refs/heads/dev"],
        "beta": ["refs/heads/main"],
        "beta_on_dev": ["refs/heads/dev"],
    }
    reader = SnapshotReader(cfg.data_dir)
    found = search(reader, HashEmbedder(), SearchRequest(query="beta", org="default", ref="dev", limit=5))
    assert [h.symbol for h in found if h.symbol.startswith("beta")] == ["beta_on_dev"]
    assert verify(cfg.data_dir)[1] == []


def test_a_server_takes_over_the_parts_a_new_snapshot_shares(two_repos):
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    old = SnapshotReader(cfg.data_dir)
    gitrepo.commit(api, {**api_files(), "src/billing/renew.py": CHANGED})
    run(cfg, show_progress=False)
    new = SnapshotReader(cfg.data_dir, previous=old)
    shared = {p.key for p in old.parts} & {p.key for p in new.parts}
    assert len(shared) == 2 and len(new.parts) == 3
    assert all(n is next(o for o in old.parts if o.key == n.key) for n in new.parts if n.key in shared)


def test_a_new_snapshot_is_prepared_from_its_new_parts_and_answers_as_one_opened_afresh(two_repos, monkeypatch):
    """A swap read every card and history part again and worked out each org's files from every row (6 s of
    each swap at 923 repos); a server now reads nothing more of a part it held before, and what it answers of
    the new snapshot (history, cards, files, test-tool repos) is what a reader opened afresh answers."""
    from pathlib import Path

    from query import route_task
    from query.history import history_of
    from query.localize import runner_repos

    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    old = SnapshotReader(cfg.data_dir)
    route_task.prepare(old)
    files = {**api_files(), "src/billing/renew.py": CHANGED, "src/pytest/__init__.py": b"def main():\n    pass\n"}
    del files["src/billing/invoice.py"]
    gitrepo.commit(api, files, message="a change", parents=[api.head()])
    run(cfg, show_progress=False)
    read = []
    real = pq.read_table
    monkeypatch.setattr(
        pq, "read_table", lambda where, *a, **k: read.append(Path(where).parent.name) or real(where, *a, **k)
    )
    new = SnapshotReader(cfg.data_dir, previous=old)
    route_task.prepare(new)
    listed = [{p for r in m.repos for p in (*r.parts, *r.history)} for m in (old.manifest, new.manifest)]
    assert read and set(read) - {"graph"} <= listed[1] - listed[0]  # the new parts' files, and the edges
    fresh = SnapshotReader(cfg.data_dir)
    route_task.prepare(fresh)
    a, b = history_of(new), history_of(fresh)
    assert a.keys == b.keys and a.paths == b.paths and (a.vectors == b.vectors).all() and len(a.keys) == 3
    cards = [route_task._cards_and_edges(r)[0] for r in (new, fresh)]
    assert cards[0].keys() == cards[1].keys() and all((cards[0][k] == cards[1][k]).all() for k in cards[1])
    assert runner_repos(new, "default") == runner_repos(fresh, "default") == {"api"}
    rows = fresh.col["org"] == "default"
    every = frozenset(zip(fresh.col["repo"][rows], fresh.col["path"][rows]))
    assert new.files("default") == fresh.files("default") == every
    assert ("api", "src/billing/invoice.py") not in every and not new.has_file(
        "default", "api", "src/billing/invoice.py"
    )
    assert all(new.has_file("default", repo, path) for repo, path in every)


KILL_POINTS = ("rename", "replace", "link")  # what changes what a reader sees: a kill between any two


def _killed_run(cfg, at: int) -> None:
    """A run in a child process that dies, as kill -9 would (no cleanup), at its `at`-th rename, replace or link."""
    count = [0]
    for name in KILL_POINTS:
        real = getattr(os, name)

        def dying(*args, _real=real, **kw):
            count[0] += 1
            if count[0] == at:
                os._exit(9)
            return _real(*args, **kw)

        setattr(os, name, dying)
    run(cfg, show_progress=False)
    os._exit(0)


@pytest.mark.filterwarnings("ignore:lance is not fork-safe")  # the child never opens a Lance table
def test_a_kill_at_any_point_of_an_incremental_publish_leaves_a_snapshot_that_serves(two_repos):
    cfg, api, _ = two_repos
    first = run(cfg, show_progress=False).snapshot_id
    fork = multiprocessing.get_context("fork")
    for i, at in enumerate(range(1, 200)):
        files = {**api_files(), "src/billing/renew.py": CHANGED + f"# {i}\n".encode()}
        gitrepo.commit(api, files, message=f"change {i}")
        before = current_id(cfg.data_dir)
        child = fork.Process(target=_killed_run, args=(cfg, at))
        child.start()
        child.join(60)
        assert current_id(cfg.data_dir) is not None
        served = SnapshotReader(cfg.data_dir)
        assert served.rows.num_rows and verify(cfg.data_dir)[1] == [], at
        if child.exitcode == 0:  # no kill point left: every one was tried
            break
        assert child.exitcode == 9
        killed_published = current_id(cfg.data_dir) != before  # it died after replacing CURRENT (its history)
        after = run(cfg, show_progress=False)  # the next run sweeps what the killed one left and goes on
        assert not after.failed and verify(cfg.data_dir)[1] == [], at  # a kill in a fetch leaves git locks: swept
        assert after.published or (killed_published and after.unchanged), at
        on_disk = {p.name for p in parts_dir(cfg.data_dir).iterdir()}
        assert on_disk == listed_parts(cfg.data_dir)  # nothing half-written or orphaned stays
    assert at > 10 and current_id(cfg.data_dir) != first


def test_a_long_lived_indexer_reads_each_parts_info_once_while_its_file_is_unchanged(two_repos, monkeypatch):
    """Every run that changes an org reads the info (the edge inputs) of every repo's newest part: a process
    reads each once (1.2 s of a 2.9 s push run at 923 repos), again only when its part.json is another file,
    and forgets the parts its base no longer lists as newest."""
    from indexer.build import work

    cfg, api, _ = two_repos
    run(cfg, show_progress=False)  # reads the info of the parts it writes
    _, base = open_manifest(cfg.data_dir)
    tools, api_base = (parts_dir(cfg.data_dir) / base.repo("default", name).parts[-1] for name in ("tools", "api"))
    reads = []
    real = work.read_part_info
    monkeypatch.setattr(work, "read_part_info", lambda part: reads.append(part.name) or real(part))

    def changed(days: int) -> tuple[list[str], str]:
        reads.clear()
        gitrepo.commit(api, {**api_files(), "src/billing/renew.py": RENEW_PY.replace(b"days=30", b"days=%d" % days)})
        run(cfg, show_progress=False)
        return sorted(reads), open_manifest(cfg.data_dir)[1].repo("default", "api").parts[-1]

    read, delta = changed(31)
    assert read == [delta] and tools.name not in read  # only the part this run wrote
    assert api_base in work._INFOS  # the newest of this run's base ...
    (tools / "part.json").write_bytes((tools / "part.json").read_bytes() + b"\n")  # another file, the same info
    read, delta = changed(32)
    assert read == sorted([delta, tools.name])
    assert tools in work._INFOS and api_base not in work._INFOS  # ... forgotten once no base lists it as newest


@pytest.mark.parametrize("share", [1.0, 0.0])
def test_a_lexical_index_with_many_deleted_documents_is_written_whole(two_repos, tmp_path, monkeypatch, share):
    """Tantivy counts a deleted document in BM25's document frequencies until it merges the segment: a run whose
    base index would hold more than LEXICAL_REWRITE_SHARE of deleted documents writes it whole, as a rebuild from
    scratch would (share 0: always; share 1: never, and the deleted documents stay)."""
    import json

    import tantivy

    from indexer.build import assemble

    monkeypatch.setattr(assemble, "LEXICAL_REWRITE_SHARE", share)
    cfg, api, _ = two_repos
    run(cfg, show_progress=False)
    gitrepo.commit(api, {**api_files(), "src/billing/renew.py": CHANGED})
    run(cfg, show_progress=False)
    fresh = run(replace(cfg, data_dir=tmp_path / "fresh"), show_progress=False)  # the same commits from scratch

    def lexical(data_dir):
        path = snapshots_dir(data_dir) / current_id(data_dir) / LEXICAL_DIR
        deleted = sum(
            (s.get("deletes") or {}).get("num_deleted_docs", 0)
            for s in json.loads((path / "meta.json").read_text())["segments"]
        )
        return deleted, tantivy.Index.open(str(path)).searcher().doc_freq("content", "renew")

    assert lexical(tmp_path / "fresh")[0] == 0 and fresh.published
    deleted, frequency = lexical(cfg.data_dir)
    if share == 0.0:
        assert (deleted, frequency) == lexical(tmp_path / "fresh")
    else:
        assert deleted > 0 and frequency > lexical(tmp_path / "fresh")[1]
    assert verify(cfg.data_dir)[1] == []
