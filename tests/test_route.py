"""route_task with the real model: four services with distinct jobs; each task's owner ranks first."""

import pytest

from indexer.embed import load_embedder
from query.reader import SnapshotReader
from query.route_task import NOT_SUBSTANCE_RE, _checkout, route
from tests.corpus import build_corpus

SERVICES = {
    "billing": {
        "README.md": b"# Billing\n\nSubscriptions, invoices and card payments for the shop.\n",
        "billing/payments.py": b'''import time


class PaymentProvider:
    def charge(self, card_token, amount_cents):
        """Charge a stored card through the payment gateway."""
        return self.gateway.post("/charges", {"card": card_token, "amount": amount_cents})


def renew_subscription(subscription, provider):
    """Bill the next period of a subscription."""
    receipt = provider.charge(subscription.card_token, subscription.plan.price_cents)
    subscription.paid_until = subscription.paid_until + subscription.plan.period
    return receipt
''',
        "billing/invoices.py": b"""def invoice_total(lines, tax_rate):
    subtotal = sum(line.quantity * line.unit_price for line in lines)
    return round(subtotal * (1 + tax_rate), 2)
""",
    },
    "auth": {
        "README.md": b"# Auth\n\nSign-in, passwords and sessions.\n",
        "auth/login.py": b'''import hashlib
import hmac


def verify_password(user, attempt):
    digest = hashlib.scrypt(attempt.encode(), salt=user.salt, n=2**14, r=8, p=1)
    return hmac.compare_digest(digest, user.password_hash)


def sign_in(users, username, attempt):
    """Check credentials and open a session."""
    user = users.get(username)
    if user is None or not verify_password(user, attempt):
        user.failed_attempts += 1
        return None
    user.failed_attempts = 0
    return user.new_session()
''',
    },
    "notify": {
        "README.md": b"# Notify\n\nE-mail, SMS and push messages to customers.\n",
        "notify/channels.py": b'''def send_sms(phone_number, body, client):
    """Deliver a text message through the SMS gateway."""
    return client.messages.create(to=phone_number, body=body)


def send_email(address, subject, body, smtp):
    smtp.sendmail("noreply@shop.example", address, f"Subject: {subject}\\n\\n{body}")
''',
    },
    "catalog": {
        "README.md": b"# Catalog\n\nProduct listings and product search.\n",
        "catalog/search.py": b'''def score(product, terms, now):
    """Relevance of a product for the query terms."""
    matches = sum(product.description.count(t) for t in terms)
    age_days = (now - product.created_at).days
    return matches / (1 + age_days / 365)


def search_products(products, query, now, limit=20):
    terms = query.lower().split()
    ranked = sorted(products, key=lambda p: score(p, terms, now), reverse=True)
    return ranked[:limit]
''',
    },
}

TASKS = [
    ("retry the card charge when the payment gateway times out", "billing"),
    ("lock the account after five wrong passwords", "auth"),
    ("text the customer when their parcel ships", "notify"),
    ("show newer products higher in the search results", "catalog"),
]


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    root = tmp_path_factory.mktemp("route")
    embedder = load_embedder("all-MiniLM-L6-v2")
    built = build_corpus(root, SERVICES, model="all-MiniLM-L6-v2", embedder=embedder)
    return SnapshotReader(built.cfg.data_dir), embedder


@pytest.mark.parametrize("task,owner", TASKS, ids=[t[1] for t in TASKS])
def test_route_task_ranks_the_owner_first(routed, task, owner):
    reader, embedder = routed
    routes = route(reader, embedder, task, limit=4)
    assert routes[0].repo == owner, [(r.repo, r.score, r.signals) for r in routes]
    top = routes[0]
    named = {"peak", "depth", "spread", "prior", "substance", "file_rank"}
    assert named <= set(top.signals) <= named | {"history_rank"}  # history_rank: when a past commit is like it
    assert top.signals["file_rank"] >= 1
    assert top.evidence
    assert top.evidence[0]["path"].startswith(f"{owner}/") or top.evidence[0]["path"] == "README.md"
    assert top.checkout["command"].startswith("git sparse-checkout")


def test_cards_give_every_repo_a_prior(routed):
    reader, embedder = routed
    routes = route(reader, embedder, "card payments and invoices", limit=4)
    assert routes[0].repo == "billing" and routes[0].signals["prior"] > 0


def test_substance_and_checkout_rules():
    assert NOT_SUBSTANCE_RE.search("tests/test_login.py") and NOT_SUBSTANCE_RE.search("docs/guide.md")
    assert NOT_SUBSTANCE_RE.search("web/cart.spec.ts") and not NOT_SUBSTANCE_RE.search("billing/payments.py")
    plan = _checkout(["billing/payments.py", "billing/sub/x.py", "README.md", "api/v1/h.py"])
    assert plan["directories"] == [".", "api/v1", "billing"]
    assert plan["command"] == "git sparse-checkout set api/v1 billing"


def test_a_report_in_test_vocabulary_routes_to_the_code_not_to_every_test_suite(tmp_path):
    """Each repo's tests speak of fixtures and assertions; only `runner` implements them. A report about a
    fixture's behaviour must not be routed by another repo's test files, and when the task asks for
    tests, they count again."""
    from indexer.embed import HashEmbedder

    suite = (
        b"import pytest\n\n\n@pytest.fixture\ndef teardown_fixture_twice():\n    yield\n\n\n"
        b"def test_teardown_fixture_runs_twice(teardown_fixture_twice):\n    assert teardown_fixture_twice is None\n"
    )
    repos = {
        "shop": {"shop/cart.py": b"def add_item(cart, item):\n    cart.append(item)\n", "tests/test_cart.py": suite},
        "runner": {
            "runner/fixtures.py": b"def finish_fixture(request):\n"
            b"    for hook in request.finalizers:\n        hook()\n",
            "runner/main.py": b"def run_session(items):\n    return [item.run() for item in items]\n",
        },
    }
    built = build_corpus(tmp_path, repos)
    reader, hasher = SnapshotReader(built.cfg.data_dir), HashEmbedder()
    report = "Teardown of a fixture runs twice\n\nWhen the fixture teardown raises, finish_fixture runs it twice."
    routes = route(reader, hasher, report, limit=2)
    assert [r.repo for r in routes][0] == "runner" and routes[0].signals["file_rank"] == 1
    from query.surfaces.render import routes_markdown, routes_text

    assert "best file #1" in routes_text(routes)[0] and "best file #1" in routes_markdown(report, "s", routes)
    assert all(not e["path"].startswith("tests/") for r in routes for e in r.evidence)
    asked = route(reader, hasher, "tests: teardown fixture runs twice", limit=2)
    assert any(e["path"] == "tests/test_cart.py" for r in asked for e in r.evidence)


def test_candidates_are_the_first_rows_of_each_repo_and_test_rows_are_judged_per_path():
    import numpy as np
    import pyarrow as pa

    from indexer.languages import is_test_file
    from query.labels import Labels
    from query.route_task import _first_per_group, _test_rows

    groups = np.array([2, 1, 2, 2, 1, 3, 1])
    assert _first_per_group(groups, 2).tolist() == [True, True, True, False, True, True, False]
    assert not _first_per_group(np.array([], dtype=np.int32), 2).any()
    paths = ["src/app.py", "tests/test_app.py", "src/app.py", "pkg/flag_test.go", "docs/tests.yaml"]
    assert _test_rows(Labels.of(pa.chunked_array([paths]))).tolist() == [is_test_file(p) for p in paths]
    assert [is_test_file(p) for p in paths] == [False, True, False, True, False]


@pytest.mark.parametrize("max_runs", [10_000, 0])  # 0: every case sorted whole, as interleaved groups are
def test_each_repos_best_candidates_are_those_a_full_sort_gives(max_runs, monkeypatch):
    """_best_per_group against the full stable sort it replaces: runs of groups as a snapshot holds them, ties
    (equal cosines of copied chunks) and groups split over runs, and interleaved groups."""
    import numpy as np

    from query import route_task
    from query.route_task import _best_per_group, _first_per_group

    monkeypatch.setattr(route_task, "MAX_RUNS", max_runs)
    rng = np.random.default_rng(36)
    for case in range(300):
        sizes = rng.integers(0, 60, size=rng.integers(1, 8))
        groups = np.repeat(rng.integers(0, 5, size=len(sizes)), sizes).astype(np.int32)
        if case % 5 == 0:
            rng.shuffle(groups)
        scores = rng.integers(0, 12, size=len(groups)).astype(np.float64) / 11  # many ties
        n = int(rng.integers(1, 20))
        order = np.argsort(-scores, kind="stable")
        expected = order[_first_per_group(groups[order], n)]
        assert _best_per_group(groups, scores, n).tolist() == expected.tolist(), case


def test_a_long_lived_server_prepares_what_routes_read_of_each_snapshot_it_opens(tmp_path):
    """Service(prepare=True), as `blobdex serve` and `blobdex mcp` make it, loads in a thread what every route
    reads of a snapshot when it starts serving, and, before it serves, the snapshot a publish swaps in; a route
    then answers as an unprepared server does."""
    import threading

    from dulwich.repo import Repo

    from indexer.build import run
    from indexer.embed import HashEmbedder
    from query.service import Service
    from tests import gitrepo

    built = build_corpus(tmp_path, {name: files for name, files in SERVICES.items()})
    hasher = HashEmbedder()
    prepared, plain = Service(built.cfg, hasher, prepare=True), Service(built.cfg, hasher)

    def settled(service: Service) -> set[str]:
        reader = service.reader()
        for thread in threading.enumerate():
            if thread.name == f"prepare {reader.snapshot_id}":
                thread.join(60)
        return set(reader._cache)

    first = prepared.reader().snapshot_id
    assert {"route", "history", "test_rows", "runners:default"} <= settled(prepared)
    assert "route" not in settled(plain)
    repo = Repo(str(tmp_path / "src" / "billing"))
    more = {**SERVICES["billing"], "billing/refunds.py": b"def refund(charge):\n    return charge.reverse()\n"}
    gitrepo.commit(repo, more, message="refunds", parents=[repo.head()])
    run(built.cfg, show_progress=False)
    assert prepared.reader().snapshot_id == first  # the new one opens and is prepared in a thread meanwhile
    for thread in threading.enumerate():
        if thread.name.startswith("open "):
            thread.join(60)
    assert prepared.reader().snapshot_id != first and "route" in set(prepared.reader()._cache)  # before it served
    task = "refund a card payment"
    assert prepared.route("default", task) == plain.route("default", task)
