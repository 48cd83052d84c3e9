"""A snapshot of format 2, committed as written (tests/data/format-2), must keep opening: a server
upgraded before the next index run serves what the last run published."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from indexer.embed import HashEmbedder
from indexer.snapshot import FORMAT_VERSION, READABLE_FORMATS, read_graph
from indexer.verify import verify
from query.reader import SnapshotReader
from query.search import SearchRequest, search

COMMITTED = Path(__file__).resolve().parent / "data" / "format-2"


@pytest.fixture
def data_dir(tmp_path) -> Path:
    # A copy: opening a store may leave lock files, and the committed bytes must stay as written.
    return Path(shutil.copytree(COMMITTED, tmp_path / "data"))


def test_the_committed_format_2_snapshot_opens_verifies_and_answers(data_dir):
    assert 2 in READABLE_FORMATS and FORMAT_VERSION >= 2
    reader = SnapshotReader(data_dir)
    assert reader.manifest.format_version == 2 and reader.manifest.chunks == 6
    assert verify(data_dir)[1] == []
    hits = search(reader, HashEmbedder(), SearchRequest("remove_item from the cart", "default", limit=3))
    assert hits[0].path == "shop/cart.py" and hits[0].symbol == "Cart.remove_item"
    files = read_graph(reader.path, "files").to_pylist()
    assert sorted(f["path"] for f in files) == ["README.md", "shop/cart.py", "web/checkout.js"]
    assert all(f["held_back"] == [] for f in files)
