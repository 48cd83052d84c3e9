"""One per-blob preparation: the indexer and session overlays skip, chunk and hold back alike."""

from __future__ import annotations

from indexer.build import run
from indexer.config import RepoSpec
from indexer.embed import HashEmbedder
from indexer.prepare import prepare
from indexer.snapshot import open_manifest, read_chunks, read_graph
from query.overlays.sessions import OverlayStore
from tests import gitrepo
from tests.corpus import APP_JS, MAX_BLOB_BYTES, README_MD, RENEW_PY, SERVER_GO, SETTINGS_PY, write_config

PEM_LINE = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
KEY_PY = (
    "def before():\n    return 1\n\n\nKEY = '''\n-----BEGIN PRIVATE KEY-----\n"
    + (PEM_LINE + "\n") * 40
    + "-----END PRIVATE KEY-----\n'''\n\n\ndef after():\n    return 2\n"
)
FILES = {
    "src/billing/renew.py": RENEW_PY.decode(),
    "src/config/settings.py": SETTINGS_PY.decode(),  # an AWS key in one function
    "src/keys.py": KEY_PY,  # a private key block longer than a chunk
    "web/app.js": APP_JS.decode(),
    "server/server.go": SERVER_GO.decode(),
    "README.md": README_MD.decode(),
    "assets/blob.dat2": "abc\x00def" * 10,  # binary
    "data/huge.txt": "line of text\n" * (MAX_BLOB_BYTES // 10),  # too large
    "static/app.min.js": "var a=1;" * 200,  # minified
    "empty.py": "",
    ".env": "DATABASE_PASSWORD=hunter2hunter2\n",  # by path: credentials
    "package-lock.json": '{"lockfileVersion": 3}\n',  # by path: lockfile
    "node_modules/left-pad/index.js": "module.exports = function leftPad() {};\n",  # by path: vendored
}


def test_prepare_skips_chunks_holds_back_and_extracts():
    assert prepare(b"abc\x00def", "text", 1024).skip == "binary"
    assert prepare(b"x = 1\n" * 100, "python", 64).skip == "too_large"
    entry = prepare(SETTINGS_PY, "python", 1 << 20)
    assert entry.skip is None and entry.size == len(SETTINGS_PY) and entry.sha256 is not None
    assert entry.secrets_held_back == 1 and entry.held_back[0][2] == "aws_access_key"
    assert not any("AKIA" in c.text for c in entry.chunks)
    assert [row[0] for row in entry.facts["symbols"]] == ["database_url", "cloud_credentials"]
    assert [row[0] for row in entry.facts["env_keys"]] == ["DATABASE_URL"]
    chunks_only = prepare(SETTINGS_PY, "python", 1 << 20, facts=False)
    assert chunks_only.facts is None and chunks_only.chunks == entry.chunks
    seconds = {"extract": 0.0}
    prepare(RENEW_PY, "python", 1 << 20, seconds=seconds)
    assert seconds["extract"] > 0


def test_an_overlay_prepares_files_exactly_as_the_indexer_prepares_their_blobs(tmp_path):
    repo = gitrepo.init(tmp_path / "src" / "api")
    gitrepo.commit(repo, {path: text.encode() for path, text in FILES.items()})
    cfg = write_config(tmp_path, [RepoSpec(name="api", url=str(tmp_path / "src" / "api"))])
    run(cfg, show_progress=False)
    snapshot_dir, _ = open_manifest(cfg.data_dir)
    files = read_graph(snapshot_dir, "files").to_pylist()
    indexed_skip = {f["path"]: f["skip"] for f in files}
    indexed_held = {f["path"]: len(f["held_back"]) for f in files}
    columns = ("path", "chunk_index", "symbol", "kind", "lang", "line_start", "line_end", "text")
    indexed_chunks = sorted(tuple(r[c] for c in columns) for r in read_chunks(snapshot_dir, vectors=False).to_pylist())

    store = OverlayStore(tmp_path / "data")
    result = store.sync("default", "s", "api", FILES, [], HashEmbedder(), cfg.max_blob_bytes)
    chunks, _ = store.chunks("default", "s")
    overlay_skip = {f["path"]: f["skip"] for f in store.status("default", "s").files}
    overlay_chunks = sorted(tuple(getattr(c, c_name) for c_name in columns) for c in chunks)

    assert overlay_skip == indexed_skip
    assert {"binary", "too_large", "minified", "empty", "credentials", "lockfile", "vendored"} <= set(
        indexed_skip.values()
    )
    assert overlay_chunks == indexed_chunks and len(indexed_chunks) > 10
    assert result.secrets_held_back == sum(indexed_held.values())
    assert indexed_held["src/config/settings.py"] == 1 and indexed_held["src/keys.py"] >= 2
