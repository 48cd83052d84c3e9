"""Faults are repaired, not repeated: damaged snapshots and caches, full disks, leftovers of killed runs."""

import errno
import json
import logging
import os
import shutil
from dataclasses import replace

import pytest
from dulwich.repo import Repo
from starlette.testclient import TestClient

from indexer import assemble, parts, snapshot
from indexer.cache import Cache
from indexer.embed import HashEmbedder
from indexer.build import DiskFull, run
from indexer.publish import sweep
from indexer.snapshot import SnapshotError, current_id, open_manifest
from indexer.verify import verify
from query.surfaces.app import app
from query.reader import SnapshotReader
from query.service import Service
from tests import gitrepo
from tests.corpus import api_files


@pytest.fixture
def cfg(two_repos):
    return two_repos[0]


def live_dir(cfg):
    return open_manifest(cfg.data_dir)[0]


def one(path, pattern):
    found = sorted(path.glob(pattern))
    assert found, pattern
    return found[0]


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip(path, start, count=64):
    data = bytearray(path.read_bytes())
    data[start : start + count] = bytes(b ^ 0xFF for b in data[start : start + count])
    path.write_bytes(bytes(data))


def edit_manifest_chunks(snap):
    data = json.loads((snap / snapshot.MANIFEST).read_text())
    data["repos"][0]["chunks"] += 1000
    (snap / snapshot.MANIFEST).write_text(json.dumps(data))


def first_part(snap):
    """The directory of the snapshot's first part (its first repo's base)."""
    manifest = open_manifest(snap.parent.parent, snap.name)[1]
    return snapshot.parts_dir(snap.parent.parent) / manifest.repos[0].parts[0]


# The damage the reliability review did to a live snapshot (its section 9), each of which a plain
# 'blobdex index' used to answer with "unchanged, ok"; and a part's own files.
DAMAGE = {
    "part_chunks_truncated": lambda s: truncate(first_part(s) / snapshot.CHUNKS_ARROW),
    "part_info_garbage": lambda s: (first_part(s) / snapshot.PART_INFO).write_text("garbage"),
    "part_deleted": lambda s: shutil.rmtree(first_part(s)),
    "tantivy_meta_garbage": lambda s: (s / "lexical" / "meta.json").write_text("garbage"),
    "tantivy_idx_truncated": lambda s: truncate(one(s, "lexical/*.idx")),
    "tantivy_term_flipped": lambda s: flip(one(s, "lexical/*.term"), one(s, "lexical/*.term").stat().st_size // 2),
    "files_parquet_truncated": lambda s: truncate(first_part(s) / "files.parquet"),
    "card_parquet_truncated": lambda s: truncate(first_part(s) / snapshot.CARD),
    "edges_parquet_truncated": lambda s: truncate(snapshot.graph_path(s, "edges")),
    "manifest_chunk_count_edited": edit_manifest_chunks,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_unchanged_run_rebuilds_a_damaged_live_snapshot_from_the_cache(cfg, damage):
    first = run(cfg, show_progress=False)
    DAMAGE[damage](live_dir(cfg))
    counter = CountingEmbedder()
    second = run(cfg, show_progress=False, embedder=counter)
    assert second.published and not second.unchanged and second.snapshot_id != first.snapshot_id
    assert counter.texts == 0  # rebuilt from the cache
    assert any(f"snapshot {first.snapshot_id} is damaged" in n for n in second.notes)
    assert "note: rebuilding" in second.to_text()
    assert verify(cfg.data_dir) == (second.snapshot_id, [])
    third = run(cfg, show_progress=False)
    assert third.unchanged and third.notes == []


class CountingEmbedder(HashEmbedder):
    texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


def test_verify_catches_flipped_tantivy_term_bytes(cfg):
    run(cfg, show_progress=False)
    term = one(live_dir(cfg) / "lexical", "*.term")
    flip(term, term.stat().st_size // 2)
    with pytest.raises(
        SnapshotError,
        match=r"cannot read the stores of snapshot .*PanicException.*"
        r"rebuild with 'blobdex index --full'",
    ):
        verify(cfg.data_dir)


def test_verify_catches_a_truncated_cards_parquet(cfg):
    run(cfg, show_progress=False)
    truncate(first_part(live_dir(cfg)) / snapshot.CARD)
    with pytest.raises(SnapshotError, match=r"card.parquet|Parquet"):
        verify(cfg.data_dir)


@pytest.mark.parametrize("table", ["symbols", "files"])
def test_verify_catches_flipped_bytes_in_a_graph_table(cfg, table):
    import pyarrow.parquet as pq

    run(cfg, show_progress=False)
    path = first_part(live_dir(cfg)) / f"{table}.parquet"
    row_group = pq.read_metadata(path).row_group(0)
    column = next(
        row_group.column(i) for i in range(row_group.num_columns) if row_group.column(i).path_in_schema == "path"
    )
    flip(path, column.dictionary_page_offset + 32, 16)  # inside the page of path names, past its header
    with pytest.raises(SnapshotError, match="cannot read the stores of snapshot"):
        verify(cfg.data_dir)


def test_serve_falls_back_to_the_newest_kept_snapshot_that_opens(cfg, caplog):
    cfg = replace(cfg, keep_snapshots=3)
    oldest, kept, broken = (run(cfg, full=True, show_progress=False).snapshot_id for _ in range(3))
    assert current_id(cfg.data_dir) == broken
    truncate(first_part(snapshot.snapshots_dir(cfg.data_dir) / broken) / snapshot.CHUNKS_ARROW)  # a server maps it
    service = Service(cfg, embedder=HashEmbedder())
    with caplog.at_level(logging.ERROR):
        client = TestClient(app(service), base_url="http://127.0.0.1")
        ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["snapshot_id"] == kept
    assert f"serving the older snapshot {kept}" in caplog.text and broken in caplog.text
    status = client.get("/v1/status").json()
    assert status["serving"] == kept and status["snapshot_id"] == broken
    hits = client.post("/v1/search", json={"query": "renew_subscription", "limit": 1}).json()
    assert hits["snapshot_id"] == kept and hits["hits"]


def test_status_answers_from_the_served_snapshot_when_currents_manifest_is_unreadable(cfg):
    cfg = replace(cfg, keep_snapshots=2)
    kept, broken = (run(cfg, full=True, show_progress=False).snapshot_id for _ in range(2))
    (snapshot.snapshots_dir(cfg.data_dir) / broken / "manifest.json").write_text("{", encoding="utf-8")
    client = TestClient(app(Service(cfg, embedder=HashEmbedder())), base_url="http://127.0.0.1")
    assert client.get("/readyz").json()["snapshot_id"] == kept
    status = client.get("/v1/status")
    assert status.status_code == 200 and status.json()["serving"] == kept
    assert status.json()["repos"] and all(r["status"] == "ok" for r in status.json()["repos"])
    assert client.get("/v1/repos").json()["repos"][0]["chunks"] > 0


def test_serve_without_any_snapshot_that_opens_still_refuses(cfg):
    run(cfg, show_progress=False)
    truncate(first_part(live_dir(cfg)) / snapshot.CHUNKS_ARROW)
    with pytest.raises(SnapshotError, match="cannot open snapshot"):
        Service(cfg, embedder=HashEmbedder()).reader()


def damage_cache(kind, path):
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size * 3 // 10])
    elif kind == "random_bytes":
        path.write_bytes(os.urandom(path.stat().st_size))
    else:  # every page past the header has bytes flipped
        data = bytearray(path.read_bytes())
        for page in range(4096, len(data), 4096):
            data[page + 100 : page + 300] = bytes(b ^ 0xFF for b in data[page + 100 : page + 300])
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["truncated", "random_bytes", "bytes_flipped"])
def test_a_damaged_cache_is_moved_aside_and_the_run_rebuilds_it(cfg, kind):
    first = run(cfg, show_progress=False)
    cache_dir = cfg.data_dir / "cache"
    Cache(cache_dir).close()  # checkpoints the WAL into the file, as a finished run leaves it
    damage_cache(kind, cache_dir / "cache.sqlite")
    report = run(cfg, full=True, show_progress=False)
    assert report.published and report.chunks == first.chunks
    assert any("was damaged" in n and "moved it aside" in n for n in report.notes)
    assert len(list(cache_dir.glob("cache.sqlite.corrupt-*"))) == 1
    assert verify(cfg.data_dir)[1] == []
    again = run(cfg, full=True, show_progress=False, embedder=CountingEmbedder())
    assert again.published and again.notes == [] and again.chunks_embedded == 0


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    "module, target", [(assemble, "write_lexical"), (parts, "write_part"), (assemble, "write_edges")]
)
def test_a_full_disk_is_one_sentence_and_the_previous_snapshot_keeps_serving(cfg, monkeypatch, module, target):
    first = run(cfg, show_progress=False)
    monkeypatch.setattr(module, target, no_space)
    with pytest.raises(
        DiskFull,
        match=r"^no space left on device while writing to '.*' \(\d+ MB free\); free "
        r"space and run 'blobdex index' again",
    ) as caught:
        run(cfg, full=True, show_progress=False)
    assert "\n" not in str(caught.value)
    assert current_id(cfg.data_dir) == first.snapshot_id
    assert [p.name for p in snapshot.snapshots_dir(cfg.data_dir).iterdir()] == [first.snapshot_id]
    assert SnapshotReader(cfg.data_dir).rows.num_rows == first.chunks


def test_a_full_cache_database_is_a_full_disk(cfg, monkeypatch):
    first = run(cfg, show_progress=False)
    gitrepo.commit(Repo(cfg.repos[0].url), {**api_files(), "more.py": b"def more():\n    return 1\n" * 400})
    connect = Cache._connect

    def small(self):  # sqlite's own SQLITE_FULL, as on a full disk
        db = connect(self)
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")
        return db

    monkeypatch.setattr(Cache, "_connect", small)
    with pytest.raises(DiskFull, match="no space left on device"):
        run(cfg, show_progress=False)
    assert current_id(cfg.data_dir) == first.snapshot_id


def test_every_run_sweeps_leftovers_of_killed_runs_but_keeps_what_a_server_may_read(cfg):
    cfg = replace(cfg, keep_snapshots=2)
    older = run(cfg, full=True, show_progress=False).snapshot_id
    live = run(cfg, full=True, show_progress=False).snapshot_id
    root = snapshot.snapshots_dir(cfg.data_dir)
    orphan = root / "20991231T000000000000Z-orphan"  # renamed into place, killed before CURRENT named it
    shutil.copytree(root / live, orphan)
    for leftover in (root / ".build-20991231T000000000001Z-dead00", root / ".trash-20200101T000000000000Z-half"):
        leftover.mkdir()
        (leftover / "part").write_text("x")
    (cfg.data_dir / ".CURRENT.tmp").write_text("20991231T000000000000Z-orphan")
    pack = cfg.data_dir / "mirrors" / "default" / "api.git" / "objects" / "pack" / "tmp1zjuwadt.pack"
    pack.write_bytes(b"")
    held = sorted(p.name for p in snapshot.parts_dir(cfg.data_dir).iterdir())  # what older and live list
    stray = snapshot.parts_dir(cfg.data_dir) / "20991231T000000000002Z-stray0"  # renamed in, never listed
    shutil.copytree(snapshot.parts_dir(cfg.data_dir) / held[0], stray)
    (snapshot.parts_dir(cfg.data_dir) / ".build-20991231T000000000003Z-dead01").mkdir()
    report = run(cfg, show_progress=False)
    assert report.unchanged and report.snapshot_id == live
    assert sorted(p.name for p in root.iterdir()) == sorted([older, live])
    assert sorted(p.name for p in snapshot.parts_dir(cfg.data_dir).iterdir()) == held
    assert any(stray.name in n for n in report.notes)
    assert not (cfg.data_dir / ".CURRENT.tmp").exists() and not pack.exists()
    assert any("leftover" in n and orphan.name in n for n in report.notes)
    assert run(cfg, show_progress=False).notes == []
    # The next publish keeps the newest two: the one that was live stays beside the new one.
    newest = run(cfg, full=True, show_progress=False).snapshot_id
    assert sorted(p.name for p in root.iterdir()) == sorted([live, newest])


def test_a_current_that_names_no_snapshot_makes_the_sweep_delete_no_snapshot(cfg):
    first = run(cfg, show_progress=False)
    (cfg.data_dir / snapshot.CURRENT).write_text("../../../etc\n")
    assert sweep(cfg.data_dir) == []
    assert [p.name for p in snapshot.snapshots_dir(cfg.data_dir).iterdir()] == [first.snapshot_id]


def test_a_run_in_which_every_repo_fails_publishes_nothing(cfg, tmp_path):
    broken = replace(cfg, repos=tuple(replace(r, url=str(tmp_path / "gone" / r.name)) for r in cfg.repos))
    report = run(broken, show_progress=False)
    assert not report.published and report.failed and current_id(cfg.data_dir) is None
    assert any("nothing published: every repo failed" in n for n in report.notes)
    assert "nothing published" in report.to_text()
    first = run(cfg, show_progress=False)
    again = run(broken, show_progress=False)
    assert not again.published and current_id(cfg.data_dir) == first.snapshot_id
    assert any(f"snapshot {first.snapshot_id} keeps serving" in n for n in again.notes)


def test_cli_search_answers_from_the_newest_kept_snapshot_and_says_so(cfg, blobdex, tmp_path, caplog):
    """As the server does (and `route` always did): a damaged CURRENT never stops a search; the log (stderr, for
    the CLI) says which snapshot answered instead, and the JSON carries its id."""
    kept, broken = (run(cfg, full=True, show_progress=False).snapshot_id for _ in range(2))
    (snapshot.snapshots_dir(cfg.data_dir) / broken / "manifest.json").write_text("{", encoding="utf-8")
    with caplog.at_level(logging.ERROR):
        out = blobdex("--config", tmp_path / "blobdex.toml", "search", "renew_subscription", "--json")
    assert out.code == 0 and json.loads(out.out)["snapshot_id"] == kept
    assert f"serving the older snapshot {kept}" in caplog.text and broken in caplog.text
