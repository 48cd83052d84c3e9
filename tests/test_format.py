"""A snapshot of format 2, committed as written (tests/data/format-2), must keep opening: a server
upgraded before the next index run serves what the last run published."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from indexer.build.cache import Cache
from indexer.embed import HashEmbedder
from indexer.snapshot import FORMAT_VERSION, READABLE_FORMATS, Manifest, read_graph
from indexer.snapshot.verify import verify
from indexer.versions import CHUNKER_VERSION, EXTRACTOR_VERSION, POLICY_VERSION, TOOLS, ToolVersions
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
    hits = search(reader, HashEmbedder(), SearchRequest(query="remove_item from the cart", org="default", limit=3))
    assert hits[0].path == "shop/cart.py" and hits[0].symbol == "Cart.remove_item"
    files = read_graph(reader.path, "files").to_pylist()
    assert sorted(f["path"] for f in files) == ["README.md", "shop/cart.py", "web/checkout.js"]
    assert all(f["held_back"] == [] for f in files)


def test_tool_versions_keep_the_manifest_json_and_the_cache_keys_as_they_were():
    manifest_json = next((COMMITTED / "snapshots").glob("*/manifest.json")).read_text(encoding="utf-8")
    manifest = Manifest.from_json(manifest_json)
    # Flat version keys; a version the manifest predates (the resolver's) reads 0 and is written as a key of its own.
    assert json.loads(manifest.to_json()) == {**json.loads(manifest_json), "resolver_version": 0}
    assert manifest.tools == ToolVersions(
        chunker_version=2, policy_version=2, tokenizer_version=2, extractor_version=1, resolver_version=0
    )
    others = {k: v for k, v in manifest.__dict__.items() if k not in manifest.tools.as_fields()}
    assert (
        Manifest(**others, **manifest.tools.as_fields()).to_json() == manifest.to_json()
    )  # as build/assemble.py writes one
    # Keys of entries an existing cache holds: the format every earlier version wrote.
    assert Cache.blob_key("9f2c", "python", 16384, manifest.tools) == "9f2c:python:p2:c2:x1:m16384"
    old_key = f"9f2c:python:p{POLICY_VERSION}:c{CHUNKER_VERSION}:x{EXTRACTOR_VERSION}:m16384"
    assert Cache.blob_key("9f2c", "python", 16384) == old_key and TOOLS.tokenizer_version >= 2


def test_verify_catches_an_arrow_copy_that_differs_from_the_lance_table(data_dir):
    """Format 2 kept chunks.arrow beside the Lance table it copies; verify compares the two."""
    import lance
    import pyarrow as pa

    snap = next((data_dir / "snapshots").iterdir())
    table = lance.dataset(str(snap / "vectors" / "chunks.lance")).to_table()
    texts = table.column("text").to_pylist()
    texts[0] = "def planted():\n    pass\n"
    changed = table.set_column(table.schema.get_field_index("text"), "text", pa.array(texts))
    with pa.OSFile(str(snap / "vectors" / "chunks.arrow"), "wb") as sink, pa.ipc.new_file(sink, changed.schema) as w:
        w.write_table(changed)
    assert verify(data_dir)[1] == ["chunks.arrow differs from the Lance table it copies"]


def test_without_the_legacy_extra_a_lance_only_snapshot_says_how_to_move_on(data_dir, monkeypatch):
    """Lance is an extra: a format-2 snapshot written before chunks.arrow (its chunks only in the Lance table) is
    refused in one sentence that names both ways out."""
    from indexer.snapshot import SnapshotError, read_chunks

    snap = next((data_dir / "snapshots").iterdir())
    assert not (snap / "vectors" / "chunks.arrow").exists()  # written before format 2 mapped a copy
    monkeypatch.setitem(__import__("sys").modules, "lance", None)  # as if pylance were not installed
    with pytest.raises(SnapshotError) as refused:
        read_chunks(snap)
    assert str(refused.value) == (
        f"snapshot {str(snap)!r} is of format 1 or 2 and keeps its chunks in a Lance table, which this install cannot "
        f"read: install the legacy extra (pip install 'blobdex[legacy]') to read it, or, when every repo fetches, run "
        f"'blobdex index --full' to rewrite it as format 3 (a repo that cannot be fetched is carried from it, so that "
        f"run reads it too)"
    )
