"""The query facade and the parts it is made of: the clip store, the live snapshot, the one similarity."""

import pytest

from indexer.embed import HashEmbedder
from query.clips import ClipStore
from query.search import SearchRequest
from query.service import ChunkNotFound, Service


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


def test_search_hits_get_clip_ids_that_read_back_only_in_their_org(service):
    _, hits = service.search(SearchRequest("renew subscription", "default"))
    clip, hit = hits[0]
    chunk = service.get_chunk(clip, "default")
    assert (chunk["id"], chunk["repo"], chunk["path"], chunk["line_start"]) == (
        clip,
        hit.repo,
        hit.path,
        hit.line_start,
    )
    assert "renew" in chunk["text"]
    _, again = service.search(SearchRequest("renew subscription", "default"))
    assert again[0][0] == clip  # the same chunk found again keeps its id
    with pytest.raises(ChunkNotFound, match=f"no chunk with id {clip}"):
        service.get_chunk(clip, "acme")
