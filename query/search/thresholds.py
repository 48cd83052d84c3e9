"""Score thresholds on a hit's similarity (Hit.similarity, the exact cosine): min_score, or min_score_diff below
the best hit, never both, and neither where no similarity is computed. The query facade applies them for every
surface (query.service), so a threshold means one thing and is refused in one sentence on each."""

from __future__ import annotations

from dataclasses import dataclass

from query.search.request import Hit, SearchError

BOTH = "min_score and min_score_diff are mutually exclusive: pass one of them, not both"
NO_SIMILARITY = (
    "min_score and min_score_diff act on the cosine similarity, which mode 'bm25' does not compute "
    "(it reads no model); drop them or use mode 'hybrid'"
)


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """A request's score threshold: the floor itself (min_score) or its distance below the best hit
    (min_score_diff); a record with both cannot be made."""

    min_score: float | None = None
    min_score_diff: float | None = None

    def __post_init__(self):
        if self.min_score is not None and self.min_score_diff is not None:
            raise SearchError(BOTH)

    def check(self, mode: str) -> None:
        """Refuse a threshold the search mode gives nothing to compare with (BM25 alone embeds nothing)."""
        if mode == "bm25" and (self.min_score is not None or self.min_score_diff is not None):
            raise SearchError(NO_SIMILARITY)

    def floor(self, hits: list[Hit]) -> float | None:
        return similarity_floor(hits, self.min_score, self.min_score_diff)

    def keep(self, hits: list) -> tuple[list, list[str]]:
        return keep_similar(hits, self.min_score, self.min_score_diff)


def similarity_floor(hits: list[Hit], min_score: float | None, min_score_diff: float | None) -> float | None:
    """The similarity a hit must reach under a threshold, None without one: min_score itself, or min_score_diff
    below the best hit (never below 0, as the codesearch contract echoes it)."""
    if min_score is not None:
        return min_score
    if min_score_diff is not None and hits:
        return max(max(h.similarity for h in hits) - min_score_diff, 0.0)
    return None


def keep_similar(hits: list, min_score: float | None, min_score_diff: float | None) -> tuple[list, list[str]]:
    """A threshold over (id, Hit) pairs, as search pages apply it (similarity_floor; one threshold, not both):
    returns what is kept and a note saying how many it dropped."""
    floor = similarity_floor([h for _, h in hits], min_score, min_score_diff)
    if floor is None:
        return hits, []
    kept = [(c, h) for c, h in hits if h.similarity >= floor]
    name, value = ("min_score", min_score) if min_score is not None else ("min_score_diff", min_score_diff)
    return kept, [f"{name}={value} dropped {len(hits) - len(kept)}"]
