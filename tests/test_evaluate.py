"""The eval harness and file-level localization, on fixtures (the numbers that matter are measured on
real repos, not asserted here)."""

import json
from dataclasses import replace

import pytest
from dulwich.repo import Repo

from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from indexer.build import run
from indexer.mirror import mirror_path, open_mirror
from query.eval import EvalError
from query.eval.commits import commit_cases, eval_commits
from query.eval.metrics import Scores, run_cases
from query.eval.queries import load_queries
from query.eval.scratch import drop_scratch, index_scratch
from query.localize import (
    HISTORY_WEIGHT,
    NAMED_FILE_BONUS,
    NAMED_SYMBOL_BONUS,
    NON_SOURCE_WEIGHT,
    OFF_TOPIC_CODE_WEIGHT,
    OFF_TOPIC_TEST_WEIGHT,
    is_test_file,
    localize,
    asks_for_tests,
    named_files,
    runner_repos,
)
from query.reader import SnapshotReader
from query.search import RRF_K, SearchError, SearchRequest, search
from tests import gitrepo
from tests.corpus import write_config


def test_scores_compute_hit_recall_and_mrr():
    s = Scores()
    s.add(["a", "b", "c"], ("b",))
    s.add(["x"] * 10 + ["a"], ("a", "z"))
    s.add(["a"], ("a",))
    assert s.summary() == {"n": 3, "hit@1": 0.333, "hit@5": 0.667, "hit@10": 0.667, "recall@10": 0.667, "mrr": 0.53}


def test_modes_isolate_the_signals(reader, hasher):
    bm25 = search(reader, hasher, SearchRequest(query="renew_subscription", mode="bm25"))
    assert bm25 and all(h.signals.vector_rank is None for h in bm25)
    vector = search(reader, hasher, SearchRequest(query="renew_subscription", mode="vector"))
    assert vector and all(h.signals.bm25_rank is None and h.signals.symbol_rank is None for h in vector)
    with pytest.raises(SearchError, match="unknown mode"):
        search(reader, hasher, SearchRequest(query="x", mode="magic"))


def test_localize_uses_names_and_stack_frames(reader, hasher):
    trace = 'Traceback:\n  File "/srv/app/src/billing/invoice.py", line 7, in total_with_tax\nTypeError'
    files = localize(reader, hasher, SearchRequest(query=trace, limit=5))
    assert files[0].path == "src/billing/invoice.py" and files[0].signals["named_file"]
    assert files[0].signals["named_symbols"] >= 1 and files[0].evidence
    assert named_files("see renew.py:12 and at com.x.Y.z(Y.java:3)") == {"renew.py", "Y.java"}


def test_files_fuse_each_signals_own_file_ranking(reader, hasher):
    query = "renew the subscription and bill the invoice total with tax"
    hybrid = localize(reader, hasher, SearchRequest(query=query, limit=50))
    for signal in ("vector", "bm25"):  # hybrid sees each signal's own file ranking unchanged
        alone = {
            f.path: f.signals[f"{signal}_rank"]
            for f in localize(reader, hasher, SearchRequest(query=query, limit=50, mode=signal))
        }
        assert alone and {f.path: f.signals[f"{signal}_rank"] for f in hybrid if f.path in alone} == alone
    for f in hybrid:
        ranks = [f.signals[k] for k in ("vector_rank", "bm25_rank", "symbol_rank") if f.signals.get(k)]
        history = HISTORY_WEIGHT / (RRF_K + f.signals["history_rank"]) if f.signals.get("history_rank") else 0.0
        weight = NON_SOURCE_WEIGHT if f.path.endswith(".md") else 1.0  # README.md, docs/guide.md
        bonus = NAMED_SYMBOL_BONUS * min(f.signals["named_symbols"], 3) + (
            NAMED_FILE_BONUS if f.signals["named_file"] else 0.0
        )
        assert f.signals["test_weight"] == 1.0  # no test file here, and the query does not speak of tests
        assert f.score == pytest.approx(weight * (sum(1 / (RRF_K + r) for r in ranks) + history) + bonus, abs=1e-6)
    assert any(f.path.endswith(".md") for f in hybrid)  # the weight was exercised


def test_test_files_weigh_by_whether_the_task_asks_for_tests(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "shop")
    gitrepo.commit(
        repo,
        {
            "shop/cart.py": b"def remove_item(cart, item):\n    cart.remove(item)\n",
            "tests/test_cart.py": b"def test_remove_item():\n    cart = [1]\n    remove_item(cart, 1)\n"
            b"    assert cart == []\n",
            ".github/workflows/tests.yaml": b"on: push\njobs:\n  remove item cart: {}\n",
        },
        message="initial import",
    )
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src" / "shop"))])
    run(cfg, show_progress=False)
    reader, hasher = SnapshotReader(cfg.data_dir), HashEmbedder()

    def weights(text, mode="hybrid"):
        files = localize(reader, hasher, SearchRequest(query=text, mode=mode))
        return [f.path for f in files], {f.path: f.signals["test_weight"] for f in files}

    order, weight = weights("remove an item from the cart")
    assert order[:2] == ["shop/cart.py", "tests/test_cart.py"]
    assert weight == {
        "shop/cart.py": 1.0,
        "tests/test_cart.py": OFF_TOPIC_TEST_WEIGHT,
        ".github/workflows/tests.yaml": 1.0,
    }
    order, weight = weights("tests: remove an item from the cart")
    assert order[0] == "tests/test_cart.py"
    assert weight == {
        "shop/cart.py": OFF_TOPIC_CODE_WEIGHT,
        "tests/test_cart.py": 1.0,
        ".github/workflows/tests.yaml": OFF_TOPIC_CODE_WEIGHT,
    }  # a workflow is not test code
    # A report that mentions a failing test in its body asks for a fix in the code.
    report = "Removing an item leaves the cart full\n\ntest_remove_item fails under pytest: assert cart == []"
    assert weights(report)[1]["tests/test_cart.py"] == OFF_TOPIC_TEST_WEIGHT
    # A stack trace's frames carry its evidence; single signals are measured unweighted.
    assert set(weights('File "tests/test_cart.py", line 3, in test_remove_item\nremove item')[1].values()) == {1.0}
    assert set(weights("tests: remove an item from the cart", mode="bm25")[1].values()) == {1.0}
    asks = ["tests: use strict equality", "flag_test: gofmt", "Fix assertRaises", "add a test for the cart"]
    asks += ["the testsuite", "add FooTest", "Update test.py", "use pytest, not nose", "pytest output"]
    silent = ["the latest release", "contest", "attestation", "login fails on test.local", "", "\n\n"]
    silent += ["Cart is not emptied\n\nSteps: run the tests under pytest, the test_remove_item test fails"]
    assert {t: asks_for_tests(t) for t in asks + silent} == {
        **dict.fromkeys(asks, True),
        **dict.fromkeys(silent, False),
    }
    tests = ["test/raw.js", "flag_test.go", "src/a.spec.ts", "tests.py", "conftest.py", "FooTest.java"]
    tests += ["spec/cart_spec.rb", "src/test/java/org/x/CartTest.java"]
    code = ["latest.py", "lib/contest.py", ".github/workflows/tests.yaml", "src/main/java/org/junit/RepeatedTest.java"]
    assert {p: is_test_file(p) for p in tests + code} == {**dict.fromkeys(tests, True), **dict.fromkeys(code, False)}


def test_a_test_tools_own_repo_never_asks_for_tests(tmp_path):
    """pytest's reports speak of tests in every line: there its own package is the code to change."""
    for name, files in {
        "runner": {"src/_pytest/fixtures.py": b"def getfixturevalue(name):\n    return name\n"},
        "jest": {"index.js": b"function runTests(paths) {\n  return paths\n}\n"},
        "shop": {"shop/cart.py": b"def remove_item(cart, item):\n    cart.remove(item)\n"},
    }.items():
        repo = gitrepo.init(tmp_path / "src" / name)
        tests = {"testing/test_fixtures.py": b"def test_getfixturevalue():\n    assert getfixturevalue('x')\n"}
        gitrepo.commit(repo, {**files, **tests}, message="initial import")
    specs = [RepoSpec(name=n, url=str(tmp_path / "src" / n)) for n in ("runner", "jest", "shop")]
    cfg = write_config(tmp_path, specs)
    run(cfg, show_progress=False)
    reader = SnapshotReader(cfg.data_dir)
    assert runner_repos(reader, "default") == {"runner", "jest"}  # by its package path, by its name
    files = localize(reader, HashEmbedder(), SearchRequest(query="tests: getfixturevalue for a fixture", limit=20))
    weight = {(f.repo, f.path): f.signals["test_weight"] for f in files}
    assert weight[("runner", "src/_pytest/fixtures.py")] == 1.0
    assert weight[("runner", "testing/test_fixtures.py")] == OFF_TOPIC_TEST_WEIGHT
    assert weight[("shop", "shop/cart.py")] == OFF_TOPIC_CODE_WEIGHT
    assert weight[("shop", "testing/test_fixtures.py")] == 1.0


def test_eval_queries_from_jsonl(corpus, reader, hasher, tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(x)
            for x in [
                {"query": "renew_subscription", "expected": ["src/billing/renew.py:10-13"]},
                {"query": "drain_queue", "repo": "tools", "expected": ["queue/src/lib.rs"]},
            ]
        )
        + "\n"
    )
    result = run_cases(reader, hasher, load_queries(path))
    assert set(result["summary"]) == {"hybrid", "vector", "bm25", "history"}
    assert result["summary"]["hybrid"]["hit@1"] == 1.0 and result["summary"]["bm25"]["hit@1"] == 1.0
    assert result["cases"][1]["hybrid"]["top"][0] == "queue/src/lib.rs"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "x"}\n')
    with pytest.raises(EvalError, match="bad.jsonl:1"):
        load_queries(bad)


@pytest.fixture
def history(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "shop")
    files = {
        "shop/cart.py": b"def add_item(cart, item):\n    cart.append(item)\n",
        "shop/price.py": b"def total_price(items):\n    return sum(i.price for i in items)\n",
        "README.md": b"# Shop\n",
    }
    gitrepo.commit(repo, files, message="initial import of the shop")
    files = {
        **files,
        "shop/price.py": files["shop/price.py"] + b"\n\ndef apply_coupon(total, coupon):\n    return total - coupon\n",
    }
    gitrepo.commit(repo, files, message="apply coupons to the total price")
    files = {
        **files,
        "shop/cart.py": files["shop/cart.py"] + b"\n\ndef remove_item(cart, item):\n    cart.remove(item)\n",
    }
    gitrepo.commit(repo, files, message="let customers remove items from the cart")
    files = {**files, "shop/cart.py": files["shop/cart.py"].replace(b"cart.append", b"cart.insert(0,")}
    gitrepo.commit(repo, files, message="bump version")  # a chore: never a query
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src" / "shop"))])
    run(cfg, show_progress=False)
    return cfg


def test_commit_cases_pick_real_commits_and_skip_chores(history):
    cases = commit_cases(history, "shop", 10, 0)
    assert sorted((c.query, c.expected) for c in cases) == [
        ("apply coupons to the total price", ("shop/price.py",)),
        ("let customers remove items from the cart", ("shop/cart.py",)),
    ]


def test_commit_cases_walk_the_configured_ref_and_say_when_it_is_missing(history, tmp_path):
    repo = Repo(str(tmp_path / "src" / "shop"))
    main = repo.refs[b"refs/heads/main"]
    files = {
        "shop/cart.py": b"def add_item(cart, item):\n    cart.append(item)\n\n\ndef empty(cart):\n    cart.clear()\n",
        "shop/price.py": b"def total_price(items):\n    return sum(i.price for i in items)\n",
        "README.md": b"# Shop\n",
    }
    gitrepo.commit(repo, files, branch="topic", message="let customers empty the whole cart", parents=[main])
    topic = replace(history, repos=(replace(history.repos[0], refs=("topic",)),))
    run(topic, show_progress=False)
    assert "let customers empty the whole cart" in [c.query for c in commit_cases(topic, "shop", 10, 0)]
    assert "let customers empty the whole cart" not in [c.query for c in commit_cases(history, "shop", 10, 0)]
    with open_mirror(mirror_path(history.data_dir, history.repos[0])) as git:  # as after a fetch that failed
        for name in [n for n in git.refs.keys() if n != b"HEAD"]:
            del git.refs[name]
    with pytest.raises(EvalError, match="cannot sample commits of 'shop'.*'refs/heads/main', which does not exist"):
        commit_cases(history, "shop", 10, 0)


def test_eval_commits_indexes_parents_and_scores_all_modes(history):
    result = eval_commits(history, "shop", 10, 0, HashEmbedder())
    assert result["summary"]["bm25"]["n"] == 2 and result["configuration"]["model"] == "blobdex:hash"
    scratch = history.data_dir / "eval" / "default-shop"
    assert not (scratch / "CURRENT").exists() and not (scratch / "snapshots").exists()
    assert all(row["hybrid"]["rank"] is not None for row in result["cases"])
    with pytest.raises(EvalError, match="unknown repo 'nope'"):
        eval_commits(history, "nope", 1, 0, HashEmbedder())


def test_eval_runs_on_a_data_dir_that_has_only_a_mirror_and_again(tmp_path):
    """An eval before any index run (the mirror fetched, no cache yet), twice: the scratch snapshot shares a
    cache that exists (a link to a missing one failed the second run with FileExistsError)."""
    from indexer.mirror import fetch

    gitrepo.commit(gitrepo.init(tmp_path / "src" / "shop"), {"shop/cart.py": b"def add_item(cart, item):\n    pass\n"})
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src" / "shop"))])
    fetch(cfg.data_dir, cfg.repos[0])
    assert not (cfg.data_dir / "cache").exists()
    for _ in range(2):
        reader = index_scratch(cfg, "shop", "default", HashEmbedder())
        assert reader.manifest.chunks == 1
        drop_scratch(cfg, "shop", "default")
    assert (cfg.data_dir / "eval" / "default-shop" / "cache").resolve() == (cfg.data_dir / "cache").resolve()


def test_eval_routing_scores_the_owner(tmp_path):
    from query.eval.routing import eval_routing
    from query.reader import SnapshotReader

    specs = []
    for name, word in (("billing", "invoice"), ("auth", "password")):
        repo = gitrepo.init(tmp_path / "src" / name)
        files = {f"{name}/core.py": f"def {word}_check():\n    return '{word}'\n".encode()}
        # One instant for every commit: each case is asked with the history before its own commit, and where
        # the second repo's commits fell a second after the first's, its case met the first's like-worded fix
        # (about one run in sixty failed so)
        gitrepo.commit(repo, files, message="initial import of the code", when=1_700_000_000)
        files = {f"{name}/core.py": files[f"{name}/core.py"] + f"\n\ndef {word}_retry():\n    pass\n".encode()}
        gitrepo.commit(repo, files, message=f"retry the {word} check when it fails", when=1_700_000_000)
        specs.append(RepoSpec(name=name, url=str(tmp_path / "src" / name)))
    cfg = write_config(tmp_path, specs)
    run(cfg, show_progress=False)
    result = eval_routing(cfg, SnapshotReader(cfg.data_dir), HashEmbedder(), ["billing", "auth"], 5, 0)
    assert result["summary"]["n"] == 2 and result["summary"]["top1"] == 1.0
    assert {c["owner"] for c in result["cases"]} == {"billing", "auth"}


def test_eval_routing_on_long_reports_with_names_masked(tmp_path):
    """Long commit bodies as cases, each repo's name and src/ package replaced by PKG before routing."""
    from query.eval.routing import eval_routing, mask

    specs = []
    for name, word in (("billing", "invoice"), ("auth", "password")):
        repo = gitrepo.init(tmp_path / "src" / name)
        path = f"src/_{name}/core.py"
        files = {path: f"def {word}_check():\n    return '{word}'\n".encode()}
        gitrepo.commit(repo, files, message="initial import of the code")
        for attempt in ("retry", "backoff"):
            files = {path: files[path] + f"\n\ndef {word}_{attempt}():\n    pass\n".encode()}
            body = f"With {name} 2.1 the {word} check gives up at the first failure. " * 4
            gitrepo.commit(repo, files, message=f"{attempt} the {word} check\n\n{body}\nimport _{name}\n")
        specs.append(RepoSpec(name=name, url=str(tmp_path / "src" / name)))
    cfg = write_config(tmp_path, specs)
    run(cfg, show_progress=False)
    reader = SnapshotReader(cfg.data_dir)
    result = eval_routing(
        cfg, reader, HashEmbedder(), ["billing", "auth"], 5, 0, kind="issues", split="all", masked=True
    )
    assert result["cases_from"] == {"kind": "issues", "split": "all", "masked": ["auth", "billing"]}
    assert result["summary"]["n"] == 4 and {c["owner"] for c in result["cases"]} == {"billing", "auth"}
    for case in result["cases"]:
        assert "With PKG 2.1 the" in case["query"] and "import PKG" in case["query"]
        assert "billing" not in case["query"] and "auth" not in case["query"]
    assert mask("billing-api uses billing.core, rebilling and Billing", {"billing"}) == (
        "PKG-api uses PKG.core, rebilling and PKG"
    )
    with pytest.raises(EvalError, match="unknown case kind"):
        eval_routing(cfg, reader, HashEmbedder(), ["billing"], 1, 0, kind="prs")


def test_eval_commits_cli_runs_each_model(history):
    from click.testing import CliRunner

    from query.cli import cli

    args = ["--config", str(history.path), "eval", "commits", "--repo", "shop", "--n", "5", "--json"]
    out = CliRunner().invoke(cli, args + ["--model", "blobdex:hash", "--model", "blobdex:hash"])
    assert out.exit_code == 0, out.output
    results = json.loads(out.stdout)
    assert len(results) == 2 and results[0]["summary"] == results[1]["summary"]
    assert results[0]["configuration"]["weights"] == "vector:1/bm25:0.75/symbol:1"
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0 and json.loads(out.stdout)["summary"]["hybrid"]["n"] == 2
