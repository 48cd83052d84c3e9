"""The trigram index grep narrows by (indexer/snapshot/grams.py, query/narrow.py): it never drops a row that
matches, on hostile patterns and Unicode case-folding alike, and it does narrow."""

from __future__ import annotations

import random
import shutil
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import re2
from dulwich.repo import Repo

from indexer.build import run
from indexer.config import RepoSpec
from indexer.snapshot import part_file, parts_of
from indexer.snapshot.verify import verify
from indexer.snapshot import grams as grams_format
from indexer.snapshot.grams import BLOCK, Grams
from query.grep import compile_pattern, grep
from query.narrow import candidates, need_of
from query.reader import SnapshotReader
from tests import gitrepo
from tests.corpus import build_corpus, private_copy, source_files

# Words whose case-folding is not the ASCII rule: the Kelvin sign and long s fold to k and s (RE2 matches them
# case-insensitively), sharp s folds to two letters, a dotted capital I to i and a combining dot.
WORDS = (
    "parse Parser KELVIN \u212aelvin \u017ftring string stra\u00dfe STRASSE \u0130stanbul istanbul why? a?b x_y "
    "return self def 😀emoji \t ( ) { } [ ] ."
).split(" ")
PIECES = (
    "parse PARSE kelvin \u212a str \u017ft stra\u00dfe ss \u0130s is why \\? a.b . \\w+ \\s* (re|ret)urn (self|def) "
    "[pq] x_?y e{2} (ar)+ ^ $ \\b (?i) 😀 mo?ji tr|st .* (?:de)f \\. [[:alpha:]]+ s{1,2}"
).split(" ")


class Part:
    """What `candidates` reads of a part: its length and its trigram index."""

    def __init__(self, texts, path):
        grams_format.write(path, texts)
        self.grams = Grams(path, len(texts))
        self.length = len(texts)

    def __len__(self):
        return self.length


def texts_of(rng, n):
    """Rows of random filler with a word of WORDS in about one in six: rare enough that most blocks lack each."""

    def filler():
        return "".join(rng.choice("bcdfghjlmnvwz") for _ in range(rng.randint(3, 7)))

    rows = []
    for _ in range(n):
        words = [filler() for _ in range(rng.randint(2, 5))]
        if rng.random() < 0.17:
            words.insert(rng.randint(0, len(words)), rng.choice(WORDS))
        rows.append(" ".join(words[:3]) + "\n" + " ".join(words[3:]))
    return rows


def test_narrowing_never_drops_a_match(tmp_path):
    rng = random.Random(36)
    texts = texts_of(rng, 1200)
    parts = [Part(texts[:700], tmp_path / "a.arrow"), Part(texts[700:], tmp_path / "b.arrow")]
    offsets = np.array([0, 700, 1200])
    every = np.ones(len(texts), dtype=bool)
    checked = narrowed = 0
    for _ in range(2000):
        pattern = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4)))
        literal, ignore_case = rng.random() < 0.25, rng.random() < 0.5
        try:
            compiled = compile_pattern(pattern, literal, ignore_case)
        except Exception:
            continue  # RE2 refuses it: grep never narrows what it cannot run
        kept = set(candidates(parts, offsets, need_of(pattern, literal), every).tolist())
        matching = {i for i, t in enumerate(texts) if compiled.search(t)}
        assert matching <= kept, (pattern, literal, ignore_case, sorted(matching - kept)[:5])
        some = np.array([rng.random() < 0.5 for _ in texts])  # a filter's rows: only those, in order
        assert candidates(parts, offsets, need_of(pattern, literal), some).tolist() == sorted(
            i for i in kept if some[i]
        )
        checked += 1
        narrowed += len(kept) < len(texts)
    assert checked > 1300 and narrowed > checked // 4  # most patterns read fewer rows, not a filter that keeps all


@pytest.mark.parametrize(
    ("pattern", "literal", "grams"),
    [
        ("hello", False, {"hel", "ell", "llo"}),
        ("HeLLo", True, {"hel", "ell", "llo"}),
        ("foo(bar|baz)", False, {"foo", "oob", "oba"}),  # Python factors the branches' common "ba" out
        ("(alpha|beta)_id", False, {"_id"}),
        (r"def\s+main", False, {"def", "mai", "ain"}),
        ("a.b", True, {"a.b"}),
        ("\u212aelvin", False, {"kel", "elv", "lvi", "vin"}),
    ],
)
def test_what_a_pattern_needs(pattern, literal, grams):
    need = need_of(pattern, literal)
    flat = set(need.grams)
    for branches in need.anyof:
        for branch in branches:
            flat |= branch.grams
    as_text = {bytes([(g >> 14) & 127, (g >> 7) & 127, g & 127]).decode() for g in flat}
    assert grams <= as_text


@pytest.mark.parametrize(
    "pattern", [r"\w+", "ab", ".*", "x|yz", "[[:alpha:]]xyz", "a{,3}bc", "(ab)*cd", r"\pLxyz", "(?U)abc", r"\Qabc\E"]
)
def test_patterns_that_say_nothing_read_every_row(pattern):
    re2.compile(pattern)  # each is a pattern grep runs
    # POSIX classes and \p, \Q and (?U) are RE2's own syntax: Python reads them otherwise or not at all, so they
    # are not narrowed; a{,3} is literal text to RE2, a repeat to Python, which needs less, never more.
    assert need_of(pattern) is None


def test_the_index_blocks_rows(tmp_path):
    texts = [f"row {i} " + ("needle" if i in (5, 40) else "hay") for i in range(100)]
    grams_format.write(tmp_path / "g.arrow", texts)
    index = Grams(tmp_path / "g.arrow", len(texts))
    assert index.count == -(-100 // BLOCK)
    part = Part(texts, tmp_path / "h.arrow")
    kept = candidates([part], np.array([0, 100]), need_of("needle"), np.ones(100, bool)).tolist()
    assert kept == list(range(0, 16)) + list(range(32, 48))  # the two blocks that hold it, whole
    assert candidates([part], np.array([0, 100]), need_of("missing"), np.ones(100, bool)).tolist() == []


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """Two repos of made-up code, indexed: (corpus, the files of repo `one`)."""
    rng = random.Random(7)
    one, two = source_files(rng, 60), source_files(rng, 40)
    one["pkg/special.py"] = b"def Needle_Finder(haystack):\n    return haystack.find('K\xe2\x84\xaaelvin ?x')\n"
    return build_corpus(tmp_path_factory.mktemp("grams"), {"one": one, "two": two}), one


def without_index(data_dir) -> SnapshotReader:
    unindexed = SnapshotReader(data_dir)
    for part in unindexed.parts:
        part.grams = None
    return unindexed


ASKED = [
    dict(pattern="Needle_Finder"),
    dict(pattern="needle_finder", ignore_case=True),
    dict(pattern="needle_finder"),  # case-sensitive: no match, and the index lets its block through anyway
    dict(pattern="kelvin ?x", literal=True, ignore_case=True),
    dict(pattern="\u212aelvin", ignore_case=True),
    dict(pattern=r"def \w+\(haystack\)"),
    dict(pattern=r"return \w+\.find"),
    dict(pattern="(find|finder)"),
    dict(pattern="def", limit=7),
    dict(pattern=r"\.\w+\(\)", limit=500),
    dict(pattern="return", repos=("two",), limit=30),
    dict(pattern="def", paths=("pkg/special.py",)),
]


def all_pages(reader, asked) -> list:
    found, after = [], None
    while True:
        page, after = grep(reader, **{"limit": 5, **asked}, after=after)
        found += page
        if after is None:
            return found


def test_grep_answers_with_the_index_as_without_it(indexed):
    corpus, _ = indexed
    reader, unindexed = SnapshotReader(corpus.cfg.data_dir), without_index(corpus.cfg.data_dir)
    assert all(p.grams is not None for p in reader.parts)
    for asked in ASKED:
        assert grep(reader, **asked) == grep(unindexed, **asked), asked
        assert all_pages(reader, asked) == all_pages(unindexed, asked), asked
    assert [m.path for m in grep(reader, "Needle_Finder")[0]] == ["pkg/special.py"]


def test_a_selective_pattern_reads_few_rows(indexed):
    corpus, one = indexed
    reader = SnapshotReader(corpus.cfg.data_dir)
    every = np.ones(len(reader.live), dtype=bool)
    assert len(every) > 20 * BLOCK  # enough rows that narrowing is visible
    for pattern in ("Needle_Finder", "haystack.find"):
        kept = candidates(reader.parts, reader.offsets, need_of(pattern), every)
        assert 0 < len(kept) <= BLOCK
    name = next(iter(one)).split("/")[1].split("_")[0]  # a file's made-up word
    assert len(candidates(reader.parts, reader.offsets, need_of(name), every)) < len(every) // 4


def test_a_delta_part_is_indexed_and_a_missing_or_damaged_index_reads_the_part_whole(indexed, tmp_path, caplog):
    corpus, one = indexed
    cfg = private_copy(corpus, tmp_path)
    moved = tmp_path / "one"  # the repo, one commit later (the module's own source stays as it was)
    shutil.copytree(corpus.root / "src" / "one", moved)
    changed = {**one, "pkg/special.py": b"def Needle_Finder(haystack):\n    return 'moved elsewhere'\n"}
    gitrepo.commit(Repo(str(moved)), changed)
    run(replace(cfg, repos=(RepoSpec(name="one", url=str(moved)), cfg.repos[1])), show_progress=False)
    reader = SnapshotReader(cfg.data_dir)
    assert [m.text for m in grep(reader, "moved elsewhere")[0]] == ["    return 'moved elsewhere'"]
    assert grep(reader, "haystack.find", literal=True)[0] == []  # the superseded row is not read
    refs = parts_of(reader.path, reader.manifest)
    assert all(part_file(r, "grams").exists() for r in refs)

    first, second = (part_file(r, "grams") for r in refs[:2])
    first.unlink()  # as a part written before the index existed
    second.write_bytes(second.read_bytes()[:-40])  # damaged
    whole = SnapshotReader(cfg.data_dir)
    assert whole.parts[0].grams is None and whole.parts[1].grams is None
    assert "trigram index is unusable" in caplog.text
    for asked in ASKED:
        assert grep(whole, **asked) == grep(without_index(cfg.data_dir), **asked), asked
    _, problems = verify(cfg.data_dir)
    assert any(second.name in p and refs[1].part_id in p for p in problems), problems


def test_duckdb_reads_the_live_chunks_through_graph_sql(indexed, tmp_path):
    """graph.sql's `chunks`: plain DuckDB over the parts' chunk_text.parquet, superseded rows left out, the same
    live rows the server reads."""
    import duckdb

    corpus, one = indexed
    cfg = private_copy(corpus, tmp_path)
    moved = tmp_path / "one"
    shutil.copytree(corpus.root / "src" / "one", moved)
    gitrepo.commit(Repo(str(moved)), {**one, "pkg/special.py": b"def Needle_Finder(haystack):\n    return 0\n"})
    run(replace(cfg, repos=(RepoSpec(name="one", url=str(moved)), cfg.repos[1])), show_progress=False)
    reader = SnapshotReader(cfg.data_dir)
    con = duckdb.connect()
    con.execute(f"SET file_search_path = '{reader.path}'")
    con.execute((reader.path / "graph.sql").read_text())
    rows = con.execute("SELECT row, repo, path, text FROM chunks ORDER BY row").fetchall()
    live = np.flatnonzero(reader.live)
    expected = sorted((reader.row_id(int(i)), reader.row(int(i))["repo"], reader.row(int(i))["path"]) for i in live)
    assert [r[:3] for r in rows] == expected
    special = [r[3] for r in rows if r[2] == "pkg/special.py"]
    assert special == ["def Needle_Finder(haystack):\n    return 0"]  # the superseded text is not read
    assert con.execute("SELECT count(*) FROM chunks c JOIN files f USING (org, repo, path)").fetchone()[0] > 0

    assert verify(cfg.data_dir)[1] == []
    ref = parts_of(reader.path, reader.manifest)[0]
    copy = pq.read_table(part_file(ref, "chunk_text"))
    texts = copy.column("text").to_pylist()
    texts[0] = texts[0] + "\nAWS_SECRET = 'hidden'"  # text the server never serves
    pq.write_table(
        copy.set_column(copy.schema.get_field_index("text"), "text", pa.array(texts)), part_file(ref, "chunk_text")
    )
    assert any(f"{ref.part_id}: chunk_text.parquet does not hold" in p for p in verify(cfg.data_dir)[1])
