"""Faults are repaired, not repeated: damaged snapshots and caches, full disks, leftovers of killed runs."""

import errno
import json
import logging
import os
import re
import shutil
from dataclasses import replace

import pytest
from dulwich.repo import Repo
from starlette.testclient import TestClient

from indexer import snapshot
from indexer.build import assemble
from indexer.build import parts
from indexer.build.cache import Cache
from indexer.embed import HashEmbedder
from indexer.build import DiskFull, run
from indexer.mirror import CLEAN
from indexer.snapshot.publish import sweep
from indexer.snapshot import SnapshotError, current_id, open_manifest
from indexer.snapshot.verify import verify
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


def first_chunks(snap):
    part = first_part(snap)
    return snapshot.read_part_chunks(snapshot.PartRef(part.name, part, frozenset()))


def flip_vector(snap):
    """Flip bytes inside the first chunk's vector: the Arrow file still opens, the vector is no longer unit."""
    needle = snapshot.vector_matrix(first_chunks(snap))[0].tobytes()
    flip_in_file(first_part(snap) / snapshot.CHUNKS_ARROW, needle, 0, 16)


def break_utf8(snap):
    """Flip one byte of the first chunk's text: invalid UTF-8 where Arrow's offsets still hold."""
    needle = first_chunks(snap).column("text")[0].as_py().encode()
    flip_in_file(first_part(snap) / snapshot.CHUNKS_ARROW, needle, 5, 1)


def flip_parquet_page(path, column="path", count=16):
    """Flip bytes inside the data of one column's first page, past its header: the page checksum fails."""
    import pyarrow.parquet as pq

    row_group = pq.read_metadata(path).row_group(0)
    chunk = next(
        row_group.column(i) for i in range(row_group.num_columns) if row_group.column(i).path_in_schema == column
    )
    flip(path, (chunk.dictionary_page_offset or chunk.data_page_offset) + 32, count)


# The damage the reliability reviews did to a live snapshot, each of which a plain 'blobdex index' used to answer
# with "unchanged, ok"; and a part's own files. The last three only reading the bytes finds (the second review).
DAMAGE = {
    "part_chunks_truncated": lambda s: truncate(first_part(s) / snapshot.CHUNKS_ARROW),
    "part_info_garbage": lambda s: (first_part(s) / snapshot.PART_INFO).write_text("garbage"),
    "part_edge_facts_garbage": lambda s: (first_part(s) / snapshot.EDGE_FACTS).write_text("garbage"),
    "part_deleted": lambda s: shutil.rmtree(first_part(s)),
    "tantivy_meta_garbage": lambda s: (s / "lexical" / "meta.json").write_text("garbage"),
    "tantivy_idx_truncated": lambda s: truncate(one(s, "lexical/*.idx")),
    "tantivy_term_flipped": lambda s: flip(one(s, "lexical/*.term"), one(s, "lexical/*.term").stat().st_size // 2),
    "files_parquet_truncated": lambda s: truncate(first_part(s) / "files.parquet"),
    "card_parquet_truncated": lambda s: truncate(first_part(s) / snapshot.CARD),
    "edges_parquet_truncated": lambda s: truncate(snapshot.graph_path(s, "edges")),
    "manifest_chunk_count_edited": edit_manifest_chunks,
    "part_vector_bytes_flipped": flip_vector,
    "symbols_parquet_page_flipped": lambda s: flip_parquet_page(first_part(s) / "symbols.parquet"),
    "chunk_text_invalid_utf8": break_utf8,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_unchanged_run_rebuilds_a_damaged_live_snapshot_from_the_cache(cfg, damage):
    first = run(cfg, show_progress=False)
    assert run(cfg, show_progress=False).unchanged  # its check passed: the next is skipped only if no file moved
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


def test_a_no_change_run_opens_the_snapshot_again_only_when_a_file_under_it_changed(cfg, monkeypatch):
    """open_check read every part's footers and walked every term dictionary on each no-change run (32 s at 10M
    chunks): it runs once a snapshot while the files it reads stay as they were."""
    from indexer.snapshot import verify as verify_module

    checked = []
    real = verify_module.open_check
    monkeypatch.setattr(verify_module, "open_check", lambda path, m: checked.append(m.snapshot_id) or real(path, m))
    first = run(cfg, show_progress=False)
    assert run(cfg, show_progress=False).unchanged and checked == [first.snapshot_id]
    assert run(cfg, show_progress=False).unchanged and checked == [first.snapshot_id]
    info = first_part(live_dir(cfg)) / snapshot.PART_INFO
    info.write_bytes(info.read_bytes())  # the same bytes, written again: checked again
    assert run(cfg, show_progress=False).unchanged and checked == [first.snapshot_id] * 2


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
    run(cfg, show_progress=False)
    flip_parquet_page(first_part(live_dir(cfg)) / f"{table}.parquet")  # inside the page of path names
    with pytest.raises(SnapshotError, match="cannot read the stores of snapshot"):
        verify(cfg.data_dir)


@pytest.mark.parametrize(
    "damage, problem",
    [
        ("chunk_text_invalid_utf8", r"chunks.arrow: .*Invalid UTF8"),
        ("part_vector_bytes_flipped", r"chunk vectors: 1 are not of unit length"),
        ("paths_parquet_page_flipped", r"paths.parquet: .*(CRC|checksum)"),
    ],
)
def test_verify_reads_every_byte_of_every_part(cfg, damage, problem):
    """verify and the unchanged run share deep_check: vectors normed, text valid UTF-8, every page checksummed."""
    run(cfg, show_progress=False)
    snap = live_dir(cfg)
    if damage == "paths_parquet_page_flipped":  # no other check of verify reads paths.parquet's pages
        flip_parquet_page(first_part(snap) / "paths.parquet")
    else:
        DAMAGE[damage](snap)
    _, problems = verify(cfg.data_dir)
    assert any(re.search(f"^part {first_part(snap).name}: {problem}", p) for p in problems), problems


def test_an_unchanged_run_reads_the_parts_checked_longest_ago_within_its_budget(cfg, monkeypatch):
    """A no-change run costs a byte budget, not the corpus: it deep-checks the parts checked longest ago, so
    damage is found within a few runs however large the corpus."""
    from indexer.snapshot import verify as verify_module

    first = run(cfg, show_progress=False)
    monkeypatch.setattr(verify_module, "CHECK_BYTES_PER_RUN", 1)  # one part (or the edges) a run
    items = verify_module.checked_items(live_dir(cfg), open_manifest(cfg.data_dir)[1])
    checked = []
    for _ in items:
        assert run(cfg, show_progress=False).unchanged
        state = json.loads((cfg.data_dir / verify_module.CHECKED).read_text())
        checked.append(sorted(state))
    assert [len(c) for c in checked] == list(range(1, len(items) + 1))  # one more each run, none twice
    assert set(checked[-1]) == {i.key for i in items}
    flip_vector(live_dir(cfg))  # the first part: the one checked longest ago now
    repaired = run(cfg, show_progress=False)
    assert repaired.published and any(f"snapshot {first.snapshot_id} is damaged" in n for n in repaired.notes)
    assert verify(cfg.data_dir) == (repaired.snapshot_id, [])


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
    else:  # every page past the header has 200 bytes flipped where its cells are (sqlite fills a page from its end)
        data = bytearray(path.read_bytes())
        for page in range(4096, len(data), 4096):
            data[page + 3800 : page + 4000] = bytes(b ^ 0xFF for b in data[page + 3800 : page + 4000])
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["truncated", "random_bytes", "bytes_flipped"])
def test_a_damaged_cache_is_moved_aside_and_the_run_rebuilds_it(cfg, kind):
    first = run(cfg, show_progress=False)
    cache_dir = cfg.data_dir / "cache"
    Cache(cache_dir).close()  # checkpoints the WAL into the file, as a finished run leaves it
    damage_cache(kind, cache_dir / "cache.sqlite")
    report = run(cfg, full=True, show_progress=False)
    assert report.published and report.chunks == first.chunks
    assert any("was damaged" in n and "moved it aside" in n for n in report.notes), report.notes
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
    mirror = cfg.data_dir / "mirrors" / "default" / "api.git"
    pack = mirror / "objects" / "pack" / "tmp1zjuwadt.pack"
    pack.write_bytes(b"")
    (mirror / CLEAN).unlink()  # as a fetch does before it writes: killed, it never put it back
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


def test_a_dead_repo_publishes_once_then_runs_with_nothing_new_publish_nothing(cfg):
    """B9: the first failure publishes the repo stale (status shows it); failing again with nothing else changed
    is unchanged, so a dead repo no longer makes every run upload, swap and announce a snapshot."""
    from indexer.build.plan import plan

    first = run(cfg, show_progress=False)
    shutil.rmtree(cfg.repos[1].url)  # the source of `tools` is gone
    failed = run(cfg, show_progress=False)
    assert failed.published and failed.failed and failed.snapshot_id != first.snapshot_id
    assert open_manifest(cfg.data_dir)[1].repo("default", "tools").status == "stale"
    assert not plan(cfg).would_publish
    for _ in range(2):
        again = run(cfg, show_progress=False)
        assert again.unchanged and not again.published and again.failed
        assert current_id(cfg.data_dir) == failed.snapshot_id
        tools = next(r for r in again.repos if r.name == "tools")
        assert tools.status == "stale" and "does not exist" in tools.error
    assert sorted(p.name for p in snapshot.snapshots_dir(cfg.data_dir).iterdir()) == sorted(
        [first.snapshot_id, failed.snapshot_id]
    )


def flip_in_file(path, needle: bytes, offset: int, count: int) -> None:
    """Flip `count` bytes of `path` at `offset` into the first copy of `needle`: damage inside one entry or
    value, which the file's own structure (sqlite's pages, Arrow's offsets) does not notice."""
    data = path.read_bytes()
    at = data.find(needle)
    assert at >= 0 and offset + count <= len(needle)
    flip(path, at + offset, count)


@pytest.mark.parametrize("entry", ["checksummed", "written_before_checksums"])
def test_a_damaged_cached_vector_is_computed_again_and_never_published(cfg, entry):
    """The review's 200 flipped bytes in cache.sqlite that sqlite still opens: `index --full` published the bad
    vector, a snapshot that failed verify."""
    import sqlite3

    from indexer.build.cache import VECTOR_CHECK_BYTES

    first = run(cfg, show_progress=False)
    path = cfg.data_dir / "cache" / "cache.sqlite"
    db = sqlite3.connect(str(path))
    if entry == "written_before_checksums":  # the float32 bytes alone: taken when finite and of unit length
        with db:
            db.execute("UPDATE vector SET vector = substr(vector, 1, length(vector) - ?)", [VECTOR_CHECK_BYTES])
        db.execute("VACUUM")
        kept = run(cfg, full=True, show_progress=False, embedder=CountingEmbedder())
        assert kept.chunks_embedded == 0 and kept.notes == []
    raw = db.execute("SELECT vector FROM vector ORDER BY text_id LIMIT 1").fetchone()[0]
    db.close()
    Cache(path.parent).close()  # checkpoints the WAL into the file, as a finished run leaves it
    flip_in_file(path, raw, 100, 200)
    counter = CountingEmbedder()
    report = run(cfg, full=True, show_progress=False, embedder=counter)
    assert report.published and report.chunks == first.chunks
    assert counter.texts == 1 and not list(path.parent.glob("cache.sqlite.corrupt-*"))
    assert any("1 damaged cache entries" in n for n in report.notes)
    assert verify(cfg.data_dir) == (report.snapshot_id, [])
    again = run(cfg, full=True, show_progress=False, embedder=CountingEmbedder())
    assert again.chunks_embedded == 0 and again.notes == []


def test_a_damaged_blob_entry_costs_that_entry_not_the_cache(cfg):
    import sqlite3

    first = run(cfg, show_progress=False)
    path = cfg.data_dir / "cache" / "cache.sqlite"
    db = sqlite3.connect(str(path))
    raw = db.execute("SELECT entry FROM blob ORDER BY key LIMIT 1").fetchone()[0]
    entries = db.execute("SELECT count(*) FROM blob").fetchone()[0]
    db.close()
    Cache(path.parent).close()
    flip_in_file(path, raw, len(raw) // 2, 8)
    report = run(cfg, full=True, show_progress=False, embedder=CountingEmbedder())
    assert report.published and report.chunks == first.chunks and report.blobs_new == 1
    assert not list(path.parent.glob("cache.sqlite.corrupt-*"))
    assert any("1 damaged cache entries" in n for n in report.notes)
    assert verify(cfg.data_dir)[1] == []
    db = sqlite3.connect(str(path))
    assert db.execute("SELECT count(*) FROM blob").fetchone()[0] == entries


def test_vectors_read_back_from_a_damaged_snapshot_are_not_cached(cfg, monkeypatch):
    """A lost cache is refilled from the live snapshot's vectors (indexer/build/vectors.py); a damaged one is embedded
    again instead of copied."""
    from indexer.build import vectors
    from indexer.snapshot import read_part_chunks, vector_matrix

    monkeypatch.setattr(vectors, "FAST_FIRST_CHUNKS", 1)  # read back however few are missing
    run(cfg, show_progress=False)
    embedded = []
    for damaged in (False, True):
        for lost in (cfg.data_dir / "cache").glob("cache.sqlite*"):
            lost.unlink()
        if damaged:
            part = first_part(live_dir(cfg))
            needle = vector_matrix(read_part_chunks(snapshot.PartRef(part.name, part, frozenset())))[0].tobytes()
            flip_in_file(part / snapshot.CHUNKS_ARROW, needle, 0, 16)
        counter = CountingEmbedder()
        report = run(cfg, full=True, show_progress=False, embedder=counter)
        embedded.append(counter.texts)
        assert verify(cfg.data_dir) == (report.snapshot_id, [])
    assert embedded[1] == embedded[0] + 1  # the cards are embedded again either way
    assert any("1 damaged cache entries" in n for n in report.notes)


def test_invalid_utf8_in_chunk_text_is_read_as_replacement_characters_never_a_500(cfg):
    """The review's grep 500 (UnicodeDecodeError), on every call until a run rebuilt the snapshot."""
    run(cfg, show_progress=False)
    damaged = first_chunks(live_dir(cfg)).slice(0, 1).to_pylist()[0]
    break_utf8(live_dir(cfg))
    client = TestClient(app(Service(cfg, embedder=HashEmbedder())), base_url="http://127.0.0.1")
    found = client.post("/v1/grep", json={"pattern": ".", "repos": [damaged["repo"]], "limit": 500})
    assert found.status_code == 200
    lines = [m["text"] for m in found.json()["matches"] if m["path"] == damaged["path"]]
    assert any("\ufffd" in line for line in lines)
    hits = client.post("/v1/search", json={"query": damaged["symbol"] or damaged["path"], "limit": 50})
    assert hits.status_code == 200 and hits.json()["hits"]


@pytest.mark.parametrize("current", ["missing", "empty"])
def test_serve_and_search_fall_back_to_the_newest_kept_snapshot_when_current_is_missing_or_empty(
    cfg, current, blobdex, caplog
):
    cfg = replace(cfg, keep_snapshots=2)
    _, newest = (run(cfg, full=True, show_progress=False).snapshot_id for _ in range(2))
    path = cfg.data_dir / snapshot.CURRENT
    path.unlink() if current == "missing" else path.write_text("\n")
    with caplog.at_level(logging.ERROR):
        client = TestClient(app(Service(cfg, embedder=HashEmbedder())), base_url="http://127.0.0.1")
        assert client.get("/readyz").json()["snapshot_id"] == newest
        hits = client.post("/v1/search", json={"query": "renew_subscription", "limit": 1}).json()
    assert hits["snapshot_id"] == newest and hits["hits"]
    said = [r.getMessage() for r in caplog.records if "CURRENT" in r.getMessage()]
    assert said == [
        f"serving snapshot {newest}, the newest kept: CURRENT in {str(cfg.data_dir)!r} is missing or empty; "
        "the next 'blobdex index' writes it again"
    ]
    out = blobdex("--config", cfg.path, "search", "renew_subscription", "--json")
    assert out.code == 0 and json.loads(out.out)["snapshot_id"] == newest


def test_a_damaged_term_dictionary_in_the_newest_snapshot_is_one_sentence_then_the_older_one_serves(
    cfg, blobdex, caplog
):
    """Tantivy opens a damaged .term file and panics only on a query that reads the damaged terms: the review saw
    `blobdex search` exit 70 and /v1/search and /v1/route answer 500 until the next run."""
    cfg = replace(cfg, keep_snapshots=2)
    older, newest = (run(cfg, full=True, show_progress=False).snapshot_id for _ in range(2))
    term = one(snapshot.snapshots_dir(cfg.data_dir) / newest / "lexical", "*.term")
    assert term.stat().st_nlink == 1  # the newest snapshot's own: the older one's index is intact
    flip(term, term.stat().st_size // 2)
    words = ["billing", "def", "class", "config", "api", "renew_subscription"]
    out = blobdex("--config", cfg.path, "search", "billing", "--json")
    assert out.code == 2 and f"the lexical index of snapshot {newest} is damaged" in out.err
    assert len(out.err.strip().splitlines()) == 1
    client = TestClient(app(Service(cfg, embedder=HashEmbedder())), base_url="http://127.0.0.1")
    answers = []
    with caplog.at_level(logging.ERROR):
        for word in words:
            for path, body in (("/v1/search", {"query": word}), ("/v1/route", {"task": word})):
                answer = client.post(path, json=body)
                answers.append((answer.status_code, answer.json().get("snapshot_id")))
                if answer.status_code == 503:
                    assert "is damaged" in answer.json()["error"]["message"]
    failed = [i for i, (code, _) in enumerate(answers) if code != 200]
    assert [answers[i][0] for i in failed] == [503]  # one answer, then the older snapshot serves
    assert all(sid == older for _, sid in answers[failed[0] + 1 :])
    assert f"serving the older snapshot {older}: a query found snapshot {newest} damaged" in caplog.text


def test_page_checksums_are_checked_without_decoding_wherever_pyarrow_checks_them(cfg, tmp_path):
    """indexer/snapshot/checksums.py reads the footer and page headers itself (3x faster than decoding): a byte
    flipped in a graph table fails it wherever pyarrow's page-verifying decode fails (but for a rare flip of a
    dictionary page's value count, which only decoding finds), and an untouched file passes."""
    import pyarrow.parquet as pq

    from indexer.snapshot.checksums import check_pages

    run(cfg, show_progress=False)
    source = first_part(live_dir(cfg)) / "calls.parquet"
    assert check_pages(source) == 0  # every page carries its checksum
    data = source.read_bytes()
    decoding_fails, missed = 0, []
    for at in range(4, len(data) - 8, max(1, len(data) // 400)):
        damaged = tmp_path / "damaged.parquet"
        damaged.write_bytes(data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1 :])
        try:
            pq.read_table(damaged, page_checksum_verification=True)
            continue
        except Exception:
            decoding_fails += 1
        try:
            check_pages(damaged)
            missed.append(at)
        except Exception:
            pass
    assert decoding_fails > 100 and len(missed) <= decoding_fails // 100, missed


def test_a_chunk_the_model_reads_nothing_in_is_no_damage(tmp_path):
    """A text of only unknown pieces gets an all-zero vector from the static tier and the hashing embedder; the
    unchanged run's check must not take it for a flipped vector and rebuild on every run."""
    from indexer.config import RepoSpec
    from indexer.snapshot.verify import verify
    from tests import gitrepo
    from tests.corpus import write_config

    gitrepo.commit(gitrepo.init(tmp_path / "src"), {"sep.txt": b"+-+-+ ;;; !!! ---\n", "a.py": b"def a():\n    pass\n"})
    cfg = write_config(tmp_path, [RepoSpec(name="src", url=str(tmp_path / "src"))])
    first = run(cfg, show_progress=False)
    vectors = snapshot.vector_matrix(snapshot.read_chunks(live_dir(cfg)))
    assert not vectors.any(axis=1).all()  # the separator line's vector is all zeros
    again = run(cfg, show_progress=False)
    assert again.unchanged and again.snapshot_id == first.snapshot_id and verify(cfg.data_dir)[1] == []
