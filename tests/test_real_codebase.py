"""A real codebase nobody here wrote: the installed `click` package's source, turned into a git repo."""

from pathlib import Path

import click
import pytest

from indexer.config import RepoSpec
from indexer.build import run
from indexer.snapshot.verify import verify
from query.get_file import get_file
from query.reader import SnapshotReader
from query.search import SearchRequest, search
from tests import gitrepo
from tests.corpus import write_config

SOURCE = Path(click.__file__).parent


@pytest.fixture(scope="module")
def click_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("click")
    files = {
        f"click/{p.relative_to(SOURCE).as_posix()}": p.read_bytes()
        for p in SOURCE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    repo = gitrepo.init(root / "src" / "click")
    gitrepo.commit(repo, files)
    cfg = write_config(root, [RepoSpec(name="click", url=str(root / "src" / "click"))], max_blob_bytes=1024 * 1024)
    report = run(cfg, show_progress=False)
    return cfg, report, files


def test_indexes_every_source_file_with_symbol_chunks(click_index):
    cfg, report, files = click_index
    py = [p for p in files if p.endswith(".py")]
    assert report.files_indexed >= len(py) >= 10
    assert report.parse_fallbacks == 0 and "unreadable" not in report.files_skipped
    reader = SnapshotReader(cfg.data_dir)
    symbols = set(reader.rows.column("symbol").to_pylist())
    assert {"Context.invoke", "Command.make_context", "Group.add_command", "echo"} <= symbols
    assert verify(cfg.data_dir)[1] == []


@pytest.mark.parametrize(
    "query,symbol",
    [
        ("make_context", "Command.make_context"),
        ("add_command", "Group.add_command"),
        ("get_terminal_size", None),
    ],
)
def test_identifier_queries_find_their_definitions(click_index, query, symbol):
    from indexer.embed import HashEmbedder

    cfg, _, _ = click_index
    reader = SnapshotReader(cfg.data_dir)
    hits = search(reader, HashEmbedder(), SearchRequest(query=query, limit=50))
    if symbol:  # the definition outranks its callers
        assert hits[0].symbol == symbol and hits[0].path == "click/core.py"
        assert hits[0].signals.symbol_rank == 1 and hits[0].signals.bm25_rank == 1
    else:  # click only calls it: BM25's best hit uses it (the hashing embedder's ranks are noise)
        best = next(h for h in hits if h.signals.bm25_rank == 1)
        assert query in reader.row(best.row)["text"]


def test_get_file_returns_the_real_bytes(click_index):
    cfg, _, files = click_index
    got = get_file(cfg.data_dir, "click", "click/core.py")
    assert got.content == files["click/core.py"]
