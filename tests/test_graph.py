"""The structural graph: facts per language, coupling edges across services, DuckDB over the Parquet."""

import json
from pathlib import Path

import duckdb
import pytest
from dulwich.repo import Repo

from indexer.chunk import chunk_and_parse
from indexer.extract import extract
from indexer.build.edges import edges, route_segments
from indexer.calls.declared import python_packages
from indexer.snapshot import GRAPH_DIR, GRAPH_VIEWS, open_manifest
from indexer.snapshot.verify import verify
from query.expand_context import ContextError, context
from query.sql import SqlError
from query.sql import run as run_sql
from tests import gitrepo
from tests.corpus import build_corpus

ROOT = Path(__file__).resolve().parent.parent

SERVICES = {
    "orders": {
        "orders/__init__.py": b"",
        "orders/app.py": b'''import logging
import os

from flask import Flask

app = Flask(__name__)
PAYMENTS = os.environ["PAYMENTS_URL"]
LEVEL = os.getenv("LOG_LEVEL")


@app.route("/api/orders/<int:order_id>", methods=["GET"])
def get_order(order_id):
    """Return one order."""
    return lookup(order_id)


def lookup(order_id):
    return {"id": order_id}
''',
        "orders/tasks.py": b"""from celery import shared_task


@shared_task(name="orders.send_receipt")
def send_receipt(order_id):
    return order_id
""",
        "orders/models.py": b"""class Customer(db.Model):
    id = db.Column(db.Integer, primary_key=True)
""",
    },
    "payments": {
        "payments/__init__.py": b"",
        "payments/client.py": b"""import os

import requests

from orders.models import Customer


def fetch_order(order_id):
    base = os.getenv("PAYMENTS_URL")
    level = os.environ.get("LOG_LEVEL")
    return requests.get(f"http://orders.internal/api/orders/{order_id}")


def charge(order_id):
    celery_app.send_task("orders.send_receipt", args=[order_id])
    return lookup(order_id)
""",
        "payments/models.py": b"""class Customer(Base):
    __tablename__ = "customers"
""",
    },
    "web": {
        "server.js": b"""const express = require("express");
const app = express();

app.get("/api/carts/:id", showCart);

function showCart(req, res) {
  const payments = process.env.PAYMENTS_URL;
  const level = process.env.LOG_LEVEL;
  return fetch(`/api/orders/${req.params.id}`).then((r) => res.json(r));
}
""",
    },
    "gateway": {
        "main.go": b"""package main

import (
	"net/http"
	"os"
)

func main() {
	level := os.Getenv("LOG_LEVEL")
	http.HandleFunc("GET /healthz", health)
	_ = level
}
""",
    },
}


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    root = tmp_path_factory.mktemp("services")
    built = build_corpus(root, SERVICES)
    cfg, report = built.cfg, built.report
    path, _ = open_manifest(cfg.data_dir)
    return cfg, report, path, _rows(path / GRAPH_DIR / "edges.parquet")


def _rows(parquet: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(parquet).to_pylist()


def edges_of(edges, kind):
    return sorted(
        (e["from_repo"], e["to_repo"], e["key"], e["from_path"], e["from_line"], e["to_path"], e["to_line"])
        for e in edges
        if e["kind"] == kind
    )


def test_http_call_edges_join_urls_to_routes_in_other_repos(services):
    _, _, _, edges = services
    assert edges_of(edges, "http_call") == [
        ("payments", "orders", "GET /api/orders/<int:order_id>", "payments/client.py", 11, "orders/app.py", 11),
        ("web", "orders", "GET /api/orders/<int:order_id>", "server.js", 9, "orders/app.py", 11),
    ]


def test_every_edge_carries_its_confidence_and_evidence_on_both_sides(services):
    _, _, _, edges = services
    shown = sorted(
        (e["kind"], e["from_repo"], e["to_repo"], e["confidence"], e["from_evidence"], e["to_evidence"])
        for e in edges
        if e["kind"] in ("http_call", "task", "import")
    )
    route = "GET /api/orders/<int:order_id> -> get_order"
    assert shown == [
        ("http_call", "payments", "orders", pytest.approx(0.9), "http://orders.internal/api/orders/{}", route),
        ("http_call", "web", "orders", pytest.approx(0.6), "/api/orders/{}", route),
        ("import", "payments", "orders", pytest.approx(0.9), "import orders.models", "package orders"),
        (
            "task",
            "payments",
            "orders",
            pytest.approx(0.9),
            "send_task orders.send_receipt",
            "shared_task orders.send_receipt",
        ),
    ]


def inputs(**facts) -> dict:
    """One repo's edge_inputs with only `facts` filled in."""
    return {"routes": [], "urls": [], "tasks": [], "env_keys": {}, "models": {}, "imports": {}, "packages": {}} | facts


def test_http_call_matches_relative_and_internal_urls_never_a_third_party_host():
    """The review's case: a requests test fetching http://github.com/about/ is no client of flask's /about."""
    site = {
        "flask": inputs(
            routes=[
                ["GET", "/about", "about", "src/flask/views.py", 3],
                ["GET", "/users/<id>/posts", "posts", "app.py", 9],
            ]
        ),
        "client": inputs(
            urls=[
                ["http://github.com/about/", "/about/", "client/api.py", 1],  # third party: never
                ["https://api.example.com/users/7/posts", "/users/7/posts", "client/api.py", 2],  # third party
                ["http://flask:8000/users/{}/posts", "/users/{}/posts", "client/api.py", 3],  # service name
                ["http://10.0.0.7/users/{}/posts", "/users/{}/posts", "client/api.py", 4],  # private address
                ["http://users.svc.cluster.local/users/1/posts", "/users/1/posts", "client/api.py", 5],
                ["/about", "/about", "client/api.py", 6],  # a bare path with one fixed segment: half as sure
                ["/users/{}/posts", "/users/{}/posts", "tests/test_api.py", 7],  # test code: left out
            ]
        ),
    }
    found = [(e["from_line"], e["key"], e["confidence"]) for e in edges("default", site)]
    assert found == [
        (3, "GET /users/<id>/posts", 0.9),
        (4, "GET /users/<id>/posts", 0.7),
        (5, "GET /users/<id>/posts", 0.7),
        (6, "GET /about", 0.3),
    ]
    with_tests = [(e["from_path"], e["confidence"]) for e in edges("default", site, tests=True)]
    assert ("tests/test_api.py", 0.6) in with_tests and len(with_tests) == 5


def test_test_code_couples_nothing_by_default():
    site = {
        "a": inputs(
            tasks=[["jobs.sync", "producer", "send_task", "tests/test_jobs.py", 4]],
            env_keys={"SHARED_KEY": ["os.getenv", "tests/conftest.py", 2]},
            imports={"b": [["b.client", "tests/test_b.py", 1]]},
            packages={"tests": "tests/__init__.py"},
        ),
        "b": inputs(
            tasks=[["jobs.sync", "consumer", "shared_task", "b/jobs.py", 8]],
            env_keys={"SHARED_KEY": ["os.getenv", "b/settings.py", 3]},
            packages={"b": "b/__init__.py"},
            imports={"tests": [["tests.helpers", "b/util.py", 1]]},
        ),
    }
    assert edges("default", site) == []
    assert sorted(e["kind"] for e in edges("default", site, tests=True)) == ["env_key", "import", "import", "task"]
    assert python_packages(["tests/__init__.py", "b/__init__.py", "b/tests/__init__.py"]) == {"b"}


def test_task_edge_links_producer_to_consumer(services):
    _, _, _, edges = services
    assert edges_of(edges, "task") == [
        ("payments", "orders", "orders.send_receipt", "payments/client.py", 15, "orders/tasks.py", 4)
    ]


def test_env_key_edges_skip_keys_read_by_too_many_repos(services):
    _, _, _, edges = services
    env = edges_of(edges, "env_key")
    assert {(a, b) for a, b, key, *_ in env if key == "PAYMENTS_URL"} == {
        ("orders", "payments"),
        ("orders", "web"),
        ("payments", "web"),
    }
    assert not [e for e in env if e[2] == "LOG_LEVEL"]  # four repos read it: a convention, not a coupling
    assert ("orders", "payments", "PAYMENTS_URL", "orders/app.py", 7, "payments/client.py", 9) in env


def test_db_model_and_import_edges(services):
    _, _, _, edges = services
    assert edges_of(edges, "db_model") == [
        ("orders", "payments", "Customer", "orders/models.py", 1, "payments/models.py", 1)
    ]
    assert edges_of(edges, "import") == [
        ("payments", "orders", "orders", "payments/client.py", 5, "orders/__init__.py", 1)
    ]


def test_an_import_names_a_python_package_only_from_python_code(tmp_path):
    """`import utils from 'utils'` in JavaScript is an npm package, not the org's Python package `utils`."""
    repos = {
        "pyutils": {"utils/__init__.py": b"def tidy(x):\n    return x\n"},
        "web": {"app.js": b"import utils from 'utils';\nutils.tidy(1);\n"},
        "svc": {"svc/main.py": b"import utils\n\nutils.tidy(1)\n"},
    }
    path, _ = open_manifest(build_corpus(tmp_path, repos).cfg.data_dir)
    edges = _rows(path / GRAPH_DIR / "edges.parquet")
    assert edges_of(edges, "import") == [("svc", "pyutils", "utils", "svc/main.py", 1, "utils/__init__.py", 1)]


def test_manifest_counts_reconcile_and_report_has_table_counts(services):
    cfg, report, _, edges = services
    assert verify(cfg.data_dir)[1] == []
    d = report.to_dict()
    assert d["totals"]["graph"]["edges"] == len(edges) == 8  # 2 http_call, task, 3 env_key, db_model, import
    assert d["totals"]["graph"]["routes"] == 3 and d["seconds"]["extract"] >= 0


def test_context_finds_definitions_and_callers_in_every_repo(services):
    cfg, _, _, _ = services
    data = context(cfg.data_dir, "lookup")
    assert [(d["repo"], d["path"], d["line"]) for d in data["definitions"]] == [("orders", "orders/app.py", 17)]
    # payments calls a `lookup` it never imports: a name match, not a caller, unless asked for
    assert data["callers_by_repo"] == {"orders": 1} and data["callers_by_resolution"] == {"exact": 1}
    assert [(c["repo"], c["caller"], c["resolution"]) for c in data["callers"]] == [("orders", "get_order", "exact")]
    assert data["name_only_total"] == 1 and not data["name_only_included"]
    loose = context(cfg.data_dir, "lookup", name_only=True)
    assert [(c["repo"], c["caller"], c["resolution"]) for c in loose["callers"]] == [
        ("orders", "get_order", "exact"),
        ("payments", "charge", "name_only"),
    ]
    assert loose["callers_total"] == 1  # the total counts callers; name-only rows are counted apart


def test_a_run_keeps_an_orgs_edges_while_no_repo_changes_its_facts_and_makes_them_anew_when_one_does(
    tmp_path, monkeypatch
):
    """Every run wrote every org's edges from every repo's facts (1.0 s of a cron run at 923 repos); a commit that
    changes no route, URL, task, env key, model or import keeps the base's edges without reading one repo's
    facts beyond the changed repo's, and one that does makes them again; both as a run from scratch makes them."""
    from indexer.build import run, work
    from indexer.snapshot import read_edge_facts
    from tests.corpus import fresh_copy

    built = build_corpus(tmp_path, SERVICES)
    cfg = built.cfg
    read = []
    monkeypatch.setattr(work, "read_edge_facts", lambda part: read.append(part.name) or read_edge_facts(part))
    work._FACTS.clear()
    orders = Repo(str(tmp_path / "src" / "orders"))
    body = SERVICES["orders"]["orders/app.py"].replace(b'return {"id": order_id}', b'return {"id": order_id, "ok": 1}')
    gitrepo.commit(orders, {**SERVICES["orders"], "orders/app.py": body})
    kept = run(cfg, show_progress=False)
    assert kept.published and len(read) == 2  # the changed repo's facts, before and after
    path, _ = open_manifest(cfg.data_dir)
    assert _rows(path / GRAPH_DIR / "edges.parquet") == _rows(_newest(fresh_copy(cfg, tmp_path / "a")))
    gone = body.replace(b'@app.route("/api/orders/<int:order_id>", methods=["GET"])\n', b"")
    gitrepo.commit(orders, {**SERVICES["orders"], "orders/app.py": gone})
    read.clear()
    anew = run(cfg, show_progress=False)
    assert anew.published and len(read) == len(SERVICES) + 1  # the route went: every repo's facts
    path, _ = open_manifest(cfg.data_dir)
    edges = _rows(path / GRAPH_DIR / "edges.parquet")
    assert edges == _rows(_newest(fresh_copy(cfg, tmp_path / "b")))
    assert not [e for e in edges if e["kind"] == "http_call" and e["to_repo"] == "orders"]
    (path / GRAPH_DIR / "edges.parquet").write_bytes(b"PAR1 damaged")  # the base's edges do not read: made again
    gitrepo.commit(orders, {**SERVICES["orders"], "orders/app.py": gone + b"\n# a comment\n"})
    again = run(cfg, show_progress=False)
    assert again.published and any("edges of snapshot" in n and "made again" in n for n in again.notes)
    assert _rows(_newest(cfg)) == edges


def _newest(cfg) -> Path:
    return open_manifest(cfg.data_dir)[0] / GRAPH_DIR / "edges.parquet"


def test_context_of_a_route_handler_lists_route_env_and_edges(services):
    cfg, _, _, _ = services
    data = context(cfg.data_dir, "get_order", repo="orders")
    assert [(r["method"], r["pattern"]) for r in data["routes"]] == [("GET", "/api/orders/<int:order_id>")]
    assert {(e["kind"], e["from_repo"]) for e in data["edges"]} == {("http_call", "payments"), ("http_call", "web")}
    assert data["definitions"][0]["doc"] == "Return one order."
    fetch = context(cfg.data_dir, "fetch_order")
    assert {e["key"] for e in fetch["env_keys"]} == {"PAYMENTS_URL", "LOG_LEVEL"}
    with pytest.raises(ContextError, match="no definition of 'nope'"):
        context(cfg.data_dir, "nope")


def graph_views(path):
    """A DuckDB connection with the snapshot's graph.sql views, as its docstring says to load them."""
    con = duckdb.connect()
    con.execute(f"SET file_search_path = '{path}'")
    con.execute((path / GRAPH_VIEWS).read_text())
    return con


def test_duckdb_reads_the_published_graph_through_its_views(services):
    _, _, path, _ = services
    rows = (
        graph_views(path)
        .execute("""
        SELECT c.repo, count(*) AS n
        FROM calls c
        JOIN symbols s ON s.name = c.callee AND s.org = c.org
        WHERE s.qualified_name = 'lookup'
        GROUP BY c.repo ORDER BY c.repo""")
        .fetchall()
    )
    assert rows == [("orders", 1), ("payments", 1)]


def readme_queries() -> list[str]:
    text = (ROOT / "docs" / "graph.md").read_text()
    block = text.split("<!-- tested: duckdb-queries", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    return [q.strip() for q in block.split(";") if q.strip() and not q.strip().startswith(".read")]


def test_readme_duckdb_queries_run_on_a_real_snapshot(services):
    _, _, path, _ = services
    queries = readme_queries()
    assert len(queries) == 5
    con = graph_views(path)
    most_called, resolution, env_readers, env_code, edges = [con.execute(q).fetchall() for q in queries]
    # payments' `lookup(...)` imports nothing of that name: no call of orders' lookup, so one caller, not two
    assert most_called == [("orders", "lookup", 1, 1)]
    assert resolution == [
        ("gateway", "unresolved", 2),  # os.Getenv, http.HandleFunc: the standard library
        ("orders", "unresolved", 4),  # Flask(), os.getenv, app.route on a Flask (an unindexed package), shared_task
        ("orders", "exact", 1),
        ("orders", "name_only", 1),  # db.Column: `db` is neither defined nor imported in models.py
        ("payments", "unresolved", 3),
        ("payments", "name_only", 2),
        ("web", "name_only", 3),
        ("web", "unresolved", 3),
    ]
    assert env_readers == [
        ("orders", ["orders/app.py"], 1),
        ("payments", ["payments/client.py"], 1),
        ("web", ["server.js"], 1),
    ]
    # every read of a key, with the chunk whose text holds it: `chunks` reads the parts' text
    assert len(env_code) == con.execute("SELECT count(*) FROM env_keys").fetchone()[0] >= 3
    assert all(key in text for _, key, _, _, _, text in env_code)
    assert [(e[0], e[2]) for e in edges] == [
        ("http_call", 0.9),
        ("import", 0.9),
        ("task", 0.9),
        ("http_call", 0.6),
        ("db_model", 0.5),
        ("env_key", 0.4),
        ("env_key", 0.4),
        ("env_key", 0.4),
    ]


def test_sql_is_read_only_and_reports_duckdb_errors(services):
    cfg, _, _, _ = services
    _, columns, rows = run_sql(cfg.data_dir, "SELECT kind, count(*) AS n FROM edges GROUP BY kind ORDER BY kind")
    assert columns == ["kind", "n"] and dict(rows)["http_call"] == 2
    with pytest.raises(SqlError, match="Permission Error"):
        run_sql(cfg.data_dir, "COPY edges TO '/tmp/blobdex-should-not-exist.csv'")
    with pytest.raises(SqlError, match="Permission Error"):
        run_sql(cfg.data_dir, "SELECT * FROM read_csv('/etc/hostname')")
    with pytest.raises(SqlError, match="Parser Error"):
        run_sql(cfg.data_dir, "SELEC nonsense")
    _, _, rows = run_sql(cfg.data_dir, "SELECT count(*) FROM chunks WHERE repo = 'orders'")
    assert rows[0][0] > 0


def test_sql_and_context_commands(services, blobdex):
    cfg, _, _, _ = services
    where = ("--config", cfg.path, "--data-dir", cfg.data_dir)
    out = blobdex(*where, "sql", "SELECT name FROM symbols WHERE repo = 'web' ORDER BY name", "--json")
    assert out.code == 0 and json.loads(out.out) == [{"name": "showCart"}]
    csv = blobdex(*where, "sql", "SELECT kind, key FROM edges WHERE kind = 'task'", "--csv")
    assert csv.code == 0 and csv.out.splitlines() == ["kind,key", "task,orders.send_receipt"]
    long = "SELECT repeat('x', 70) AS v"
    assert blobdex(*where, "sql", long).out.splitlines()[2] == "x" * 59 + "…"  # a cut cell says so
    assert blobdex(*where, "sql", long, "--max-width", "0").out.splitlines()[2] == "x" * 70
    bad = blobdex(*where, "sql", "DROP TABLE edges; SELEC")
    assert bad.code == 2 and bad.err.startswith("blobdex: error: query failed:")
    ctx = blobdex(*where, "context", "lookup").out
    assert "orders:orders/app.py:17" in ctx and "orders:orders/app.py:14  in get_order" in ctx
    assert "(+ 1 call(s) of the same name on something of unknown type, not counted" in ctx
    loose = blobdex(*where, "context", "lookup", "--name-only").out
    assert "payments:payments/client.py:16  in charge  [name only]" in loose


FACT_SAMPLES = [
    # (language, source, qualified names, imports as (module, name, alias), calls as (caller, callee, root,
    # receiver, receiver_type), of which the extraction must find at least these)
    (
        "python",
        b"import os\nfrom a.b import c as d\n\nclass K(Base):\n    def m(self, s: Session):\n"
        b"        self.q = Queue()\n        s.send()\n        return os.path.join(x)\n",
        {"K", "K.m"},
        {("os", "", ""), ("a.b", "c", "d")},
        {("K.m", "join", "os", "os.path", ""), ("K.m", "send", "s", "s", "Session"), ("K.m", "Queue", "Queue", "", "")},
    ),
    (
        "javascript",
        b'import x from "lib";\nconst y = require("dep");\nexport function f() { const q = new Queue(); q.run(); '
        b"return x.run(); }\n",
        {"f"},
        {("lib", "default", "x"), ("dep", "*", "y")},
        {("f", "run", "x", "x", ""), ("f", "run", "q", "q", "Queue"), ("f", "Queue", "Queue", "", "")},
    ),
    (
        "typescript",
        b'import { z as zz } from "zod";\nexport class S {\n  private api: Api;\n'
        b"  go(): void { this.api.call(); }\n}\n",
        {"S", "S.go"},
        {("zod", "z", "zz")},
        {("S.go", "call", "this", "this.api", "Api")},
    ),
    (
        "go",
        b'package p\n\nimport f "fmt"\n\ntype T struct{}\n\nfunc (t *T) Run() { f.Println(1); t.Stop() }\n',
        {"T", "T.Run"},
        {("fmt", "", "f")},
        {("T.Run", "Println", "f", "f", ""), ("T.Run", "Stop", "t", "t", "T")},
    ),
    (
        "java",
        b"package p;\nimport java.util.List;\nclass A {\n  private List<Integer> list;\n  void b() { list.add(1); "
        b"new Box(); }\n}\n",
        {"A", "A.b"},
        {("java.util.List", "", "")},
        {("A.b", "add", "list", "list", "List"), ("A.b", "Box", "Box", "", "")},
    ),
    (  # definitions inside arrow functions passed along are named as if they were not; their calls likewise
        "javascript",
        b'describe("x", () => {\n  function helper() { return 1; }\n  it("y", (s) => helper(s));\n});\n'
        b"export const f = () => { class K { m() { this.n(); } n() {} } return new K(); };\n",
        {"helper", "f", "f.K", "f.K.m", "f.K.n"},
        set(),
        {("", "helper", "helper", "", ""), ("f.K.m", "n", "this", "this", ""), ("f", "K", "K", "", "")},
    ),
]


@pytest.mark.parametrize("lang,source,symbols,imports,calls", FACT_SAMPLES, ids=[s[0] for s in FACT_SAMPLES])
def test_facts_per_language(lang, source, symbols, imports, calls):
    _, _, parsed = chunk_and_parse(source.decode(), lang)
    facts = extract(parsed, lang)
    assert {s[1] for s in facts.symbols} == symbols
    assert {tuple(i[:3]) for i in facts.imports} == imports
    assert {tuple(c[:5]) for c in facts.calls} >= calls


@pytest.mark.parametrize(
    "lang, source, signatures",
    [
        (
            "python",
            "def renew(sub, days=30) -> int:  # grace period\n    # why\n    return days\n\n"
            "class A(B):  # base\n    x = 1\n",
            ["def renew(sub, days=30) -> int", "class A(B)"],
        ),
        ("javascript", "function f(a, b) { // note\n  return a\n}\n", ["function f(a, b)"]),
        ("go", "package p\n\nfunc F(a int) int { // note\n\treturn a\n}\n", ["func F(a int) int"]),
    ],
)
def test_a_signature_ends_before_the_body_and_its_comments(lang, source, signatures):
    _, _, parsed = chunk_and_parse(source, lang)
    assert [s[4] for s in extract(parsed, lang).symbols] == signatures


def test_syntax_errors_keep_what_can_be_recovered():
    _, _, parsed = chunk_and_parse("def ok():\n    os.getenv('KEY_A')\n\ndef broken(:\n    pass\n", "python")
    facts = extract(parsed, "python")
    assert "ok" in {s[0] for s in facts.symbols} and [e[0] for e in facts.env_keys] == ["KEY_A"]


@pytest.mark.parametrize(
    "pattern,segments",
    [
        ("/api/orders/<int:order_id>", ("api", "orders", "{}")),
        ("/api/carts/:id", ("api", "carts", "{}")),
        ("/users/{id}/", ("users", "{}")),
        ("^api/(?P<pk>[0-9]+)/$", ("api", "{}")),
        ("/", None),
        ("/{id}", None),
    ],
)
def test_route_segments(pattern, segments):
    assert route_segments(pattern) == segments


def test_a_file_with_syntax_errors_is_counted_and_never_aborts_its_repo(tmp_path):
    files = {
        "bad.py": b"def ok():\n    return os.getenv('KEY_A')\n\ndef broken(:\n    pass\n",
        "good.py": b"def fine():\n    return 1\n",
    }
    built = build_corpus(tmp_path, {"r": files})
    cfg, report = built.cfg, built.report
    assert report.repos[0].status == "ok" and report.syntax_errors == 1
    _, _, rows = run_sql(cfg.data_dir, "SELECT path, key FROM env_keys")
    assert rows == [("bad.py", "KEY_A")]


def test_go_npm_and_java_imports_meet_the_repo_that_declares_them_at_a_path_boundary():
    """A module meets the owner named by itself, by a "/" prefix of it (Go, npm) or by its package (Java), in
    another repo, outside test files; `github.com/acme/library` is not below `github.com/acme/lib`."""

    def inputs(declared=None, java=None, modules=None):
        empty = {"routes": [], "urls": [], "tasks": [], "env_keys": {}, "models": {}, "imports": {}, "packages": {}}
        return {**empty, "declared": declared or {}, "java": java or {}, "modules": modules or {}}

    org = {
        "lib": inputs(
            declared={"go": {"go.mod": "github.com/acme/lib"}, "npm": {"package.json": ["@acme/ui", "1.0.0"]}},
            java={"com.acme.core": "src/com/acme/core/Invoice.java"},
            modules={"github.com/acme/lib/sub": ["lib/self.go", 3]},  # its own: no edge
        ),
        "app": inputs(
            modules={
                "github.com/acme/lib/sub/deep": ["cmd/main.go", 5],
                "github.com/acme/library": ["cmd/other.go", 4],
                "github.com/acme/lib": ["cmd/root.go", 6],
                "@acme/ui/button": ["web/app.js", 1],
                "@acme/uix": ["web/x.js", 1],
                "com.acme.core.Invoice": ["src/App.java", 2],
                "com.acme.core.sub.Thing": ["src/Sub.java", 2],
                "github.com/acme/lib/testing": ["cmd/main_test.go", 7],
            }
        ),
    }
    found = sorted((e["key"], e["from_path"], e["to_path"]) for e in edges("default", org) if e["kind"] == "import")
    assert found == [
        ("@acme/ui", "web/app.js", "package.json"),
        ("com.acme.core", "src/App.java", "src/com/acme/core/Invoice.java"),
        ("github.com/acme/lib", "cmd/main.go", "go.mod"),
        ("github.com/acme/lib", "cmd/root.go", "go.mod"),
    ]


def test_a_route_carries_the_edges_touching_its_repo_and_those_at_its_evidence(services):
    """route_task reads the edges once a snapshot, by repo: each route counts every edge of the org touching its
    repo (either end) and carries, in the graph's order, those whose end in it is a file of its evidence."""
    from indexer.embed import HashEmbedder
    from query.reader import SnapshotReader
    from query.route_task import route

    cfg, _, _, edges = services
    reader = SnapshotReader(cfg.data_dir)
    routes = route(reader, HashEmbedder(), "create an order and charge the payment", limit=5)
    assert routes and any(r.edges for r in routes)
    for r in routes:
        touching = [e for e in edges if e["org"] == r.org and r.repo in (e["from_repo"], e["to_repo"])]
        assert r.edges_total == len(touching) and r.edges == [e for e in touching if e in r.edges]
        shown = {e["path"] for e in r.evidence}  # the evidence answered: the first of the files edges are kept at
        at_shown = [
            e
            for e in touching
            if (e["from_repo"] == r.repo and e["from_path"] in shown)
            or (e["to_repo"] == r.repo and e["to_path"] in shown)
        ]
        assert all(e in r.edges for e in at_shown)
