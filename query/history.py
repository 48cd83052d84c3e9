"""History from the snapshot's tables: search_commits (BM25 over messages, changed paths and hunks, fused with the
messages' vectors, with filters)
and log (the commits that touched a path, newest first, following renames). Blame and diff read the mirror
(query/blame.py, query/diff.py).

The tables hold the commits each repo's indexed refs reach, as the indexer's history settings bound them
(indexer/history.py); a commit's changed paths are what git's `log PATH` counts (a merge only where it differs
from every parent)."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import tantivy

from indexer.embed import Embedder
from indexer.errors import BlobdexError
from indexer.history import when
from indexer.snapshot import (
    data_dir_of,
    open_history_lexical,
    read_commit_vectors,
    read_history,
    store_error,
)
from indexer.snapshot.read import read_history_parts
from indexer.tokenize import path_tokens, tokens
from query.cursor import encode as cursor_encode
from query.cursor import offset as cursor_offset
from query.get_file import repo_path
from query.query_text import STOPWORDS
from query.reader import SnapshotReader
from query.search import query_vectors, rrf

MAX_COMMITS_PER_PAGE = 200
MAX_DEPTH = 10_000  # commits a cursor may page past (a forged cursor must not size a search)
MAX_FILTER_VALUES = 50  # repos or paths one request may name
REACHABLE_CACHED = 64  # heads whose reachable commits are kept; more start the cache afresh
PATHS_SHOWN = 20  # changed paths listed per commit in an answer; `files_changed` counts them all
FIRST_FETCH = 64  # BM25 hits read first (4 pages' worth at least); widened until a page fills or all are seen
MAX_WORDS = 200  # distinct words of a query the commits index is asked for (a pasted report has more)
# A commit's vector votes only this near the query: unrelated messages score below it with the bundled model
# (the median of pytest's message pairs is 0.16; gibberish reaches 0.25), so a query that names nothing in the
# history finds nothing, as it does by words.
MIN_COSINE = 0.3
PATH_BOOST, HUNK_BOOST = 0.5, 0.3  # a word in the message says more than one in a path or a changed line
# The history signal (file_votes): the past commits most like a task vote for the files they changed.
SIMILAR_COMMITS = 50  # commits that vote
HALF_LIFE_DAYS = 365.0  # a commit this much older than the repo's newest votes half as much


class HistoryError(BlobdexError):
    """History cannot be answered as asked; the message says why and what to try."""

    status = 400


class NoHistory(HistoryError):
    """The snapshot holds no history of that repo (history is off, or the repo is not indexed)."""

    status = 404


class DamagedHistory(HistoryError):
    """The snapshot's history parts or commits index are damaged: the rest of the snapshot still serves."""

    status = 503


@dataclass(frozen=True, kw_only=True)
class CommitPage:
    snapshot_id: str
    commits: list[dict]  # commit_dict, with `score` for a search
    next_cursor: str | None


class History:
    """One snapshot's history tables, loaded once: commits by key, the paths each changed, parents."""

    def __init__(self, reader: SnapshotReader):
        # Each part's tables and paths as read for the snapshot before, where it listed the part: a swap reads
        # only its new parts' (SnapshotReader.of_part; every part's again was 3.5 s of a swap at 923 repos).
        self.commits = read_history(reader.path, reader.manifest, "commits", of_part=reader.of_part)
        c = self.commits.select(["org", "repo", "commit_id"]).to_pydict()
        self.keys = list(zip(c["org"], c["repo"], c["commit_id"]))
        self.row = {key: i for i, key in enumerate(self.keys)}
        self.time = self.commits.column("committer_time").to_numpy()
        self.org = np.array(c["org"], dtype=object)
        self.repo = np.array(c["repo"], dtype=object)
        self.parents = self.commits.column("parents").to_pylist()
        self.paths: list[list[tuple]] = []  # what each commit changed: (path, old path, change, added, removed)
        data_dir = data_dir_of(reader.path)
        for part_id in (p for r in reader.manifest.repos for p in r.history):
            self.paths += reader.of_part(
                part_id, "commit paths", lambda p=part_id: _commit_paths(data_dir, p, reader.of_part)
            )
        # each commit's vector and its model ("" where its part has none): rows of the query's model are compared
        self.vectors, self.vector_model = read_commit_vectors(reader.path, reader.manifest, reader.of_part)
        self.has_vectors = bool(self.vector_model.any())
        self._of_model: dict[str, np.ndarray] = {}
        index = open_history_lexical(reader.path)
        self.index = index
        self.searcher = index.searcher() if index is not None else None
        self._reachable: dict[tuple[str, str, str], np.ndarray] = {}
        self._ids: dict[tuple[str, str], list[str]] = {}
        self._authors: list[str] | None = None

    def authors(self) -> list[str]:
        """Each commit's author as the `author` filter reads it: name and email, lower case (built once)."""
        if self._authors is None:
            c = self.commits.select(["author_name", "author_email"]).to_pydict()
            self._authors = [f"{n}\0{e}".lower() for n, e in zip(c["author_name"], c["author_email"])]
        return self._authors

    def of_model(self, model_id: str) -> np.ndarray:
        """Which rows hold `model_id`'s vectors (a mask, built once per model)."""
        if model_id not in self._of_model:
            self._of_model[model_id] = self.vector_model == model_id
        return self._of_model[model_id]

    def ids_of(self, org: str, repo: str) -> list[str]:
        """One repo's commit ids, sorted (a prefix is looked up by bisection)."""
        if (org, repo) not in self._ids:
            self._ids[(org, repo)] = sorted(k[2] for k in self.keys if k[0] == org and k[1] == repo)
        return self._ids[(org, repo)]

    def reachable(self, org: str, repo: str, head: str) -> np.ndarray:
        """Rows of the commits `head` reaches in the tables, newest first (by commit time, as `git log`)."""
        key = (org, repo, head)
        if key not in self._reachable and len(self._reachable) >= REACHABLE_CACHED:
            self._reachable.clear()
        if key not in self._reachable:
            start = self.row.get(key)
            order = []
            if start is not None:
                seen, queue = {start}, [(-int(self.time[start]), start)]
                while queue:
                    _, at = heapq.heappop(queue)
                    order.append(at)
                    for p in self.parents[at]:
                        nxt = self.row.get((org, repo, p))
                        if nxt is not None and nxt not in seen:
                            seen.add(nxt)
                            heapq.heappush(queue, (-int(self.time[nxt]), nxt))
            self._reachable[key] = np.array(order, dtype=np.int64)
        return self._reachable[key]

    def graph(self, org: str, repo: str) -> "RepoGraph":
        """What the tables say about one repo's commits, as blame asks it (query.blame.Graph)."""
        return RepoGraph(self, org, repo)

    def commit_dict(self, at: int, paths: bool = True) -> dict:
        row = {k: self.commits.column(k)[at].as_py() for k in _SHOWN}
        changed = self.paths[at]
        out = {
            "org": row["org"],
            "repo": row["repo"],
            "commit_id": row["commit_id"],
            "parents": row["parents"],
            "author": row["author_name"],
            "author_email": row["author_email"],
            "date": when(row["author_time"]),
            "committed": when(row["committer_time"]),
            "subject": row["subject"],
            "message": row["message"],
            "files_changed": row["files_changed"],
            "added": row["added"],
            "removed": row["removed"],
        }
        if paths:
            out["paths"] = [
                {"path": p, "change": c, **({"old_path": o} if o != p else {}), "added": a, "removed": r}
                for p, o, c, a, r in changed[:PATHS_SHOWN]
            ]
        return out


@dataclass(frozen=True)
class RepoGraph:
    """One repo's commits in the history tables: parents and times, and which paths each changed."""

    hist: History
    org: str
    repo: str

    def _row(self, commit_id: str) -> int | None:
        return self.hist.row.get((self.org, self.repo, commit_id))

    def commit(self, commit_id: str) -> tuple[list[str], int] | None:
        at = self._row(commit_id)
        return None if at is None else (self.hist.parents[at], int(self.hist.time[at]))

    def touched(self, commit_id: str, path: str) -> bool:
        at = self._row(commit_id)
        return at is None or any(p == path or old == path for p, old, *_ in self.hist.paths[at])

    def renamed_from(self, commit_id: str, path: str) -> str | None:
        at = self._row(commit_id)
        if at is None:
            return None
        return next((old for p, old, change, _, _ in self.hist.paths[at] if change == "rename" and p == path), None)


_SHOWN = (
    "org",
    "repo",
    "commit_id",
    "parents",
    "author_name",
    "author_email",
    "author_time",
    "committer_time",
    "subject",
    "message",
    "files_changed",
    "added",
    "removed",
)


def _commit_paths(data_dir: Path, part_id: str, of_part) -> list[list[tuple]]:
    """What each commit of a history part changed, in the order of its commits table (read as History read it)."""
    commits = read_history_parts(data_dir, [part_id], "commits", of_part)
    changes = read_history_parts(
        data_dir, [part_id], "commit_changes", columns=["commit_id", "path", "old_path", "change", "added", "removed"]
    )
    row = {commit_id: i for i, commit_id in enumerate(commits.column("commit_id").to_pylist())}
    paths: list[list[tuple]] = [[] for _ in range(commits.num_rows)]
    ch = changes.to_pydict()
    # One string a distinct path: Arrow gives each change its own copy (a file changed by a hundred commits
    # was a hundred strings; at 3M bench chunks, 165k changes held about 400 bytes each).
    known: dict[str, str] = {}
    for i in range(changes.num_rows):
        at = row.get(ch["commit_id"][i])
        if at is not None:
            path, old, change = ch["path"][i], ch["old_path"][i], ch["change"][i]
            path, change = known.setdefault(path, path), known.setdefault(change, change)
            old = old if old is None else known.setdefault(old, old)
            paths[at].append((path, old, change, ch["added"][i], ch["removed"][i]))
    return paths


def history_of(reader: SnapshotReader) -> History:
    return reader.cached("history", lambda: _opened(reader))


def _opened(reader: SnapshotReader) -> History:
    try:
        return History(reader)
    except BaseException as exc:  # arrow and tantivy raise their own types on damaged bytes (pyo3 panics too)
        if not store_error(exc):
            raise
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DamagedHistory(
            f"the history of snapshot {reader.snapshot_id} cannot be read ({reason}); run 'blobdex verify', then "
            "'blobdex index --full' to write it again"
        ) from exc


def _seconds(value: str | None, name: str) -> int | None:
    """An ISO date or time (UTC unless it says otherwise) as seconds since the epoch."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise HistoryError(f"{name} {value!r} is not a date: write it as 2024-01-31 or 2024-01-31T12:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp())


def _head(reader: SnapshotReader, org: str, repo: str, ref: str | None) -> str:
    """The commit an indexed ref names (short or full name, or a commit id the tables hold); HistoryError when
    the history tables cannot answer for it."""
    state = reader.manifest.repo(org, repo)
    if state is None:
        known = sorted(r.name for r in reader.manifest.repos if r.org == org)
        raise NoHistory(f"unknown repo {repo!r} in org {org!r}; indexed repos: {', '.join(known) or 'none'}")
    if not state.history:
        raise NoHistory(
            f'the index holds no history of repo {repo!r}: its config has history = "off", or it was indexed '
            "before history was; set history = \"messages\" and run 'blobdex index'"
        )
    for x in state.refs:
        if ref in (None, "", x.ref, x.ref.removeprefix("refs/heads/"), x.ref.removeprefix("refs/tags/")):
            return x.commit_id
    hist = history_of(reader)
    if ref and len(ref) >= 4:
        ids = hist.ids_of(org, repo)
        at = bisect.bisect_left(ids, ref)
        found = [c for c in ids[at : at + 2] if c.startswith(ref)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise HistoryError(f"commit id prefix {ref!r} is ambiguous in repo {repo!r}; give more digits")
    indexed = ", ".join(x.ref for x in state.refs)
    raise NoHistory(  # not found, as an unknown ref is for get_file
        f"{ref!r} is neither a ref the index holds of repo {repo!r} ({indexed}) nor a commit of its history; pass "
        "one of those refs or a commit they reach"
    )


def _page(reader: SnapshotReader, kind: str, asked: dict, cursor: str | None, limit: int) -> int:
    if not 1 <= limit <= MAX_COMMITS_PER_PAGE:
        raise HistoryError(f"limit {limit} is out of range: use 1 to {MAX_COMMITS_PER_PAGE}")
    return cursor_offset(cursor, kind, reader.snapshot_id, asked, MAX_DEPTH)


def log(
    reader: SnapshotReader,
    org: str,
    repo: str,
    path: str | None = None,
    ref: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> CommitPage:
    """The commits `ref` reaches that touched `path` (a file or a folder; every commit without one), newest
    first. A file renamed on the way is followed to its older name, as `git log --follow`."""
    head = _head(reader, org, repo, ref)
    asked = {"org": org, "repo": repo, "path": path, "head": head, "limit": limit}
    start = _page(reader, "log", asked, cursor, limit)
    hist = history_of(reader)
    rows = hist.reachable(org, repo, head)
    if path and path.strip("/"):
        rows = _touching(hist, rows, repo_path(path))
    page = rows[start : start + limit]
    more = start + limit < len(rows)
    return CommitPage(
        snapshot_id=reader.snapshot_id,
        commits=[hist.commit_dict(int(r)) for r in page],
        next_cursor=cursor_encode("log", reader.snapshot_id, asked, start + limit) if more else None,
    )


def _touching(hist: History, rows: np.ndarray, path: str) -> np.ndarray:
    names, folder = {path}, path + "/"
    out = []
    for at in rows.tolist():
        hit = False
        for p, old, change, _, _ in hist.paths[at]:
            if p in names or old in names or p.startswith(folder) or old.startswith(folder):
                hit = True
                if change == "rename" and p in names:
                    names.add(old)  # older commits knew the file by its old name
        if hit:
            out.append(at)
    return np.array(out, dtype=np.int64)


def search_commits(
    reader: SnapshotReader,
    org: str,
    query: str = "",
    repos: tuple[str, ...] = (),
    paths: tuple[str, ...] = (),
    author: str | None = None,
    since: str | None = None,
    until: str | None = None,
    ref: str | None = None,
    limit: int = 10,
    cursor: str | None = None,
    embedder: Callable[[], Embedder] | None = None,
) -> CommitPage:
    """Commits whose message (or changed paths, or hunks where indexed) match `query`, best first: BM25 fused by
    reciprocal rank with the cosine of the messages' vectors (`embedder()`: the model they were embedded with,
    loaded only when the history holds vectors); with no query, the newest. Filters: repos, changed paths (a
    file or a folder), author (part of the name or the email, any case), since/until (the author's date), ref
    (reachable from it; with one repo, or the ref's name in each repo)."""
    asked = {
        "org": org,
        "query": query,
        "repos": list(repos),
        "paths": list(paths),
        "author": author,
        "since": since,
        "until": until,
        "ref": ref,
        "limit": limit,
    }
    start = _page(reader, "search_commits", asked, cursor, limit)
    hist = history_of(reader)
    mask = _mask(reader, hist, org, repos, paths, author, since, until, ref)
    words = _words(query)
    if words and hist.searcher is not None:
        ranked = _bm25(hist, org, repos, words, mask, start + limit + 1)
        model = embedder() if embedder is not None and hist.has_vectors else None
        nearest = _nearest(hist, query, mask, start + limit + 1, model)
        if nearest:
            fused = rrf([("bm25", 1.0, ranked), ("vector", 1.0, nearest)])
            ranked = sorted(((at, e["score"]) for at, e in fused.items()), key=lambda kv: (-kv[1], kv[0]))
            ranked = ranked[: start + limit + 1]
    else:
        allowed = np.flatnonzero(mask)
        order = allowed[np.argsort(-hist.time[allowed], kind="stable")] if len(allowed) else allowed
        ranked = [(int(r), None) for r in order[: start + limit + 1]]
    page = ranked[start : start + limit]
    commits = []
    for at, score in page:
        d = hist.commit_dict(at)
        if score is not None:
            d["score"] = round(score, 4)
        commits.append(d)
    more = len(ranked) > start + limit
    return CommitPage(
        snapshot_id=reader.snapshot_id,
        commits=commits,
        next_cursor=cursor_encode("search_commits", reader.snapshot_id, asked, start + limit) if more else None,
    )


def _words(text: str) -> list[str]:
    """The words of a query the commits index is asked for: without stopwords (every commit has "the"), unless
    the query is nothing else."""
    words = [w for w in dict.fromkeys(tokens(text)) if w]
    return ([w for w in words if w not in STOPWORDS] or words)[:MAX_WORDS]


def _mask(reader, hist: History, org, repos, paths, author, since, until, ref) -> np.ndarray:
    for name, values in (("repos", repos), ("paths", paths)):
        if len(values) > MAX_FILTER_VALUES:
            raise HistoryError(f"{len(values)} {name} given; name at most {MAX_FILTER_VALUES}")
    mask = hist.org == org
    if repos:
        mask &= np.isin(hist.repo, list(repos))
    lo, hi = _seconds(since, "since"), _seconds(until, "until")
    if lo is not None or hi is not None:
        times = hist.commits.column("author_time").to_numpy()
        if lo is not None:
            mask &= times >= lo
        if hi is not None:
            mask &= times <= hi
    if author:
        needle = author.lower()
        mask &= np.array([needle in a for a in hist.authors()], dtype=bool)
    if paths:
        wanted = [p.strip("/") for p in paths]
        for i in np.flatnonzero(mask).tolist():  # only the rows the org and the other filters kept
            mask[i] = any(_under(p, w) or _under(o, w) for p, o, *_ in hist.paths[i] for w in wanted)
    if ref:
        names = list(repos) or sorted({r.name for r in reader.manifest.repos if r.org == org and r.history})
        reach = np.zeros(len(mask), dtype=bool)
        for name in names:
            try:
                reach[hist.reachable(org, name, _head(reader, org, name, ref))] = True
            except HistoryError:
                if len(names) == 1:
                    raise
        mask &= reach
    return mask


def _under(path: str, wanted: str) -> bool:
    return path == wanted or path.startswith(wanted + "/")


def _bm25(hist: History, org, repos, words, mask, depth) -> list[tuple[int, float]]:
    Q, Occur, schema = tantivy.Query, tantivy.Occur, hist.index.schema
    should = []
    for w in words:
        should.append((Occur.Should, Q.term_query(schema, "message", w)))
        should.append((Occur.Should, Q.boost_query(Q.term_query(schema, "hunks", w), HUNK_BOOST)))
    for w in dict.fromkeys(t for word in words for t in path_tokens(word)):
        should.append((Occur.Should, Q.boost_query(Q.term_query(schema, "paths", w), PATH_BOOST)))
    must = [(Occur.Must, Q.term_query(schema, "org", org)), (Occur.Must, Q.boolean_query(should))]
    if repos:
        must.append((Occur.Must, Q.term_set_query(schema, "repo", list(repos))))
    query = Q.boolean_query(must)
    fetch = max(4 * depth, FIRST_FETCH)  # widened while the filters leave too few (each hit's stored key is read)
    while True:
        result = hist.searcher.search(query, fetch, count=False)
        ranked = []
        for score, address in result.hits:
            doc = hist.searcher.doc(address)
            at = hist.row.get((doc["org"][0], doc["repo"][0], doc["commit_id"][0]))
            if at is not None and mask[at]:
                ranked.append((at, float(score)))
        if len(ranked) >= depth or len(result.hits) < fetch:
            return ranked[:depth]
        fetch *= 4


def _nearest(hist: History, text: str, mask: np.ndarray, depth: int, model: Embedder | None) -> list[tuple[int, float]]:
    """The `mask`ed commits whose message vectors (of `model`) are nearest `text`'s, at least MIN_COSINE, best
    first; none without a model or vectors."""
    if model is None or not hist.has_vectors:
        return []
    allowed = np.flatnonzero(mask & hist.of_model(model.model_id))
    if not len(allowed):
        return []
    # every row at once and then the allowed ones: a product over the whole matrix costs less than a gather
    scores = (hist.vectors @ query_vectors(model, text).T).max(axis=1)[allowed]
    allowed, scores = allowed[scores >= MIN_COSINE], scores[scores >= MIN_COSINE]
    if not len(allowed):
        return []
    k = min(depth, len(allowed))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(allowed[i]), float(scores[i])) for i in top]


def similar_commits(
    reader: SnapshotReader,
    org: str,
    repos: tuple[str, ...],
    text: str,
    depth: int,
    embedder: Embedder | None = None,
    before: int | None = None,
):
    """The commits of the snapshot's history most like `text` by BM25 (message, changed paths, hunks), fused
    with their messages' vectors where `embedder` is their model, best first: (row, score); with `before` (an
    eval's cutoff, seconds since the epoch), only commits committed earlier. Empty when the snapshot holds no
    history."""
    hist = history_of(reader)
    words = _words(text)
    if not words or hist.searcher is None:
        return []
    mask = hist.org == org
    if repos:
        mask &= np.isin(hist.repo, list(repos))
    if before is not None:
        mask &= hist.time < before
    ranked = _bm25(hist, org, repos, words, mask, depth)
    nearest = _nearest(hist, text, mask, depth, embedder)
    if not nearest:
        return ranked
    # a similarity, not a rank: each signal's score relative to its best, averaged (a vote follows it)
    similarity: dict[int, float] = {}
    for found in (ranked, nearest):
        best = found[0][1] if found and found[0][1] > 0 else 1.0
        for at, score in found:
            similarity[at] = similarity.get(at, 0.0) + score / best / 2
    return sorted(similarity.items(), key=lambda kv: (-kv[1], kv[0]))[:depth]


def file_votes(
    reader: SnapshotReader, org: str, repos: tuple[str, ...], text: str, embedder: Embedder | None = None
) -> list[tuple[tuple, float]]:
    """Files ranked by what the organisation already changed for tasks like this one (BugLocator's similar
    reports): each of the SIMILAR_COMMITS commits most like `text` votes for the files it changed, by its
    similarity (relative to the best), halved every HALF_LIFE_DAYS it is older than its repo's newest commit,
    and shared among the files it changed. Only files the snapshot indexes get votes; the history is what the
    indexed commits reach, so nothing newer than them can vote."""
    ranked = similar_commits(reader, org, repos, text, SIMILAR_COMMITS, embedder)
    if not ranked:
        return []
    hist, best = history_of(reader), ranked[0][1] or 1.0
    newest = reader.cached("history:newest", lambda: _newest(hist))
    votes: dict[tuple[str, str], float] = {}
    for at, score in ranked:
        changed = [p for p, _, change, _, _ in hist.paths[at] if change != "delete"]
        if not changed:
            continue
        repo = hist.repo[at]
        age = (newest[(org, repo)] - int(hist.time[at])) / 86400
        weight = (score / best) * 0.5 ** (age / HALF_LIFE_DAYS) / len(changed)
        for path in changed:
            if reader.has_file(org, repo, path):
                votes[(repo, path)] = votes.get((repo, path), 0.0) + weight
    return sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))


def _newest(hist: History) -> dict[tuple[str, str], int]:
    """(org, repo) -> the commit time of its newest commit."""
    newest: dict[tuple[str, str], int] = {}
    for key, t in zip(zip(hist.org.tolist(), hist.repo.tolist()), hist.time.tolist()):
        newest[key] = max(newest.get(key, t), t)
    return newest


def repo_votes(
    reader: SnapshotReader, org: str, text: str, embedder: Embedder | None = None, before: int | None = None
) -> list[tuple[str, float]]:
    """Repos ranked by their past commit most like `text` (a repo that fixed a task like this one owns it), with
    that commit's similarity relative to the best. The best commit, not a sum over the SIMILAR_COMMITS: a sum
    counted a long history's many fair matches over a short one's close match (`eval routing` on four repos,
    subjects masked: top-1 0.633 summed, 0.683 by the best, 0.667 without history)."""
    ranked = similar_commits(reader, org, (), text, SIMILAR_COMMITS, embedder, before)
    if not ranked:
        return []
    hist, best = history_of(reader), ranked[0][1] or 1.0
    votes: dict[str, float] = {}
    for at, score in ranked:  # best first: a repo's first is its best
        votes.setdefault(hist.repo[at], score / best)
    return list(votes.items())


def committed_at(reader: SnapshotReader, org: str, repo: str, commit_id: str) -> int | None:
    """When the history tables say a commit was committed (seconds since the epoch), or None."""
    hist = history_of(reader)
    at = hist.row.get((org, repo, commit_id))
    return None if at is None else int(hist.time[at])
