"""The optional cross-encoder pass. No cross-encoder weights can be obtained offline here, so the
plumbing runs a real sentence-transformers CrossEncoder with small, seeded random weights (like the
hashing embedder, a stand-in for plumbing, never for meaning). Its quality is not asserted."""

from dataclasses import replace

import numpy as np
import pytest

from indexer import config as configmod
from indexer.config import RepoSpec
from indexer.embed import embed_text
from query.eval.metrics import run_cases
from query.eval.queries import load_queries
from query.localize import localize
from query.rerank import RERANK_POOL, RerankError, load_reranker
from query.search import SearchRequest, rank, search
from tests.corpus import write_config

WORDS = (
    "def return class self total tax invoice refund renew subscription queue drain price line items "
    "with amount rate order customer"
).split()


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("cross-encoder")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(WORDS) + 5,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=1,
        max_position_embeddings=512,
        initializer_range=0.5,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    return load_reranker(str(folder))


def test_off_unless_configured_and_a_bad_path_says_so(tmp_path):
    assert load_reranker("") is None and load_reranker(None) is None
    with pytest.raises(RerankError, match="cannot load reranker .*set `reranker` in blobdex.toml"):
        load_reranker(str(tmp_path / "missing"))


def test_rerank_reorders_the_hybrid_head_by_the_cross_encoder(reader, hasher, cross_encoder):
    req = SearchRequest(query="invoice total with tax", limit=5)
    fused = [row for row, _ in rank(reader, hasher, req)][:RERANK_POOL]
    texts = [embed_text(reader.row(r)["symbol"], reader.row(r)["text"]) for r in fused]
    scores = np.asarray(cross_encoder.model.predict([(req.query, t) for t in texts])).reshape(-1)
    assert len(set(np.round(scores, 6))) > 1  # the seeded weights tell candidates apart
    expected = [fused[i] for i in sorted(range(len(fused)), key=lambda i: (-scores[i], i))][:5]
    hits = search(reader, hasher, req, reranker=cross_encoder)
    assert [h.row for h in hits] == expected
    assert all(h.signals.rerank_score is not None for h in hits)
    plain = search(
        reader, hasher, SearchRequest(query="invoice total with tax", limit=5, mode="bm25"), reranker=cross_encoder
    )
    assert plain and all(h.signals.rerank_score is None for h in plain)  # single signals stay pure


def test_eval_adds_a_rerank_column(reader, hasher, cross_encoder, tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "renew_subscription", "expected": ["src/billing/renew.py"]}\n')
    result = run_cases(reader, hasher, load_queries(path), reranker=cross_encoder)
    assert set(result["summary"]) == {"hybrid", "vector", "bm25", "history", "rerank"}
    assert result["cases"][0]["rerank"]["top"]
    files = localize(reader, hasher, SearchRequest(query="invoice total with tax"), reranker=cross_encoder)
    assert any(f.signals.get("rerank_rank") == 1 for f in files)  # its order is one more ranking fused per file


def test_repo_add_keeps_the_reranker_and_session_settings(tmp_path):
    cfg = write_config(tmp_path, [])
    text = cfg.path.read_text() + 'reranker = "/models/ce"\nsession_idle_hours = 2.5\n'
    cfg.path.write_text(text)
    cfg = configmod.load(cfg.path)
    configmod.save(replace(cfg, repos=(RepoSpec(name="api", url="/src/api"),)))
    again = configmod.load(cfg.path)
    assert (again.reranker, again.session_idle_hours, [r.name for r in again.repos]) == ("/models/ce", 2.5, ["api"])


def test_codesearchnet_eval_adds_a_rerank_column(reader, hasher, cross_encoder, tmp_path):
    from query.eval.codesearchnet import evaluate

    url = f"https://github.com/o/r/blob/{'1' * 40}/src/billing/invoice.py#L1-L9"
    (tmp_path / "annotationStore.csv").write_text(
        f"Language,Query,GitHubUrl,Relevance,Notes\nPython,invoice total with tax,{url},3,\n"
    )
    result = evaluate(reader, hasher, tmp_path, "api", reranker=cross_encoder)
    assert set(result["summary"]) == {"hybrid", "vector", "bm25", "rerank"}
    assert result["summary"]["rerank"]["all"]["n"] == result["summary"]["hybrid"]["all"]["n"] == 1
