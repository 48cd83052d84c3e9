"""The precise tier: the real scip-python (npm, installed into .tools by `make test`) over a real repo, its index
read from the protobuf wire format, its answers taken by `blobdex index` with `scip = true` and its agreement
with blobdex's own resolution reported; an indexer that is missing or fails leaves a note and the run's own
resolution, never a failed run."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from indexer.config import dumps, load
from indexer.mirror import mirror_dir
from indexer.calls.scip import ScipError, checkout, definitions, index_tree, installed, read_index
from indexer.snapshot import open_manifest
from tests.corpus import LIB, build_corpus, calls, write_config

pytestmark = pytest.mark.npm

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools" / "node_modules" / ".bin"


@pytest.fixture
def scip_on_path(monkeypatch):
    tool = installed("python", [TOOLS])
    assert tool is not None, "scip-python is missing: `make test` installs it into .tools (npm)"
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    return tool


def test_scip_python_indexes_a_checkout_and_its_index_reads_back(tmp_path, scip_on_path):
    built = build_corpus(tmp_path, {"lib": LIB})
    _, manifest = open_manifest(built.cfg.data_dir)
    commit = manifest.repo("default", "lib").refs[0].commit_id
    root = tmp_path / "tree"
    checkout(mirror_dir(built.cfg.data_dir, "default", "lib"), commit, root)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == sorted(LIB)
    documents = index_tree(scip_on_path, "python", root, "lib", commit, 600)
    assert sorted(documents) == sorted(LIB)
    defined = {(path, line) for path, line in definitions(documents).values()}
    assert {("src/lib/sessions.py", 6), ("src/lib/sessions.py", 14), ("src/lib/api.py", 9)} <= defined
    # the call `self.send(m)` on line 9 references Session.send, defined on line 11
    line = LIB["src/lib/sessions.py"].decode().split("\n")[8]
    send = [o for o in documents["src/lib/sessions.py"] if o.line == 9 and line[o.start : o.end] == "send"]
    assert [definitions(documents)[o.symbol] for o in send] == [("src/lib/sessions.py", 11)]


def test_index_with_scip_takes_its_answers_and_reports_the_agreement(tmp_path, scip_on_path):
    built = build_corpus(tmp_path, {"lib": LIB}, scip=True)
    report = built.report.to_dict()
    figures = report["scip"]["default/lib"]
    # SCIP resolved 8 of the 9 calls (7 into the repo, `len` outside it), and blobdex agreed with every one
    judged = ("judged", "internal", "agree", "disagree", "missed", "precision", "recall")
    assert tuple(figures[k] for k in judged) == (8, 7, 7, 0, 0, 1.0, 1.0)
    assert figures["tools"] == ["scip-python"] and report["notes"] == []
    rows = {(r[1], r[2], r[3]): r[4:] for r in calls(built.cfg.data_dir)}
    assert rows[("src/lib/sessions.py", 8, "merge")] == ("scip", "lib", "src/lib/sessions.py", "Base.merge")
    assert rows[("src/lib/sessions.py", 12, "len")] == ("unresolved", "", "", "")  # a builtin: outside the index
    assert rows[("src/lib/cli.py", 5, "get")] == ("scip", "lib", "src/lib/api.py", "get")
    # `with sessions.Session() as s: s.request(...)`: SCIP records nothing there, so blobdex's answer stays
    assert rows[("src/lib/api.py", 6, "request")] == ("receiver", "lib", "src/lib/sessions.py", "Session.request")


BOTH = b"""from lib import Session


class Local:
    def get(self, k):
        return k


def both():
    s = Local()
    d = {}
    return s.get("u") or d.get("k") or Session()
"""


def test_scip_never_overrides_what_it_cannot_tell_apart_or_cannot_see(tmp_path, scip_on_path):
    """Two calls named `get` on one line, one of them a dict's: SCIP's answers cannot be told apart by row, so
    blobdex's stay. `Session()` resolves into the repo lib: SCIP, indexing app's checkout alone, calls it
    external, and blobdex's answer stays too."""
    built = build_corpus(tmp_path, {"lib": LIB, "app": {"app/__init__.py": b"", "app/both.py": BOTH}}, scip=True)
    rows = [r[1:] for r in calls(built.cfg.data_dir, ("app",)) if r[2] == 12]
    assert rows == [
        ("app/both.py", 12, "Session", "import", "lib", "src/lib/sessions.py", "Session"),
        ("app/both.py", 12, "get", "receiver", "app", "app/both.py", "Local.get"),
        ("app/both.py", 12, "get", "unresolved", "", "", ""),
    ]
    assert built.report.to_dict()["scip"]["default/app"]["disagree"] == 0


def test_a_missing_or_failing_indexer_leaves_a_note_and_the_own_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no scip-python anywhere on it
    built = build_corpus(tmp_path / "missing", {"lib": LIB}, scip=True)
    assert built.report.published and built.report.scip == {}
    assert built.report.notes == [
        "repo 'lib': calls keep blobdex's own resolution: scip = true, but scip-python is not on PATH "
        "(npm install -g @sourcegraph/scip-python)"
    ]
    assert {r[4] for r in calls(built.cfg.data_dir)} <= {"exact", "import", "receiver", "name_only", "unresolved"}
    broken = tmp_path / "bin" / "scip-python"  # an indexer that crashes, as a real one can
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'pyright: out of memory' >&2\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    failed = build_corpus(tmp_path / "failing", {"lib": LIB}, scip=True)
    assert failed.report.published and failed.report.notes == [
        "repo 'lib': calls keep blobdex's own resolution: scip-python failed on repo 'lib' (exit 3): "
        "pyright: out of memory"
    ]


def test_a_damaged_index_is_refused_in_one_sentence(tmp_path):
    bad = tmp_path / "index.scip"
    bad.write_bytes(b"\x12\xff\xff\xff\xff\x0f")  # a document whose length runs past the end
    with pytest.raises(ScipError, match="a field runs past the end of its message"):
        read_index(bad)


def test_the_scip_keys_are_read_and_written_by_the_config(tmp_path):
    cfg = replace(write_config(tmp_path, []), scip=True, scip_timeout_seconds=90)
    assert "scip" not in cfg.path.read_text()  # write_config wrote the defaults
    cfg.path.write_text(dumps(cfg))
    again = load(cfg.path)
    assert (again.scip, again.scip_timeout_seconds) == (True, 90)
