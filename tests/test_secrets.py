"""No secret is stored: plant credentials in a real repo, index it, then read every byte the index wrote."""

from __future__ import annotations

import base64
import json
import random
import sqlite3
import string
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from indexer.config import RepoSpec
from indexer.build import run
from indexer.secrets import credential_kind, hold_back, key_spans
from indexer.snapshot import read_chunks, read_graph
from indexer.chunk import chunk_text
from tests import gitrepo
from tests.corpus import write_config

RNG = random.Random(20261201)
B62 = string.ascii_letters + string.digits


def _rand(n: int, alphabet: str = B62) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def _pem() -> tuple[str, list[str]]:
    body = base64.b64encode(RNG.randbytes(2400)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END RSA PRIVATE KEY-----\n", lines


AWS_ID, AWS_SECRET = "AKIA" + _rand(16, string.ascii_uppercase + string.digits), _rand(40, B62 + "/+")
GHP_CI, GHP_SIG = "ghp_" + _rand(36), "ghp_" + _rand(36)
SLACK = "xoxb-" + _rand(12, string.digits) + "-" + _rand(24)
ENV_PW, URL_PW, SETTINGS_PW, SIG_PW = _rand(18), _rand(16), "Pw" + _rand(14), _rand(14)
DOC_AKIA = "AKIA" + _rand(16, string.ascii_uppercase + string.digits)
DOC_ID, DOC_SECRET = "AKIA" + _rand(16, string.ascii_uppercase + string.digits), _rand(40, B62 + "/+")
BARE = _rand(40, B62 + "/+")
PEM, PEM_LINES = _pem()

FILES = {
    "app/config.py": f'AWS_ACCESS_KEY_ID = "{AWS_ID}"\nAWS_SECRET_ACCESS_KEY = "{AWS_SECRET}"\n\n\n'
    f'def region():\n    return "eu-west-1"\n'.encode(),
    "deploy/server_key.txt": PEM.encode(),
    "deploy/install.sh": (
        "#!/bin/sh\nset -e\necho installing\ncat > /etc/app/key.pem <<'EOF'\n"
        + PEM
        + "EOF\nchmod 600 /etc/app/key.pem\nsystemctl restart app\n"
    ).encode(),
    ".github/workflows/ci.yml": f"name: ci\non: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    env:\n"
    f"      GITHUB_TOKEN: {GHP_CI}\n    steps:\n      - run: make test\n".encode(),
    "app/notify.js": f'const client = new WebClient("{SLACK}");\n\nexport function notify(text) {{\n'
    f'  return client.chat.postMessage({{ channel: "#ops", text }});\n}}\n'.encode(),
    ".env": f"DB_PASSWORD={ENV_PW}\n".encode(),
    "app/settings.py": f'DATABASE_URL = "postgres://admin:{URL_PW}@db.internal:5432/app"\n'
    f'DB_PASSWORD = "{SETTINGS_PW}"\n\n\ndef debug():\n    return False\n'.encode(),
    "app/db.py": (
        f'def connect(token="{GHP_SIG}", url="mysql://root:{SIG_PW}@localhost/app"):\n'
        f'    """Connect with the deploy key {DOC_AKIA} unless told otherwise."""\n'
        f"    return open_connection(url, token)\n\n\n"
        f'def close(conn):\n    """Close a connection."""\n    conn.close()\n'
    ).encode(),
    "docs/setup.md": f"# Setup\n\nExport the keys:\n\n    aws_access_key_id = {DOC_ID}\n"
    f"    aws_secret_access_key = {DOC_SECRET}\n\n## Running\n\nStart the app.\n".encode(),
    "app/aws_alt.py": f'k = "{BARE}"\n\n\ndef session():\n    return make_session(k)\n'.encode(),
}
# The fifteen planted values (every PEM line counts as the key), and text that must stay searchable.
SECRETS = {
    "aws_id": AWS_ID,
    "aws_secret": AWS_SECRET,
    "ghp_ci": GHP_CI,
    "ghp_sig": GHP_SIG,
    "slack": SLACK,
    "env_pw": ENV_PW,
    "url_pw": URL_PW,
    "settings_pw": SETTINGS_PW,
    "sig_pw": SIG_PW,
    "doc_akia": DOC_AKIA,
    "doc_id": DOC_ID,
    "doc_secret": DOC_SECRET,
    "bare": BARE,
    **{f"pem_line_{n}": line for n, line in enumerate(PEM_LINES)},
}


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _everything_written(data_dir: Path) -> list[tuple[str, str]]:
    """(where, text) for every byte the index wrote, decoded where a store compresses or encodes it."""
    out = []
    for path in data_dir.rglob("*"):
        if path.is_file():
            out.append((str(path), path.read_bytes().decode("latin-1")))
    db = sqlite3.connect(str(data_dir / "cache" / "cache.sqlite"))
    for key, raw in db.execute("SELECT key, entry FROM blob"):
        out.append((f"cache blob {key}", zlib.decompress(raw).decode("utf-8")))
    db.close()
    for snap in (data_dir / "snapshots").iterdir():
        table = read_chunks(snap)
        for name in table.column_names:
            if name != "vector":
                out.append((f"{snap.name} chunks.{name}", json.dumps(table.column(name).to_pylist())))
    for parquet in data_dir.rglob("*.parquet"):  # the parts' tables and each snapshot's edges, decompressed
        out.append((str(parquet), json.dumps(pq.read_table(parquet).to_pylist(), default=str)))
    assert any("parts" in where and where.endswith("symbols.parquet") for where, _ in out)  # the walk saw them
    return out


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    repo = gitrepo.init(root / "src" / "app")
    gitrepo.commit(repo, FILES)
    cfg = write_config(root, [RepoSpec(name="app", url=str(root / "src" / "app"))])
    report = run(cfg, show_progress=False)
    return cfg, report


def test_no_planted_secret_is_stored_anywhere_in_the_data_dir(planted):
    cfg, report = planted
    assert report.published and report.repos[0].status == "ok"
    written = _everything_written(cfg.data_dir)
    found = {name: where for name, value in SECRETS.items() for where, text in written if value in text}
    assert found == {}
    # Held back is not lost: the harmless code of the same files is searchable.
    from query.reader import SnapshotReader

    texts = "\n".join(SnapshotReader(cfg.data_dir).rows.column("text").to_pylist())
    assert "def region" in texts and "def close(conn)" in texts and "## Running" in texts


def test_facts_of_a_held_back_signature_are_not_stored_but_its_neighbours_are(planted):
    cfg, _ = planted
    snap = next((cfg.data_dir / "snapshots").iterdir())
    symbols = read_graph(snap, "symbols").to_pylist()
    names = {s["qualified_name"] for s in symbols if s["path"] == "app/db.py"}
    assert "close" in names and "connect" not in names


def test_a_private_key_is_held_back_from_begin_to_end_however_it_is_chunked():
    text = "intro = 1\n" * 3 + PEM + "after = 2\n"
    assert key_spans(text)[0].line_start == 4 and key_spans(text)[0].line_end == 4 + len(PEM_LINES) + 1
    chunks, _ = chunk_text(text, "text")
    kept, held = hold_back(text, chunks)
    assert held and all(line not in c.text for c in kept for line in PEM_LINES)
    # A key whose END marker is missing runs to the end of the text.
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(PEM_LINES[:5]) + "\n"
    assert key_spans(cut)[0].line_end == 7


@pytest.mark.parametrize(
    "text, kind",
    [
        (f'k = "{BARE}"', "high_entropy_string"),
        ('token: "Xq7vB2pLm9TzR4kW8nYc3HsD"', "assigned_secret"),
        ("\n".join(PEM_LINES[5:9]) + "\n", "pem_body"),
        ('name = "MyVeryLongClassNameForTesting2"', None),
        ('ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"', None),
        ('digest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"', None),
        ('content_type = "application/x-www-form-urlencoded"', None),
        ('aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"', None),
    ],
)
def test_credential_kind_finds_keys_without_telling_names_and_leaves_code_alone(text, kind):
    assert credential_kind(text) == kind


def test_secrets_lists_where_chunks_were_held_back_without_their_text(planted, monkeypatch):
    import sys
    from click.testing import CliRunner
    from query.cli import main

    cfg, _ = planted
    monkeypatch.setattr(sys, "argv", ["blobdex", "--config", str(cfg.path), "secrets", "--json"])
    with CliRunner().isolation() as (out, err, _):
        with pytest.raises(SystemExit) as exit_:
            main()
    assert exit_.value.code in (0, None), err.getvalue()
    listed = json.loads(out.getvalue())["held_back"]
    where = {(r["path"], r["kind"]) for r in listed}
    assert ("deploy/server_key.txt", "private_key") in where and ("deploy/install.sh", "private_key") in where
    assert ("app/aws_alt.py", "high_entropy_string") in where and ("app/db.py", "aws_access_key") in where
    key = [r for r in listed if r["path"] == "deploy/server_key.txt"]  # one row per chunk held back
    assert min(r["line_start"] for r in key) == 1 and max(r["line_end"] for r in key) == len(PEM_LINES) + 2
    assert {r["ref"] for r in listed} == {"refs/heads/main"}
    assert not any(value.encode() in out.getvalue() for value in SECRETS.values())


def test_get_file_withholds_the_lines_the_index_held_back_and_keeps_line_numbers(planted):
    from query.get_file import WITHHELD_MARKER, get_file

    cfg, _ = planted
    key = get_file(cfg.data_dir, "app", "deploy/server_key.txt")
    assert key.total_lines == len(PEM_LINES) + 2 and key.content.count(b"\n") == key.total_lines
    assert not any(line.encode() in key.content for line in PEM_LINES) and b"BEGIN RSA" not in key.content
    assert dict(key.withheld)[1] == "private_key" and len(key.withheld) == key.total_lines
    middle = get_file(cfg.data_dir, "app", "deploy/server_key.txt", start=10, end=12)  # no BEGIN in range
    assert middle.content.count(WITHHELD_MARKER.encode()) == 3
    config = get_file(cfg.data_dir, "app", "app/config.py")
    assert AWS_ID.encode() not in config.content and AWS_SECRET.encode() not in config.content
    assert b'def region():\n    return "eu-west-1"\n' in config.content and dict(config.withheld) == {
        1: "aws_access_key",
        2: "assigned_secret",
    }
    install = get_file(cfg.data_dir, "app", "deploy/install.sh").content.decode()
    assert "systemctl restart app" in install and not any(line in install for line in PEM_LINES)
    for name in (
        "app/db.py",
        "app/aws_alt.py",
        "app/notify.js",
        "app/settings.py",
        "docs/setup.md",
        ".github/workflows/ci.yml",
    ):
        content = get_file(cfg.data_dir, "app", name).content.decode()
        assert not [k for k, v in SECRETS.items() if v in content], name


def test_cache_entries_of_an_older_policy_are_erased_by_the_next_build(tmp_path):
    from indexer.cache import Cache

    repo = gitrepo.init(tmp_path / "src" / "app")
    gitrepo.commit(repo, {"app.py": b"def app():\n    return 1\n"})
    cfg = write_config(tmp_path, [RepoSpec(name="app", url=str(tmp_path / "src" / "app"))])
    cache = Cache(cfg.data_dir / "cache")
    old = zlib.compress(json.dumps({"body": PEM_LINES[7]}).encode())
    with cache.db:
        cache.db.execute("INSERT INTO blob VALUES (?, ?)", [f"{'0' * 40}:text:p1:c2:x1:m1048576", old])
    cache.close()
    run(cfg, show_progress=False)
    raw = (cfg.data_dir / "cache" / "cache.sqlite").read_bytes()
    assert old not in raw and b":p1:" not in raw
    db = sqlite3.connect(str(cfg.data_dir / "cache" / "cache.sqlite"))
    assert db.execute("SELECT count(*) FROM blob").fetchone()[0] == 1  # app.py, under today's versions
