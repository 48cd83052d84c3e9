"""Approximate vector search (indexer/snapshot/ann.py, query/approximate.py): a codebook trained once and kept
by later snapshots, codes written with each part, filters honoured, scores exact, parts without codes still
searched; recall against exact search on real-model vectors."""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from dulwich.repo import Repo

from indexer.build import run
from indexer.config import RepoSpec
from indexer.snapshot import ann, part_file, parts_of, read_part_info
from indexer.snapshot.ann import CODEBOOK, CODES, Codebook, read_codes
from query import approximate
from query.reader import SnapshotReader
from query.search import SearchRequest, row_mask
from query.search.signals import query_vectors, vector_ranks
from tests import gitrepo
from tests.corpus import build_corpus, private_copy, source_files

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def small_codebooks():
    """A codebook for a test corpus: 8 lists, trained from 500 chunks on."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ann, "LISTS", 8)
        patch.setattr(ann, "TRAIN_ROWS", 500)
        patch.setattr(approximate, "EXACT_ROWS", 0)  # every search asks the index
        yield


@pytest.fixture(scope="module")
def indexed(small_codebooks, tmp_path_factory):
    rng = random.Random(11)
    files = {"one": source_files(rng, 90), "two": source_files(rng, 60)}
    return build_corpus(tmp_path_factory.mktemp("ann"), files), files


def test_a_snapshot_past_train_rows_has_a_codebook_and_every_part_its_codes(indexed):
    corpus, _ = indexed
    reader = SnapshotReader(corpus.cfg.data_dir)
    assert len(reader.live) > 500
    codebook = Codebook.read(reader.path / CODEBOOK)
    for ref in parts_of(reader.path, reader.manifest):
        codes, digest = read_codes(ref.dir / CODES)
        assert digest == codebook.digest and codes.shape == (
            read_part_info(ref.dir).rows,
            codebook.index.sa_code_size(),
        )
    assert reader.approximate is not None and reader.approximate.covered.all()


def ranks(reader, query: str, **filters) -> list[tuple[int, float]]:
    from indexer.embed import HashEmbedder

    req = SearchRequest(query=query, org="default", **filters)
    return vector_ranks(reader, query_vectors(HashEmbedder(), query), row_mask(req, reader), depth=10)


def test_approximate_ranks_are_exact_scores_within_the_filters_and_recall_the_exact_top(indexed):
    corpus, files = indexed
    reader = SnapshotReader(corpus.cfg.data_dir)
    exact = SnapshotReader(corpus.cfg.data_dir, exact=True)
    assert exact.approximate is None
    words = " ".join(t.decode() for t in files["one"].values()).split()
    rng, hits = random.Random(3), 0
    queries = [" ".join(rng.sample(words, 6)) for _ in range(40)]
    for query in queries:
        near, truth = ranks(reader, query), ranks(exact, query)
        assert all(abs(score - float(exact.vectors[row] @ query_vectors_of(query))) < 1e-5 for row, score in near)
        nth = truth[-1][1]
        hits += sum(1 for _, score in near if score >= nth - 1e-6)
        assert [s for _, s in near] == sorted((s for _, s in near), reverse=True)
    assert hits / (10 * len(queries)) >= 0.9
    for query in queries[:10]:
        only_two = ranks(reader, query, repos=("two",))
        assert only_two and all(reader.col["repo"][row] == "two" for row, _ in only_two)


def query_vectors_of(query: str) -> np.ndarray:
    from indexer.embed import HashEmbedder

    return query_vectors(HashEmbedder(), query)[0]


def test_a_later_run_keeps_the_codebook_and_a_part_without_codes_is_searched_exactly(indexed, tmp_path):
    corpus, files = indexed
    cfg = private_copy(corpus, tmp_path)
    moved = tmp_path / "one"
    shutil.copytree(corpus.root / "src" / "one", moved)
    added = b"def zebra_crossing_signal(lights):\n    return lights.flash_amber_twice()\n"
    gitrepo.commit(Repo(str(moved)), {**files["one"], "pkg/zebra.py": added})
    first = SnapshotReader(cfg.data_dir)
    run(replace(cfg, repos=(RepoSpec(name="one", url=str(moved)), cfg.repos[1])), show_progress=False)
    reader = SnapshotReader(cfg.data_dir)
    assert (reader.path / CODEBOOK).stat().st_ino == (first.path / CODEBOOK).stat().st_ino  # linked, not trained
    refs = parts_of(reader.path, reader.manifest)
    assert all(part_file(r, "grams").exists() and (r.dir / CODES).exists() for r in refs)
    zebra = "def zebra_crossing_signal(lights):\n    return lights.flash_amber_twice()"
    newest = next(r for r in refs if r.part_id not in {p.part_id for p in parts_of(first.path, first.manifest)})
    (newest.dir / CODES).unlink()  # as a part written before the codebook existed
    whole = SnapshotReader(cfg.data_dir)
    assert not whole.approximate.covered.all()
    top = ranks(whole, zebra)[0][0]
    assert whole.row(top)["path"] == "pkg/zebra.py"


def zebra_copy(indexed, tmp_path: Path):
    """A private copy of the corpus, and what publishes its next snapshot: repo one with pkg/zebra.py added."""
    corpus, files = indexed
    cfg = private_copy(corpus, tmp_path)
    moved = tmp_path / "one"
    shutil.copytree(corpus.root / "src" / "one", moved)
    gitrepo.commit(Repo(str(moved)), {**files["one"], "pkg/zebra.py": b"def zebra(lights):\n    return lights\n"})
    return cfg, lambda: run(
        replace(cfg, repos=(RepoSpec(name="one", url=str(moved)), cfg.repos[1])), show_progress=False
    )


def test_a_swap_adds_only_the_new_parts_codes_and_a_part_no_snapshot_lists_leaves(indexed, tmp_path):
    import gc

    _, files = indexed
    cfg, publish = zebra_copy(indexed, tmp_path)
    first = SnapshotReader(cfg.data_dir)
    shared = first.approximate.shared
    assert shared.index.ntotal == len(first.live)
    publish()
    swapped, fresh = SnapshotReader(cfg.data_dir, previous=first), SnapshotReader(cfg.data_dir)
    assert swapped.approximate.shared is shared and fresh.approximate.shared is not shared
    added = sum(len(p) for p in swapped.parts if p not in first.parts)  # the run's new part
    assert added and shared.index.ntotal == len(first.live) + added
    # The shared index's ids map to this snapshot's positions: every allowed row it holds, for any filter.
    for repos in ((), ("two",), ("one",)):
        mask = row_mask(SearchRequest(query="q", org="default", repos=repos), swapped)
        assert found(swapped, mask).tolist() == np.flatnonzero(mask).tolist()
    words = " ".join(t.decode() for t in files["one"].values()).split()
    for query in [" ".join(random.Random(i).sample(words, 6)) for i in range(10)] + ["def zebra(lights)"]:
        assert ranks(swapped, query) == ranks(fresh, query)
    # A snapshot that lists repo one only (as a shard does): once the snapshots listing two are gone, two's codes
    # leave with the next view: never found again, and left in the mapped lists until they pass a quarter of them.
    only_one = SnapshotReader(cfg.data_dir, previous=swapped, select=lambda m: {("default", "one")})
    two = sum(rows for key, (_, rows) in shared.bases.items() if key not in {p.key for p in only_one.parts})
    del first, swapped, fresh
    gc.collect()
    again = SnapshotReader(cfg.data_dir, previous=only_one, select=lambda m: {("default", "one")})
    assert again.approximate.shared is shared and shared.held() == len(again.live)
    assert shared.leftover == two and shared.index.ntotal == len(again.live) + two
    assert found(again, np.ones(len(again.live), dtype=bool)).tolist() == list(range(len(again.live)))
    assert two > approximate.LEFTOVER_SHARE * len(again.live)
    rebuilt = SnapshotReader(cfg.data_dir, previous=again, select=lambda m: {("default", "one")})
    assert rebuilt.approximate.shared is not shared and rebuilt.approximate.shared.index.ntotal == len(rebuilt.live)
    assert found(rebuilt, np.ones(len(rebuilt.live), dtype=bool)).tolist() == list(range(len(rebuilt.live)))


def test_a_disk_too_full_for_the_lists_leaves_search_exact_and_the_old_snapshot_answering(indexed, tmp_path, caplog):
    """The mapped lists take their disk blocks before writing (a write through a map to a full disk is SIGBUS):
    a full disk is an OSError, the snapshot being opened searches exactly, the one serving keeps its index, and
    the next open joins the codes that failed to (they were not counted as joined)."""
    import errno

    import query.mapped_lists as mapped

    cfg, publish = zebra_copy(indexed, tmp_path)
    first = SnapshotReader(cfg.data_dir)
    before = ranks(first, "def zebra(lights)")
    publish()

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mapped.os, "posix_fallocate", full)
        fresh = SnapshotReader(cfg.data_dir)  # its own index: the file's first blocks
        patch.setattr(mapped.MappedLists, "reserve", full)
        swapped = SnapshotReader(cfg.data_dir, previous=first)  # joining the serving one's
    assert fresh.approximate is None and swapped.approximate is None
    assert "its approximate index cannot be built (" in caplog.text and "No space left on device" in caplog.text
    assert ranks(swapped, "def zebra(lights)")[0][0] == swapped.rows_at("default", "one", "pkg/zebra.py")[0]
    assert ranks(first, "def zebra(lights)") == before  # the serving snapshot's index is as it was
    again = SnapshotReader(cfg.data_dir, previous=first)
    assert again.approximate is not None and again.approximate.shared is first.approximate.shared
    assert found(again, np.ones(len(again.live), dtype=bool)).tolist() == list(range(len(again.live)))


def found(reader, mask: np.ndarray) -> np.ndarray:
    """Every position the approximate index returns among the `mask`ed rows, asked with each row's own vector (a
    row is its own nearest: the fast-scan kernel leaves out rows at the worst distance it can count, which one
    query of the sparse hashed vectors has by the dozen)."""
    every = np.arange(len(mask))
    return reader.approximate.candidates(np.asarray(reader.vectors[every], dtype=np.float32), mask, len(mask))


def test_a_part_joins_the_shared_index_only_when_no_search_reads_it():
    import threading

    lock, order = approximate.ReadWriteLock(), []
    reading, release = threading.Event(), threading.Event()

    def search() -> None:
        with lock.reading():
            order.append("search")
            reading.set()
            release.wait(5)

    def join() -> None:
        with lock.writing():
            order.append("join")

    searcher = threading.Thread(target=search)
    searcher.start()
    reading.wait(5)
    joiner = threading.Thread(target=join)
    joiner.start()
    late = threading.Thread(target=search)  # a search that comes while a part waits to join waits after it
    joiner.join(0.2)
    late.start()
    late.join(0.2)
    assert order == ["search"] and joiner.is_alive() and late.is_alive()
    release.set()
    for thread in (searcher, joiner, late):
        thread.join(5)
    assert order == ["search", "join", "search"]


def test_exact_search_is_a_setting(indexed, tmp_path):
    from indexer.config import load
    from query.service import Service

    corpus, _ = indexed
    cfg = private_copy(corpus, tmp_path)
    cfg.path.write_text("exact_search = true\n" + corpus.cfg.path.read_text().replace('"data"', f'"{cfg.data_dir}"'))
    exact = Service(load(cfg.path))
    assert exact.cfg.exact_search and exact.reader().approximate is None
    assert exact.status("default").vectors["search"] == "exact (exact_search = true)"
    approximate_one = Service(corpus.cfg)
    assert approximate_one.reader().approximate is not None
    assert approximate_one.status("default").vectors["search"].startswith("approximate past 0 allowed chunks")


def one_part_view(codebook: Codebook, base: np.ndarray, folder: Path):
    """A view of a shared index of one part holding `base`'s codes."""

    class Part:
        key = "part"
        codes = (codebook.encode(base), codebook.digest)

        def __len__(self):
            return len(base)

    return approximate.Shared(codebook, folder).view([Part()], np.array([0, len(base)]))


def test_recall_on_real_model_vectors(tmp_path):
    """This repository's own code embedded by the default model (int8): with every list probed, PQ codes rank
    well enough that the exactly rescored candidates hold the exact top 10; with a quarter probed, most of it.
    (At a realistic size, 1,024 lists, 256 probed and 2,000 candidates, make bench-recall measures 0.955 on a
    million real chunks; a test cannot embed that many.)"""
    from indexer.embed import load_embedder

    lines = [ln for p in sorted((ROOT / "query").rglob("*.py")) for ln in p.read_text().splitlines()]
    texts = ["\n".join(lines[i : i + 12]) for i in range(0, len(lines), 12)][:500]
    vectors = load_embedder("all-MiniLM-L6-v2+int8").embed(texts).astype(np.float32)
    held = np.arange(0, len(vectors), 9)
    queries, base = vectors[held], np.delete(vectors, held, axis=0)
    recall = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ann, "LISTS", 16)
        codebook = Codebook(ann.train(base))

        index = one_part_view(codebook, base, tmp_path)
        for probed in (16, 4):
            index.shared.nprobe = probed
            found = 0
            for q in queries:
                nth = np.sort(base @ q)[-10]
                near = index.candidates(q[None, :], np.ones(len(base), dtype=bool), 50)
                found += int(np.sum(np.sort(base[near] @ q)[-10:] >= nth - 1e-6))
            recall[probed] = found / (10 * len(queries))
    assert recall[16] >= 0.99 and recall[4] >= 0.8, recall


def test_mapped_lists_hold_what_faiss_packs_and_answer_as_its_own_lists_do(tmp_path):
    """A 4-bit index's lists live in a mapped file that blobdex writes (query/mapped_lists.py): joined a few codes
    at a time (partly filled blocks packed again, lists moved as they outgrow their room), they hold the very ids
    and packed bytes faiss's own lists hold for the same codes added at once, and searches answer the same."""
    import faiss

    from query.mapped_lists import MappedLists, plain_index

    rng = np.random.default_rng(5)
    sample = rng.standard_normal((3_000, 16)).astype(np.float32)
    sample /= np.linalg.norm(sample, axis=1, keepdims=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ann, "LISTS", 4)
        codebook = Codebook(ann.train(sample))
    lists = MappedLists(codebook.index, tmp_path)
    assert isinstance(faiss.downcast_InvertedLists(codebook.index.invlists), faiss.OnDiskInvertedLists)
    assert not list(tmp_path.iterdir())  # the file has no name
    added, moved = [], set()
    for count in (40, 1, 23, 64, 300, 5, 31, 1_000):  # blocks of 32: partly filled, filled, many at once
        codes = codebook.encode(sample[rng.integers(0, len(sample), count)])
        ids = np.arange(sum(len(c) for c in added), sum(len(c) for c in added) + count, dtype=np.int64)
        before = lists.offset.copy()
        lists.add(codes, ids, approximate.list_numbers(codebook.index, codes))
        moved.update(np.flatnonzero(lists.offset != before).tolist())
        added.append(codes)
        whole = np.concatenate(added)
        plain = plain_index(codebook.index)
        plain.add_sa_codes(whole, np.arange(len(whole), dtype=np.int64))
        reference = faiss.IndexIVFPQFastScan(plain)
        theirs, ours = faiss.downcast_InvertedLists(reference.invlists), lists.lists
        for number in range(4):
            size = theirs.list_size(number)
            assert ours.list_size(number) == size
            assert (
                faiss.rev_swig_ptr(ours.get_ids(number), size) == faiss.rev_swig_ptr(theirs.get_ids(number), size)
            ).all()
            packed = -(-size // 32) * lists.block
            assert (
                faiss.rev_swig_ptr(ours.get_codes(number), packed)
                == faiss.rev_swig_ptr(theirs.get_codes(number), packed)
            ).all()
        queries, params = sample[:5], faiss.SearchParametersIVF(nprobe=4)
        assert [a.tolist() for a in codebook.index.search(queries, 50, params=params)] == [
            a.tolist() for a in reference.search(queries, 50, params=params)
        ]
    assert moved  # lists outgrew their room and moved to the file's end


def test_an_8bit_codebook_trained_before_still_serves_at_its_own_settings(tmp_path):
    """Codebooks were 8-bit IndexIVFPQ until 4-bit fast-scan ones: a data dir that holds one is searched through it
    (96 lists, 500 candidates) until `blobdex index --full` trains a new one; status names which."""
    import faiss

    rng = np.random.default_rng(6)
    base = rng.standard_normal((2_000, 32)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    old = faiss.IndexIVFPQ(faiss.IndexFlatIP(32), 32, 8, 4, 8, faiss.METRIC_INNER_PRODUCT)
    old.cp.min_points_per_centroid = old.pq.cp.min_points_per_centroid = 1
    old.train(base)
    blob = faiss.serialize_index(old).tobytes()
    (tmp_path / CODEBOOK).write_bytes(blob)
    codebook = Codebook.read(tmp_path / CODEBOOK)
    assert not codebook.fast and not ann.is_fast(tmp_path / CODEBOOK)

    view = one_part_view(codebook, base, tmp_path)
    assert (view.shared.nprobe, view.shared.rescore) == (approximate.NPROBE_8BIT, approximate.RESCORE_8BIT)
    mask = np.ones(len(base), dtype=bool)
    mask[::2] = False
    near = view.candidates(base[1:2], mask, 5)
    assert 1 in near.tolist() and not (near % 2 == 0).any()


def test_verify_names_a_damaged_codebook_or_codes_and_search_stays_exact(indexed, tmp_path, caplog):
    from indexer.snapshot.verify import verify

    corpus, _ = indexed
    cfg = private_copy(corpus, tmp_path)
    reader = SnapshotReader(cfg.data_dir)
    assert verify(cfg.data_dir)[1] == []
    ref = parts_of(reader.path, reader.manifest)[0]
    codes = ref.dir / CODES
    codes.write_bytes(codes.read_bytes()[:-64])
    assert any(f"part {ref.part_id}: {CODES}" in p for p in verify(cfg.data_dir)[1])
    (reader.path / CODEBOOK).write_bytes(b"not a codebook")
    assert any(p.startswith(f"{CODEBOOK}: ") for p in verify(cfg.data_dir)[1])
    damaged = SnapshotReader(cfg.data_dir)
    assert damaged.approximate is None and "vector search is exact" in caplog.text
    assert ranks(damaged, "def return") == ranks(SnapshotReader(cfg.data_dir, exact=True), "def return")


@pytest.mark.parametrize("pool", [2000, 3])  # 3: most rows BM25 finds are not among the index's candidates
def test_route_through_the_approximate_index_names_the_repo_that_holds_the_task(indexed, pool, monkeypatch):
    from indexer.embed import HashEmbedder
    from query import route_task
    from query.route_task import route

    corpus, files = indexed
    monkeypatch.setattr(route_task, "ROUTE_POOL", pool)
    reader, exact = SnapshotReader(corpus.cfg.data_dir), SnapshotReader(corpus.cfg.data_dir, exact=True)
    for name in ("one", "two"):
        text = next(iter(files[name].values())).decode().split("\n\n\n")[1]  # one function of one file
        routes = route(reader, HashEmbedder(), text, limit=2)
        assert routes[0].repo == name
        assert (
            routes[0].evidence[0]["relevance"]
            == route(exact, HashEmbedder(), text, limit=2)[0].evidence[0]["relevance"]
        )
