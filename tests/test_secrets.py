"""No secret is stored or served, and no correct code is hidden: plant credentials (and credential references) in
a real repo, index it, read every byte the index wrote and ask every reading surface; release a false positive."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import sqlite3
import string
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from indexer import config as configmod
from indexer.build import run
from indexer.chunk import chunk_text
from indexer.config import ConfigError, RepoSpec
from indexer.embed import HashEmbedder
from indexer.secrets import credential_kind, fingerprint, hold_back, key_spans
from indexer.snapshot import read_chunks, read_graph
from tests import gitrepo
from tests.corpus import write_config

RNG = random.Random(20261201)
B62 = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def _rand(n: int, alphabet: str = B62) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def _pem() -> tuple[str, list[str]]:
    body = base64.b64encode(RNG.randbytes(2400)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END RSA PRIVATE KEY-----\n", lines


def _b64_lines(nbytes: int, width: int) -> list[str]:
    body = base64.b64encode(RNG.randbytes(nbytes)).decode()
    return [body[i : i + width] for i in range(0, len(body), width)]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _guid() -> str:
    return "-".join(_rand(n, HEX) for n in (8, 4, 4, 4, 12))


# The first review's fifteen planted values (every PEM line counts as the key).
AWS_ID, AWS_SECRET = "AKIA" + _rand(16, string.ascii_uppercase + string.digits), _rand(40, B62 + "/+")
GHP_CI, GHP_SIG = "ghp_" + _rand(36), "ghp_" + _rand(36)
SLACK = "xoxb-" + _rand(12, string.digits) + "-" + _rand(24)
ENV_PW, URL_PW, SETTINGS_PW, SIG_PW = _rand(18), _rand(16), "Pw" + _rand(14), _rand(14)
DOC_AKIA = "AKIA" + _rand(16, string.ascii_uppercase + string.digits)
DOC_ID, DOC_SECRET = "AKIA" + _rand(16, string.ascii_uppercase + string.digits), _rand(40, B62 + "/+")
BARE = _rand(40, B62 + "/+")
PEM, PEM_LINES = _pem()
# The second review's sixteen (B5): held already then, and stored then.
OPENSSH = _b64_lines(1800, 70)
CONCAT = _b64_lines(1200, 64)
JWT = ".".join(
    (
        _b64url(b'{"alg": "HS256", "typ": "JWT"}'),
        _b64url(b'{"sub": "deploy", "exp": 1893456000}'),
        _b64url(RNG.randbytes(32)),
    )
)
SK_LIVE, AIZA, GLPAT = "sk_live_" + _rand(24), "AIza" + _rand(35, B62 + "_-"), "glpat-" + _rand(20)
GETENV_DEFAULT, SK_DOC, NPM = _rand(32), "sk_live_" + _rand(24), "npm_" + _rand(36)
SLACK_HOOK = _rand(24)
SLACK_URL = f"https://hooks.slack.com/services/T{_rand(8, string.ascii_uppercase)}/B{_rand(10, string.ascii_uppercase)}"
DISCORD_HOOK = _rand(68, B62 + "_-")
TEAMS_HOOK = _rand(32, HEX)
AZURE_KEY, BUS_KEY = base64.b64encode(RNG.randbytes(64)).decode(), base64.b64encode(RNG.randbytes(32)).decode()
FALLBACK, POSITIONAL = _rand(40, B62 + "/+"), _rand(40, B62 + "/+")
BODY76 = _b64_lines(25 * 57, 76)[:25]
DOTNET_PW = _rand(3) + "#" + _rand(4) + "$" + _rand(3) + "!" + _rand(4)  # the shape of `Xk9#mQ2$vL7!pR4z`
COMMENT_PW = _rand(3) + "#" + _rand(4) + "$" + _rand(3) + "!" + _rand(4)

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
    # The second review's variants, one file each as it planted them.
    "app/ssh_key.py": (
        'KEY = """-----BEGIN OPENSSH PRIVATE KEY-----\n' + "\n".join(OPENSSH) + "\n-----END OPENSSH PRIVATE KEY-----\n"
        '"""\n\n\ndef load():\n    return KEY\n'
    ).encode(),
    "app/pem_concat.py": (
        'PEM = (\n    "-----BEGIN RSA PRIVATE KEY-----\\n"\n'
        + "".join(f'    "{line}\\n"\n' for line in CONCAT)
        + '    "-----END RSA PRIVATE KEY-----\\n"\n)\n\n\ndef pem():\n    return PEM\n'
    ).encode(),
    "app/session.py": f'SESSION = "{JWT}"\n\n\ndef current():\n    return SESSION\n'.encode(),
    "app/billing.py": f'STRIPE = "{SK_LIVE}"\n\n\ndef charge(amount):\n    return amount\n'.encode(),
    "web/maps.js": f'const MAPS = "{AIZA}";\n\nexport function map() {{\n  return MAPS;\n}}\n'.encode(),
    ".gitlab-ci.yml": f"stages: [build]\nvariables:\n  GITLAB_TOKEN: {GLPAT}\nbuild:\n  script: make\n".encode(),
    "app/env.py": f'import os\n\nAPI_TOKEN = os.getenv("API_TOKEN", "{GETENV_DEFAULT}")\n'.encode(),
    "app/payments.py": f'class Payments:\n    """Charge cards with the live key {SK_DOC} unless told otherwise."""\n\n'
    f"    def pay(self):\n        return 1\n".encode(),
    ".npmrc": f"//registry.npmjs.org/:_authToken={NPM}\n".encode(),
    "app/alerts.py": (
        f'SLACK = "{SLACK_URL}/{SLACK_HOOK}"\n'
        f'DISCORD = "https://discord.com/api/webhooks/{_rand(18, string.digits)}/{DISCORD_HOOK}"\n'
        f'TEAMS = "https://contoso.webhook.office.com/webhookb2/{_guid()}@{_guid()}/IncomingWebhook/{TEAMS_HOOK}/'
        f'{_guid()}"\n\n\ndef alert(text):\n    return text\n'
    ).encode(),
    "app/azure.py": (
        f'STORAGE = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE_KEY};'
        f'EndpointSuffix=core.windows.net"\nBUS = "Endpoint=sb://ns.servicebus.windows.net/;'
        f'SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={BUS_KEY}"\n'
    ).encode(),
    "app/fallbacks.py": f'FALLBACKS = ["{FALLBACK}"]\n\n\ndef first():\n    return FALLBACKS[0]\n'.encode(),
    "app/client.py": f'client = make_client("{POSITIONAL}")\n\n\ndef get():\n    return client\n'.encode(),
    "app/blob_key.py": ('BLOB = """\n' + "\n".join(BODY76) + '\n"""\n\n\ndef blob():\n    return BLOB\n').encode(),
    "app/Db.cs": (
        f'class Db {{\n    const string Conn = "Server=db;Database=app;User Id=sa;Password={DOTNET_PW};";\n\n'
        f"    static void Open() {{ }}\n}}\n"
    ).encode(),
    "app/staging.py": f"# the staging admin password is {COMMENT_PW}\nHOST = 'staging'\n\n\ndef host():\n"
    f"    return HOST\n".encode(),
}
# Each planted value, one name per variant (31); a list where one variant plants several values.
SECRETS = {
    "aws_id": [AWS_ID],
    "aws_secret": [AWS_SECRET],
    "ghp_ci": [GHP_CI],
    "ghp_sig": [GHP_SIG],
    "slack": [SLACK],
    "env_pw": [ENV_PW],
    "url_pw": [URL_PW],
    "settings_pw": [SETTINGS_PW],
    "sig_pw": [SIG_PW],
    "doc_akia": [DOC_AKIA],
    "doc_id": [DOC_ID],
    "doc_secret": [DOC_SECRET],
    "bare": [BARE],
    "pem": PEM_LINES,
    "openssh": OPENSSH,
    "pem_concat": CONCAT,
    "jwt": [JWT],
    "sk_live": [SK_LIVE],
    "aiza": [AIZA],
    "glpat": [GLPAT],
    "getenv_default": [GETENV_DEFAULT],
    "stripe_docstring": [SK_DOC],
    "npm": [NPM],
    "chat_webhooks": [SLACK_HOOK, DISCORD_HOOK, TEAMS_HOOK],
    "azure": [AZURE_KEY, BUS_KEY],
    "list_literal": [FALLBACK],
    "call_argument": [POSITIONAL],
    "body76": BODY76,
    "dotnet_password": [DOTNET_PW],
    "comment_password": [COMMENT_PW],
    "slack_token_url": [SLACK_URL + "/" + SLACK_HOOK],
}
# The newcomer's repo (review A1): credential references, the style the README asks for, are code to find.
REFERENCES = {
    "settings.py": b'"""Settings, read from the environment."""\nimport os\n'
    b'DATABASE_PASSWORD_REF = "env:DB_PASSWORD"\nwebhook_secret = "env:BLOBDEX_WEBHOOK_SECRET"\n'
    b'API_TOKEN = os.environ.get("API_TOKEN")\n',
    "deploy/app.toml": b'[store]\naccess_key = "file:/run/secrets/s3_key"\nsecret_key = "vault:secret/data/app#s3"\n'
    b'db_url = "vault://secret/app/db"\npassword = "${DB_PASSWORD}"\n',
    "web/client.js": b'const apiKey = process.env.API_KEY;\nconst token = "<your-token>";\n'
    b'const password = "********";\nconst apiSecret = "your-api-key-here";\n'
    b'export const dbPassword = "changeme";\nexport const TOKEN = os.getenv("TOKEN");\n',
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


def _found(values: dict[str, list[str]], texts: list[tuple[str, str]]) -> dict[str, str]:
    return {name: where for name, vs in values.items() for v in vs for where, text in texts if v in text}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    app = gitrepo.init(root / "src" / "app")
    commit_id = gitrepo.commit(app, FILES)
    gitrepo.commit(gitrepo.init(root / "src" / "sec"), REFERENCES)
    specs = [RepoSpec(name=name, url=str(root / "src" / name)) for name in ("app", "sec")]
    cfg = write_config(root, specs)
    report = run(cfg, show_progress=False)
    return cfg, report, commit_id


def test_no_planted_secret_is_stored_anywhere_in_the_data_dir(planted):
    cfg, report, _ = planted
    assert report.published and {r.status for r in report.repos} == {"ok"}
    assert len(SECRETS) == 31
    assert _found(SECRETS, _everything_written(cfg.data_dir)) == {}
    # Held back is not lost: the harmless code of the same files is searchable.
    from query.reader import SnapshotReader

    texts = "\n".join(SnapshotReader(cfg.data_dir).rows.column("text").to_pylist())
    for code in ("def region", "def close(conn)", "## Running", "def first", "def get", "def blob", "def host"):
        assert code in texts


def test_no_planted_secret_is_served_by_search_grep_get_file_or_facts(planted):
    from query.search import SearchRequest
    from query.service import Service

    cfg, _, commit_id = planted
    service = Service(cfg, embedder=HashEmbedder())
    answers = []
    for name, values in SECRETS.items():
        for query in (values[0], name.replace("_", " ")):
            for mode in ("bm25", "hybrid"):
                _, hits = service.search(SearchRequest(query=query, mode=mode, limit=50))
                answers += [(f"search {mode} {query!r}", json.dumps(h.to_dict())) for _, h in hits]
        for value in values:
            page = service.grep("default", value[:40], literal=True)
            answers += [(f"grep {value[:12]}", json.dumps(m.__dict__)) for m in page.matches]
    for path in FILES:
        if path in (".env", ".npmrc"):
            continue  # credential files by name: refused whole (tests/test_get_file.py)
        for ref in (None, "main", commit_id):
            answers.append((f"get_file {path}@{ref}", service.get_file("default", "app", path, ref).content.decode()))
    snapshot = service.reader().path
    for table in ("url_literals", "env_keys", "symbols"):
        answers.append((table, json.dumps(read_graph(snapshot, table).to_pylist(), default=str)))
    assert len(answers) > 100 and _found(SECRETS, answers) == {}


def test_credential_references_and_placeholders_are_indexed_and_served_whole(planted):
    """Review A1: `env:NAME` and the like held config code back; none of it is a secret."""
    from query.get_file import WITHHELD_MARKER
    from query.reader import SnapshotReader

    cfg, _, _ = planted
    files = read_graph(SnapshotReader(cfg.data_dir).path, "files").to_pylist()
    assert {f["path"]: f["held_back"] for f in files if f["repo"] == "sec"} == {p: [] for p in REFERENCES}
    from query.service import Service

    service = Service(cfg, embedder=HashEmbedder())
    for path, data in REFERENCES.items():
        served = service.get_file("default", "sec", path)
        assert served.content == data and WITHHELD_MARKER.encode() not in served.content and not served.withheld
    lines = service.get_file("default", "sec", "settings.py", start=3, end=5).content.decode()
    assert lines.splitlines() == [
        'DATABASE_PASSWORD_REF = "env:DB_PASSWORD"',
        'webhook_secret = "env:BLOBDEX_WEBHOOK_SECRET"',
        'API_TOKEN = os.environ.get("API_TOKEN")',
    ]


def test_facts_of_a_held_back_signature_are_not_stored_but_its_neighbours_are(planted):
    cfg, _, _ = planted
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
    # A key whose END marker is missing runs on as long as its lines look like key material...
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(PEM_LINES[:5]) + "\n"
    assert key_spans(cut)[0].line_end == 7
    # ...and no further: a BEGIN marker quoted in code does not hide the rest of the file.
    quoted = 'MARKER = "-----BEGIN RSA PRIVATE KEY-----"\n\n\ndef parse(text):\n    return text.split()\n'
    assert [(k.line_start, k.line_end) for k in key_spans(quoted)] == [(1, 3)]  # the marker and the blank lines


def test_a_key_body_without_markers_is_held_back_even_when_chunking_splits_it():
    from indexer.chunk import Chunk

    text = "\n".join(["def a():", "    return 1", *BODY76[:4], "def b():", "    return 2"])
    halves = [(1, 4), (5, 8)]  # two lines of the body in each: neither chunk alone holds a run of three
    chunks = [
        Chunk(index=i, symbol="", kind="text", line_start=s, line_end=e, text="\n".join(text.split("\n")[s - 1 : e]))
        for i, (s, e) in enumerate(halves)
    ]
    assert [(h.line_start, h.kind) for h in hold_back(text, chunks)[1]] == [(1, "pem_body"), (5, "pem_body")]


def test_a_certificate_is_not_a_key():
    body = "\n".join(_b64_lines(900, 64))
    for marker in ("CERTIFICATE", "PUBLIC KEY", "CERTIFICATE REQUEST"):
        text = f"-----BEGIN {marker}-----\n{body}\n-----END {marker}-----\n"
        chunks, _ = chunk_text(text, "text")
        assert hold_back(text, chunks)[1] == [], marker


def _cases() -> list[tuple[str, str | None]]:
    """(text, kind): secrets without telling names or shapes, and code, references and placeholders that are
    not secrets. Values are made here, at run time, so this file holds no credential-shaped literal."""
    token, password = _rand(24), "Xk9#" + _rand(4) + "$" + _rand(3) + "!" + _rand(4)
    return [
        (f'k = "{BARE}"', "high_entropy_string"),
        (f'token: "{token}"', "assigned_secret"),
        ("\n".join(PEM_LINES[5:9]) + "\n", "pem_body"),
        ("\n".join(BODY76[3:7]) + "\n", "pem_body"),
        (f'FALLBACKS = ["{FALLBACK}"]', "high_entropy_string"),
        (f'client = make_client("{POSITIONAL}")', "high_entropy_string"),
        (f'API_TOKEN = os.getenv("API_TOKEN", "{token}")', "assigned_secret"),
        (f'conn = "Server=db;Database=app;User Id=sa;Password={password};"', "assigned_secret"),
        (f"# the staging admin password is {password}", "assigned_secret"),
        (f"password: {password}", "assigned_secret"),
        (f'STORAGE = "AccountName=a;AccountKey={AZURE_KEY};"', "azure_key"),
        (f'SB = "Endpoint=sb://n/;SharedAccessKey={BUS_KEY}"', "azure_key"),
        (f"url = '{SLACK_URL}/{SLACK_HOOK}'", "slack_webhook"),
        (f"hook = 'https://discord.com/api/webhooks/123456789012345678/{DISCORD_HOOK}'", "discord_webhook"),
        (
            f"hook = 'https://c.webhook.office.com/webhookb2/{_guid()}@{_guid()}/IncomingWebhook/{TEAMS_HOOK}/x'",
            "teams_webhook",
        ),
        (f"//registry.npmjs.org/:_authToken={NPM}", "npm_token"),
        ('name = "MyVeryLongClassNameForTesting2"', None),
        ('ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"', None),
        ('digest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"', None),
        ('content_type = "application/x-www-form-urlencoded"', None),
        ('aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"', None),
        ('DATABASE_PASSWORD_REF = "env:DB_PASSWORD"', None),
        ('webhook_secret = "env:BLOBDEX_WEBHOOK_SECRET"', None),
        ('token = "file:/run/secrets/token"', None),
        ('PASSWORD = "${DB_PASSWORD}"', None),
        ('password = os.environ["DB_PASSWORD"]', None),
        ('token = os.getenv("TOKEN")', None),
        ("const apiKey = process.env.API_KEY;", None),
        ('secret = "vault:secret/data/app#key"', None),
        ('secret_url = "vault://secret/app/db"', None),
        ('token = "<your-token>"', None),
        ('password = "changeme"', None),
        ('api_key = "your-api-key-here"', None),
        ('password = "********"', None),
        ('password: "{{ vault_db_password }}"', None),
        ('auth = DigestAuth(username="user", password="password123")', None),
        ('url = "https://user:password@example.com"', None),
        ('secret = "hunter2hunter2"', None),
        ('jwt.decode(token, "secret", algorithms=["HS256"])', None),
        ("if next_token == token.LPAR:", None),
        ('raise HookError(503, "no_secret", "no webhook_secret is configured: set one in blobdex.toml")', None),
        ('WEBHOOK = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"', None),
        (
            "headers = {'nonce': 'dcd98b7102dd2f0e8b11d0f600bfb0c093', 'kid': 'NEE1QURBOTM4MzI5RkFDNTYxOTU1MDg2ODgw'}",
            None,
        ),
        ('HEADER = b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"', None),
        (f'PROSE = "{base64.b64encode(b"it is a dangerous business, going out of your door").decode()}"', None),
    ]


@pytest.mark.parametrize("text, kind", _cases())
def test_credential_kind_tells_secrets_from_references_placeholders_and_code(text, kind):
    assert credential_kind(text) == kind


def test_secrets_lists_where_chunks_were_held_back_with_line_fingerprints_never_text(planted, monkeypatch):
    cfg, _, _ = planted
    out = _cli(monkeypatch, cfg.path, "secrets", "--json")
    listed = json.loads(out)["held_back"]
    where = {(r["path"], r["kind"]) for r in listed}
    assert ("deploy/server_key.txt", "private_key") in where and ("deploy/install.sh", "private_key") in where
    assert ("app/aws_alt.py", "high_entropy_string") in where and ("app/db.py", "aws_access_key") in where
    assert {r["repo"] for r in listed} == {"app"}  # nothing of the references' repo
    key = [r for r in listed if r["path"] == "deploy/server_key.txt"]  # one row per chunk held back
    assert min(r["line_start"] for r in key) == 1 and max(r["line_end"] for r in key) == len(PEM_LINES) + 2
    assert {r["ref"] for r in listed} == {"refs/heads/main"}
    config = next(r for r in listed if r["path"] == "app/config.py")
    lines = FILES["app/config.py"].decode().split("\n")
    assert config["lines"] == [
        {"line": 1, "kind": "aws_access_key", "fingerprint": fingerprint(lines[0])},
        {"line": 2, "kind": "assigned_secret", "fingerprint": fingerprint(lines[1])},
    ]
    assert all(line["fingerprint"] is None for r in key for line in r["lines"])  # key material: never released
    assert not any(v.encode() in out.encode() for vs in SECRETS.values() for v in vs)


def _cli(monkeypatch, config: Path, *args: str) -> str:
    from click.testing import CliRunner

    from query.cli import main

    monkeypatch.setattr(sys, "argv", ["blobdex", "--config", str(config), *args])
    with CliRunner().isolation() as (out, err, _):
        with pytest.raises(SystemExit) as exit_:
            main()
    assert exit_.value.code in (0, None), err.getvalue()
    return out.getvalue().decode() if isinstance(out.getvalue(), bytes) else out.getvalue()


def test_get_file_withholds_the_lines_the_index_held_back_and_keeps_line_numbers(planted):
    from query.get_file import WITHHELD_MARKER, get_file

    cfg, _, _ = planted
    key = get_file(cfg.data_dir, "app", "deploy/server_key.txt")
    assert key.total_lines == len(PEM_LINES) + 2 and key.content.count(b"\n") == key.total_lines
    assert not any(line.encode() in key.content for line in PEM_LINES) and b"BEGIN RSA" not in key.content
    assert dict(key.withheld)[1] == "private_key" and len(key.withheld) == key.total_lines
    install = get_file(cfg.data_dir, "app", "deploy/install.sh").content.decode()
    assert "systemctl restart app" in install and not any(line in install for line in PEM_LINES)
    ssh = get_file(cfg.data_dir, "app", "app/ssh_key.py")
    assert dict(ssh.withheld)[1] == "private_key" and b"def load():\n    return KEY\n" in ssh.content
    middle = get_file(cfg.data_dir, "app", "app/blob_key.py", start=10, end=12)  # no BEGIN anywhere
    assert middle.content.count(WITHHELD_MARKER.encode()) == 3
    config = get_file(cfg.data_dir, "app", "app/config.py")
    assert AWS_ID.encode() not in config.content and AWS_SECRET.encode() not in config.content
    assert b'def region():\n    return "eu-west-1"\n' in config.content and dict(config.withheld) == {
        1: "aws_access_key",
        2: "assigned_secret",
    }


def test_cache_entries_of_an_older_policy_are_erased_by_the_next_build(tmp_path):
    from indexer.build.cache import Cache

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


# A tutorial's example key (a false positive a reviewer releases) and a real password, in two functions of one
# file; and a second example released with a fingerprint that names no line of it.
EXAMPLE_KEY, REAL_PW, OTHER_EXAMPLE = _rand(40, B62 + "/+"), "Pw" + _rand(14), _rand(40, B62 + "/+")
KEYS_PY = (
    f'def example():\n    """The settings the tutorial shows."""\n    return {{"SECRET_KEY": "{EXAMPLE_KEY}"}}\n\n\n'
    f'def connect():\n    return open_db(password="{REAL_PW}")\n'
)
OTHER_PY = f'def sample():\n    return {{"SECRET_KEY": "{OTHER_EXAMPLE}"}}\n'
RELEASE = """
[[release]]
repo = "docs"
path = "app/keys.py"
line = "{line}"
reason = "the tutorial's example key, shown to readers"

[[release]]
repo = "docs"
path = "app/other.py"
line = "{wrong}"
reason = "a fingerprint copied wrong"
"""


def test_a_released_false_positive_is_indexed_and_served_and_nothing_else_is(tmp_path, monkeypatch):
    from query.get_file import get_file
    from query.search import SearchRequest
    from query.service import Service

    gitrepo.commit(
        gitrepo.init(tmp_path / "src" / "docs"), {"app/keys.py": KEYS_PY.encode(), "app/other.py": OTHER_PY.encode()}
    )
    cfg = write_config(tmp_path, [RepoSpec(name="docs", url=str(tmp_path / "src" / "docs"))])
    assert run(cfg, show_progress=False).published
    listed = json.loads(_cli(monkeypatch, cfg.path, "secrets", "--json"))
    held = {(r["path"], r["line_start"]): r["lines"] for r in listed["held_back"]}
    assert set(held) == {("app/keys.py", 1), ("app/keys.py", 6), ("app/other.py", 1)} and listed["releases"] == []
    line = held[("app/keys.py", 1)][0]
    assert (
        line["line"] == 3
        and line["fingerprint"] == hashlib.sha256(KEYS_PY.split("\n")[2].strip().encode()).hexdigest()[:16]
    )

    wrong = hashlib.sha256(b"another line").hexdigest()[:16]
    cfg.path.write_text(cfg.path.read_text() + RELEASE.format(line=line["fingerprint"], wrong=wrong))
    cfg = configmod.load(cfg.path)
    report = run(cfg, show_progress=False)  # the same commit: only the releases changed, and that is a change
    assert report.published
    service = Service(cfg, embedder=HashEmbedder())
    _, hits = service.search(SearchRequest(query="settings the tutorial shows", mode="bm25"))
    assert any(h.path == "app/keys.py" and h.symbol == "example" for _, h in hits)
    assert [m.path for m in service.grep("default", EXAMPLE_KEY, literal=True).matches] == ["app/keys.py"]
    served = service.get_file("default", "docs", "app/keys.py")
    assert EXAMPLE_KEY.encode() in served.content and dict(served.withheld) == {7: "assigned_secret"}
    assert get_file(cfg.data_dir, "docs", "app/keys.py").withheld[0] == (3, "assigned_secret")  # releases are config
    assert dict(service.get_file("default", "docs", "app/other.py").withheld) == {2: "assigned_secret"}
    written = _everything_written(cfg.data_dir)
    assert _found({"real": [REAL_PW], "other": [OTHER_EXAMPLE]}, written) == {}
    assert _found({"example": [EXAMPLE_KEY]}, written)

    listed = json.loads(_cli(monkeypatch, cfg.path, "secrets", "--json"))
    assert {(r["path"], r["line_start"]) for r in listed["held_back"]} == {("app/keys.py", 6), ("app/other.py", 1)}
    assert [(r["path"], r["line"], r["repo_configured"]) for r in listed["releases"]] == [
        ("app/keys.py", line["fingerprint"], True),
        ("app/other.py", wrong, True),
    ]
    text = _cli(monkeypatch, cfg.path, "secrets")
    assert "releases in effect: 2" in text and "the tutorial's example key" in text and REAL_PW not in text
    assert not run(cfg, show_progress=False).published  # nothing changed since: nothing to publish

    # `repo add` and `repo remove` leave the [[release]] tables as they were written.
    before = cfg.path.read_text()
    configmod.save(configmod.with_repo(cfg, RepoSpec(name="more", url=str(tmp_path / "src" / "docs"))))
    configmod.save(configmod.without_repo(configmod.load(cfg.path), "more", "default"))
    assert (
        cfg.path.read_text() == before and configmod.load(cfg.path).repo("docs").releases == cfg.repo("docs").releases
    )


@pytest.mark.parametrize(
    "table, message",
    [
        ('repo = "docs"\npath = "a.py"\nline = "0123456789abcdef"\n', "lacks `reason`"),
        ('repo = "docs"\npath = "a.py"\nline = "not-a-fingerprint"\nreason = "r"\n', "is not a line's fingerprint"),
        ('repo = "docs"\npath = "../a.py"\nline = "0123456789abcdef"\nreason = "r"\n', "is not a repo-relative path"),
        ('repo = "docs"\npath = "a.py"\nline = "0123456789abcdef"\nreason = "r"\ntext = "x"\n', "unknown key `text`"),
    ],
)
def test_a_release_table_is_checked_like_every_other_key(tmp_path, table, message):
    path = tmp_path / "blobdex.toml"
    path.write_text(f"[[release]]\n{table}")
    with pytest.raises(ConfigError, match=message) as refused:
        configmod.load(path)
    assert "\n" not in str(refused.value)


HOSTILE = {  # 1 MB each: the shapes that make a backtracking regex or a restarting scan take quadratic time
    "a run of word characters": "a" * (1 << 20),
    "a.a.a… around one ://": "a." * (1 << 18) + "://" + "a." * (1 << 18),
    "many quotes": '"' * (1 << 20),
    "many =": "=" * (1 << 20),
    "a credential name assigned over and over": 'token = "' * (1 << 17),
}


def test_the_detector_takes_linear_time_on_hostile_text():
    """A liveness watchdog, not a timing: the functions run on request input (pushed chunks, session overlays).
    Before RE2, `a.a.a…://…` alone ran for minutes; now every text here takes well under a second."""
    script = (
        "import json, sys\n"
        "from indexer.chunk import Chunk\n"
        "from indexer.secrets import credential_kind, hold_back, withheld_lines\n"
        "for text in json.load(sys.stdin).values():\n"
        "    lines = text.split('\\n')\n"
        "    credential_kind(text)\n"
        "    hold_back(text, [Chunk(index=0, symbol='', kind='text', line_start=1, line_end=len(lines), text=text)])\n"
        "    withheld_lines(lines, 1, len(lines))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(HOSTILE),
        text=True,
        capture_output=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
