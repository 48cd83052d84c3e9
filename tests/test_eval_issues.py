"""`blobdex eval issues` on a fixture history: which commits become long task texts, what their truth is, the
time split, and the command end to end on the hashing embedder."""

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from indexer.build import run
from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from query.cli import cli
from query.eval import EvalError
from query.eval.issues import eval_issues, issue_cases, lengths, render, split_cases
from query.eval.metrics import Scores
from tests import gitrepo
from tests.corpus import write_config

CART_REPORT = (
    "When a customer removes an item from the cart, the total shown at checkout still includes its price.\n"
    "Steps: add two items, remove one, open checkout. Expected the total of the remaining item; actual the\n"
    "total of both, because remove_item drops the item but never recomputes the cached total."
)
COUPON_REPORT = (
    "Coupons with a percentage discount produce totals like 9.999999 that the payment provider rejects with\n"
    "an invalid amount error. The discounted total is now rounded to cents before it is returned, and a\n"
    "coupon larger than the total no longer makes the price negative."
)
TAX_REPORT = (
    "Prices in the European shops are shown without value added tax, so customers see a lower price than\n"
    "they pay. total_price now adds the tax rate of the shop's country; the rates live in a new module so\n"
    "that the finance team can update them without touching the pricing code."
)
CART = b"def add_item(cart, item):\n    cart.append(item)\n\n\ndef remove_item(cart, item):\n    cart.remove(item)\n"
PRICE = b"def total_price(items):\n    return sum(i.price for i in items)\n"
TEST_CART = b"def test_remove_item():\n    cart = [1]\n    remove_item(cart, 1)\n    assert cart == []\n"


@pytest.fixture
def shop(tmp_path, monkeypatch):
    """A history, oldest first: the root; a long bug report (trailers, `Fixes #12`) fixing shop/cart.py and
    its test; a long message touching only tests; a long chore; a short message; a pull request (a branch
    commit and its merge, whose body is the description) on shop/price.py; a long report that changes
    shop/price.py and README.md and adds shop/tax.py. Commits are 100 s apart."""
    clock = iter(range(1_700_000_000, 1_800_000_000, 100))
    monkeypatch.setattr(gitrepo, "time", SimpleNamespace(time=lambda: next(clock)))
    repo = gitrepo.init(tmp_path / "src" / "shop")
    files = {"shop/cart.py": CART, "shop/price.py": PRICE, "tests/test_cart.py": TEST_CART, "README.md": b"# Shop\n"}
    gitrepo.commit(repo, files, message="initial import of the shop")
    files = {**files, "shop/cart.py": CART + b"    cart.total = None\n", "tests/test_cart.py": TEST_CART + b"\n"}
    fixes = (
        f"Removed items stay in the cart total\n\n{CART_REPORT}\n\nFixes #12\nSigned-off-by: A Dev <a@example.com>\n"
    )
    gitrepo.commit(repo, files, message=fixes)
    files = {**files, "tests/test_cart.py": TEST_CART + b"\n\n# the cart total after a removal\n"}
    gitrepo.commit(repo, files, message=f"Cover removing from the cart in the tests\n\n{CART_REPORT}\n")
    files = {**files, "shop/cart.py": files["shop/cart.py"] + b"\n__version__ = '1.1'\n"}
    gitrepo.commit(repo, files, message=f"Bump version to 1.1\n\n{CART_REPORT}\n")
    files = {**files, "shop/price.py": PRICE + b"\n\ndef zero():\n    return 0\n"}
    main = gitrepo.commit(repo, files, message="Add a zero price helper\n\nFor free items.\n")
    topic = {**files, "shop/price.py": files["shop/price.py"] + b"\n\ndef apply_coupon(total, c):\n    return total\n"}
    branch = gitrepo.commit(repo, topic, branch="coupons", message="round coupon totals", parents=[main.encode()])
    merge = f"Merge pull request #7 from dev/coupons\n\nRound coupon totals to cents\n\n{COUPON_REPORT}\n"
    gitrepo.commit(repo, topic, message=merge, parents=[main.encode(), branch.encode()])
    files = {
        **topic,
        "shop/price.py": topic["shop/price.py"] + b"\n\ndef with_tax(total, rate):\n    return total * rate\n",
        "shop/tax.py": b"RATES = {'de': 1.19}\n",
        "README.md": b"# Shop\n\nPrices include tax.\n",
    }
    gitrepo.commit(repo, files, message=f"Show prices with tax in European shops\n\n{TAX_REPORT}\n")
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src" / "shop"))])
    run(cfg, show_progress=False)
    return cfg


def test_issue_cases_are_the_long_reports_with_their_non_test_source_files(shop):
    cases, skipped = issue_cases(shop, "shop")
    assert [(c.kind, c.case.query, c.case.expected) for c in cases] == [
        ("commit", f"Removed items stay in the cart total\n\n{CART_REPORT}", ("shop/cart.py",)),
        ("pull request", f"Round coupon totals to cents\n\n{COUPON_REPORT}", ("shop/price.py",)),
        ("commit", f"Show prices with tax in European shops\n\n{TAX_REPORT}", ("shop/price.py",)),
    ]
    assert [c.time for c in cases] == sorted(c.time for c in cases)
    assert dict(skipped) == {
        "looked at": 8,
        "the root commit": 1,
        "no non-test source file changed": 1,
        "a chore": 1,
        "a body under 200 characters": 2,  # the short commit and the pull request's branch commit
    }


def test_the_split_tunes_on_the_older_half_and_reports_the_newer(shop):
    cases, _ = issue_cases(shop, "shop")
    tune, info = split_cases(cases, "tune")
    test, _ = split_cases(cases, "test")
    assert [c.case.query.split("\n")[0] for c in tune] == ["Removed items stay in the cart total"]
    assert [c.case.query.split("\n")[0] for c in test] == [
        "Round coupon totals to cents",
        "Show prices with tax in European shops",
    ]
    assert split_cases(cases, "all")[0] == cases
    assert info["at"] == cases[1].case.commit_id and (info["tune"], info["test"]) == (1, 2)
    assert info["at_time"] == "2023-11-14T22:23:20+00:00"  # the merge, 600 s after the root
    with pytest.raises(EvalError, match="unknown split 'later'"):
        split_cases(cases, "later")


def test_lengths_and_hit_at_3():
    assert lengths(["a b", "a b c d", "a"] + ["x"] * 7) == {
        "chars": {"min": 1, "median": 1.0, "p90": 3, "max": 7},
        "words": {"min": 1, "median": 1.0, "p90": 2, "max": 4},
    }
    s = Scores()
    for ranked in (["a"], ["x", "x", "a"], ["x"] * 4 + ["a"], ["x"]):
        s.add(ranked, ("a",))
    assert s.summary((1, 3, 5, 10)) == {
        "n": 4,
        "hit@1": 0.25,
        "hit@3": 0.5,
        "hit@5": 0.75,
        "hit@10": 0.75,
        "recall@10": 0.75,
        "mrr": 0.383,
    }


def test_eval_issues_cli_prints_the_table_split_and_lengths(shop):
    args = ["--config", str(shop.path), "eval", "issues", "--repo", "shop", "--n", "5"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    header = "mode        n  hit@1  hit@3  hit@5 hit@10 recall@10    mrr"
    assert header in out.stdout.splitlines() and "model=blobdex:hash" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines()]
    assert {row[0]: row[1] for row in rows if row[:1] in (["hybrid"], ["vector"], ["bm25"])} == {
        "hybrid": "2",
        "vector": "2",
        "bm25": "2",
    }
    assert "split: test (tune 1 older, test 2 newer; the newer half starts at" in out.stdout
    assert "query chars: min" in out.stdout and "query words: min" in out.stdout
    assert "eval: 2/2 cases" in out.stderr
    out = CliRunner().invoke(cli, args + ["--split", "all", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    assert {mode: s["n"] for mode, s in result["summary"].items()} == {
        "hybrid": 3,
        "vector": 3,
        "bm25": 3,
        "history": 3,
    }
    assert [(row["kind"], row["expected"]) for row in result["cases"]] == [
        ("commit", ["shop/cart.py"]),
        ("pull request", ["shop/price.py"]),
        ("commit", ["shop/price.py"]),
    ]
    assert result["lengths"]["words"]["min"] == min(len(row["query"].split()) for row in result["cases"])
    assert result["split"]["split"] == "all" and all(row["bm25"]["rank"] for row in result["cases"])


def test_a_tuned_models_cutoff_leaves_the_cases_it_learned_from_out(shop):
    cases, _ = issue_cases(shop, "shop")
    result = eval_issues(shop, "shop", 5, 0, HashEmbedder(), split="all", unseen_from=cases[1].time)
    assert [row["commit_id"] for row in result["cases"]] == [c.case.commit_id for c in cases[1:]]
    assert result["split"]["seen_dropped"] == 1
    assert "1 older than the tuned model's cutoff left out" in render(result)
    with pytest.raises(EvalError, match=r"every case of the test half of 'shop' is older .* tune with --before"):
        eval_issues(shop, "shop", 5, 0, HashEmbedder(), split="test", unseen_from=cases[-1].time + 1)


def test_eval_issues_says_why_no_commit_qualifies(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "tiny")
    gitrepo.commit(repo, {"tiny/core.py": b"def f():\n    pass\n"}, message="initial import")
    gitrepo.commit(repo, {"tiny/core.py": b"def f():\n    return 1\n"}, message="return one from f")
    cfg = write_config(tmp_path, [RepoSpec(name="tiny", url=str(tmp_path / "src" / "tiny"))])
    run(cfg, show_progress=False)
    with pytest.raises(
        EvalError,
        match=r"no commit of 'tiny' qualifies .*: looked at 2 commits \(a body under 200 characters: 1, "
        r"the root commit: 1\); a case needs a message body of 200\+ characters",
    ):
        eval_issues(cfg, "tiny", 5, 0, HashEmbedder())
    with pytest.raises(EvalError, match="unknown repo 'nope'"):
        eval_issues(cfg, "nope", 5, 0, HashEmbedder())


def test_a_trailer_block_goes_whatever_its_keys_but_a_report_keeps_its_last_paragraph():
    """Gerrit's trailers (`Reviewed-on:`, `LUCI-TryBot-Result:`) would otherwise count as the report's prose."""
    from query.eval.issues import task_text

    gerrit = (
        "go/analysis: add the printf check\n\nThe check reports format strings that do not match their arguments.\n"
        "\nUpdates golang/go#17747\n\nChange-Id: I385c59d5f0136c0b8009f6be42c0c85712c50618\n"
        "Reviewed-on: https://go-review.googlesource.com/c/tools/+/804480\n"
        "LUCI-TryBot-Result: golang-scoped@luci-project-accounts.iam.gserviceaccount.com\n"
        "Auto-Submit: A Dev <a@example.com>\n"
    )
    title, description, reason = task_text(gerrit, merge=False)
    assert description == "The check reports format strings that do not match their arguments."
    assert reason == "a body under 200 characters"
    report = f"Totals are wrong\n\n{CART_REPORT}\n\nExpected: 10.00\nActual: 19.99\n"
    assert task_text(report, merge=False) == (
        "Totals are wrong",
        f"{CART_REPORT}\n\nExpected: 10.00\nActual: 19.99",
        "",
    )
