"""History in the index: the commits each indexed ref reaches, read incrementally from real mirrors (renames, a
merge, a secret in a message, a huge commit, a force-push), and search_commits, log, blame and diff on every
surface (CLI, /v1, MCP)."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import string
import subprocess

import duckdb
import httpx
import pytest
from mcp import Client

from indexer.build import run
from indexer.config import RepoSpec, load
from indexer.embed import HashEmbedder
from indexer.history import MAX_DIFF_LINES
from indexer.snapshot import open_manifest, read_history
from indexer.snapshot.verify import open_check
from query.cursor import CursorError
from query.cursor import encode as cursor_encode
from query.eval.commits import eval_commits
from query.history import HistoryError, NoHistory, committed_at
from query.localize import localize
from query.route_task import route
from query.search import SearchRequest
from query.service import Service
from query.surfaces.app import app
from query.surfaces.mcp import build
from query.surfaces.render import routes_text
from tests import gitrepo
from tests.checks import assert_one_sentence_error
from tests.corpus import write_config
from tests.servers import Server, call, text

T = 1_700_000_000
ALICE, BOB = "Alice Smith <alice@example.com>", "Bob Jones <bob@example.com>"
CAROL, DAVE, ERIN = "Carol <carol@example.com>", "Dave <dave@example.com>", "Erin <erin@example.com>"
# A key pasted into a commit message, random so no test data holds a real one.
AWS_SECRET = "".join(random.Random(7).choices(string.ascii_letters + string.digits + "/+", k=40))

CALC_1 = b"def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_2 = b"def add(a, b):\n    return int(a) + int(b)\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_3 = CALC_2 + b"\n\ndef subtract(a, b):\n    return a - b\n"
README_1, README_2 = b"# calc\n", b"# calc\n\nadd() adds two numbers.\n"


def _build(root):
    """The `hist` repo: c1 adds calc.py; c2 fixes it; c3 renames it into pkg/; a feature branch adds subtract
    (f1) while main documents add (c4); a clean merge (m); c5 holds a secret in its message and adds .env; c6
    adds 300 generated files and one of more lines than a diff is computed for. Returns the commit ids."""
    repo = gitrepo.init(root / "src" / "hist")
    ids = {}
    ids["c1"] = gitrepo.commit(
        repo, {"calc.py": CALC_1, "README.md": README_1}, message="Add the calculator", author=ALICE, when=T
    )
    ids["c2"] = gitrepo.commit(
        repo,
        {"calc.py": CALC_2, "README.md": README_1},
        message="Fix overflow in add when numbers arrive as strings",
        author=BOB,
        when=T + 100,
    )
    tree3 = {"pkg/calc.py": CALC_2, "pkg/__init__.py": b"", "README.md": README_1}
    ids["c3"] = gitrepo.commit(repo, tree3, message="Move calc into a package", author=ALICE, when=T + 200)
    ids["f1"] = gitrepo.commit(
        repo,
        {**tree3, "pkg/calc.py": CALC_3},
        branch="feature",
        parents=[ids["c3"].encode()],
        message="Add subtract",
        author=CAROL,
        when=T + 300,
    )
    tree4 = {**tree3, "README.md": README_2}
    ids["c4"] = gitrepo.commit(repo, tree4, message="Document add", author=BOB, when=T + 400)
    merged = {**tree4, "pkg/calc.py": CALC_3}
    parents = [ids["c4"].encode(), ids["f1"].encode()]
    ids["m"] = gitrepo.commit(repo, merged, message="Merge feature", parents=parents, author=ALICE, when=T + 500)
    tree5 = {**merged, "config.txt": b"region = eu\n", ".env": b"TOKEN=abc\n"}
    message = f"Rotate the deploy key\n\naws_secret_access_key = {AWS_SECRET}\nregion moved to eu"
    ids["c5"] = gitrepo.commit(repo, tree5, message=message, author=DAVE, when=T + 600)
    generated = {f"gen/t{i:03}.txt": f"table {i}\n".encode() for i in range(300)}
    big = "".join(f"row {i}\n" for i in range(MAX_DIFF_LINES + 10)).encode()
    ids["c6"] = gitrepo.commit(
        repo,
        {**tree5, **generated, "big.txt": big},
        message="Vendor the generated tables",
        author=ERIN,
        when=T + 700,
    )
    other = gitrepo.init(root / "src" / "other")
    ids["o1"] = gitrepo.commit(other, {"x.py": b"x = 1\n"}, message="Fix overflow elsewhere", author=BOB, when=T + 50)
    return ids


@pytest.fixture(scope="module")
def hist(tmp_path_factory):
    root = tmp_path_factory.mktemp("hist")
    ids = _build(root)
    specs = [RepoSpec(name=n, url=str(root / "src" / n)) for n in ("hist", "other")]
    cfg = write_config(root, specs)
    report = run(cfg, show_progress=False)
    return cfg, ids, report, Service(cfg, embedder=HashEmbedder())


def _subjects(page) -> list[str]:
    return [c["subject"] for c in page.commits]


def test_the_tables_hold_every_commit_its_parents_authors_and_the_paths_each_changed(hist):
    cfg, ids, report, _ = hist
    path, manifest = open_manifest(cfg.data_dir)
    commits = {c["commit_id"]: c for c in read_history(path, manifest, "commits").to_pylist()}
    assert set(commits) == set(ids.values()) and report.commits == len(ids) == report.commits_read
    assert commits[ids["m"]]["parents"] == [ids["c4"], ids["f1"]]
    assert (commits[ids["c2"]]["author_name"], commits[ids["c2"]]["author_email"]) == ("Bob Jones", "bob@example.com")
    assert commits[ids["c2"]]["author_time"] == T + 100 and commits[ids["c2"]]["subject"].startswith("Fix overflow")
    changes = read_history(path, manifest, "commit_changes").to_pylist()
    by_commit = {}
    for c in changes:
        by_commit.setdefault(c["commit_id"], []).append(c)
    assert [(c["path"], c["added"], c["removed"]) for c in by_commit[ids["c2"]]] == [("calc.py", 1, 1)]
    moved = next(c for c in by_commit[ids["c3"]] if c["path"] == "pkg/calc.py")
    assert (moved["change"], moved["old_path"], moved["added"], moved["removed"]) == ("rename", "calc.py", 0, 0)
    # A clean merge changed nothing that one of its parents did not have: no row, as `git log PATH` sees it.
    assert ids["m"] not in by_commit and commits[ids["m"]]["files_changed"] == 0
    assert commits[ids["c6"]]["files_changed"] == 301
    big = next(c for c in by_commit[ids["c6"]] if c["path"] == "big.txt")
    assert (big["added"], big["removed"]) == (MAX_DIFF_LINES + 10, 0)  # counted, not diffed
    assert report.to_dict()["seconds"]["history"] >= 0 and "history: 9 commits" in report.to_text()


def test_a_key_in_a_commit_message_is_held_back_and_cannot_be_found(hist):
    cfg, ids, _, service = hist
    path, manifest = open_manifest(cfg.data_dir)
    rotated = next(c for c in read_history(path, manifest, "commits").to_pylist() if c["commit_id"] == ids["c5"])
    assert AWS_SECRET not in rotated["message"] and rotated["held_back"] == 1
    assert "[line held back: " in rotated["message"] and "region moved to eu" in rotated["message"]
    assert service.search_commits("default", AWS_SECRET).commits == []
    assert AWS_SECRET not in (cfg.data_dir / "snapshots").joinpath(manifest.snapshot_id, "graph.sql").read_text()
    found = subprocess.run(["grep", "-rl", AWS_SECRET, str(cfg.data_dir)], capture_output=True, text=True)
    assert found.stdout == ""  # nowhere on disk: tables, the commits index, the run history


def test_search_commits_ranks_messages_and_filters(hist):
    _, ids, _, service = hist
    found = service.search_commits("default", "overflow strings")
    assert found.commits[0]["commit_id"] == ids["c2"] and found.commits[0]["score"] > 0
    assert {c["repo"] for c in found.commits} == {"hist", "other"}
    assert _subjects(service.search_commits("default", "overflow", repos=("other",))) == ["Fix overflow elsewhere"]
    assert _subjects(service.search_commits("default", author="BOB", repos=("hist",))) == [
        "Document add",
        "Fix overflow in add when numbers arrive as strings",
    ]
    assert _subjects(service.search_commits("default", paths=("README.md",))) == ["Document add", "Add the calculator"]
    window = service.search_commits("default", since="2023-11-14T22:18:00", until="2023-11-14T22:21:00")
    assert _subjects(window) == ["Document add", "Add subtract"]  # T+400 and T+300 only, newest first
    # A word of a changed path finds the commit too; a ref keeps what it reaches.
    assert ids["c6"] in [c["commit_id"] for c in service.search_commits("default", "gen").commits]
    assert service.search_commits("default", "subtract", ref="main", repos=("hist",)).commits[0]["subject"] == (
        "Add subtract"
    )
    with pytest.raises(HistoryError, match="'yesterday' is not a date"):
        service.search_commits("default", since="yesterday")


def test_pages_of_commits_continue_by_cursor(hist):
    _, ids, _, service = hist
    seen, cursor = [], None
    while True:
        page = service.log("default", "hist", limit=4, cursor=cursor)
        seen += [c["commit_id"] for c in page.commits]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == 8 and set(seen) == {v for k, v in ids.items() if k != "o1"}
    assert seen[0] == ids["c6"] and seen[-1] == ids["c1"]  # newest first
    with pytest.raises(HistoryError, match="limit 0 is out of range"):
        service.log("default", "hist", limit=0)


def test_log_of_a_file_follows_it_through_its_rename_and_a_folder_lists_what_touched_it(hist):
    _, ids, _, service = hist
    assert [c["commit_id"] for c in service.log("default", "hist", "pkg/calc.py").commits] == [
        ids["f1"],
        ids["c3"],
        ids["c2"],
        ids["c1"],
    ]
    assert [c["commit_id"] for c in service.log("default", "hist", "gen").commits] == [ids["c6"]]
    # At an older commit of the history, only what it reaches.
    assert [c["commit_id"] for c in service.log("default", "hist", "pkg/calc.py", ref=ids["c3"][:10]).commits] == [
        ids["c3"],
        ids["c2"],
        ids["c1"],
    ]
    with pytest.raises(NoHistory, match="unknown repo 'nope'"):
        service.log("default", "nope")
    with pytest.raises(HistoryError, match="neither a ref the index holds"):
        service.log("default", "hist", ref="no-such-branch")


def test_blame_names_each_lines_last_commit_through_a_rename_and_a_merge(hist):
    _, ids, _, service = hist
    b = service.blame("default", "hist", "pkg/calc.py")
    owners = [x["commit_id"] for x in b.lines]
    assert owners[0] == ids["c1"] and owners[1] == ids["c2"]  # the fix, before the move: the rename is followed
    assert owners[4:6] == [ids["c1"], ids["c1"]]
    assert set(owners[-2:]) == {ids["f1"]}  # the branch's commit, through the merge
    assert b.commits[ids["c2"]]["author"] == "Bob Jones" and b.lines[1]["text"] == "    return int(a) + int(b)"
    part = service.blame("default", "hist", "pkg/calc.py", start=2, end=2)
    assert [(x["line"], x["commit_id"]) for x in part.lines] == [(2, ids["c2"])]


def test_diff_between_two_commits_pages_files_and_shows_no_credential_file(hist):
    _, ids, _, service = hist
    d = service.diff("default", "hist", ids["c1"], ids["c3"])
    assert d.total == 2 and [f["change"] for f in d.files] == ["add", "rename"]
    assert d.files[1]["old_path"] == "calc.py" and "+    return int(a) + int(b)" in d.files[1]["hunks"]
    secret = service.diff("default", "hist", f"{ids['c5']}~1", ids["c5"])
    env = next(f for f in secret.files if f["path"] == ".env")
    assert env["hunks"] == "" and "credential" in env["note"] and "TOKEN" not in json.dumps(secret.files)
    first = service.diff("default", "hist", "main~1", "main", "gen", limit=100)
    assert first.total == 300 and len(first.files) == 100 and first.next_cursor
    rest = service.diff("default", "hist", "main~1", "main", "gen", limit=100, cursor=first.next_cursor)
    assert rest.files[0]["path"] == "gen/t100.txt"
    huge = service.diff("default", "hist", "main~1", "main", "big.txt")
    assert huge.files[0]["hunks"] == "" and huge.files[0]["added"] == MAX_DIFF_LINES + 10


def test_analysts_read_history_with_sql(hist, blobdex):
    cfg, ids, _, _ = hist
    together = blobdex(
        "--config",
        cfg.path,
        "sql",
        "--json",
        "SELECT a.path AS a, b.path AS b, count(*) AS n FROM commit_changes a JOIN commit_changes b "
        "ON a.commit_id = b.commit_id AND a.path < b.path WHERE a.path = 'README.md' GROUP BY 1, 2 ORDER BY 3 DESC",
    )
    assert together.code == 0, together.err
    assert {"a": "README.md", "b": "calc.py", "n": 1} in json.loads(together.out)
    owners = blobdex("--config", cfg.path, "sql", "--json", "SELECT author_name, count(*) AS n FROM commits GROUP BY 1")
    assert {r["author_name"]: r["n"] for r in json.loads(owners.out)}["Bob Jones"] == 3
    # Plain DuckDB over the snapshot's views, as graph.sql says to load them.
    path, _ = open_manifest(cfg.data_dir)
    con = duckdb.connect()
    con.execute(f"SET file_search_path = '{path}'")
    con.execute((path / "graph.sql").read_text())
    assert con.execute("SELECT count(*) FROM commits").fetchone() == (9,)
    renamed = "SELECT old_path FROM commit_changes WHERE change = 'rename' AND commit_id = ?"
    assert con.execute(renamed, [ids["c3"]]).fetchall() == [("calc.py",)]


def test_cli_history_commands_print_markdown_or_json_and_one_sentence_on_bad_input(hist, blobdex):
    cfg, ids, _, _ = hist
    c = ["--config", cfg.path]
    found = blobdex(*c, "commits", "overflow", "--repo", "hist", "--json")
    assert found.code == 0 and json.loads(found.out)["commits"][0]["commit_id"] == ids["c2"]
    log = blobdex(*c, "log", "hist", "pkg/calc.py")
    assert log.code == 0 and f"hist {ids['f1'][:12]}" in log.out and "R calc.py -> pkg/calc.py" in log.out
    blame = blobdex(*c, "blame", "hist", "pkg/calc.py", "--lines", "1-2")
    assert blame.code == 0 and f"{ids['c2'][:10]} 2023-11-14 Bob Jones" in blame.out
    diff = blobdex(*c, "diff", "hist", "main~1", "main", "gen", "--json", "-n", "5")
    assert json.loads(diff.out)["total"] == 300 and json.loads(diff.out)["next_cursor"]
    assert_one_sentence_error(blobdex(*c, "log", "nope"), "unknown repo 'nope'")
    assert_one_sentence_error(blobdex(*c, "commits", "--since", "soon"), "since 'soon' is not a date")
    assert_one_sentence_error(blobdex(*c, "diff", "hist", "main", "nope-ref"), "nope-ref")


def test_http_and_mcp_answer_as_the_cli_does(hist):
    _, ids, _, service = hist
    with Server(app(service)) as url:
        h = httpx.Client(base_url=url)
        found = h.post("/v1/commits", json={"query": "overflow", "repos": ["hist"]}).json()
        assert found["commits"][0]["commit_id"] == ids["c2"]
        log = h.get("/v1/log", params={"repo": "hist", "path": "pkg/calc.py", "limit": 2}).json()
        assert [c["commit_id"] for c in log["commits"]] == [ids["f1"], ids["c3"]] and log["next_cursor"]
        blame = h.get("/v1/blame", params={"repo": "hist", "path": "pkg/calc.py", "start": 2, "end": 2}).json()
        assert blame["lines"][0]["commit_id"] == ids["c2"]
        diff = h.get("/v1/diff", params={"repo": "hist", "base": ids["c1"], "head": ids["c2"]}).json()
        assert diff["files"][0]["path"] == "calc.py" and diff["files"][0]["added"] == 1
        for method, path, kw, status in [
            ("get", "/v1/log", {"params": {"repo": "nope"}}, 404),
            ("get", "/v1/log", {"params": {}}, 400),
            ("post", "/v1/commits", {"json": {"query": "x", "since": "soon"}}, 400),
            ("post", "/v1/commits", {"json": {"qurey": "x"}}, 400),
            ("get", "/v1/diff", {"params": {"repo": "hist", "base": "main"}}, 400),
            ("get", "/v1/blame", {"params": {"repo": "hist", "path": "nope.py"}}, 404),
        ]:
            r = getattr(h, method)(path, **kw)
            assert r.status_code == status and r.json()["error"]["message"], (path, r.text)
        assert {"/v1/commits", "/v1/log", "/v1/blame", "/v1/diff"} <= set(h.get("/openapi.json").json()["paths"])
    server = build(service)
    assert "Fix overflow in add" in text(call(server, "search_commits", {"query": "overflow", "repos": ["hist"]}))
    assert "R calc.py -> pkg/calc.py" in text(call(server, "log", {"repo": "hist", "path": "pkg/calc.py"}))
    assert "Bob Jones" in text(call(server, "blame", {"repo": "hist", "path": "pkg/calc.py", "start_line": 2}))
    assert "### R calc.py -> pkg/calc.py" in text(
        call(server, "diff", {"repo": "hist", "base": ids["c1"], "head": ids["c3"]})
    )
    refused = call(server, "log", {"repo": "nope"})
    assert refused.is_error and "unknown repo 'nope'" in text(refused)

    async def listed():
        async with Client(server) as client:
            return {t.name for t in (await client.list_tools()).tools}

    assert {"search_commits", "log", "blame", "diff"} <= asyncio.run(listed())


# -- incremental: a run reads only what is new; a rewrite or new settings read it all again ----------------------


def _parts(cfg, name="api"):
    return open_manifest(cfg.data_dir)[1].repo("default", name).history


def test_a_run_reads_only_new_commits_and_a_force_push_rewrites_the_history(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "api")
    first = gitrepo.commit(repo, {"a.py": b"a = 1\n"}, message="Start", when=T)
    gitrepo.commit(repo, {"a.py": b"a = 2\n"}, message="Tune the threshold", when=T + 10)
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))])
    assert run(cfg, show_progress=False).commits_read == 2
    gitrepo.commit(repo, {"a.py": b"a = 3\n"}, message="Raise the limit", when=T + 20)
    again = run(cfg, show_progress=False)
    assert (again.commits_read, again.commits, len(_parts(cfg))) == (1, 3, 2)  # a delta of the new commit
    unchanged = run(cfg, show_progress=False)
    assert unchanged.unchanged and unchanged.commits_read == 0 and unchanged.commits == 3
    service = Service(cfg, embedder=HashEmbedder())
    assert _subjects(service.log("default", "api")) == ["Raise the limit", "Tune the threshold", "Start"]
    # A force-push: main now names a commit on another line from the first one.
    repo.refs[b"refs/heads/main"] = first.encode()
    gitrepo.commit(repo, {"a.py": b"a = 9\n"}, message="Start over", when=T + 30)
    rewritten = run(cfg, show_progress=False)
    assert rewritten.commits_read == 2 and len(_parts(cfg)) == 1  # a base, listed alone
    service = Service(cfg, embedder=HashEmbedder())
    assert _subjects(service.log("default", "api")) == ["Start over", "Start"]
    assert service.search_commits("default", "threshold").commits == []  # the rewritten-away commit is gone
    assert open_check(*open_manifest(cfg.data_dir)) is None  # the commits index lost the old line's documents
    shutil.rmtree(open_manifest(cfg.data_dir)[0] / "history")
    assert open_check(*open_manifest(cfg.data_dir)) == "history parts hold 2 commits, the commits index has 0 documents"


def test_settings_bound_history_and_diffs_mode_makes_hunks_searchable(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "api")
    for i, word in enumerate(("alpha", "bravo", "charlie", "delta", "echo")):
        gitrepo.commit(repo, {"a.py": f"{word}_budget = True\n".encode()}, message=f"step {i}", when=T + i)
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))])
    cfg.path.write_text('history = "diffs"\nhistory_max_commits = 3\n' + cfg.path.read_text())
    cfg = load(cfg.path)
    assert run(cfg, show_progress=False).commits == 3  # the newest three
    service = Service(cfg, embedder=HashEmbedder())
    found = service.search_commits("default", "delta")
    assert sorted(_subjects(found)) == ["step 3", "step 4"]  # the word is only in hunks: added, then removed
    cfg.path.write_text(cfg.path.read_text().replace('history = "diffs"', 'history = "off"'))
    cfg = load(cfg.path)
    report = run(cfg, show_progress=False)
    assert report.published and report.commits == 0 and _parts(cfg) == []
    with pytest.raises(NoHistory, match='history = "off"'):
        Service(cfg, embedder=HashEmbedder()).log("default", "api")


@pytest.mark.parametrize(
    "line, fragment",
    [
        ('history = "everything"', "`history` is 'everything'"),
        ('history_since = "last week"', "`history_since` is 'last week'"),
        ("history_max_commits = 0", "`history_max_commits` is 0"),
    ],
)
def test_bad_history_settings_are_one_sentence(tmp_path, blobdex, line, fragment):
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path))])
    cfg.path.write_text(line + "\n" + cfg.path.read_text())
    assert_one_sentence_error(blobdex("--config", cfg.path, "status"), fragment)


def test_a_mirror_whose_history_cannot_be_read_keeps_serving_its_files(tmp_path, monkeypatch):
    """A history read that fails (injected here: a walk that meets a missing object) costs the repo its new history
    only: its files are indexed and published, the history it had is kept, and the report says why."""
    repo = gitrepo.init(tmp_path / "src" / "api")
    gitrepo.commit(repo, {"a.py": b"a = 1\n"}, message="Start", when=T)
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))])
    run(cfg, show_progress=False)
    gitrepo.commit(repo, {"a.py": b"a = 2\n", "b.py": b"b = 1\n"}, message="Next", when=T + 1)

    def missing_object(*args, **kw):
        raise KeyError(b"0" * 40)

    monkeypatch.setattr("indexer.history.walk", missing_object)
    report = run(cfg, show_progress=False)
    assert report.published and report.repos[0].status == "ok" and report.repos[0].files == 2
    assert any("cannot read the history of repo 'api'" in n for n in report.notes)
    assert len(_parts(cfg)) == 1  # the history it had


# -- history as a ranking signal ------------------------------------------------------------------------------


def _shop(tmp_path):
    """A shop whose history fixed rounding in billing twice; the files' text never says "rounding"."""
    repo = gitrepo.init(tmp_path / "src" / "shop")
    files = {
        "shop/billing.py": b"def total(items):\n    return sum(i.price for i in items)\n",
        "shop/cart.py": b"def add(cart, item):\n    cart.append(item)\n",
        "shop/search.py": b"def find(items, word):\n    return [i for i in items if word in i.name]\n",
    }
    gitrepo.commit(repo, files, message="Open the shop", when=T)
    for n, message in enumerate(["Fix rounding of cents in totals", "Rounding again: half cents round up"], 1):
        files = {**files, "shop/billing.py": files["shop/billing.py"] + f"# {n}\n".encode()}
        gitrepo.commit(repo, files, message=message, when=T + n * 86400)
    files = {**files, "shop/cart.py": files["shop/cart.py"] + b"# carts\n"}
    gitrepo.commit(repo, files, message="Let carts hold more items", when=T + 5 * 86400)
    return repo, files


def test_history_parts_of_another_models_vectors_are_read_again_and_a_delta_follows_its_own(tmp_path):
    repo, files = _shop(tmp_path)
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src" / "shop"))])
    assert run(cfg, show_progress=False).commits_read == 4
    info = cfg.data_dir / "parts" / open_manifest(cfg.data_dir)[1].repo("default", "shop").history[0] / "history.json"
    info.write_text(info.read_text().replace('"model_id": "blobdex:hash"', '"model_id": "another-model"'))
    gitrepo.commit(repo, {**files, "NOTES.md": b"notes\n"}, message="Add notes", when=T + 9 * 86400)
    again = run(cfg, show_progress=False)
    assert again.commits_read == 5  # the whole history, as a base with this model's vectors
    (part,) = open_manifest(cfg.data_dir)[1].repo("default", "shop").history
    assert json.loads((cfg.data_dir / "parts" / part / "history.json").read_text())["model_id"] == "blobdex:hash"
    gitrepo.commit(repo, {**files, "NOTES.md": b"more notes\n"}, message="More notes", when=T + 10 * 86400)
    assert run(cfg, show_progress=False).commits_read == 1  # its own model's parts: a delta of the new commit


def test_past_fixes_vote_for_the_files_they_changed(tmp_path, monkeypatch):
    _shop(tmp_path)
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src" / "shop"))])
    run(cfg, show_progress=False)
    service = Service(cfg, embedder=HashEmbedder())
    reader = service.reader()
    task = "Customers see totals off by one cent: rounding is wrong"
    alone = localize(reader, service.embedder, SearchRequest(query=task, limit=5, mode="history"))
    assert [f.path for f in alone] == ["shop/billing.py"] and alone[0].signals["history_rank"] == 1
    monkeypatch.setattr("query.localize.HISTORY_WEIGHT", 1.0)  # fused, where it is switched on
    fused = localize(reader, service.embedder, SearchRequest(query=task, limit=5))
    assert fused[0].path == "shop/billing.py" and fused[0].signals["history_rank"] == 1
    # Without history there is no such vote, and the files' own text does not find it first.
    cfg.path.write_text('history = "off"\n' + cfg.path.read_text())
    run(load(cfg.path), show_progress=False)
    plain = Service(load(cfg.path), embedder=HashEmbedder())
    assert localize(plain.reader(), plain.embedder, SearchRequest(query=task, limit=5, mode="history")) == []


def test_eval_builds_each_cases_history_from_commits_before_it(tmp_path):
    """`eval commits` asks each case at its parent, whose history cannot hold the case's own commit: a subject
    found nowhere else gets no history vote, though the commit itself changed the expected file."""
    repo, files = _shop(tmp_path)
    files = {**files, "shop/search.py": files["shop/search.py"] + b"# zebra\n"}
    gitrepo.commit(repo, files, message="Make the zebra quokka lookup case blind", when=T + 9 * 86400)
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src" / "shop"))])
    run(cfg, show_progress=False)
    result = eval_commits(cfg, "shop", 10, 0, HashEmbedder())
    rows = {row["query"]: row for row in result["cases"]}
    assert rows["Make the zebra quokka lookup case blind"]["history"]["rank"] is None  # its own commit is unseen
    assert rows["Rounding again: half cents round up"]["history"]["rank"] == 1  # the earlier rounding fix votes
    assert set(result["summary"]) == {"hybrid", "vector", "bm25", "history"}


def test_the_repo_that_fixed_tasks_like_this_one_is_routed_first_and_an_eval_reads_only_earlier_history(tmp_path):
    """Two repos whose code reads alike; one fixed a gateway timeout before. route_task puts it first on its past
    commits' vote, and with a cutoff before that fix (as eval routing asks each case) nothing votes."""
    code = {"pay/api.py": b"def charge(card, amount):\n    return post('/charge', card, amount)\n"}
    fixed = {}
    for name in ("ledger", "checkout"):
        repo = gitrepo.init(tmp_path / "src" / name)
        gitrepo.commit(repo, code, message="Start service", when=T)
        message = "Retry the charge when the gateway times out" if name == "checkout" else "Tidy module layout"
        fixed[name] = gitrepo.commit(repo, {**code, "pay/notes.txt": b"1\n"}, message=message, when=T + 86400)
    cfg = write_config(tmp_path, [RepoSpec(name=n, url=str(tmp_path / "src" / n)) for n in ("ledger", "checkout")])
    run(cfg, show_progress=False)
    service = Service(cfg, embedder=HashEmbedder())
    reader, task = service.reader(), "the gateway times out and the charge is lost"
    routes = route(reader, service.embedder, task, limit=2)
    assert [r.repo for r in routes][0] == "checkout" and routes[0].signals["history_rank"] == 1, [
        (r.repo, r.score, r.signals) for r in routes
    ]
    assert "similar past commits #1" in routes_text(routes)[0]
    before = committed_at(reader, "default", "checkout", fixed["checkout"])
    assert before == T + 86400 and committed_at(reader, "default", "checkout", "0" * 40) is None
    earlier = route(reader, service.embedder, task, limit=2, before=before)
    assert all("history_rank" not in r.signals for r in earlier)  # its own fix is not history yet


def test_a_long_walk_read_by_worker_processes_gives_the_same_tables(tmp_path, monkeypatch):
    repo = gitrepo.init(tmp_path / "src" / "api")
    for i in range(7):
        files = {"a.py": f"a = {i}\n".encode(), f"b{i % 3}.py": f"b = {i}\n".encode()}
        gitrepo.commit(repo, files, message=f"Step {i} of the walk", when=T + i)
    tables = []
    for parallel in (False, True):
        if parallel:  # spawned workers, two commits a slice, on any machine
            monkeypatch.setattr("indexer.build.history.PARALLEL_FROM", 2)
            monkeypatch.setattr("indexer.build.history.SLICE", 2)
            monkeypatch.setattr("indexer.build.history.os.cpu_count", lambda: 2)
        root = tmp_path / str(parallel)
        root.mkdir()
        cfg = write_config(root, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))])
        assert run(cfg, show_progress=False).commits_read == 7
        path, manifest = open_manifest(cfg.data_dir)
        tables.append([read_history(path, manifest, t).to_pylist() for t in ("commits", "commit_changes")])
    assert tables[0] == tables[1] and len(tables[0][0]) == 7 and tables[0][1]


@pytest.mark.parametrize("damaged", ["commits.parquet", "commit_vectors.parquet"])
def test_damaged_history_is_one_sentence_and_the_rest_still_serves(tmp_path, blobdex, damaged):
    _shop(tmp_path)
    cfg = write_config(tmp_path, [RepoSpec(name="shop", url=str(tmp_path / "src" / "shop"))])
    run(cfg, show_progress=False)
    part = open_manifest(cfg.data_dir)[1].repo("default", "shop").history[0]
    table = cfg.data_dir / "parts" / part / damaged
    table.write_bytes(table.read_bytes()[:100])  # a torn write
    refused = blobdex("--config", cfg.path, "log", "shop")
    assert_one_sentence_error(refused, "the history of snapshot", "cannot be read", "blobdex verify")
    assert blobdex("--config", cfg.path, "search", "total", "--json").code == 0  # code search is unaffected
    assert blobdex("--config", cfg.path, "route", "round the totals").code == 0  # routing, without history
    assert open_check(*open_manifest(cfg.data_dir)).startswith("history")
    repaired = run(cfg, show_progress=False)  # the no-change check finds it and reads history again
    assert repaired.published and repaired.commits_read == 4 and open_check(*open_manifest(cfg.data_dir)) is None
    assert blobdex("--config", cfg.path, "log", "shop").code == 0


def _pem() -> bytes:
    rng = random.Random(3)
    body = "\n".join("".join(rng.choices(string.ascii_letters + string.digits + "+/", k=64)) for _ in range(12))
    return f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\n".encode()


def test_a_key_removed_from_a_file_is_held_back_in_hunks_and_diffs(tmp_path, blobdex):
    """A removed line starts with `-`, which no key body does: hunks are screened as the file held the lines."""
    repo = gitrepo.init(tmp_path / "src" / "api")
    gitrepo.commit(repo, {"settings.py": b"DEBUG = True\n" + _pem()}, message="Settings", when=T)
    gitrepo.commit(repo, {"settings.py": b"DEBUG = True\n"}, message="Take the key out", when=T + 1)
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))])
    cfg.path.write_text('history = "diffs"\n' + cfg.path.read_text())
    run(load(cfg.path), show_progress=False)
    body = _pem().decode().split("\n")[3]
    path, manifest = open_manifest(cfg.data_dir)
    hunks = "".join(c["hunks"] for c in read_history(path, manifest, "commit_changes").to_pylist())
    assert "[line held back: private_key]" in hunks and body not in hunks
    shown = blobdex("--config", cfg.path, "diff", "api", "main~1", "main", "--json")
    assert shown.code == 0 and body not in shown.out and json.loads(shown.out)["files"][0]["held_back"] == 14
    found = subprocess.run(["grep", "-rl", body, str(cfg.data_dir / "parts"), str(path)], capture_output=True)
    assert found.stdout == b""


def test_a_forged_cursor_is_refused_before_it_sizes_a_search(hist):
    _, _, _, service = hist
    asked = {"org": "default", "query": "overflow", "repos": [], "paths": [], "author": None, "since": None}
    asked.update(until=None, ref=None, limit=10)
    forged = cursor_encode("search_commits", service.reader().snapshot_id, asked, 10**9)
    with pytest.raises(CursorError, match="not one a search_commits page gives"):
        service.search_commits("default", "overflow", forged)
    with pytest.raises(HistoryError, match="name at most 50"):
        service.search_commits("default", "x", paths=tuple(f"p{i}" for i in range(51)))


def test_blame_numbers_lines_as_git_does(tmp_path):
    """A form feed or a lone carriage return is inside a line, as git and get_file count them."""
    repo = gitrepo.init(tmp_path / "src" / "api")
    first = gitrepo.commit(repo, {"ff.c": b"a\n\x0cb\nc\n"}, message="Start", when=T)
    second = gitrepo.commit(repo, {"ff.c": b"a\n\x0cb\nc\nd\n"}, message="Add d", when=T + 1)
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))])
    run(cfg, show_progress=False)
    b = Service(cfg, embedder=HashEmbedder()).blame("default", "api", "ff.c")
    assert [x["commit_id"] for x in b.lines] == [first, first, first, second]


def test_a_file_that_comes_or_goes_counts_its_lines_without_walking_the_diff():
    """An added or deleted file is all edits: counted as such (the diff walk took up to MAX_EDITS^2 / 2 steps to
    say so: 5 s of a 595-file first commit), with the hunks and numbers the walk gave."""
    from indexer.history import MAX_EDITS, MAX_HUNK_CHARS, _edits, hunks, line_counts, lines_of

    rng = random.Random(0)
    for n in (1, 7, 150, MAX_EDITS - 1, MAX_EDITS + 5):
        text = "".join(f"{rng.choice(['a', 'b', 'def f():', ''])} {i}\n" for i in range(n)).encode()
        lines = lines_of(text)
        walked = _edits(["\0 a line no file has"], lines)  # the walk, one line more than the file's
        assert _edits([], lines) == (None if walked is None else walked - 1) == _edits(lines, [])
        if walked is not None:
            assert line_counts(b"", text, True) == (n, 0, hunks([], lines)[:MAX_HUNK_CHARS])
            assert line_counts(text, b"", True) == (0, n, hunks(lines, [])[:MAX_HUNK_CHARS])
