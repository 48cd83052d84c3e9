"""NDCG on graded judgements (the CodeSearchNet challenge's format), on a fixture corpus laid out like
sourcegraph-testing/codesearchnet. The real figures are measured on the real corpus, not asserted here."""

import json
import math

import pytest
from click.testing import CliRunner

from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from indexer.build import run
from query.cli import cli
from query.eval.codesearchnet import Judged, JudgementError, evaluate, load, ndcg_within
from query.reader import SnapshotReader
from tests import gitrepo
from tests.corpus import write_config

C1, C2 = "1" * 40, "2" * 40
GEO = (
    b"def haversine_distance(a, b):\n    return great_circle(a, b)\n\n\n"
    b"def parse_csv_rows(text):\n    return [line.split(',') for line in text.splitlines()]\n"
)
WRITER = b"def write_csv_file(rows, path):\n    open(path, 'w').write(format_csv(rows))\n"
URL = "https://github.com/{}/blob/{}/{}#L{}-L{}"


def annotations(tmp_path, rows) -> object:
    folder = tmp_path / "csn"
    folder.mkdir(exist_ok=True)
    lines = ["Language,Query,GitHubUrl,Relevance,Notes"] + [",".join(map(str, r)) + "," for r in rows]
    (folder / "annotationStore.csv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture
def csn(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "csn")
    gitrepo.commit(
        repo, {f"files/{C1}_geo_util.py": GEO, f"files/{C2}_io_writer.py": WRITER, "README.md": b"# corpus\n"}
    )
    cfg = write_config(tmp_path, [RepoSpec(name="csn", url=str(tmp_path / "src" / "csn"))])
    run(cfg, show_progress=False)
    folder = annotations(
        tmp_path,
        [
            ("Python", "parse csv rows", URL.format("o/geo", C1, "geo/util.py", 5, 6), 3),
            ("Python", "parse csv rows", URL.format("o/geo", C1, "geo/util.py", 5, 6), 2),  # averaged: 2.5
            ("Python", "parse csv rows", URL.format("o/io", C2, "io/writer.py", 1, 2), 1),
            ("Python", "parse csv rows", URL.format("o/geo", C1, "geo/util.py", 1, 2), 0),
            ("Python", "distance on a sphere", URL.format("o/gone", "3" * 40, "x.py", 1, 9), 3),  # file not in corpus
            ("Go", "parse csv rows", URL.format("o/geo", C1, "geo/util.py", 5, 6), 0),  # all zero: left out
        ],
    )
    return cfg, folder


def test_ndcg_within_follows_the_challenge():
    judged = [
        Judged(url="a", path="p", start=1, end=2, relevance=3),
        Judged(url="b", path="p", start=3, end=4, relevance=1),
        Judged(url="c", path="p", start=5, end=6, relevance=0),
    ]
    assert ndcg_within(["a", "b"], judged) == 1.0
    ideal = 7 + 1 / math.log2(3)
    assert ndcg_within(["b", "a"], judged) == pytest.approx((1 + 7 / math.log2(3)) / ideal)
    assert ndcg_within(["c", "b", "a"], judged) == pytest.approx((1 / math.log2(3) + 7 / 2) / ideal)
    assert ndcg_within([], judged) == 0.0
    assert ndcg_within(["c"], [Judged(url="c", path="p", start=5, end=6, relevance=0)]) is None


def test_load_maps_urls_to_corpus_paths_and_averages(csn):
    judged = load(csn[1])
    parse = {j.url: j for j in judged[("Python", "parse csv rows")]}
    assert len(parse) == 3
    best = next(j for j in parse.values() if j.start == 5)
    assert (best.path, best.end, best.relevance) == (f"files/{C1}_geo_util.py", 6, 2.5)


def test_bad_annotation_files_say_where(tmp_path):
    with pytest.raises(JudgementError, match="annotationStore.csv does not exist"):
        load(tmp_path)
    with pytest.raises(JudgementError, match=r":2: unknown language 'Cobol'"):
        load(annotations(tmp_path, [("Cobol", "q", URL.format("o/r", C1, "a.cob", 1, 2), 1)]))
    with pytest.raises(JudgementError, match=r":2: relevance 'high' is not a number"):
        load(annotations(tmp_path, [("Go", "q", URL.format("o/r", C1, "a.go", 1, 2), "high")]))


def test_evaluate_ranks_annotated_spans_by_overlapping_chunks(csn):
    cfg, folder = csn
    reader = SnapshotReader(cfg.data_dir)
    result = evaluate(reader, HashEmbedder(), folder, "csn")
    assert result["coverage"] == {"judgements": 5, "indexed": 4, "share": 0.8}
    bm25 = {(c["language"], c["query"]): c["bm25"] for c in result["cases"]}
    # BM25 ranks parse_csv_rows (2.5) above write_csv_file (1) and never reaches haversine (0): ideal order.
    assert bm25[("Python", "parse csv rows")] == 1.0
    assert bm25[("Python", "distance on a sphere")] == 0.0  # its file is not in the corpus
    assert bm25[("Go", "parse csv rows")] is None  # every grade 0
    assert result["summary"]["bm25"]["all"] == {"n": 2, "ndcg": 0.5}
    assert result["summary"]["bm25"]["languages"] == {"n": 1, "ndcg": 0.5}  # Python only: Go is all zeros
    assert set(result["summary"]) == {"hybrid", "vector", "bm25"}
    with pytest.raises(JudgementError, match="repo 'nope' has no indexed chunks"):
        evaluate(reader, HashEmbedder(), folder, "nope")


def test_cli_compares_two_models_in_one_command(csn):
    cfg, folder = csn
    args = ["--config", str(cfg.path), "eval", "codesearchnet", str(folder), "--repo", "csn"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "judged spans whose file is indexed: 4/5" in out.output and "model=blobdex:hash" in out.output
    out = CliRunner().invoke(cli, args + ["--json", "--model", "blobdex:hash", "--model", "blobdex:hash"])
    assert out.exit_code == 0, out.output
    results = json.loads(out.stdout)
    assert [r["configuration"]["model"] for r in results] == ["blobdex:hash", "blobdex:hash"]
    assert results[0]["summary"] == results[1]["summary"]
    assert not (cfg.data_dir / "eval" / "default-csn" / "CURRENT").exists()  # the scratch snapshot is dropped
