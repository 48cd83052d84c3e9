"""What an eval measures and how it prints: the labelled case, file-level scores per mode (each signal alone,
hybrid, reranked), the configuration a run measured, and the summary table.

Every run measures BM25-only, vector-only and hybrid side by side and prints the configuration it
measured, so a change is judged as a ratio in one run, not against a remembered number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from query import localize as localize_module
from query import route_task as route_module
from query import search as search_module
from query.localize import FILE_MODES, localize
from query.reader import SnapshotReader
from query.search import SearchRequest


@dataclass(frozen=True, kw_only=True)
class Case:
    query: str
    expected: tuple[str, ...]  # repo-relative paths
    repo: str | None = None
    commit_id: str | None = None  # for commit cases: the commit whose parent is searched


HITS = (1, 5, 10)  # the hit@k columns every eval reports; `eval issues` adds 3


@dataclass
class Scores:
    ranks: list[int | None] = field(default_factory=list)  # rank of the first expected file, per case
    recalls: list[float] = field(default_factory=list)  # share of expected files in the top 10

    def add(self, ranked: list[str], expected: tuple[str, ...]) -> dict:
        rank = next((i for i, p in enumerate(ranked, 1) if p in expected), None)
        recall = len(set(ranked[:10]) & set(expected)) / len(expected)
        self.ranks.append(rank)
        self.recalls.append(recall)
        return {"rank": rank, "recall@10": round(recall, 3)}

    def summary(self, hits: tuple[int, ...] = HITS) -> dict:
        """n, hit@k for each k in `hits` (the share of cases whose first expected file ranks k or better),
        recall@10 and MRR."""
        n = len(self.ranks) or 1

        def hit(k: int) -> float:
            return sum(1 for r in self.ranks if r is not None and r <= k) / n

        return {
            "n": len(self.ranks),
            **{f"hit@{k}": round(hit(k), 3) for k in hits},
            "recall@10": round(sum(self.recalls) / n, 3),
            "mrr": round(sum(1 / r for r in self.ranks if r) / n, 3),
        }


def configuration(reader: SnapshotReader, reranker=None) -> dict:
    return {
        "model": reader.manifest.model_id,
        "reranker": reranker.model_id if reranker else "off",
        "snapshot_id": reader.snapshot_id,
        **reader.manifest.tools.as_fields(),  # chunker, policy, tokenizer and extractor: each changes what is ranked
        "rrf_k": search_module.RRF_K,
        "weights": "/".join(f"{k}:{v:g}" for k, v in search_module.WEIGHTS.items()),
        "candidates": search_module.CANDIDATES,
        "symbol_boost": search_module.SYMBOL_BOOST,
        "path_boost": search_module.PATH_BOOST,
        "compound_boost": search_module.COMPOUND_BOOST,
        "file_decay": localize_module.DECAY,
        "non_source_weight": localize_module.NON_SOURCE_WEIGHT,
        "off_topic_test_weight": localize_module.OFF_TOPIC_TEST_WEIGHT,
        "off_topic_code_weight": localize_module.OFF_TOPIC_CODE_WEIGHT,
        "history_weight": localize_module.HISTORY_WEIGHT,
        "route_history_weight": route_module.HISTORY_WEIGHT,
    }


def modes(reranker=None, history: bool = True) -> tuple[str, ...]:
    """The columns an eval measures: each signal alone, hybrid, and hybrid reranked when a reranker is set."""
    columns = FILE_MODES if history else tuple(m for m in FILE_MODES if m != "history")
    return columns + (("rerank",) if reranker is not None else ())


def run_cases(reader: SnapshotReader, embedder, cases: list[Case], org: str = "default", reranker=None) -> dict:
    """Score file-level rankings of every case in each mode."""
    columns = modes(reranker)
    scores = {mode: Scores() for mode in columns}
    rows = []
    for case in cases:
        row = {"query": case.query, "expected": list(case.expected), "repo": case.repo}
        if case.commit_id:
            row["commit_id"] = case.commit_id
        for mode in columns:
            req = SearchRequest(
                query=case.query,
                org=org,
                repos=(case.repo,) if case.repo else (),
                limit=10,
                mode="hybrid" if mode == "rerank" else mode,
            )
            ranked = [f.path for f in localize(reader, embedder, req, reranker if mode == "rerank" else None)]
            row[mode] = {**scores[mode].add(ranked, case.expected), "top": ranked[:3]}
        rows.append(row)
    return {"summary": {mode: scores[mode].summary() for mode in columns}, "cases": rows}


def configuration_line(result: dict) -> str:
    return "configuration: " + ", ".join(f"{k}={v}" for k, v in result["configuration"].items())


def render(result: dict) -> str:
    columns = list(next(iter(result["summary"].values())))  # n, hit@k for the k measured, recall@10, mrr
    widths = {c: 4 if c == "n" else max(6, len(c)) for c in columns}
    lines = [configuration_line(result), "", f"{'mode':<8} " + " ".join(f"{c:>{widths[c]}}" for c in columns)]
    for mode, s in result["summary"].items():
        lines.append(f"{mode:<8} " + " ".join(f"{s[c]:>{widths[c]}}" for c in columns))
    return "\n".join(lines)
