"""`blobdex tune` on a fixture history: which pairs are mined (and never from after the cutoff, from tests or
from credentials), a real fine-tuning run of the bundled model, and evals that leave out what it learned from."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from indexer.build import run
from indexer.config import RepoSpec
from indexer.embed import load_embedder
from query.eval import EvalError
from query.eval.tune import TUNE_RECORD, Pair, batches, clean, cutoff, learned_until, mine, split_doc
from tests import gitrepo
from tests.corpus import write_config

CART = b'''def add_item(cart, item):
    """Add an item to the cart, keeping the cart sorted by price."""
    cart.append(item)
    cart.sort(key=lambda i: i.price)
'''
PRICE = b"""# Sum the prices of every item in the cart, in cents.
def total_price(items):
    total = 0
    for item in items:
        total += item.price
    return total
"""
FORMAT_JS = b"""// Format a price given in cents as a currency string for display.
function formatPrice(cents) {
  return (cents / 100).toFixed(2);
}
"""
SETTINGS = b'''def cloud_credentials():
    """Return the access key the storage client signs requests with."""
    aws_access_key_id = "AKIAABCDEFGHIJKLMNOP"
    return aws_access_key_id
'''
TEST_CART = b'''def test_add_item():
    """Adding an item keeps the cart sorted by price."""
    assert True
'''
COUPON = b'''

def apply_coupon(total, code):
    """Apply a coupon code to the total and never go below zero."""
    return max(total - 5, 0)
'''


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """A history, oldest first: the root; "Round totals to cents before checkout" (changes total_price); a
    commit whose message holds an access key (changes formatPrice); the cutoff, "Keep removed items out of
    the cart total" (adds apply_coupon too); one more commit after it."""
    root = tmp_path_factory.mktemp("tune")
    clock = iter(range(1_700_000_000, 1_800_000_000, 100))
    saved = gitrepo.time
    gitrepo.time = SimpleNamespace(time=lambda: next(clock))
    try:
        repo = gitrepo.init(root / "src" / "shop")
        files = {
            "shop/cart.py": CART,
            "shop/price.py": PRICE,
            "shop/settings.py": SETTINGS,
            "web/format.js": FORMAT_JS,
            "tests/test_cart.py": TEST_CART,
        }
        commits = {"root": gitrepo.commit(repo, files, message="initial import of the shop")}
        files = {**files, "shop/price.py": PRICE.replace(b"return total", b"return round(total)")}
        commits["round"] = gitrepo.commit(repo, files, message="Round totals to cents before checkout")
        files = {**files, "web/format.js": FORMAT_JS.replace(b"cents / 100", b"cents / 100.0")}
        message = "Show prices on uploads signed with AKIAABCDEFGHIJKLMNOP"
        commits["secret"] = gitrepo.commit(repo, files, message=message)
        files = {**files, "shop/cart.py": CART + COUPON}
        commits["cutoff"] = gitrepo.commit(repo, files, message="Keep removed items out of the cart total")
        files = {**files, "web/format.js": FORMAT_JS.replace(b"toFixed(2)", b"toFixed(3)")}
        commits["after"] = gitrepo.commit(repo, files, message="Show prices with three decimals in the shop")
    finally:
        gitrepo.time = saved
    cfg = write_config(root, [RepoSpec(name="shop", url=str(root / "src" / "shop"))], model="all-MiniLM-L6-v2")
    embedder = load_embedder("all-MiniLM-L6-v2")
    run(cfg, embedder=embedder, show_progress=False)
    return SimpleNamespace(cfg=cfg, commits=commits, embedder=embedder)


GO_TWICE = "func Twice(x int) int {\n\treturn 2 * x\n}"
RUST_POINT = "struct Point { x: i32 }"
LUA_TWICE = "local function twice(x) return 2 * x end"
JAVA_TWICE = "int twice(int x) { return 2 * x; }"


@pytest.mark.parametrize(
    "lang, text, doc, code",
    [
        ("python", 'def f(x):\n    """Twice x."""\n    return 2 * x\n', "Twice x.", "def f(x):\n    return 2 * x\n"),
        ("python", '@cache\ndef f():\n    """Doc\n    more."""\n    pass', "Doc more.", "@cache\ndef f():\n    pass"),
        ("python", "# Twice x.\ndef f(x):\n    return 2 * x", "Twice x.", "def f(x):\n    return 2 * x"),
        ("go", "// Twice doubles x.\n" + GO_TWICE, "Twice doubles x.", GO_TWICE),
        ("java", "/**\n * Twice x.\n */\n" + JAVA_TWICE, "Twice x.", JAVA_TWICE),
        ("python", "def f(x):\n    return 2 * x\n", None, None),
        ("go", "// only a comment\n// and nothing else", None, None),
        ("rust", "#[derive(Debug, Clone, PartialEq)]\n" + RUST_POINT, None, None),  # an attribute, not a doc
        (
            "rust",
            "/// A point on the plane.\nstruct Point { x: i32 }",
            "A point on the plane.",
            "struct Point { x: i32 }",
        ),
        ("c", "#define TWICE(x) (2 * (x))\nint twice(int x);", None, None),
        (
            "lua",
            "-- Twice x.\nlocal function twice(x) return 2 * x end",
            "Twice x.",
            "local function twice(x) return 2 * x end",
        ),
    ],
)
def test_split_doc_takes_a_docstring_or_leading_comment_off_its_code(lang, text, doc, code):
    got = split_doc(text, lang)
    assert (None if got is None else (clean(got[0]), got[1])) == (None if doc is None else (doc, code))


def test_mining_stops_at_the_cutoff_and_skips_tests_and_credentials(shop):
    cut = cutoff(shop.cfg, "shop", "default", shop.commits["cutoff"])
    assert cut.commit_id == shop.commits["secret"]  # the tree before the cutoff commit is mined
    pairs = mine(shop.cfg, cut, 100, 0)
    docs = {p.query: p.code for p in pairs if p.kind == "doc"}
    assert set(docs) == {
        "Add an item to the cart, keeping the cart sorted by price.",
        "Sum the prices of every item in the cart, in cents.",
        "Format a price given in cents as a currency string for display.",
    }  # not the test's docstring, not the credential's, not apply_coupon's (added by the cutoff commit)
    assert docs["Add an item to the cart, keeping the cart sorted by price."] == (
        "add_item\ndef add_item(cart, item):\n    cart.append(item)\n    cart.sort(key=lambda i: i.price)"
    )
    commits = [(p.query, p.code.split("\n", 1)[0]) for p in pairs if p.kind == "commit"]
    # the one commit older than the cutoff that changed source and holds no credential, with the chunk it
    # changed (as it was before)
    assert commits == [("Round totals to cents before checkout", "total_price")]
    assert next(p.code for p in pairs if p.kind == "commit").endswith("return total")  # the parent's version
    assert not any("AKIA" in p.code or "AKIA" in p.query for p in pairs)


def test_a_date_cutoff_takes_the_newest_commit_before_it_and_bad_ones_are_refused(shop):
    from dulwich.repo import Repo

    git = Repo(str(shop.cfg.data_dir / "mirrors" / "default" / "shop.git"))
    at = git[shop.commits["cutoff"].encode()].commit_time
    from datetime import datetime, timezone

    iso = datetime.fromtimestamp(at, timezone.utc).isoformat()
    assert cutoff(shop.cfg, "shop", "default", iso).commit_id == shop.commits["secret"]
    assert cutoff(shop.cfg, "shop", "default", None).commit_id == shop.commits["after"]
    with pytest.raises(EvalError, match="neither a commit of 'shop' nor an ISO date"):
        cutoff(shop.cfg, "shop", "default", "nosuchthing")
    with pytest.raises(EvalError, match="root commit"):
        cutoff(shop.cfg, "shop", "default", shop.commits["root"])


def test_batches_never_hold_one_text_or_code_twice():
    pairs = [Pair(query=f"q{i % 5}", code=f"c{i % 7}", kind="doc", repo="r") for i in range(40)]
    plan = batches(pairs, 4, 0)
    for batch in plan:
        assert len({p.query for p in batch}) == len({p.code for p in batch}) == len(batch)
    assert sum(len(b) for b in plan) >= 30  # duplicates wait for a later batch instead of being lost


@pytest.fixture(scope="module")
def tuned(shop, tmp_path_factory):
    """`blobdex tune` run for real (the bundled model, three epochs) on the history before the cutoff."""
    from click.testing import CliRunner

    from query.cli import cli

    args = ["--config", str(shop.cfg.path), "tune", "--name", "shop-1", "--repo", "shop"]
    args += ["--before", shop.commits["cutoff"], "--epochs", "3", "--json"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_tune_writes_a_model_that_loads_like_any_other_and_learned(shop, tuned):
    path = shop.cfg.data_dir / "models" / "shop-1"
    assert tuned["model"] == str(path.resolve())
    assert tuned["pairs"] == {"doc": 3, "commit": 1}
    assert tuned["cutoffs"][0]["commit_id"] == shop.commits["secret"]
    assert tuned["loss_last"] < tuned["loss_first"]  # three epochs over four pairs: it fits them
    record = json.loads((path / TUNE_RECORD).read_text())
    assert record == tuned
    model = load_embedder(str(path))
    assert model.dim == 384
    text = ["Format a price given in cents as a currency string for display."]
    assert float(np.dot(model.embed(text)[0], shop.embedder.embed(text)[0])) < 0.9999  # the weights moved
    assert not list((shop.cfg.data_dir / "models").glob(".*tmp*"))  # written aside, then renamed in


def test_tune_refuses_an_existing_name_and_a_commit_cutoff_over_several_repos(shop, tuned, blobdex):
    again = blobdex("--config", shop.cfg.path, "tune", "--name", "shop-1", "--repo", "shop")
    assert again.code == 2 and "a model named 'shop-1' already exists" in again.err and "choose another" in again.err
    two = blobdex("--config", shop.cfg.path, "tune", "--name", "x", "--repo", "a", "--repo", "b", "--before", "abc")
    assert two.code == 2 and "belongs to one repo" in two.err
    bad = blobdex("--config", shop.cfg.path, "tune", "--name", "../up", "--repo", "shop")
    assert bad.code == 2 and "invalid model name" in bad.err
    fast = shop.cfg.path.with_name("fast.toml")
    fast.write_text(shop.cfg.path.read_text(encoding="utf-8").replace('"all-MiniLM-L6-v2"', '"fast"'))
    variant = blobdex("--config", fast, "tune", "--name", "x", "--repo", "shop")
    assert variant.code == 2 and "cannot tune model 'fast': it is the +static variant" in variant.err


def test_an_eval_of_a_tuned_model_leaves_out_what_it_learned_from(shop, tuned, blobdex):
    assert learned_until(tuned["model"], "default", "shop") == tuned["cutoffs"][0]["time"]
    assert learned_until(tuned["model"], "default", "other") is None
    assert learned_until("all-MiniLM-L6-v2", "default", "shop") is None
    out = blobdex(
        "--config", shop.cfg.path, "eval", "commits", "--repo", "shop", "--n", "10", "--json",
        "--model", "all-MiniLM-L6-v2", "--model", tuned["model"],
    )  # fmt: skip
    assert out.code == 0, out.err
    for result in json.loads(out.out):  # both models on the same cases: the commits from the cutoff on
        assert {row["commit_id"] for row in result["cases"]} == {shop.commits["cutoff"], shop.commits["after"]}
    base = blobdex("--config", shop.cfg.path, "eval", "commits", "--repo", "shop", "--n", "10", "--json")
    older = {shop.commits["round"], shop.commits["secret"]}
    assert older <= {row["commit_id"] for row in json.loads(base.out)["cases"]}


def test_a_tuned_model_in_the_config_or_its_variant_is_never_measured_on_what_it_learned(shop, tuned, blobdex):
    """The cutoff holds when the tuned model is the configured one (no --model) and for its 8-bit encoding."""
    assert learned_until(tuned["model"] + "+int8", "default", "shop") == tuned["cutoffs"][0]["time"]
    configured = shop.cfg.path.with_name("tuned.toml")
    text = shop.cfg.path.read_text(encoding="utf-8").replace('"all-MiniLM-L6-v2"', json.dumps(tuned["model"]))
    configured.write_text(text.replace('data_dir = "data"', f"data_dir = {json.dumps(str(shop.cfg.data_dir))}"))
    assert tuned["model"] in configured.read_text()
    out = blobdex("--config", configured, "eval", "commits", "--repo", "shop", "--n", "10", "--json")
    assert out.code == 0, out.err
    assert {row["commit_id"] for row in json.loads(out.out)["cases"]} == {shop.commits["cutoff"], shop.commits["after"]}
