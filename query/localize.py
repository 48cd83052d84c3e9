"""File-level localization: rank files for a task text (an issue, a stack trace, a commit message).

Each signal (vector, BM25, the definitions the text names, and a cross-encoder's order when one is
configured) first ranks files on its own: a file scores its best chunk plus a decaying share of the
next ones, so a file with several relevant chunks beats one lucky match. The file rankings are then
fused by reciprocal rank, and what the text itself names counts on top: identifiers that are
definitions in the file, file names, and stack-trace frames. Whether the task asks for test code weighs
test files against the rest.

Fusing files rather than chunks keeps one signal's many mid-ranked chunks of a hub file (a `.d.ts`
restating every method, a README) from outvoting another signal's clear first file (it raised hybrid
file MRR on three of four histories in `blobdex eval commits`; docs/benchmarks.md has today's figures).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import re2

from indexer.embed import Embedder
from indexer.languages import GRAMMARS, is_test_file, language_for
from query.history import file_votes
from query.reader import SnapshotReader
from query.search import (
    RRF_K,
    Hit,
    SearchRequest,
    candidates,
    defining_files,
    row_mask,
    rrf,
    validate,
    with_snippet,
)
from query.query_text import named_definitions, title_and_body

DECAY = 0.5  # within a signal, the n-th best chunk of a file adds DECAY**n of its share
SIGNALS = ("vector", "bm25", "symbol")  # a file's place in the symbol list is its first definition's
FILE_MODES = ("hybrid", "vector", "bm25", "history")  # history: files ranked by similar past commits alone
# The history signal's weight in the fusion of file rankings: 0, off, by measurement. Fused at 1.0, 0.5 or 0.3
# (or cut to its top 5 files) it lowered hybrid file MRR on all three commit histories measured (`eval commits
# --n 40 --seed 0`, self / itsdangerous / markupsafe: 0.856 / 0.901 / 0.843 without it; 0.820 / 0.883 / 0.796 at
# 1.0; 0.835 / 0.877 / 0.825 at 0.3), while alone it reached 0.421 / 0.721 / 0.475. With the messages' vectors
# alone reaches 0.464 / 0.760 / 0.522 and fused at 0.3 still lowers hybrid (0.835 / 0.877 / 0.826). It stays an
# eval column here; route_task fuses it per repo, where it helps.
HISTORY_WEIGHT = 0.0
NAMED_SYMBOL_BONUS = 0.02  # about one signal's first place, per definition a one-line text names (at most 3)
# A text with a body (a report, not a subject line) names many definitions in passing: they still rank in
# the symbol list, but a bonus on top lifted every file defining one of them over the file to change
# (pytest's `eval issues`, hybrid MRR: tune half 0.794 -> 0.864 without it, held-out half 0.762 -> 0.768).
NAMED_SYMBOL_BONUS_IN_REPORTS = 0.0
NAMED_FILE_BONUS = 0.03  # the text names the file (a path, a file name, a stack frame, the title's scope)
# The fused score of a file with no grammar (prose, config, data) counts this much: a task is usually
# carried out in source, and BM25 otherwise lifts READMEs and changelogs that merely mention its words.
# Chosen with `blobdex eval commits` (1 -> 0.25 raised hybrid MRR on blinker, itsdangerous and markupsafe;
# 0.5 was between) and applied to the fused score, which measured better than inside each signal's ranking.
NON_SOURCE_WEIGHT = 0.25
# A task that asks for test code ("tests: use strict equality", "add test for X", `flag_test`) is carried
# out in test files, and one that does not mostly in the code: of 362 commits in 7 histories, 64 of the 73
# whose subject speaks of tests changed only tests, and 8 of the 289 that do not. So in hybrid mode a test
# file counts OFF_TOPIC_TEST_WEIGHT of its score when the task does not ask for tests, and any other file
# OFF_TOPIC_CODE_WEIGHT when it does. Chosen with `blobdex eval commits` on seven histories, where it raised
# hybrid file MRR on six; the weights sit on a plateau (0.35-0.8 for tests, 0.15-0.35 for the rest).
OFF_TOPIC_TEST_WEIGHT = 0.5
OFF_TOPIC_CODE_WEIGHT = 0.25
# The evidence is the task's title (its first line): a bug report's body says "test", "assert", "pytest"
# and names the test that fails while asking for a fix in the code. Deciding on the whole text fired on
# 20 of 30 long reports of pytest's history (`blobdex eval issues`) and cut hybrid MRR there to 0.315
# (0.708 asking the title alone). A host such as `test.local` is no test either. A test tool's name in the title
# counts ("use pytest instead of nose", "report the config in pytest output": of five commit histories,
# two have such a subject and it changed test files), except in the tool's own repo (below).
TEST_TOOLS = "pytest|unittest|nose2?|jest|mocha|vitest|jasmine|karma|junit|testng|testify|ginkgo|rspec|minitest|phpunit"
# Every pattern here is RE2's (linear time): they scan the request's text, and Python's engine took quadratic time
# on a long run of word characters (a 500 KB task held the server for minutes). RE2 has no lookahead, so a host
# such as `test.local` is matched whole (group 1) and then passed over.
TESTS_ASKED_RE = re2.compile(
    r"(?i:\btest(?:s|ing|case|cases|suite|suites)?\b(\.(?:local|localhost|example|invalid|com|org|net)\b)?"
    r"|_tests?\b|\btest_|\bassert_\w|\b(?:" + TEST_TOOLS + r")\b)|[a-z0-9]Tests?\b|\bassert[A-Z]"
)
# A repository whose product is a test tool (its package is the runner: `src/_pytest/`, `packages/jest-cli/`,
# `lib/mocha.js`, or a repo named so) speaks of tests in every task: there the rule does not ask.
TEST_TOOL_PATH_RE = re2.compile(r"(?i)^(?:(?:src|lib|packages)/)?_?(?:" + TEST_TOOLS + r")(?:[-_][\w-]*)?(?:/|\.\w+$)")
TEST_TOOL_NAME_RE = re2.compile(r"(?i)^(?:" + TEST_TOOLS + r")(?:[-_.][\w.-]*)?$")
FRAME_RE = re2.compile(r"""(?:File "([^"]+)", line \d+|at [\w.$<>]+\(([\w./-]+):\d+\)|([\w./-]+\.\w+):\d+)""")
# A title's scope names the module or package the task is in: "findpaths: fix ...", "gopls/internal/cache:
# ...", "fix(parser): ..." (several may be listed, comma-separated), as pytest's and Go's commits and Go's
# issue titles do. It counts as naming the file (`eval issues`, hybrid MRR on the held-out half without
# -> with it: pytest 0.708 -> 0.768, golang/mod 0.810 -> 0.889).
SCOPE_RE = re2.compile(r"^\s*(?:[a-z]+\(([\w./,-]+)\)!?|([\w./,-]+)):\s")
FILE_NAME_RE = re2.compile(r"[\w./-]+\.(?:py|js|jsx|ts|tsx|go|rs|java|rb|php|c|h|cc|cpp|hpp|cs|kt|scala|swift|md)\b")


@dataclass(kw_only=True)
class FileHit:
    repo: str
    path: str
    score: float
    signals: dict = field(default_factory=dict)
    evidence: list[Hit] = field(default_factory=list)

    # The file as its best chunk was indexed: where get_file reads exactly the evidence's lines.
    @property
    def ref(self) -> str:
        return self.evidence[0].ref if self.evidence else ""

    @property
    def commit_id(self) -> str:
        return self.evidence[0].commit_id if self.evidence else ""


def named_files(text: str) -> set[str]:
    names = {m.group(0) for m in FILE_NAME_RE.finditer(text)}
    for m in FRAME_RE.finditer(text):
        names.update(g for g in m.groups() if g)
    return {n.lstrip("./") for n in names}


def title_scopes(text: str) -> list[str]:
    """The scopes a task's title names before its colon ("findpaths", "gopls/internal/cache")."""
    m = SCOPE_RE.match(title_and_body(text)[0])
    if not m:
        return []
    return [s.strip("/") for s in (m.group(1) or m.group(2)).split(",") if s.strip("/")]


def in_scope(path: str, scopes: list[str]) -> bool:
    """The file is the scope's module (its stem) or lies in the scope's directory."""
    folder, _, name = path.rpartition("/")
    stem = name.split(".", 1)[0]
    return any((stem == s and "/" not in s) or folder == s or folder.endswith("/" + s) for s in scopes)


def asks_for_tests(text: str) -> bool:
    """Whether a task asks for test code: its title (first non-blank line) speaks of tests."""
    return any(m.group(1) is None for m in TESTS_ASKED_RE.finditer(title_and_body(text)[0]))


def runner_repos(reader: SnapshotReader, org: str) -> frozenset[str]:
    """The repos of an org whose product is a test tool: named after one, or shipping one as a top-level package."""

    def load() -> frozenset[str]:
        found = {r.name for r in reader.manifest.repos if r.org == org and TEST_TOOL_NAME_RE.match(r.name)}
        tools = reader.files_where(
            org, "test tool paths", lambda p: bool(TEST_TOOL_PATH_RE.match(p)) and not is_test_file(p)
        )
        return frozenset(found | {repo for repo, _ in tools})

    return reader.cached(f"runners:{org}", load)


def localize(
    reader: SnapshotReader,
    embedder: Embedder,
    req: SearchRequest,
    reranker=None,
    snippets: bool = True,
    known: dict[str, list] | None = None,
) -> list[FileHit]:
    """The files that best answer `req`, each with its best three chunks as evidence (without their snippets when
    `snippets` is off: route_task reads only where each repo's best file ranks). `known`: see search.rank."""
    if req.mode == "history":
        validate(replace(req, mode="hybrid"), reader)
        return _history_alone(reader, embedder, req)
    validate(req, reader)
    mask = row_mask(req, reader)
    pool = candidates(reader, embedder, req, reranker=reranker, mask=mask, snippets=False, known=known)

    def defining(word: str) -> set[tuple[str, str]]:
        return defining_files(reader, [r for r in reader.symbol_rows.get(word, ()) if mask[r]])

    ranked = files_of(pool, req, defining, lambda: runner_repos(reader, req.org), reader, embedder)
    for f in ranked if snippets else ():  # only the files answered show their evidence
        f.evidence = [with_snippet(reader, h, req.query) for h in f.evidence]
    return ranked


def files_of(pool: list[Hit], req: SearchRequest, defining, tools, reader, embedder) -> list[FileHit]:
    """The best `req.limit` files of a search's fused chunks (`pool`); `defining(word)`: the (repo, path) of the
    files defining a name among the rows the request may see; `tools()`: runner_repos of the org. One reader's
    pool, or the shards' merged (query.front); `reader` is read only for history's votes."""
    files: dict[tuple[str, str], FileHit] = {}
    for hit in pool:  # fused chunk order: each file's evidence is its best three chunks
        key = (hit.repo, hit.path)
        if key not in files:
            files[key] = _file_hit(hit.repo, hit.path)
        if len(files[key].evidence) < 3:
            files[key].evidence.append(hit)
    lists = {
        name: sorted((h for h in pool if h.signals.rank(name)), key=lambda h: h.signals.rank(name)) for name in SIGNALS
    }
    reranked = [h for h in pool if h.signals.rerank_score is not None]
    if reranked:  # the cross-encoder's order of the head is one more ranking to fuse
        lists["rerank"] = sorted(reranked, key=lambda h: -h.signals.rerank_score)
    orders = [
        (name, 1.0, [(key, 0.0) for key in _file_order(hits, 0.0 if name == "symbol" else DECAY)])
        for name, hits in lists.items()
    ]
    if req.mode == "hybrid" and HISTORY_WEIGHT:
        voted = file_votes(reader, req.org, req.repos, req.query, embedder)
        for repo, path in (key for key, _ in voted if key not in files):
            files[(repo, path)] = _file_hit(repo, path)
        if voted:
            orders.append(("history", HISTORY_WEIGHT, voted))
    fused: dict[tuple[str, str], float] = defaultdict(float)
    for key, entry in rrf(orders).items():
        files[key].signals.update({k: v for k, v in entry.items() if k.endswith("_rank")})
        fused[key] = entry["score"]
    if req.mode == "hybrid":
        for word in named_definitions(req.query):
            # A name defined in n files is 1/n of the evidence for each (`Type` on every value type).
            found = defining(word)
            for key in found & files.keys():
                files[key].signals["named_symbols"] += 1 / len(found)
        names, scopes = named_files(req.query), title_scopes(req.query)
        # A stack trace says where it failed, often inside a test; its frames carry that evidence.
        weigh_tests = not FRAME_RE.search(req.query)
        tests_asked = asks_for_tests(req.query)
        runners = tools()
        for (repo, path), entry in files.items():
            if any(path == n or path.endswith("/" + n) or n.endswith("/" + path) for n in names):
                entry.signals["named_file"] = True
            entry.signals["named_scope"] = in_scope(path, scopes)
            tests_wanted = tests_asked and repo not in runners
            if weigh_tests and is_test_file(path) != tests_wanted:
                entry.signals["test_weight"] = OFF_TOPIC_CODE_WEIGHT if tests_wanted else OFF_TOPIC_TEST_WEIGHT
    per_name = NAMED_SYMBOL_BONUS_IN_REPORTS if title_and_body(req.query)[1] else NAMED_SYMBOL_BONUS
    for key, entry in files.items():
        s = entry.signals
        s["named_symbols"] = round(s["named_symbols"], 3)
        weight = 1.0 if language_for(entry.path) in GRAMMARS else NON_SOURCE_WEIGHT
        named = per_name * min(s["named_symbols"], 3) + (
            NAMED_FILE_BONUS if s["named_file"] or s["named_scope"] else 0.0
        )
        entry.score = round(s["test_weight"] * (weight * fused[key] + named), 6)
    return sorted(files.values(), key=lambda f: (-f.score, f.repo, f.path))[: req.limit]


def _file_hit(repo: str, path: str) -> FileHit:
    signals = {"named_symbols": 0, "named_file": False, "named_scope": False, "test_weight": 1.0}
    return FileHit(repo=repo, path=path, score=0.0, signals=signals)


def _history_alone(reader: SnapshotReader, embedder: Embedder, req: SearchRequest) -> list[FileHit]:
    """Files ranked by the history signal alone (eval's `history` column)."""
    ranked = []
    for position, ((repo, path), score) in enumerate(
        file_votes(reader, req.org, req.repos, req.query, embedder)[: req.limit], 1
    ):
        hit = _file_hit(repo, path)
        hit.score, hit.signals["history_rank"], hit.signals["history_score"] = (
            round(score, 6),
            position,
            round(score, 4),
        )
        ranked.append(hit)
    return ranked


def _file_order(hits: list[Hit], decay: float) -> list[tuple[str, str]]:
    """Files ranked by one signal: each chunk's reciprocal rank, decaying per file."""
    score: dict[tuple[str, str], float] = defaultdict(float)
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for position, hit in enumerate(hits, 1):
        key = (hit.repo, hit.path)
        score[key] += decay ** seen[key] / (RRF_K + position)
        seen[key] += 1
    return sorted(score, key=lambda k: (-score[k], k))
