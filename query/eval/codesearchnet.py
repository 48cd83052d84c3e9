"""Graded relevance judgements scored with NDCG: the CodeSearchNet challenge's human annotations.

The challenge judged (query, function URL) pairs 0-3. Its corpus repository stores every annotated
file at its annotated commit as `files/<commit>_<path with / replaced by _>`, so a URL maps to one
indexed path and a line span. A retrieved chunk counts for every annotated span of its file that
its lines overlap, and NDCG is the challenge's "within" variant: only annotated results take a rank,
gain is 2^rel - 1, and a (language, query) whose judgements are all 0 is left out (its ideal DCG is 0).
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.embed import embed_text
from indexer.errors import BlobdexError
from query.eval.metrics import configuration_line, modes
from query.reader import SnapshotReader
from query.search import SearchRequest, rank

ANNOTATIONS = "annotationStore.csv"
URL_RE = re.compile(r"^https://github\.com/[^/]+/[^/]+/blob/([0-9a-f]{40})/([^#]+)#L(\d+)(?:-L(\d+))?$")
LANGS = {"Python": "python", "Java": "java", "JavaScript": "javascript", "Ruby": "ruby", "PHP": "php", "Go": "go"}
DEPTH = 200  # candidates per signal; an annotated span ranked below this gains nothing


class JudgementError(BlobdexError):
    pass


@dataclass(frozen=True, kw_only=True)
class Judged:
    url: str
    path: str  # the corpus path that holds the annotated file
    start: int
    end: int
    relevance: float  # the mean of its judgements, 0-3


def corpus_path(commit: str, path: str) -> str:
    return f"files/{commit}_{path.replace('/', '_')}"


def load(directory: Path) -> dict[tuple[str, str], list[Judged]]:
    """Judgements grouped by (language, query), several judgements of one URL averaged."""
    source = directory / ANNOTATIONS if directory.is_dir() else directory
    if not source.is_file():
        raise JudgementError(
            f"{source} does not exist; pass the folder that holds the CodeSearchNet {ANNOTATIONS} (and queries.csv)"
        )
    grades: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with source.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"Language", "Query", "GitHubUrl", "Relevance"} - set(reader.fieldnames or ())
        if missing:
            raise JudgementError(
                f"{source} lacks the column(s) {', '.join(sorted(missing))}; expected "
                f"Language,Query,GitHubUrl,Relevance,Notes"
            )
        for n, row in enumerate(reader, 2):
            if row["Language"] not in LANGS:
                raise JudgementError(f"{source}:{n}: unknown language {row['Language']!r}; known: {', '.join(LANGS)}")
            try:
                grade = float(row["Relevance"])
            except ValueError:
                raise JudgementError(f"{source}:{n}: relevance {row['Relevance']!r} is not a number 0-3") from None
            grades[(row["Language"], row["Query"])][row["GitHubUrl"]].append(grade)
    judged = {}
    for key, urls in grades.items():
        items = []
        for url, values in urls.items():
            m = URL_RE.match(url)
            if m is None:  # a URL without a span cannot be matched to lines
                continue
            start = int(m[3])
            items.append(
                Judged(
                    url=url,
                    path=corpus_path(m[1], m[2]),
                    start=start,
                    end=int(m[4] or start),
                    relevance=sum(values) / len(values),
                )
            )
        judged[key] = items
    if not judged:
        raise JudgementError(f"{source} holds no judgements")
    return judged


def ndcg_within(ranked_urls: list[str], judged: list[Judged]) -> float | None:
    """The challenge's NDCG over annotated results only; None when every grade is 0."""
    grade = {j.url: j.relevance for j in judged}
    dcg = sum((2 ** grade[u] - 1) / math.log2(i + 1) for i, u in enumerate(ranked_urls, 1))
    ideal = sum((2**g - 1) / math.log2(i + 1) for i, g in enumerate(sorted(grade.values(), reverse=True), 1))
    return dcg / ideal if ideal > 0 else None


def annotated_order(reader: SnapshotReader, rows: list[int], judged: list[Judged]) -> list[str]:
    """The annotated URLs in the order their first overlapping chunk was ranked."""
    by_path: dict[str, list[Judged]] = defaultdict(list)
    for j in judged:
        by_path[j.path].append(j)
    starts, ends = reader.cached(
        "line_spans", lambda: (reader.rows.column("line_start").to_numpy(), reader.rows.column("line_end").to_numpy())
    )
    seen = {}
    for row in rows:
        for j in by_path.get(reader.col["path"][row], ()):
            if j.url not in seen and starts[row] <= j.end and j.start <= ends[row]:
                seen[j.url] = None
    return list(seen)


def _embedded(reader: SnapshotReader, row: int) -> str:
    r = reader.row(row)
    return embed_text(r["symbol"], r["text"])


def evaluate(
    reader: SnapshotReader,
    embedder,
    directory: Path,
    repo: str,
    org: str = "default",
    depth: int = DEPTH,
    progress=None,
    reranker=None,
) -> dict:
    """NDCG (within) per mode, overall and per language, with what share of judgements was indexed."""
    judged = load(directory)
    indexed = set(reader.col["path"][(reader.col["org"] == org) & (reader.col["repo"] == repo)])
    if not indexed:
        raise JudgementError(
            f"repo {repo!r} has no indexed chunks in org {org!r}; add the corpus repository "
            f"(sourcegraph-testing/codesearchnet) with 'blobdex repo add' and index it"
        )
    total = sum(len(v) for v in judged.values())
    covered = sum(1 for v in judged.values() for j in v if j.path in indexed)
    columns = modes(reranker, history=False)  # judged code snippets, no history to learn from
    scores: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in columns}
    rows = []
    for i, ((language, query), items) in enumerate(sorted(judged.items())):
        row = {"language": language, "query": query, "judged": len(items)}
        orders = {}
        for mode in columns:
            if mode == "rerank":  # the hybrid order, its head reordered by the cross-encoder
                ranked = [r for r, _ in reranker.rerank(query, orders["hybrid"], lambda r: _embedded(reader, r))]
            else:
                req = SearchRequest(query=query, org=org, repos=(repo,), langs=(LANGS[language],), mode=mode)
                ranked = [key for key, _ in rank(reader, embedder, req, depth=depth)][:depth]
            orders[mode] = ranked
            value = ndcg_within(annotated_order(reader, ranked, items), items)
            if value is not None:
                scores[mode][language].append(value)
                scores[mode]["all"].append(value)
            row[mode] = None if value is None else round(value, 4)
        rows.append(row)
        if progress:
            progress(i + 1, len(judged))
    summary = {
        m: {
            lang: {"n": len(v), "ndcg": round(float(np.mean(v)), 4) if v else None}
            for lang, v in sorted(scores[m].items())
        }
        for m in columns
    }
    for per in summary.values():  # the challenge's leaderboard figure: the mean over languages
        means = [v["ndcg"] for lang, v in per.items() if lang != "all"]
        per["languages"] = {"n": len(means), "ndcg": round(float(np.mean(means)), 4) if means else None}
    return {
        "coverage": {"judgements": total, "indexed": covered, "share": round(covered / total, 4)},
        "depth": depth,
        "summary": summary,
        "cases": rows,
    }


def render_with_configuration(result: dict) -> str:
    return configuration_line(result) + "\n" + render(result)


def render(result: dict) -> str:
    langs = sorted(result["summary"]["hybrid"], key=lambda x: (x not in ("all", "languages"), x))
    c = result["coverage"]
    lines = [
        f"judged spans whose file is indexed: {c['indexed']}/{c['judgements']} ({c['share']:.1%}); "
        f"depth {result['depth']} per signal",
        "",
        f"{'mode':<8} " + " ".join(f"{lang:>10}" for lang in langs),
    ]
    for mode, per in result["summary"].items():
        lines.append(f"{mode:<8} " + " ".join(f"{per.get(lang, {}).get('ndcg') or 0:>10.3f}" for lang in langs))
    n = result["summary"]["hybrid"]
    lines.append(f"{'n':<8} " + " ".join(f"{n[lang]['n']:>10}" for lang in langs))
    return "\n".join(lines)
