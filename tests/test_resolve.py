"""Call resolution over real repos indexed by the real pipeline: every call row of a Python org (two repos, one
importing the other's package), of JavaScript, Go and Java code, resolved to the exact definition with its
level; a run that moves a definition writes again the unchanged files whose calls now resolve elsewhere, and
holds what a rebuild from scratch holds; find_references by name and by position."""

from __future__ import annotations

import asyncio

import pytest
from dulwich.repo import Repo
from mcp import Client
from starlette.testclient import TestClient

from indexer.build import run
from indexer.build.resolution import Moved
from indexer.embed import HashEmbedder
from indexer.snapshot import open_manifest, parts_of, read_graph, read_part_info, read_part_table
from query.expand_context import ContextError, references
from query.service import Service
from query.surfaces.app import app
from query.surfaces.mcp import build
from tests import gitrepo
from tests.corpus import LIB, build_corpus, calls, content, fresh_copy, write_config

APP = {
    "app/__init__.py": b"",
    "app/main.py": b"""import os.path

import lib
from lib import Session


def go(x):
    s = Session()
    s.get("u")
    lib.get("u")
    os.path.join("a")
    x.get("k")
    helper()
    print(1)


def helper():
    d = {}
    return d.get("a")
""",
}
# (repo, path, line, callee, resolution, resolved repo, resolved path, resolved symbol), in path and line order
PYTHON_CALLS = [
    ("app", "app/main.py", 8, "Session", "import", "lib", "src/lib/sessions.py", "Session"),
    ("app", "app/main.py", 9, "get", "receiver", "lib", "src/lib/sessions.py", "Session.get"),
    ("app", "app/main.py", 10, "get", "import", "lib", "src/lib/api.py", "get"),  # lib's __init__ re-exports it
    ("app", "app/main.py", 11, "join", "unresolved", "", "", ""),  # os is no indexed package
    ("app", "app/main.py", 12, "get", "name_only", "", "", ""),  # x: nothing says what it is
    ("app", "app/main.py", 13, "helper", "exact", "app", "app/main.py", "helper"),
    ("app", "app/main.py", 14, "print", "unresolved", "", "", ""),  # a builtin
    ("app", "app/main.py", 19, "get", "unresolved", "", "", ""),  # d = {}: a dict's method
    ("lib", "src/lib/api.py", 5, "Session", "import", "lib", "src/lib/sessions.py", "Session"),
    (
        "lib",
        "src/lib/api.py",
        6,
        "request",
        "receiver",
        "lib",
        "src/lib/sessions.py",
        "Session.request",
    ),  # with ... as s
    ("lib", "src/lib/api.py", 10, "request", "exact", "lib", "src/lib/api.py", "request"),
    ("lib", "src/lib/cli.py", 5, "get", "import", "lib", "src/lib/api.py", "get"),
    ("lib", "src/lib/sessions.py", 8, "merge", "receiver", "lib", "src/lib/sessions.py", "Base.merge"),  # inherited
    ("lib", "src/lib/sessions.py", 9, "send", "exact", "lib", "src/lib/sessions.py", "Session.send"),
    ("lib", "src/lib/sessions.py", 12, "len", "unresolved", "", "", ""),
    ("lib", "src/lib/sessions.py", 15, "request", "exact", "lib", "src/lib/sessions.py", "Session.request"),
    ("lib", "src/lib/sessions.py", 19, "Session", "exact", "lib", "src/lib/sessions.py", "Session"),
]
POLY = {
    "web/http.js": b"""export function fetchJson(url) {
  return fetch(url);
}

export class Client {
  get(u) {
    return fetchJson(u);
  }
}
""",
    "web/app.js": b"""import { fetchJson } from "./http";
import * as http from "./http";

export function load() {
  const c = new http.Client();
  c.get("/x");
  console.log(fetchJson("/y"));
}
""",
    "server/server.go": b"""package server

type Server struct{}

func (s *Server) Handle() {
	s.log()
}

func (s *Server) log() {}

func NewServer() *Server {
	return &Server{}
}
""",
    "server/util.go": b"""package server

func helper() *Server {
	return NewServer()
}
""",
    "cmd/main.go": b"""package main

import (
	"fmt"

	"github.com/acme/poly/server"
)

func main() {
	s := &server.Server{}
	s.Handle()
	server.NewServer()
	fmt.Println("up")
}
""",
    "src/main/java/com/acme/Invoice.java": b"""package com.acme;

public class Invoice {
  public static Invoice create() { return new Invoice(); }
  public double total() { return 0; }
}
""",
    "src/main/java/com/acme/billing/Billing.java": b"""package com.acme.billing;

import com.acme.Invoice;

public class Billing {
  private Invoice last;
  double charge() {
    Invoice i = Invoice.create();
    last.total();
    return i.total() + helper();
  }
  double helper() { return 1; }
}
""",
}
POLY_CALLS = [
    ("cmd/main.go", 11, "Handle", "receiver", "server/server.go", "Server.Handle"),
    ("cmd/main.go", 12, "NewServer", "import", "server/server.go", "NewServer"),
    ("cmd/main.go", 13, "Println", "unresolved", "", ""),
    ("server/server.go", 6, "log", "receiver", "server/server.go", "Server.log"),
    ("server/util.go", 4, "NewServer", "exact", "server/server.go", "NewServer"),  # the same package
    ("src/main/java/com/acme/Invoice.java", 4, "Invoice", "exact", "src/main/java/com/acme/Invoice.java", "Invoice"),
    (
        "src/main/java/com/acme/billing/Billing.java",
        8,
        "create",
        "import",
        "src/main/java/com/acme/Invoice.java",
        "Invoice.create",
    ),
    (  # a field's type
        "src/main/java/com/acme/billing/Billing.java",
        9,
        "total",
        "receiver",
        "src/main/java/com/acme/Invoice.java",
        "Invoice.total",
    ),
    (
        "src/main/java/com/acme/billing/Billing.java",
        10,
        "helper",
        "exact",
        "src/main/java/com/acme/billing/Billing.java",
        "Billing.helper",
    ),
    (
        "src/main/java/com/acme/billing/Billing.java",
        10,
        "total",
        "receiver",
        "src/main/java/com/acme/Invoice.java",
        "Invoice.total",
    ),
    ("web/app.js", 5, "Client", "import", "web/http.js", "Client"),
    ("web/app.js", 6, "get", "receiver", "web/http.js", "Client.get"),
    ("web/app.js", 7, "fetchJson", "import", "web/http.js", "fetchJson"),
    ("web/app.js", 7, "log", "unresolved", "", ""),  # console's
    ("web/http.js", 2, "fetch", "unresolved", "", ""),
    ("web/http.js", 7, "fetchJson", "exact", "web/http.js", "fetchJson"),
]


@pytest.fixture(scope="module")
def python_org(tmp_path_factory):
    return build_corpus(tmp_path_factory.mktemp("resolve"), {"lib": LIB, "app": APP})


def test_every_python_call_resolves_to_its_definition_across_repos(python_org):
    assert calls(python_org.cfg.data_dir) == sorted(PYTHON_CALLS)


def test_javascript_go_and_java_calls_resolve_within_their_repo(tmp_path):
    built = build_corpus(tmp_path, {"poly": POLY})
    found = [
        (path, line, callee, how, where, symbol)
        for _, path, line, callee, how, _, where, symbol in calls(built.cfg.data_dir)
    ]
    assert found == POLY_CALLS


def test_references_by_name_and_by_position(python_org):
    data_dir = python_org.cfg.data_dir
    by_name = references(data_dir, symbol="Session.request")
    assert [(c["repo"], c["path"], c["line"], c["resolution"]) for c in by_name["callers"]] == [
        ("lib", "src/lib/api.py", 6, "receiver"),
        ("lib", "src/lib/sessions.py", 15, "exact"),
    ]
    # a position on a call names what it calls; a position inside a definition names the definition
    at_call = references(data_dir, repo="app", path="app/main.py", line=10)
    assert [(d["path"], d["qualified_name"]) for d in at_call["definitions"]] == [("src/lib/api.py", "get")]
    assert [(c["repo"], c["path"], c["line"]) for c in at_call["callers"]] == [
        ("app", "app/main.py", 10),
        ("lib", "src/lib/cli.py", 5),
    ]
    inside = references(data_dir, repo="lib", path="src/lib/sessions.py", line=12)
    assert [d["qualified_name"] for d in inside["definitions"]] == ["Session.send"]
    assert [(c["path"], c["line"]) for c in inside["callers"]] == [("src/lib/sessions.py", 9)]
    whole = references(data_dir, symbol="get", repo="lib")  # api.get and Session.get
    assert (whole["callers_total"], whole["name_only_total"], whole["next_cursor"]) == (3, 1, None)
    pages, cursor = [], None
    while True:
        page = references(data_dir, symbol="get", repo="lib", limit=1, cursor=cursor)
        pages.append(page["callers"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [c for p in pages for c in p] == whole["callers"] and len(pages) == 3
    loose = references(data_dir, symbol="get", repo="lib", name_only=True)
    assert loose["callers"][:3] == whole["callers"]
    assert [(c["path"], c["line"], c["resolution"]) for c in loose["callers"][3:]] == [
        ("app/main.py", 12, "name_only")  # x.get("k"), labelled
    ]


def test_a_common_name_lists_twenty_definitions_and_counts_them_all(tmp_path):
    files = {f"m{i:02}.py": f"def handle(x):\n    return x\n\n\nhandle({i})\n".encode() for i in range(25)}
    data_dir = build_corpus(tmp_path, {"many": files}).cfg.data_dir
    data = references(data_dir, symbol="handle")
    assert data["definitions_total"] == 25 and data["callers_total"] == 25
    assert [d["path"] for d in data["definitions"]] == [f"m{i:02}.py" for i in range(20)]
    from query.surfaces.render import references_text

    assert "(+ 5 more definition(s) of this name, not listed" in "\n".join(references_text(data))


def test_a_position_names_only_what_its_own_org_holds(tmp_path):
    """Two orgs, each with a repo `svc` and a call on line 6 of m.py: a position in org y names y's code."""
    x_file = b"def secret_helper():\n    return 1\n\n\ndef go():\n    return secret_helper()\n"
    y_file = b"import os\n\n\n\ndef here():\n    return os.getcwd()\n"
    data_dir = build_corpus(tmp_path, {"x/svc": {"m.py": x_file}, "y/svc": {"m.py": y_file}}).cfg.data_dir
    mine = references(data_dir, org="x", repo="svc", path="m.py", line=6)
    assert [d["qualified_name"] for d in mine["definitions"]] == ["secret_helper"]
    theirs = references(data_dir, org="y", repo="svc", path="m.py", line=6)  # os.getcwd(): inside here()
    assert [d["qualified_name"] for d in theirs["definitions"]] == ["here"]
    with pytest.raises(ContextError, match="nothing is defined or called at svc:m.py:2 in org 'y'"):
        references(data_dir, org="y", repo="svc", path="m.py", line=2)


def test_classes_whose_bases_lead_back_to_them_resolve_without_end(tmp_path):
    """Hostile (or just odd) code: each class's base is named through the other, so looking for a member walks
    A -> B.Inner -> B's base A.Inner -> A's base ... until the run died of a RecursionError; now a cycle ends."""
    cyclic = {
        "pkg/__init__.py": b"",
        "pkg/a.py": b"from pkg import b\n\nclass A(b.B.Inner):\n    pass\n\ndef f(x: A):\n    x.go()\n",
        "pkg/b.py": b"from pkg import a\n\nclass B(a.A.Inner):\n    pass\n",
    }
    built = build_corpus(tmp_path, {"cyclic": cyclic})
    assert built.report.published and not built.report.failed
    assert calls(built.cfg.data_dir) == [("cyclic", "pkg/a.py", 7, "go", "name_only", "", "", "")]


LOOKALIKES = {
    "py/mod.py": b"""class Client:
    def send(self):
        pass


client = Client()


def handler(client, items):
    client.send()
    for each in items:
        each.send()
    made = make()
    made.send()
    return [c.send() for c in items]


def plain():
    client.send()


def make():
    return None


each = Client()
made = Client()
c = Client()


def callback():
    return 1


def run(callback):
    return callback()


def other():
    return callback()
""",
    "go.mod": b"module example.com/goapp\n",
    "errors/errors.go": b"package errors\n\nfunc Wrap() {}\n",
    "main.go": b"""package main

import "github.com/pkg/errors"

func main() {
	errors.Wrap()
}
""",
    "server/server.go": b"""package server

type Server struct{}

func (s *Server) flush() {}

func (s *Server) Run() {
	flush()
}
""",
    "server/util.go": b"package server\n\nfunc flush() {}\n",
    "server/stack.go": b"""package server

type Stack[T any] struct{ items []T }

func (s *Stack[T]) Push(v T) {
	s.grow()
}

func (s *Stack[T]) grow() {}
""",
    "py/scopes.py": b"""from py.mod import Client


class Other:
    def send(self):
        pass


s = Client()


class A:
    s = Other()

    def m(self):
        s.send()

    def register(self):
        pass

    handlers = register(None)


def lambdas(items):
    sorted(items, key=lambda s: s.name)
    s.send()
    return [s for s in items]


def outer():
    t = Client()

    def inner():
        nonlocal t
        t = make()

    t.send()


def make():
    return None
""",
    "py/glob.py": b"""from py.mod import Client

g = Client()


def reset():
    global g
    g = None or make()


def use():
    g.send()


def make():
    return None
""",
    "web/more.js": b"""const s = new Session();
function helper() {}
export function run(helper, s) { helper(); s.get(); }
const Api = class { save() {} };
export function go() { save(); s.get(); }
export const load = (x) => x.map((s) => s.get());
export class Session { get() { return { go() { this.helper(); } }; } helper() {} }
""",
    "server/loop.go": b"""package server

func run(fs []func()) {
	for _, flush := range fs {
		flush()
	}
}
""",
    "web/api.js": b"""export const api = {
  fetch(url) {
    return fetch(url);
  },
};

export function load() {
  return fetch("/x");
}
""",
}
LOOKALIKE_CALLS = [
    ("main.go", 6, "Wrap", "unresolved", "", ""),  # github.com/pkg/errors, not this module's errors/
    ("py/mod.py", 6, "Client", "exact", "py/mod.py", "Client"),
    ("py/mod.py", 10, "send", "name_only", "", ""),  # the parameter `client`, not the module's
    ("py/mod.py", 12, "send", "name_only", "", ""),  # a loop variable
    ("py/mod.py", 13, "make", "exact", "py/mod.py", "make"),
    ("py/mod.py", 14, "send", "name_only", "", ""),  # what make() returns says no type
    ("py/mod.py", 15, "send", "name_only", "", ""),  # a comprehension's variable
    ("py/mod.py", 19, "send", "receiver", "py/mod.py", "Client.send"),  # the module's `client`: a Client
    ("py/mod.py", 26, "Client", "exact", "py/mod.py", "Client"),
    ("py/mod.py", 27, "Client", "exact", "py/mod.py", "Client"),
    ("py/mod.py", 28, "Client", "exact", "py/mod.py", "Client"),
    ("py/mod.py", 36, "callback", "name_only", "", ""),  # the parameter, called: not the module's function
    ("py/mod.py", 40, "callback", "exact", "py/mod.py", "callback"),
    ("server/server.go", 8, "flush", "exact", "server/util.go", "flush"),  # the package's, not the method
    ("server/stack.go", 6, "grow", "receiver", "server/stack.go", "Stack.grow"),  # Stack's, not T's
    ("web/api.js", 3, "fetch", "unresolved", "", ""),  # the global, not api.fetch
    ("web/api.js", 8, "fetch", "unresolved", "", ""),
    # Python's scopes: a class body's names are not its methods'; a class body sees its own; a lambda's and a
    # comprehension's names are their own; `global` and `nonlocal` rebind the outer name
    ("py/glob.py", 3, "Client", "import", "py/mod.py", "Client"),
    ("py/glob.py", 8, "make", "exact", "py/glob.py", "make"),
    ("py/glob.py", 12, "send", "name_only", "", ""),  # reset() rebinds the module's g to what make() returns
    ("py/scopes.py", 9, "Client", "import", "py/mod.py", "Client"),
    ("py/scopes.py", 13, "Other", "exact", "py/scopes.py", "Other"),
    ("py/scopes.py", 16, "send", "receiver", "py/mod.py", "Client.send"),  # the module's s, not A.s
    ("py/scopes.py", 21, "register", "exact", "py/scopes.py", "A.register"),  # in A's body: A's own
    ("py/scopes.py", 25, "sorted", "unresolved", "", ""),
    ("py/scopes.py", 26, "send", "receiver", "py/mod.py", "Client.send"),  # the lambda's s is its own
    ("py/scopes.py", 31, "Client", "import", "py/mod.py", "Client"),
    ("py/scopes.py", 35, "make", "exact", "py/scopes.py", "make"),
    ("py/scopes.py", 37, "send", "name_only", "", ""),  # inner() rebinds t (nonlocal)
    ("server/loop.go", 5, "flush", "name_only", "", ""),  # the loop variable, not the package's flush
    # JS: parameters shadow, a class expression's methods are its own, `this` in an object literal is it
    ("web/more.js", 1, "Session", "exact", "web/more.js", "Session"),
    ("web/more.js", 3, "get", "name_only", "", ""),
    ("web/more.js", 3, "helper", "name_only", "", ""),
    ("web/more.js", 5, "get", "receiver", "web/more.js", "Session.get"),
    ("web/more.js", 5, "save", "name_only", "", ""),  # Api.save is no bare name
    ("web/more.js", 6, "get", "name_only", "", ""),  # the arrow function's s
    ("web/more.js", 6, "map", "name_only", "", ""),
    ("web/more.js", 7, "helper", "name_only", "", ""),  # this: the object literal, not Session
]


def test_names_that_only_look_alike_never_resolve_to_each_other(tmp_path):
    """A parameter, a loop variable or a returned value named like a module-level instance; a Go type's
    method named like a package function; a third-party Go package named like a folder of this module; a
    method of a JS object literal named like a global: each call resolves to what it calls, or says it does
    not know, never to the other."""
    built = build_corpus(tmp_path, {"alike": LOOKALIKES})
    found = [
        (path, line, callee, how, where, symbol)
        for _, path, line, callee, how, _, where, symbol in calls(built.cfg.data_dir)
    ]
    assert found == sorted(LOOKALIKE_CALLS)


MOVED = {  # `get` moves from api.py to shortcuts.py, and __init__.py re-exports it from there
    **LIB,
    "src/lib/__init__.py": b"from .sessions import Session, session\nfrom .shortcuts import get\n",
    "src/lib/api.py": LIB["src/lib/api.py"].split(b"\n\ndef get")[0] + b"\n",
    "src/lib/shortcuts.py": b"from .api import request\n\n\ndef get(url):\n    return request('get', url)\n",
}


def written(data_dir, repo: str) -> set[str]:
    """The paths the newest part of a repo speaks for."""
    path, manifest = open_manifest(data_dir)
    return set(read_part_table(parts_of(path, manifest, {("default", repo)})[-1], "paths").column("path").to_pylist())


def test_a_moved_definition_rewrites_the_unchanged_files_that_call_it(tmp_path):
    """cli.py, unchanged, now calls shortcuts.py's `get`: the run writes cli.py again, and the snapshot equals a
    rebuild from scratch."""
    built = build_corpus(tmp_path, {"lib": LIB})
    repo = Repo(str(tmp_path / "src" / "lib"))
    gitrepo.commit(repo, MOVED, message="move get", parents=[repo.head()])
    run(built.cfg, show_progress=False)
    changed = {"src/lib/__init__.py", "src/lib/api.py", "src/lib/shortcuts.py"}
    assert written(built.cfg.data_dir, "lib") == changed | {"src/lib/cli.py"}
    cli = [c for c in calls(built.cfg.data_dir) if c[1] == "src/lib/cli.py"]
    assert cli == [("lib", "src/lib/cli.py", 5, "get", "import", "lib", "src/lib/shortcuts.py", "get")]
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh").data_dir)


def test_a_definition_moved_in_one_repo_rewrites_the_files_of_another_that_import_it(tmp_path):
    """app, at the same commit, imports lib's `get`: when lib moves it, the run writes app's main.py again from
    the rows it had, its call now resolved to shortcuts.py; the snapshot equals a rebuild from scratch."""
    built = build_corpus(tmp_path, {"lib": LIB, "app": APP})
    before = open_manifest(built.cfg.data_dir)[1].repo("default", "app").parts
    repo = Repo(str(tmp_path / "src" / "lib"))
    gitrepo.commit(repo, MOVED, message="move get", parents=[repo.head()])
    report = run(built.cfg, show_progress=False)
    assert open_manifest(built.cfg.data_dir)[1].repo("default", "app").parts != before  # app has a part written
    assert "app/main.py" in written(built.cfg.data_dir, "app")
    app = [c for c in calls(built.cfg.data_dir, ("app",)) if c[3] == "get" and c[2] == 10]
    assert app == [("app", "app/main.py", 10, "get", "import", "lib", "src/lib/shortcuts.py", "get")]
    assert report.blobs == 4  # lib's three changed files and cli.py (written again): app's rows were only copied
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh").data_dir)


THREE = {  # c calls what b re-exports from a
    "a": {
        "alib/__init__.py": b"",
        "alib/core.py": b"class Client:\n    def send(self):\n        return 1\n",
    },
    "b": {"blib/__init__.py": b"from alib.core import Client\n"},
    "c": {
        "capp/__init__.py": b"",
        "capp/main.py": b"from blib import Client\n\n\ndef go():\n    c = Client()\n    return c.send()\n",
    },
}


def test_a_change_reaches_the_calls_that_resolved_into_it_through_another_repo(tmp_path):
    """a moves `send` into a base class; c imports Client through b's re-export, so no import of c names a: its
    call is written again all the same (it resolved into a), as a rebuild from scratch resolves it."""
    built = build_corpus(tmp_path, THREE)
    send = [r for r in calls(built.cfg.data_dir, ("c",)) if r[3] == "send"]
    assert send == [("c", "capp/main.py", 6, "send", "receiver", "a", "alib/core.py", "Client.send")]
    moved = {
        "alib/__init__.py": b"",
        "alib/base.py": b"class Base:\n    def send(self):\n        return 1\n",
        "alib/core.py": b"from alib.base import Base\n\n\nclass Client(Base):\n    pass\n",
    }
    repo = Repo(str(tmp_path / "src" / "a"))
    gitrepo.commit(repo, moved, message="move send", parents=[repo.head()])
    run(built.cfg, show_progress=False)
    send = [r for r in calls(built.cfg.data_dir, ("c",)) if r[3] == "send"]
    assert send == [("c", "capp/main.py", 6, "send", "receiver", "a", "alib/base.py", "Base.send")]
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh").data_dir)


def test_a_new_definition_reaches_the_calls_that_found_nothing_before(tmp_path):
    """c calls `helper` through b's re-export of a's package, which has no helper yet: name_only. When a
    defines it, c (importing nothing of a, its call resolved into nothing) is written again, as a rebuild
    resolves it."""
    repos = {
        "a": {"pa/__init__.py": b"def other():\n    return 0\n"},
        "b": {"pb/__init__.py": b"from pa import helper\n"},
        "c": {
            "pc/__init__.py": b"",
            "pc/main.py": b"from pb import helper\n\n\ndef go():\n    return helper()\n",
            "pc/alias.py": b"from pa import helper as h\n\n\ndef go():\n    return h()\n",  # no call named helper
        },
    }
    built = build_corpus(tmp_path, repos)
    assert [r[4:] for r in calls(built.cfg.data_dir, ("c",))] == [("name_only", "", "", "")] * 2
    repo = Repo(str(tmp_path / "src" / "a"))
    defined = {"pa/__init__.py": b"def other():\n    return 0\n\n\ndef helper():\n    return 1\n"}
    gitrepo.commit(repo, defined, message="helper", parents=[repo.head()])
    run(built.cfg, show_progress=False)
    assert [r[4:] for r in calls(built.cfg.data_dir, ("c",))] == [("import", "a", "pa/__init__.py", "helper")] * 2
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh").data_dir)


MODULES = {
    "pkg/__init__.py": b"",
    "pkg/mixins.py": b"class M1:\n    def m(self):\n        return 1\n\n\n"
    b"class M2:\n    def m(self):\n        return 2\n",
    "pkg/c.py": b"from .mixins import M1 as Mx\n\n\nclass Base(Mx):\n    pass\n",
    "pkg/f.py": b"from .c import Base\n\n\nclass Sub(Base):\n    pass\n",
    "pkg/e.py": b"from pkg.f import Sub\n\n\ndef run():\n    s = Sub()\n    return s.m()\n",
    "pkg/sub/helper.py": b"def f():\n    return 0\n",
    "pkg/main.py": b"from pkg.sub import helper\nimport pkg.newmod as nm\n\n\n"
    b"def go():\n    helper.f()\n    return nm.g()\n",
    "src/main.js": b"import * as u from './util';\n\nexport function go() {\n  return u.g();\n}\n",
}


def test_modules_that_come_and_a_base_named_anew_reach_every_call_they_move(tmp_path):
    """Files that come (an empty __init__.py making pkg.sub a package, a module and a JS file that did not
    exist) move the calls made through them though they define nothing those calls name; a base class named
    through an alias that now names another class moves every inherited call. Each run equals a rebuild."""
    built = build_corpus(tmp_path, {"app": MODULES})
    repo = Repo(str(tmp_path / "src" / "app"))
    added = {
        **MODULES,
        "pkg/sub/__init__.py": b"",
        "pkg/newmod.py": b"def other():\n    return 0\n",
        "src/util.js": b"export function other() {\n  return 0;\n}\n",
    }
    gitrepo.commit(repo, added, message="modules", parents=[repo.head()])
    run(built.cfg, show_progress=False)
    found = {(r[1], r[2], r[3]): r[4:] for r in calls(built.cfg.data_dir)}
    assert found[("pkg/main.py", 6, "f")] == ("import", "app", "pkg/sub/helper.py", "f")
    assert found[("pkg/main.py", 7, "g")] == ("name_only", "", "", "")  # a module now: not one outside the index
    assert found[("src/main.js", 4, "g")] == ("name_only", "", "", "")
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh1").data_dir)
    realias = {**added, "pkg/c.py": added["pkg/c.py"].replace(b"M1 as Mx", b"M2 as Mx")}
    gitrepo.commit(repo, realias, message="another base", parents=[repo.head()])
    run(built.cfg, show_progress=False)
    found = {(r[1], r[2], r[3]): r[4:] for r in calls(built.cfg.data_dir)}
    assert found[("pkg/e.py", 6, "m")] == ("receiver", "app", "pkg/mixins.py", "M2.m")
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh2").data_dir)


def test_a_removed_repo_leaves_no_call_resolved_into_it(tmp_path):
    built = build_corpus(tmp_path, THREE)
    kept = [spec for spec in built.cfg.repos if spec.name != "a"]
    cfg = write_config(tmp_path, kept)
    run(cfg, show_progress=False)
    assert [r[4:] for r in calls(cfg.data_dir) if r[0] == "c" and r[3] in ("Client", "send")] == [
        ("unresolved", "", "", ""),  # Client(): b re-exports it from a package no indexed repo has now
        ("unresolved", "", "", ""),  # c.send(): c is such a Client
    ]
    assert content(cfg.data_dir) == content(fresh_copy(cfg, tmp_path / "fresh").data_dir)


def test_a_run_resolves_again_only_the_calls_its_change_may_move(tmp_path):
    """A function nobody calls added to lib's cli.py moves no call: nothing stored is resolved again, in lib or
    app; moving `get` (MOVED) resolves again the calls of `get` and those into the files written."""
    built = build_corpus(tmp_path, {"lib": LIB, "app": APP})
    repo = Repo(str(tmp_path / "src" / "lib"))
    unrelated = {**LIB, "src/lib/cli.py": LIB["src/lib/cli.py"] + b"\n\ndef unrelated():\n    return 0\n"}
    gitrepo.commit(repo, unrelated, message="unrelated", parents=[repo.head()])
    quiet = run(built.cfg, show_progress=False)
    assert quiet.calls_resolved_again == 0 and written(built.cfg.data_dir, "lib") == {"src/lib/cli.py"}
    gitrepo.commit(
        repo, {**MOVED, "src/lib/cli.py": unrelated["src/lib/cli.py"]}, message="move", parents=[repo.head()]
    )
    moving = run(built.cfg, show_progress=False).to_dict()
    assert moving["totals"]["calls_resolved_again"] > 0
    assert [r for r in calls(built.cfg.data_dir, ("app",)) if r[2] == 10] == [
        ("app", "app/main.py", 10, "get", "import", "lib", "src/lib/shortcuts.py", "get")
    ]
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh").data_dir)


OTHER = {  # a repo of the org that imports nothing of lib and calls no name of it
    "other/__init__.py": b"",
    "other/tool.py": b"import json\n\n\ndef dump(x):\n    return json.dumps(x)\n\n\ndef run():\n    return dump(1)\n",
}


def test_a_run_reads_the_calls_of_only_the_repos_its_change_reaches(tmp_path):
    """Each part says what names its repo's calls and imports use and which repos its calls resolved into: a
    function nobody calls, added to lib, reads no other repo's calls; moving `get` reads app's (it calls and
    imports lib's names), never other's; every run equals a rebuild. A part written before parts said so is
    read all the same."""
    built = build_corpus(tmp_path, {"lib": LIB, "app": APP, "other": OTHER})
    info = read_part_info(parts_of(*open_manifest(built.cfg.data_dir), {("default", "app")})[-1].dir)
    assert {"get", "Session", "lib"} <= set(info.edge_inputs["reach"]["names"].split("\n"))
    assert info.edge_inputs["reach"]["into"] == {"lib": ["src/lib/api.py", "src/lib/sessions.py"]}
    repo = Repo(str(tmp_path / "src" / "lib"))
    unrelated = {**LIB, "src/lib/cli.py": LIB["src/lib/cli.py"] + b"\n\ndef unrelated():\n    return 0\n"}
    gitrepo.commit(repo, unrelated, message="unrelated", parents=[repo.head()])
    quiet = run(built.cfg, show_progress=False)
    assert (quiet.repos_calls_read, quiet.calls_resolved_again) == (0, 0)
    gitrepo.commit(
        repo, {**MOVED, "src/lib/cli.py": unrelated["src/lib/cli.py"]}, message="move", parents=[repo.head()]
    )
    moving = run(built.cfg, show_progress=False)
    assert moving.repos_calls_read == 1 and moving.calls_resolved_again > 0
    assert [r for r in calls(built.cfg.data_dir, ("app",)) if r[2] == 10] == [
        ("app", "app/main.py", 10, "get", "import", "lib", "src/lib/shortcuts.py", "get")
    ]
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh").data_dir)
    older = {k: v for k, v in info.edge_inputs.items() if k != "reach"}
    assert Moved(frozenset({"nothing_calls_this"}), frozenset()).reaches(older)
    assert not Moved(frozenset({"nothing_calls_this"}), frozenset()).reaches(info.edge_inputs)
    reach = info.edge_inputs["reach"]
    listed = {**info.edge_inputs, "reach": {**reach, "names": reach["names"].split("\n")}}  # as parts had them
    many = frozenset({f"n{i}" for i in range(40)})  # a set of the names at once, rather than a search a name
    for inputs in (info.edge_inputs, listed):
        assert Moved(frozenset({"Session"}), frozenset()).reaches(inputs) and Moved(
            many | {"get"}, frozenset()
        ).reaches(inputs)
        assert not Moved(frozenset({"Sess", "ession"}), frozenset()).reaches(inputs) and not Moved(
            many, frozenset()
        ).reaches(inputs)


def test_find_references_answers_alike_on_mcp_http_and_the_cli(python_org, blobdex):
    service = Service(python_org.cfg, embedder=HashEmbedder())

    async def tool(name: str, args: dict):
        async with Client(build(service)) as client:
            return await client.call_tool(name, args)

    by_mcp = asyncio.run(tool("expand_context", {"symbol": "Session.get"})).structured_content
    placed = {"repo": "lib", "path": "src/lib/sessions.py", "line": 14}
    by_mcp_position = asyncio.run(tool("expand_context", placed)).structured_content
    with TestClient(app(service), base_url="http://127.0.0.1") as http:
        by_http = http.get("/v1/references", params={"symbol": "Session.get"}).json()
        by_position = http.get("/v1/references", params={"repo": "lib", "path": "src/lib/sessions.py", "line": "14"})
        both = http.get("/v1/references", params={"symbol": "get", "line": "3"})
        context_placed = http.get("/v1/context", params=placed).json()
    assert {k: by_mcp[k] for k in by_http} == by_http  # expand_context answers the references, and more
    assert by_mcp_position == context_placed and by_mcp_position["symbol"] == "get"
    assert by_mcp_position["callers"] == by_http["callers"]
    assert [(c["repo"], c["path"], c["line"], c["resolution"]) for c in by_http["callers"]] == [
        ("app", "app/main.py", 9, "receiver")
    ]
    assert by_position.json()["callers"] == by_http["callers"]  # line 14 is where Session.get is defined
    assert both.status_code == 400 and both.json()["error"]["message"] == (
        "give a symbol, or repo, path and line, not both"
    )
    markdown = asyncio.run(tool("expand_context", {"symbol": "get", "repo": "lib"})).content[0].text
    assert "callers: 3 (app 2, lib 1); resolved by import 2, receiver 1" in markdown
    assert "(+ 1 call(s) of the same name on something of unknown type, not counted; name_only=true lists them)" in (
        markdown
    )
    where = ("--config", python_org.cfg.path, "--data-dir", python_org.cfg.data_dir)
    cli = blobdex(*where, "references", "--repo", "lib", "--path", "src/lib/sessions.py", "--line", "14")
    assert cli.code == 0 and "app:app/main.py:9  in go" in cli.out
    # the CLI pages as the tools do, and says so in its own words
    first = blobdex(*where, "references", "get", "--repo", "lib", "-n", "2")
    cursor = first.out.split("(more: run it again with --cursor ", 1)[1].split(")", 1)[0]
    assert "--name-only lists them" in first.out and "name_only=true" not in first.out
    rest = blobdex(*where, "references", "get", "--repo", "lib", "-n", "2", "--cursor", cursor)
    listed = [line.split()[0] for out in (first.out, rest.out) for line in out.splitlines() if " in " in line]
    assert rest.code == 0 and "(more:" not in rest.out
    assert listed == [
        f"{c['repo']}:{c['path']}:{c['line']}"
        for c in references(python_org.cfg.data_dir, symbol="get", repo="lib")["callers"]
    ]


ACROSS = {
    "gokit": {
        "go.mod": b"module github.com/acme/gokit\n\ngo 1.22\n",
        "server/server.go": b"package server\n\ntype Server struct{}\n\nfunc (s *Server) Handle() {}\n\n"
        b"func NewServer() *Server {\n\treturn &Server{}\n}\n",
    },
    "goapp": {
        "go.mod": b"module github.com/acme/goapp\n\ngo 1.22\n",
        "main.go": b'package main\n\nimport "github.com/acme/gokit/server"\n\nfunc main() {\n'
        b"\ts := server.NewServer()\n\tt := &server.Server{}\n\tt.Handle()\n\t_ = s\n}\n",
    },
    "ui": {
        "package.json": b'{"name": "@acme/ui", "version": "1.0.0", "main": "lib/index.js"}\n',
        "lib/index.js": b"export function render(node) {\n  return node;\n}\n",
        "lib/button.js": b"export class Button {\n  click() {\n    return 1;\n  }\n}\n",
    },
    "web": {
        "package.json": b'{"name": "web", "private": true}\n',
        "app.js": b'import { render } from "@acme/ui";\nimport { Button } from "@acme/ui/lib/button";\n\n'
        b"export function start() {\n  const b = new Button();\n  b.click();\n  return render(b);\n}\n",
    },
    "billing": {
        "src/main/java/com/acme/billing/Invoice.java": b"package com.acme.billing;\n\npublic class Invoice {\n"
        b"  public static Invoice create() { return new Invoice(); }\n  public double total() { return 0; }\n}\n",
    },
    "shop": {
        "src/main/java/com/acme/shop/Cart.java": b"package com.acme.shop;\n\nimport com.acme.billing.Invoice;\n\n"
        b"public class Cart {\n  double pay() {\n    Invoice i = Invoice.create();\n    return i.total();\n  }\n}\n",
    },
}


def test_go_npm_and_java_imports_resolve_into_the_repo_that_declares_them(tmp_path):
    """A Go module (go.mod), an npm package (package.json, its `main` and a path below it) and a Java package,
    each imported from another repo of the org."""
    built = build_corpus(tmp_path, ACROSS)
    found = {r[:4]: r[4:] for r in calls(built.cfg.data_dir, ("goapp", "web", "shop"))}
    assert found == {
        ("goapp", "main.go", 6, "NewServer"): ("import", "gokit", "server/server.go", "NewServer"),
        ("goapp", "main.go", 8, "Handle"): ("receiver", "gokit", "server/server.go", "Server.Handle"),
        ("web", "app.js", 5, "Button"): ("import", "ui", "lib/button.js", "Button"),
        ("web", "app.js", 6, "click"): ("receiver", "ui", "lib/button.js", "Button.click"),
        ("web", "app.js", 7, "render"): ("import", "ui", "lib/index.js", "render"),
        ("shop", "src/main/java/com/acme/shop/Cart.java", 7, "create"): (
            "import",
            "billing",
            "src/main/java/com/acme/billing/Invoice.java",
            "Invoice.create",
        ),
        ("shop", "src/main/java/com/acme/shop/Cart.java", 8, "total"): (
            "receiver",
            "billing",
            "src/main/java/com/acme/billing/Invoice.java",
            "Invoice.total",
        ),
    }
    path, _ = open_manifest(built.cfg.data_dir)
    edges = sorted(
        (e["from_repo"], e["from_line"], e["to_repo"], e["to_path"], e["to_evidence"])
        for e in read_graph(path, "edges").to_pylist()
    )
    assert edges == [  # the import edges these declarations make
        ("goapp", 3, "gokit", "go.mod", "module github.com/acme/gokit"),
        ("shop", 3, "billing", "src/main/java/com/acme/billing/Invoice.java", "package com.acme.billing"),
        ("web", 1, "ui", "package.json", "package @acme/ui"),
        ("web", 2, "ui", "package.json", "package @acme/ui"),
    ]
    # gokit moves NewServer into a file of its own: goapp, unchanged, has main.go written again
    kit = Repo(str(tmp_path / "src" / "gokit"))
    moved = {
        **ACROSS["gokit"],
        "server/server.go": b"package server\n\ntype Server struct{}\n\nfunc (s *Server) Handle() {}\n",
        "server/new.go": b"package server\n\nfunc NewServer() *Server {\n\treturn &Server{}\n}\n",
    }
    gitrepo.commit(kit, moved, message="split", parents=[kit.head()])
    run(built.cfg, show_progress=False)
    again = {r[:4]: r[4:] for r in calls(built.cfg.data_dir, ("goapp",))}
    assert again[("goapp", "main.go", 6, "NewServer")] == ("import", "gokit", "server/new.go", "NewServer")
    assert content(built.cfg.data_dir) == content(fresh_copy(built.cfg, tmp_path / "fresh").data_dir)
