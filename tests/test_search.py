"""Hybrid search over the session snapshot: fields, filters, tenancy and bad input."""

import copy
from dataclasses import replace

import pytest

from indexer.tokenize import tokens
from query.query_text import PASSAGE_CHARS, named_definitions, passages
from query.search import (
    SearchError,
    SearchRequest,
    keep_similar,
    lexical_query,
    search,
    similarity_floor,
)
from tests.corpus import HIT_JSON_FIELDS


def paths(hits):
    return [h.path for h in hits]


def test_hits_carry_the_full_contract(reader, hasher, corpus):
    hits = search(reader, hasher, SearchRequest(query="renew_subscription", repos=("api",)))
    top = hits[0]
    assert (top.repo, top.path, top.symbol, top.kind, top.lang) == (
        "api",
        "src/billing/renew.py",
        "Billing.renew_subscription",
        "method",
        "python",
    )
    assert top.ref == "refs/heads/main" and top.commit_id == corpus.commits["api_main"]
    assert top.blob_id and top.line_start == 10 and top.line_end == 13
    assert "def renew_subscription" in top.snippet
    assert top.signals.bm25_rank == 1 and top.signals.vector_rank is not None
    assert top.score > 0
    assert set(top.to_dict()) >= HIT_JSON_FIELDS


def test_code_aware_tokens_match_parts_of_identifiers(reader, hasher):
    # "subscription renew" shares no whole word with `renew_subscription`, only its parts.
    hits = search(reader, hasher, SearchRequest(query="subscription renew", kind="method"))
    assert hits[0].symbol == "Billing.renew_subscription" and hits[0].signals.bm25_rank == 1
    assert tokens("HTTPServer.handleRequest") == [
        "httpserver.handlerequest",
        "httpserver",
        "http",
        "server",
        "handlerequest",
        "handle",
        "request",
    ]


def test_plurals_match_their_singular(reader, hasher):
    assert tokens("tests classes dependencies status analysis has") == [
        "test",
        "class",
        "dependency",
        "status",
        "analysis",
        "has",
    ]
    # `cancel(self, subscription)`: "subscriptions" is found by its singular, in BM25 alone.
    hits = search(reader, hasher, SearchRequest(query="subscriptions", mode="bm25", limit=50))
    assert hits and all("subscription" in h.snippet.lower() for h in hits)


def test_queries_are_tokenized_as_their_snapshot_was(reader):
    # A server upgraded before the next index run still reads its tokenizer-1 snapshot as tokenizer 1.
    assert tokens("tests", version=1) == ["tests"]
    old = copy.copy(reader)
    old.manifest = replace(reader.manifest, tokenizer_version=1)
    for r, found in ((reader, True), (old, False)):  # this snapshot's index holds only the singular
        query = lexical_query(r, "subscriptions", "default", ())
        assert bool(reader.searcher.search(query, 5).hits) is found


def test_every_search_runs_inside_one_org(reader, hasher):
    default = search(reader, hasher, SearchRequest(query="acme_only_renewal", limit=50))
    assert default and all(h.org == "default" for h in default)
    assert "billing.py" not in paths(default)
    acme = search(reader, hasher, SearchRequest(query="acme_only_renewal", org="acme"))
    assert [h.org for h in acme] == ["acme"] and acme[0].symbol == "acme_only_renewal"


def test_repo_lang_and_kind_filters(reader, hasher):
    go = search(reader, hasher, SearchRequest(query="server health", langs=("go",), limit=50))
    assert go and all(h.lang == "go" for h in go)
    tools = search(reader, hasher, SearchRequest(query="queue", repos=("tools",), limit=50))
    assert tools and all(h.repo == "tools" for h in tools)
    docs = search(reader, hasher, SearchRequest(query="install database", kind="doc", limit=50))
    assert docs and all(h.lang == "markdown" for h in docs)
    assert docs[0].symbol == "Acme API > Installing"
    code = search(reader, hasher, SearchRequest(query="install database", kind="code", limit=50))
    assert code and all(h.lang != "markdown" for h in code)


def test_path_include_and_ignore_globs(reader, hasher):
    hits = search(reader, hasher, SearchRequest(query="invoice customer", paths=("src/billing/**",), limit=50))
    assert hits and all(h.path.startswith("src/billing/") for h in hits)
    hits = search(reader, hasher, SearchRequest(query="invoice customer", ignore=("*.py",), limit=50))
    assert hits and not any(h.path.endswith(".py") for h in hits)


def test_ref_filter_sees_only_that_branch(reader, hasher, corpus):
    dev = search(reader, hasher, SearchRequest(query="issue_refund", ref="dev", limit=5))
    assert dev[0].path == "src/billing/refund.py"
    assert dev[0].ref == "refs/heads/dev" and dev[0].commit_id == corpus.commits["api_dev"]
    main = search(reader, hasher, SearchRequest(query="issue_refund", ref="main", limit=50))
    assert "src/billing/refund.py" not in paths(main)
    # A blob unchanged between branches is one row reachable from both.
    both = search(reader, hasher, SearchRequest(query="renew_subscription", ref="refs/heads/dev"))
    assert both[0].symbol == "Billing.renew_subscription" and both[0].ref == "refs/heads/dev"


def test_identical_blob_on_two_refs_is_one_hit(reader, hasher):
    hits = search(reader, hasher, SearchRequest(query="renew_subscription", limit=50))
    keys = [(h.repo, h.path, h.blob_id, h.chunk_index) for h in hits]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    "req,message",
    [
        (SearchRequest(query="   "), "the query is empty"),
        (SearchRequest(query="x", limit=0), "limit 0 is out of range"),
        (SearchRequest(query="x", limit=10_000), "limit 10000 is out of range"),
        (SearchRequest(query="x", repos=("nope",)), "unknown repo 'nope' in org 'default'; indexed repos: api, tools"),
        (SearchRequest(query="x", kind="banana"), "unknown kind 'banana'"),
        (
            SearchRequest(query="x", langs=("klingon",)),
            "no chunk in language 'klingon' is indexed in org 'default'; "
            "indexed languages: go, javascript, markdown, python, rust",
        ),
        (
            SearchRequest(query="x", ref="nosuchref"),
            "ref 'nosuchref' is not indexed in org 'default'; indexed refs: refs/heads/dev, refs/heads/main",
        ),
        (
            SearchRequest(query="x", repos=("tools",), ref="dev"),
            "ref 'dev' is not indexed in repo 'tools'; indexed refs: refs/heads/main",
        ),
    ],
)
def test_bad_requests_get_one_clear_sentence(reader, hasher, req, message):
    with pytest.raises(SearchError, match=message):
        search(reader, hasher, req)


def test_filter_values_are_terms_never_query_syntax(reader, hasher):
    # A repo name full of query syntax is compared as a value: it matches nothing and leaks nothing.
    hostile = 'api" OR org:acme OR repo:"'
    query = lexical_query(reader, "renew", "default", (hostile,))
    rows = [reader.searcher.doc(a)["row"][0] for _, a in reader.searcher.search(query, 50).hits]
    assert rows == []
    query = lexical_query(reader, "acme_only_renewal OR org:acme", "default", ())
    rows = [reader.searcher.doc(a)["row"][0] for _, a in reader.searcher.search(query, 50).hits]
    assert rows and {reader.row(r)["org"] for r in rows} == {"default"}


def test_only_stopwords_still_searches_by_vector(reader, hasher):
    hits = search(reader, hasher, SearchRequest(query="where is the"))
    assert hits and all(h.signals.bm25_rank is None for h in hits)


@pytest.mark.parametrize(
    "text,names",
    [
        ("add attributeName() method to Option objects", {"attributename", "option"}),
        ("Fix help for commands with an executable handler", set()),  # prose, though `class Help` may exist
        (
            'File "app.py", line 7, in total_with_tax\n  File "b.py", line 2, in render',
            {"total_with_tax", "render", "app.py", "b.py"},
        ),
        ("use `dumps` and Command.parse; issue #1977. Option is set", {"dumps", "command.parse", "parse"}),
    ],
)
def test_only_words_spelled_as_code_name_definitions(text, names):
    assert named_definitions(text) == names


def test_a_prose_word_does_not_summon_a_definition_of_that_name(reader, hasher):
    def symbol_paths(query):
        return {h.path for h in search(reader, hasher, SearchRequest(query=query, limit=20)) if h.signals.symbol_rank}

    assert symbol_paths("cancel the order when payment fails") == set()
    assert symbol_paths("make cancel() idempotent") == {"src/billing/renew.py"}
    assert symbol_paths("round the total of an Invoice") == {"src/billing/invoice.py"}


def test_a_name_defined_in_many_files_is_weak_evidence(tmp_path, hasher):
    from query.localize import localize
    from query.reader import SnapshotReader
    from query.search import MAX_DEFINING_FILES
    from tests.corpus import build_corpus

    kinds = ["int", "bool", "uint", "string", "float"][: MAX_DEFINING_FILES + 1]
    files = {
        f"{k}.go": f'package flag\n\nfunc (v *{k}Value) Type() string {{ return "{k}" }}\n'.encode() for k in kinds
    }
    files["flag.go"] = b"package flag\n\nfunc ParseFlags(args []string) error { return nil }\n"
    reader = SnapshotReader(build_corpus(tmp_path, {"flag": files}).cfg.data_dir)

    hits = search(reader, hasher, SearchRequest(query="call Type() before ParseFlags()", limit=50))
    assert {h.path for h in hits if h.signals.symbol_rank} == {"flag.go"}  # `Type` is everywhere
    named = {
        f.path: f.signals["named_symbols"]
        for f in localize(reader, hasher, SearchRequest(query="call Type()", limit=50))
    }
    assert all(named[f"{k}.go"] == pytest.approx(1 / len(kinds)) for k in kinds)  # shared, not 1 each
    assert named["flag.go"] == 0


def test_rrf_is_weighted_reciprocal_rank_fusion_with_every_named_signal_present():
    from query.search import RRF_K, rrf

    fused = rrf([("vector", 1.0, [("a", 0.9), ("b", 0.8)]), ("bm25", 0.75, [("b", 12.0)])], ("vector", "bm25"))
    assert fused["a"] == {
        "score": 1 / (RRF_K + 1),
        "vector_rank": 1,
        "vector_score": 0.9,
        "bm25_rank": None,
        "bm25_score": None,
    }
    assert fused["b"]["score"] == 1 / (RRF_K + 2) + 0.75 / (RRF_K + 1) and fused["b"]["bm25_rank"] == 1


def test_a_hit_bm25_alone_found_carries_its_real_cosine_similarity(reader, hasher):
    from query.search import rank

    fused = rank(reader, hasher, SearchRequest(query="renew invoice"), depth=1)  # each signal's first only
    query = hasher.embed(["renew invoice"])[0]
    lexical = [(row, s) for row, s in fused if s["vector_rank"] is None]
    assert lexical and all(s["bm25_rank"] for _, s in lexical)  # not in the vector list: BM25 found each one
    exact = [float(reader.vectors[row] @ query) for row, _ in lexical]
    assert [s["similarity"] for _, s in lexical] == pytest.approx(exact, abs=1e-6)
    assert max(exact) > 0  # a real cosine, not the 0.0 a missing vector rank used to mean


def test_bm25_alone_embeds_nothing_and_computes_no_similarity(reader):
    class Refuses:
        def embed(self, texts):
            raise AssertionError("BM25 alone must not embed")

    hits = search(reader, Refuses(), SearchRequest(query="invoice customer", mode="bm25"))
    assert hits and all(h.signals.vector_rank is None and h.similarity == 0.0 for h in hits)


def test_score_thresholds_keep_exactly_the_hits_similar_enough(reader, hasher):
    hits = list(enumerate(search(reader, hasher, SearchRequest(query="invoice customer renew", limit=20)), 1))
    sims = sorted({h.similarity for _, h in hits})
    assert len(sims) >= 3
    floor = sims[len(sims) // 2]
    kept, notes = keep_similar(hits, floor, None)
    assert kept == [(c, h) for c, h in hits if h.similarity >= floor] and 0 < len(kept) < len(hits)
    assert notes == [f"min_score={floor} dropped {len(hits) - len(kept)}"]
    diff = sims[-1] - floor
    assert similarity_floor([h for _, h in hits], None, diff) == pytest.approx(floor)
    assert [c for c, _ in keep_similar(hits, None, diff)[0]] == [c for c, _ in kept]
    assert keep_similar(hits, None, None) == (hits, [])


def test_signals_are_a_record_whose_json_names_every_ranking_and_the_snippet_lines(reader, hasher):
    hit = search(reader, hasher, SearchRequest(query="renew_subscription", repos=("api",)))[0]
    assert hit.signals.rank("bm25") == hit.signals.bm25_rank == 1 and hit.signals.rerank_score is None
    data = hit.to_dict()["signals"]
    assert list(data) == [
        "vector_rank",
        "vector_score",
        "bm25_rank",
        "bm25_score",
        "symbol_rank",
        "symbol_score",
        "snippet_lines",
        "vector_tier",
    ]  # rerank_score appears only where a reranker scored the hit
    assert data["snippet_lines"] == [hit.line_start, hit.line_end] and data["bm25_rank"] == 1
    assert data["vector_tier"] == "full"  # the hashing embedder is no static model
    bm25 = search(reader, hasher, SearchRequest(query="renew_subscription", repos=("api",), mode="bm25"))[0]
    assert bm25.signals.vector_tier is None  # no vectors were read


def test_a_long_task_text_is_asked_as_titled_passages_that_lose_nothing():
    assert passages("  retry the webhook when the payment provider times out \n") == [
        "retry the webhook when the payment provider times out"
    ]
    title = "Checkout crashes when a coupon exceeds the total"
    prose = "\n\n".join(f"Paragraph {i}: " + "the coupon is applied before the tax is computed. " * 4 for i in range(6))
    code = "```python\n" + "\n".join(f"apply_coupon(cart, coupon_{i})\n" for i in range(12)) + "```"
    trace = "Traceback (most recent call last):\n" + "\n".join(
        f'  File "shop/pricing.py", line {i}, in total\n    raise ValueError("negative total")' for i in range(30)
    )
    report = f"{title}\n\n{prose}\n\n{code}\n\n{trace}"
    parts = passages(report)
    assert len(parts) > 3 and all(p.startswith(title + "\n") for p in parts)
    assert all(len(p) <= PASSAGE_CHARS for p in parts)
    assert sum(code in p for p in parts) == 1  # a fenced block that fits stays whole, blank lines and all
    body = "".join(p[len(title) + 1 :] for p in parts)
    for line in report.split("\n")[1:]:
        assert line.strip() in body  # every line of the body is read by some passage


def test_filter_columns_are_codes_that_answer_like_the_strings_they_stand_for(reader):
    import numpy as np
    import pyarrow as pa

    from query.labels import Labels

    langs = Labels.of(pa.chunked_array([["go", "python"], ["go", "markdown", "python"]]))
    assert langs.codes.dtype == np.uint8 and len(langs) == 5 and sorted(langs.values) == ["go", "markdown", "python"]
    assert (langs == "go").tolist() == [True, False, True, False, False]
    assert langs.isin(["python", "rust"]).tolist() == [False, True, False, False, True]
    assert not langs.isin([]).any()
    assert langs[3] == "markdown" and langs[np.array([True, False, False, True, False])].tolist() == ["go", "markdown"]
    assert list(langs) == ["go", "python", "go", "markdown", "python"]
    kinds = langs.mapped(lambda v: "doc" if v == "markdown" else "code")  # two values map to one
    assert (kinds == "code").tolist() == [True, True, True, False, True]
    # Codes take the narrowest type their values fit; one value takes no memory a row; parts join into one column.
    many = Labels.of(pa.array([f"p{i % 300}" for i in range(600)]))
    assert many.codes.dtype == np.uint16 and many[299] == "p299" and (many == "p7").sum() == 2
    one = Labels.of(pa.array(["acme"] * 1000))
    assert one.codes.strides == (0,) and (one == "acme").all() and not one.isin(["other"]).any()
    joined = Labels.joined([one, many, Labels.of(pa.array(["acme"] * 3))])
    assert len(joined) == 1603 and joined.codes.dtype == np.uint16
    assert list(joined) == ["acme"] * 1000 + [f"p{i % 300}" for i in range(600)] + ["acme"] * 3
    # A snapshot's columns agree with its rows.
    paths = reader.rows.column("path").to_pylist()
    assert list(reader.col["path"]) == paths and reader.col["org"][0] == reader.rows.column("org")[0].as_py()


def test_vector_ranks_are_the_same_scored_in_place_or_on_the_gathered_rows(reader, hasher, monkeypatch):
    import numpy as np

    from query.search import signals as search_module  # the module whose GATHER_SHARE row_cosines reads

    vector = search_module.query_vectors(hasher, "renew the subscription invoice")
    mask = np.ones(reader.rows.num_rows, dtype=bool)
    mask[::3] = False
    ranked = {}
    for share in (0, 10**9):  # 0: always gather the allowed rows; huge: always score every row in place
        monkeypatch.setattr(search_module, "GATHER_SHARE", share)
        ranked[share] = search_module.vector_ranks(reader, vector, mask)
    assert ranked[0] == ranked[10**9] and ranked[0] and all(mask[row] for row, _ in ranked[0])


def test_one_org_asks_bm25_without_requiring_the_org_and_ranks_as_if_it_did(tmp_path):
    """Where a snapshot holds one org, the lexical query is its terms alone (so Tantivy can skip what cannot
    reach the top); it ranks the rows the org-required query ranks, in the same order, each score less the
    same constant (the org term's, which every row of the org matches)."""
    import tantivy

    from query.reader import SnapshotReader
    from query.search import lexical_ranks, row_mask
    from tests.corpus import LIB, build_corpus

    reader = SnapshotReader(build_corpus(tmp_path, {"lib": LIB, "copy": LIB}).cfg.data_dir)
    for text in ("session get request", "api shortcuts", "Session", "request url"):
        req = SearchRequest(query=text)
        terms = lexical_query(reader, text, "default", ())
        assert "Must" not in repr(terms)
        required = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.term_query(reader.schema, "org", "default")),
                (tantivy.Occur.Must, terms),
            ]
        )
        ranked = lexical_ranks(reader, req, row_mask(req, reader))
        hits = reader.searcher.search(required, 100).hits
        rows = reader.positions(reader.searcher.fast_field_values("row", [a for _, a in hits])).tolist()
        assert ranked and [r for r, _ in ranked] == rows
        shift = {round(s - mine, 4) for (s, _), (_, mine) in zip(hits, ranked)}
        assert len(shift) == 1  # the required org's term adds one constant to every score: the same order
    assert "Must" in repr(lexical_query(reader, "session", "default", ("lib",)))  # a repo filter still requires


def test_the_org_mask_is_worked_out_once_and_no_request_narrows_it(reader):
    from query.search import row_mask

    whole = row_mask(SearchRequest(query="x"), reader)
    assert (whole == (reader.col["org"] == "default")).all()
    tools = row_mask(SearchRequest(query="x", repos=("tools",)), reader)
    assert 0 < tools.sum() < whole.sum()
    whole[:] = False  # a caller narrows its copy (a session's shadowing does)
    assert (row_mask(SearchRequest(query="x"), reader) == (reader.col["org"] == "default")).all()


def test_vectors_of_rows_from_many_parts_in_any_order_are_their_rows(reader):
    import numpy as np

    every = np.concatenate([m for m in reader.vectors.matrices if len(m)])
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(every), 200)
    assert len(reader.vectors.matrices) > 1 and (reader.vectors[rows] == every[rows]).all()
    assert (reader.vectors[int(rows[0])] == every[rows[0]]).all() and reader.vectors[[]].shape == (0, every.shape[1])


def test_a_snippet_is_the_window_of_lines_sharing_most_words_with_the_query():
    """Lines are tokenized only where their lower case holds a query word: the window chosen is the one every
    line tokenized chooses, plurals (`policies` -> policy) and identifiers' parts included."""
    import random

    import numpy as np

    from query.search.hits import SNIPPET_LINES, _query_words, snippet

    vocabulary = [
        "policies",
        "Policy",
        "get_user_policies",
        "PolicyStore",
        "classes",
        "class",
        "nodes",
        "node",
        "Node",
        "edges",
        "x = 1",
        "42",
        "return",
        "shortest_path",
        "ShortestPaths",
        "  ",
        "dependency",
    ]
    rng = random.Random(0)
    for _ in range(300):
        lines = [" ".join(rng.choices(vocabulary, k=rng.randint(0, 4))) for _ in range(rng.randint(11, 40))]
        query = " ".join(rng.choices(["policy", "class", "node", "shortest path", "dependencies", "edge"], k=2))
        words = _query_words(query)
        scores = [len(words.intersection(tokens(line))) for line in lines]
        window = [sum(scores[i : i + SNIPPET_LINES]) for i in range(len(lines) - SNIPPET_LINES + 1)]
        best = int(np.argmax(window)) if max(window) > 0 else 0
        assert snippet("\n".join(lines), 1, query)[1] == 1 + best


def test_bm25_ties_are_cut_in_index_order_so_a_short_fetch_is_a_prefix_of_a_long_one(tmp_path):
    """Tantivy's best n are the first n by (score, place in the index): lexical_hits fetches no further for ties,
    and shards' lists merged by (score, place) are one reader's. A Tantivy that cut ties otherwise fails here."""
    import numpy as np

    from query.reader import SnapshotReader
    from query.search import SearchRequest, lexical_hits, row_mask
    from tests.corpus import build_corpus

    same = b"def parse_config(text):\n    return dict(line.split('=') for line in text.splitlines())\n"
    files = {f"pkg/copy{i}.py": same for i in range(40)} | {"pkg/other.py": b"def parse_other(x):\n    return x\n"}
    corpus = build_corpus(tmp_path, {"one": files, "two": dict(list(files.items())[::3])})
    reader = SnapshotReader(corpus.cfg.data_dir)
    req = SearchRequest(query="parse config text", org="default")
    mask = row_mask(req, reader)
    whole = lexical_hits(reader, req, mask, depth=1000)
    assert len({score for _, score, _ in whole[:30]}) == 1  # a tie far longer than the fetch below
    assert [place for _, _, place in whole[:30]] == sorted(place for _, _, place in whole[:30])
    for depth in (1, 5, 12):
        assert lexical_hits(reader, req, mask, depth=depth) == whole[:depth]
    only_two = mask & (reader.col["repo"] == "two")  # a filter the query does not carry: the fetch widens for it
    filtered = [hit for hit in whole if only_two[hit[0]]]
    assert lexical_hits(reader, req, only_two, depth=5) == filtered[:5] and not np.all(only_two == mask)
