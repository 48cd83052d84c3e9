"""The query facade and the parts it is made of: the clip store, the live snapshot, the one similarity."""

import logging
import threading

import pytest
from dulwich.repo import Repo

from indexer.build import run
from indexer.embed import HASH_MODEL, HashEmbedder
from indexer.snapshot import current_id
from query.clips import ClipStore
from query.live import LiveSnapshot
from query.search import SearchRequest
from query.service import ChunkNotFound, Service
from tests import gitrepo
from tests.corpus import api_files, build_corpus


@pytest.fixture(scope="module")
def service(corpus):
    return Service(corpus.cfg, embedder=HashEmbedder())


def test_clip_ids_are_short_counted_and_deduplicated_per_org():
    clips = ClipStore()
    first = clips.add("default", ("api/a.py", 1, 9, "c1"))
    assert clips.add("default", ("api/b.py", 1, 9, "c1")) == first + 1
    assert clips.add("default", ("api/a.py", 1, 9, "c1")) == first
    assert clips.add("acme", ("api/a.py", 1, 9, "c1")) == first + 2  # the same key in another org is its own clip
    assert clips.get(first, "default") == ("api/a.py", 1, 9, "c1")
    assert len(clips) == 3


def test_a_known_key_keeps_its_id_and_answers_its_newest_value():
    clips = ClipStore()
    clip = clips.add("default", "key", {"score": 1})
    assert clips.add("default", "key", {"score": 2}) == clip
    assert clips.get(clip, "default") == {"score": 2}


def test_another_orgs_clip_id_answers_nothing():
    clips = ClipStore()
    clip = clips.add("acme", "secret-path", {"repo": "api"})
    assert clips.get(clip, "default") is None
    assert clips.get(clip, "acme") == {"repo": "api"}


def test_the_oldest_clips_are_forgotten_first():
    clips = ClipStore(size=2)
    a, b = clips.add("default", "a"), clips.add("default", "b")
    c = clips.add("default", "c")
    assert (clips.get(a, "default"), clips.get(b, "default"), clips.get(c, "default")) == (None, "b", "c")
    assert clips.add("default", "a") == c + 1  # forgotten, so a new id, not the old one
    assert len(clips) == 2


def test_search_hit_ids_are_row_ids_that_read_back_only_in_their_org(service, corpus):
    _, hits = service.search(SearchRequest(query="renew subscription", org="default"))
    clip, hit = hits[0]
    chunk = service.get_chunk("default", clip)
    assert (chunk.id, chunk.snapshot_id) == (clip, service.reader().snapshot_id)
    assert (chunk.hit.repo, chunk.hit.path, chunk.hit.line_start, chunk.hit.commit_id) == (
        hit.repo,
        hit.path,
        hit.line_start,
        hit.commit_id,
    )
    assert "renew" in chunk.text
    shown = {k: v for k, v in hit.to_dict().items() if k not in ("snippet", "score", "signals")}
    assert chunk.to_dict() == {"id": clip, **shown, "text": chunk.text, "snapshot_id": chunk.snapshot_id}
    assert clip == service.reader().row_id(hit.row)  # the snapshot's own row id, not a counter of this process
    restarted = Service(service.cfg, service.embedder)
    _, again = restarted.search(SearchRequest(query="renew subscription", org="default"))
    assert again[0][0] == clip and restarted.get_chunk("default", clip).text == chunk.text
    with pytest.raises(ChunkNotFound, match=f"no chunk with id {clip}"):
        service.get_chunk("acme", clip)


def test_status_and_repos_are_records_with_one_json_shape(service, corpus):
    status = service.status("default")
    data = status.to_dict()
    assert list(data) == ["snapshot_id", "serving", "model", "vectors", "repos", "last_run"]
    assert data["model"] == "blobdex:hash"
    assert data["vectors"] == {
        "model": "blobdex:hash",
        "tier": "full",
        "dim": 384,
        "chunks": corpus.report.chunks,
        "backfill": None,
        "search": "exact",  # a small corpus has no codebook
    }
    assert [r["name"] for r in data["repos"]] == ["api", "tools"]
    api = status.repos[0]
    assert api.refs[0].ref == "refs/heads/main" and api.refs[0].commit_id == corpus.commits["api_main"]
    assert data["repos"][0]["refs"][0] == {
        "ref": "refs/heads/main",
        "commit_id": api.refs[0].commit_id,
        "behind": False,
    }
    assert list(data["repos"][0])[:3] == ["org", "name", "url"] and isinstance(data["repos"][0]["refs"], list)
    snapshot_id, rows = service.repos("acme")
    assert snapshot_id == status.snapshot_id and [(r.org, r.name) for r in rows] == [("acme", "api")]


def test_session_answers_are_records(tmp_path):
    service = Service(build_corpus(tmp_path, {"api": api_files()}).cfg, embedder=HashEmbedder())
    stored = service.sync_workspace("default", "records", "api", {"notes.md": "# Notes\n\nrefund flow\n"}, [])
    assert (stored.session_id, stored.repo, stored.files, stored.deleted) == ("records", "api", 1, 0)
    status = service.session_status("default", "records")
    assert status.to_dict()["files"] == [{"repo": "api", "path": "notes.md", "deleted": False, "skip": None}]
    assert service.end_session("default", "records") is True


def test_the_live_snapshot_refuses_a_bad_current_keeps_serving_and_swaps_to_a_good_one(tmp_path, caplog):
    built = build_corpus(tmp_path, {"api": {"a.py": b"def first():\n    return 1\n"}})
    data_dir = built.cfg.data_dir
    live = LiveSnapshot(data_dir, lambda: (HASH_MODEL,))
    assert live.serving is None
    first = live.reader()
    assert live.serving is first and first.snapshot_id == current_id(data_dir)
    (data_dir / "CURRENT").write_text("20990101T000000000000Z-000000", encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="query.live"):
        assert live.reader() is first  # refused: the old one keeps serving
    assert f"keeping snapshot {first.snapshot_id}: the new one is refused" in caplog.text
    (data_dir / "CURRENT").write_text(first.snapshot_id, encoding="utf-8")
    gitrepo.commit(Repo(str(tmp_path / "src" / "api")), {"a.py": b"def second():\n    return 2\n"})
    run(built.cfg, show_progress=False)
    second = live.reader()
    assert second.snapshot_id == current_id(data_dir) != first.snapshot_id and live.reader() is second


def test_a_long_lived_server_opens_and_prepares_a_new_snapshot_while_the_old_one_answers(tmp_path, caplog):
    """With `prepare` (a server's), the request that finds CURRENT moved is answered by the old snapshot at
    once, as every request is until the new one is open and prepared in a thread; then the new one serves,
    already prepared. One the thread cannot open is refused, logged, and the old one keeps serving."""
    built = build_corpus(tmp_path, {"api": {"a.py": b"def first():\n    return 1\n"}})
    data_dir = built.cfg.data_dir
    release, prepared = threading.Event(), []

    def prepare(reader):
        if prepared:  # the first snapshot is prepared at once; a swapped-in one waits for the test
            assert release.wait(60)
        prepared.append(reader.snapshot_id)

    live = LiveSnapshot(data_dir, lambda: (HASH_MODEL,), prepare=prepare)
    first = live.reader()
    _join(f"prepare {first.snapshot_id}")
    assert prepared == [first.snapshot_id]
    gitrepo.commit(Repo(str(tmp_path / "src" / "api")), {"a.py": b"def second():\n    return 2\n"})
    run(built.cfg, show_progress=False)
    second_id = current_id(data_dir)
    assert live.reader() is first and live.reader() is first  # opening and preparing in a thread meanwhile
    assert f"open {second_id}" in {t.name for t in threading.enumerate()}
    release.set()
    _join(f"open {second_id}")
    second = live.reader()
    assert second.snapshot_id == second_id and prepared == [first.snapshot_id, second_id]

    (data_dir / "CURRENT").write_text("20990101T000000000000Z-000000", encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="query.live"):
        assert live.reader() is second
        _join("open 20990101T000000000000Z-000000")
    assert f"keeping snapshot {second_id}: the new one is refused" in caplog.text
    assert live.reader() is second and prepared == [first.snapshot_id, second_id]  # not retried at once


def _join(name: str) -> None:
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join(60)
            assert not thread.is_alive(), name


def test_a_clip_found_again_is_as_fresh_as_a_new_one():
    clips = ClipStore(size=3)
    for key in "abc":
        clips.add("default", key)
    answer = [clips.add("default", "a"), clips.add("default", "d")]  # one answer: a known chunk and a new one
    assert [clips.get(clip, "default") for clip in answer] == ["a", "d"]
    assert clips.get(2, "default") is None  # "b" was the least recently given
